#!/usr/bin/env bash
# One H200 call for the low-bit KV caches (issue 32): the INT4/int2 kernel tests, then
# bench/kv_lowbit_gpu.py (GPU correctness of the compiled kernels, decode speed of
# bf16/int8/int4 (the default split-half program, and the kernel before it as "int4 old")/int2
# with the byte floor, CUDA-graph timing, 8B-shape residency). The INT4 variants
# own sweep is bench/kv_int4_variants.py (one call of its own). Logs under $OUT; the summary
# table last. Usage (repository root): OUT=/tmp/out bash bench/kv_gpu_session.sh
set -u
OUT=${OUT:-/tmp/kv_gpu_session}
mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
# the kernel tests (they run the Triton interpreter, CUDA present)
timeout 240 python3 -m pytest -q -x -p no:cacheprovider \
  tests/local_engine/attention/test_kv_quant_int4.py \
  tests/local_engine/attention/test_kv_quant_int2.py > "$OUT/pytest.txt" 2>&1
echo "pytest rc=$? ($(tail -n 1 "$OUT/pytest.txt"))"
# compiled kernels on the GPU: correctness, decode speed, residency
timeout 300 python3 bench/kv_lowbit_gpu.py --iters 50 > "$OUT/kv_lowbit_gpu.txt" 2>&1
echo "bench rc=$?"
grep -v "^## summary" "$OUT/kv_lowbit_gpu.txt" | sed '/^| KV | 64 x 4096/,$d'
sed -n '/^## summary/,$p' "$OUT/kv_lowbit_gpu.txt"
