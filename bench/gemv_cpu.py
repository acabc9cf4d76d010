"""Batch-1 GEMV per weight format on the CPU, SmolLM2-135M's linear shapes.

For each shape, 30 distinct random matrices (2 for the LM head) so that the weights come from
DRAM as in a decode step, best of 5 passes; printed as microseconds per call and GB/s of the
float32-equivalent bytes (``out * in * 4 / time``; formats that store fewer bytes exceed the
read bandwidth). The read bandwidth of a plain ``torch.sum`` over 512 MiB of float32 is printed first.

Formats: ``F.linear`` on ``[out, in]``; ``torch.mv``; ``torch.mm`` on ``[in, out]``; oneMKL's
packed GEMM (``torch.ops.mkl._mkl_linear``); oneDNN float32 and bfloat16 packed linears
(``torch.ops.mkldnn._linear_pointwise``); fbgemm's int8 dynamic linear (what
``weight_dtype="int8"`` runs); ``torch._weight_int8pack_mm`` (weight-only int8, bfloat16 and
float32 activations); and the engine's own C++ kernels (:mod:`local_engine.ops.cpu`: float32,
bfloat16 and int8 panels), where they are built. ``--rows M`` times M-row products instead
of one row (a batched decode or a speculative verification: 5 rows for K = 4), and prints
GFLOP/s beside GB/s.

Usage: ``PYTHONPATH=. .venv/bin/python bench/gemv_cpu.py [--threads 1] [--rows 1]
[--only qkv down]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from local_engine.models.linear import _pack_int8, quantize_int8  # noqa: E402
from local_engine.ops import cpu  # noqa: E402

SHAPES = {
    "qkv": (960, 576),
    "o": (576, 576),
    "gate_up": (3072, 576),
    "down": (576, 1536),
    "lm_head": (49152, 576),
}


def _best(fns, reps=5) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        for f in fns:
            f()
        best = min(best, time.perf_counter() - t)
    return best / len(fns)


def _formats(o: int, i: int, n: int, m: int = 1) -> dict:
    """Per format, the calls of one pass over ``n`` fresh ``[o, i]`` matrices, ``m`` rows."""
    ws = [torch.randn(o, i) for _ in range(n)]
    x, xb = torch.randn(m, i), torch.randn(m, i).bfloat16()
    wts = [w.t().contiguous() for w in ws]
    mkl = [torch.ops.mkl._mkl_reorder_linear_weight(w, 1) for w in ws]
    dnn = [torch.ops.mkldnn._reorder_linear_weight(w, 1) for w in ws]
    dnnb = [torch.ops.mkldnn._reorder_linear_weight(w.bfloat16(), 1) for w in ws]
    qs = [quantize_int8(w) for w in ws]
    fb = [_pack_int8(q, s) for q, s in qs]
    lp = torch.ops.mkldnn._linear_pointwise
    rows = {
        "F.linear [out, in]": [lambda w=w: F.linear(x, w) for w in ws],
        "torch.mv [out, in]": [lambda w=w: torch.mv(w, x[0]) for w in ws],
        "torch.mm [in, out]": [lambda w=w: torch.mm(x, w) for w in wts],
        "oneMKL packed": [
            lambda p=p, w=w: torch.ops.mkl._mkl_linear(x, p, w, None, 1) for p, w in zip(mkl, ws)
        ],
        "oneDNN float32": [lambda p=p: lp(x, p, None, "none", [], "") for p in dnn],
        "oneDNN bfloat16": [lambda p=p: lp(xb, p, None, "none", [], "") for p in dnnb],
        "fbgemm int8": [lambda p=p: torch.ops.quantized.linear_dynamic(x, p, False) for p in fb],
        "_weight_int8pack_mm, bf16 act.": [
            lambda q=q, s=s: torch._weight_int8pack_mm(xb, q, s.bfloat16()) for q, s in qs
        ],
        "_weight_int8pack_mm, f32 act.": [
            lambda q=q, s=s: torch._weight_int8pack_mm(x, q, s) for q, s in qs
        ],
    }
    mod = cpu.kernels()
    if mod is not None and cpu.has("float32"):
        pf = [cpu.pack_f32(w) for w in ws]
        rows["ours float32 panels (C++)"] = [lambda p=p: mod.linear_f32(x, p, o) for p in pf]
    if mod is not None and cpu.has("bfloat16"):
        pb = [cpu.pack_bf16(w) for w in ws]
        rows["ours bfloat16 panels (C++)"] = [lambda p=p: mod.linear_bf16(x, p, o) for p in pb]
    if mod is not None and cpu.has("int8"):
        pi = [cpu.pack_int8(q, s) for q, s in qs]
        rows["ours int8 panels (C++)"] = [lambda p=p: mod.linear_int8(x, *p, o) for p in pi]
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rows", type=int, default=1, help="rows of x (1 = a GEMV)")
    ap.add_argument("--only", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print("#", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    buf = torch.ones(128 * 2**20)  # 512 MiB of float32
    buf.sum()
    bw = buf.numel() * 4 / _best([buf.sum])
    print(f"# torch.sum read bandwidth: {bw / 1e9:.1f} GB/s, {args.threads} thread(s)")
    print(f"# CPU kernels: {cpu.isa()}; rows of x: {args.rows}")
    print(
        "| shape | format | us / call | GB/s (float32-equivalent) | / read bandwidth | GFLOP/s |"
        "\n|---|---|---:|---:|---:|---:|"
    )
    for name in args.only:
        o, i = SHAPES[name]
        rows = _formats(o, i, 30 if name != "lm_head" else 2, args.rows)
        for fmt, fns in rows.items():
            t = _best(fns)
            gbs = o * i * 4 / t / 1e9
            print(
                f"| {name} {o}x{i} | {fmt} | {t * 1e6:.0f} | {gbs:.1f} | {gbs * 1e9 / bw:.2f} "
                f"| {2 * args.rows * o * i / t / 1e9:.1f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
