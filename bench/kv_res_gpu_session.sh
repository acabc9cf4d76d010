#!/usr/bin/env bash
# One H200 call for int2's residual window and the disk tier's cold row (issue 32), about 150 s
# (bounded by its timeouts at 265 s):
#   (a) bench/disk_tier.py on CUDA, Llama-3-8B shape with random bf16 weights drawn on the
#       device (a `bench/engine_gpu.py prepare` folder: config + tokenizer), the cold row held
#       to its compute floor;
#   (b) bench/kv_int2_cuda_check.py: the compiled int2 kernels (write + finalize, attention
#       reading the residual slot) against the torch reference on the GPU;
#   (c) bench/kv_lowbit_gpu.py --formats int2: int2's decode speed rows against bf16 and its
#       8B-shape residency (residual slots counted).
# Logs under $OUT; the summary table last. Usage (repository root):
#   OUT=/tmp/out MODEL_DIR=.bench_models/llama3-8b-shape bash bench/kv_res_gpu_session.sh
# MODEL_DIR defaults to .bench_models/llama3-8b-shape; when missing, it is prepared here if
# the embedded GGUF is installed (else (a) is skipped, said so). DRY_RUN=1: parse every
# script's arguments (--help) and check the syntax, run nothing (the CPU check of this script).
set -u
OUT=${OUT:-/tmp/kv_res_gpu_session}
MODEL_DIR=${MODEL_DIR:-.bench_models/llama3-8b-shape}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONPATH=. PYTHONUNBUFFERED=1

if [ "${DRY_RUN:-0}" = "1" ]; then
  for s in bench/disk_tier.py bench/kv_int2_cuda_check.py bench/kv_lowbit_gpu.py; do
    $PY "$s" --help > /dev/null || { echo "dry run: $s --help failed"; exit 1; }
  done
  echo "dry run: arguments parse"
  exit 0
fi

{
  date -u
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
  $PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# (a) disk tier, cold row = a full prefill (TTFT to the first token), floor printed
if [ ! -f "$MODEL_DIR/config.json" ]; then
  $PY bench/engine_gpu.py prepare --dir "$(dirname "$MODEL_DIR")" > "$OUT/prepare.txt" 2>&1
fi
if [ -f "$MODEL_DIR/config.json" ]; then
  timeout 120 $PY bench/disk_tier.py --device cuda --model-dir "$MODEL_DIR" \
    --dir "$PWD/.kvdisk_bench" --probe-mib 256 > "$OUT/disk_tier.txt" 2>&1
  echo "disk_tier rc=$?"
  rm -rf "$PWD/.kvdisk_bench"
else
  echo "disk_tier skipped: no $MODEL_DIR/config.json (see $OUT/prepare.txt)" | tee "$OUT/disk_tier.txt"
fi

# (b) int2 kernels compiled, against the torch reference on the GPU
timeout 45 $PY bench/kv_int2_cuda_check.py > "$OUT/int2_check.txt" 2>&1
echo "int2 check rc=$?"

# (c) int2 decode speed against bf16, residency
timeout 100 $PY bench/kv_lowbit_gpu.py --iters 20 --formats int2 > "$OUT/kv_lowbit_gpu.txt" 2>&1
echo "kv_lowbit rc=$?"

echo
echo "## (a) disk tier (bench/disk_tier.py --device cuda)"
grep -E "^# (cold|INVALID)|^\|" "$OUT/disk_tier.txt" || tail -n 5 "$OUT/disk_tier.txt"
echo
echo "## (b) int2 kernels vs torch reference (bench/kv_int2_cuda_check.py)"
cat "$OUT/int2_check.txt" | tail -n 5
echo
echo "## (c) int2 decode vs bf16 (bench/kv_lowbit_gpu.py --formats int2)"
sed -n '/^| KV | rel/,/^$/p' "$OUT/kv_lowbit_gpu.txt"
sed -n '/^## summary/,$p' "$OUT/kv_lowbit_gpu.txt"
