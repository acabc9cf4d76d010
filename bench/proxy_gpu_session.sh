#!/usr/bin/env bash
# One device call for issue 29: the proxy's added latency with the local engine on CUDA as the
# upstream (streaming chat completions, 1/16/64 clients; bench/proxy_engine.py), on a quiet
# 16-core host. ~150 s: carried wheels installed (~10 s), SmolLM2-135M-shaped random weights
# written (~10 s), the engine started (~30-60 s), the bench (~60 s). Logs under $OUT; the
# table last.
#
# Prepared here by bench/proxy_gpu_prepare.sh (wheels the device lacks, the model folder's
# config and tokenizer, this branch's files); the call, from the repository root:
#   carry=[".carry_proxy3"], command:
#   cp -r .carry_proxy3/code/. . && OUT=$OUT bash bench/proxy_gpu_session.sh
#
# Knobs (defaults are the device run's; a CPU rehearsal here: DEVICE=cpu LAYERS=2
# PLAN=1:2,4:8 ROUNDS=1 SITE=/tmp/rehearsal_site; PYTHONPATH=a folder holding only the
# device image's packages, python3 a Python without the repository's venv):
set -u
OUT=${OUT:-/tmp/proxy_gpu_session}
C=${PROXY_CARRY:-.carry_proxy3}
SITE=${SITE:-/tmp/site_proxy3}
DEVICE=${DEVICE:-cuda}
PLAN=${PLAN:-1:16,16:192,64:384}
ROUNDS=${ROUNDS:-2}
LAYERS=${LAYERS:-}
mkdir -p "$OUT/logs"
t0=$(date +%s)
{
  date -u
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
  echo "cores: $(nproc)"
  python3 --version
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" "$C"/.whl/*.whl > "$OUT/pip.txt" 2>&1 || { echo "pip failed"; tail -n 20 "$OUT/pip.txt"; exit 1; }
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
echo "wheels installed ($(( $(date +%s) - t0 )) s)"
timeout 120 python3 bench/proxy_engine_model.py weights --dir "$C/model" ${LAYERS:+--layers $LAYERS} || { echo "weights failed"; exit 1; }
echo "weights written ($(( $(date +%s) - t0 )) s)"
set -o pipefail
timeout 240 python3 bench/proxy_engine.py --model "$C/model" --device "$DEVICE" --max-model-len 4096 \
  --max-tokens 16 --rounds "$ROUNDS" --plan "$PLAN" --start-timeout 120 \
  --log-dir "$OUT/logs" --json "$OUT/proxy_engine_gpu.json" 2>&1 | tee "$OUT/proxy_engine_gpu.txt"
rc=$?
echo "bench rc=$rc ($(( $(date +%s) - t0 )) s in all)"
[ $rc -eq 0 ] || tail -n 30 "$OUT/logs/engine.log" "$OUT/logs/proxy.log"
exit $rc
