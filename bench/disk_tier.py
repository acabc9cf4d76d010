"""Disk tier of the prefix cache on this CPU (the real SmolLM2-135M-Instruct, float32) or on a
GPU (``--device cuda --model-dir DIR``: a ``bench/engine_gpu.py prepare`` folder, a real model's
architecture and tokenizer with random weights drawn on the device, bf16: the 94 MiB GGUF cannot
travel to the device; the KV bytes and the prefill's cost are those of the shape).

TTFT of one request whose prompt is a ``--prefix`` token prefix (default 4,096) plus a 16-token
suffix, 1 output token, when the prefix is:

- ``cold``: nowhere (a full prefill: the peer, today's restart);
- ``device pool``: cached in the device pool (on the CPU host memory too, the CPU engine's "GPU");
- ``CPU tier``: evicted from the pool to the CPU tier (``cpu_cache_memory``);
- ``disk, page cache``: a fresh engine on the folder the first engine wrote (``close()``):
  the block files are in the OS page cache (a restart right after a run);
- ``disk, cold``: the same with the files dropped from the page cache first
  (``posix_fadvise(DONTNEED)`` on each file: a reboot, or a CI runner restoring the folder).

The floor for the disk rows: the prefix's bytes read sequentially from this disk, measured
in the same run (a ``--probe-mib`` MiB file written, dropped from the page cache, read in 8 MiB
chunks), and the same from the page cache. Read-back GB/s = the prefix's KV bytes / the
restore's wall time (from the request's arrival to the step that saw its reads done: the
reader threads read, check the CRC and copy into the pool meanwhile).

On CUDA one full-length request of other tokens runs first (kernel compilation and library
start-up stay out of the cold row), and each fresh engine runs a 32-token one (no eviction).

TTFT is the time to the first *token*: the engine reports a request after every step, a
prefill chunk too (the prompt is longer than ``max_num_batched_tokens``), and an early run took
the first chunk's report for the first token (a "cold" 4k prefix in 0.050 s on the H200, below
the compute floor). The compute floor of the cold row, printed with it: ``2 x (the layers'
weight parameters) x prompt tokens`` FLOPs at the device's dense peak (``--peak-tflops``; CUDA
default 989, the H200's dense BF16 figure, NVIDIA H200 datasheet, 2024; none on the CPU); a
row below it is marked invalid and given no ratio.

Usage: ``PYTHONPATH=. .venv/bin/python bench/disk_tier.py [--prefix 4096] [--dir DIR]
[--device cuda --model-dir DIR]``. Not a test: it prints, it does not assert.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SUFFIX = 16


def drop_from_page_cache(path: Path) -> None:
    """Ask the kernel to drop ``path``'s pages (only this file's; nothing global)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def sequential_read_gbps(folder: Path, mib: int) -> tuple[float, float]:
    """(cold GB/s, page-cache GB/s) of reading a ``mib`` MiB file in 8 MiB chunks."""
    f = folder / "probe.bin"
    chunk = os.urandom(8 << 20)
    with open(f, "wb") as fh:
        for _ in range(mib // 8):
            fh.write(chunk)
    out = []
    for cold in (True, False):
        if cold:
            drop_from_page_cache(f)
        t0 = time.perf_counter()
        n = 0
        with open(f, "rb", buffering=0) as fh:
            while b := fh.read(8 << 20):
                n += len(b)
        out.append(n / (time.perf_counter() - t0) / 1e9)
    f.unlink()
    return out[0], out[1]


def _sync() -> None:
    """Wait for the device's queued work (CUDA; nothing on the CPU)."""
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except ImportError:
        pass


def ttft(engine, rid: str, ids: list[int]) -> tuple[float, object, float]:
    """Wall seconds from add_request to the request's first token (not its first output: a
    prefill chunk is reported too), that output, and the seconds until its restore (CPU tier
    or disk) was done (0 without one)."""
    from local_engine import SamplingParams

    kv = engine.kv_cache_manager
    t0 = time.perf_counter()
    engine.add_request(rid, ids, SamplingParams(temperature=0.0, max_tokens=1))
    restoring, restored = False, 0.0
    while True:
        outs = engine.step()
        if kv.num_restores_in_flight:
            restoring = True
        elif restoring and not restored:
            restored = time.perf_counter() - t0
        for o in outs:
            if o.request_id == rid and o.outputs[0].token_ids:
                _sync()
                dt = time.perf_counter() - t0
                while engine.has_unfinished_requests():
                    engine.step()
                return dt, o, restored


def layer_params(cfg: dict) -> int:
    """Weight parameters of a Llama-shaped model's decoder layers (q, k, v, o projections and
    the gated MLP; no embeddings, norms or head): Llama-3-8B 32 x 218,103,808 = 6,979,321,856."""
    h, heads, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or h // heads
    attn = 2 * h * heads * hd + 2 * h * kv * hd
    return cfg["num_hidden_layers"] * (attn + 3 * h * cfg["intermediate_size"])


def compute_floor(cfg: dict, tokens: int, peak_tflops: float | None) -> tuple[float, float | None]:
    """(prefill FLOPs ``2 x layer_params x tokens``, seconds at ``peak_tflops`` or None)."""
    flops = 2.0 * layer_params(cfg) * tokens
    return flops, (flops / (peak_tflops * 1e12) if peak_tflops else None)


def engine_factory(args: argparse.Namespace) -> tuple:
    """(make(**engine options) -> LLMEngine, bytes of one KV block (block_size 16), model label).
    CPU default: the embedded GGUF, float32; ``--model-dir``: that folder's shape, random
    weights (seed 0: every engine of the run has the same ones, so the disk fingerprint matches),
    the device's default dtype (float32 on the CPU, bf16 on CUDA)."""
    from local_engine.engine import LLMEngine

    if args.model_dir is None:
        if args.device != "cpu":
            raise SystemExit(
                "disk_tier: --device cuda needs --model-dir (the GGUF is CPU-only here)"
            )
        block_bytes = 2 * 30 * 3 * 64 * 4 * 16  # SmolLM2 float32: 737,280 B a block
        return (lambda **kw: LLMEngine.from_model(None, **kw)), block_bytes, "SmolLM2-135M float32"
    cfg = json.loads((Path(args.model_dir) / "config.json").read_text())
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    dtype_bytes = 4 if args.device == "cpu" else 2
    block_bytes = (
        2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim * dtype_bytes * 16
    )
    label = (
        f"{Path(args.model_dir).name} (random weights) {'float32' if dtype_bytes == 4 else 'bf16'}"
    )

    def make(**kw):
        return LLMEngine.from_config(args.model_dir, device=args.device, **kw)

    return make, block_bytes, label


def free(engine) -> None:
    """Drop an engine and (on CUDA) give its memory back before the next one is built."""
    del engine
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def model_shape(args: argparse.Namespace) -> dict:
    """config.json of ``--model-dir``, else SmolLM2-135M's (the embedded GGUF's shape)."""
    if args.model_dir is not None:
        return json.loads((Path(args.model_dir) / "config.json").read_text())
    from local_engine.kv_plan import PRESETS

    mc = PRESETS["smollm2-135m"][0]
    return dict(
        hidden_size=mc.hidden_size,
        num_attention_heads=mc.num_heads,
        num_key_value_heads=mc.num_kv_heads,
        head_dim=mc.head_dim,
        num_hidden_layers=mc.num_layers,
        intermediate_size=mc.intermediate_size,
    )


class Rows(list):
    """The measured rows, each also logged to stderr as it comes (a run cut short by a
    timeout still shows what it measured)."""

    def append(self, row: tuple) -> None:
        super().append(row)
        print(f"# measured: {row[0]} {row[1]:.3f} s", file=sys.stderr, flush=True)


def measure(args: argparse.Namespace, folder: Path) -> tuple[list, str]:
    """The five rows (label, TTFT s, output[, bytes from disk, restore s]) and the model label."""
    make, block_bytes, label = engine_factory(args)
    cuda = args.device != "cpu"
    rng = random.Random(0)
    prefix = [rng.randrange(1000, 40000) for _ in range(args.prefix)]
    prompt = prefix + [rng.randrange(1000, 40000) for _ in range(SUFFIX)]
    other = [rng.randrange(1000, 40000) for _ in range(args.prefix + SUFFIX)]
    warm = [rng.randrange(1000, 40000) for _ in range(args.prefix + SUFFIX)]
    blocks = -(-(args.prefix + SUFFIX + 1) // 16)
    common = dict(num_kv_blocks=blocks + 8, max_num_batched_tokens=2048)
    tier_bytes = (blocks + 8) * block_bytes

    rows = Rows()
    eng = make(cpu_cache_memory=tier_bytes, disk_cache_dir=str(folder), **common)
    if cuda:
        ttft(eng, "warm-up", warm)
    t_cold, o, _ = ttft(eng, "cold", prompt)
    rows.append(("cold (full prefill)", t_cold, o))
    t_dev, o, _ = ttft(eng, "device", prompt)
    rows.append(("device pool", t_dev, o))
    ttft(eng, "evict", other)  # the prefix's blocks move to the CPU tier
    t_cpu, o, _ = ttft(eng, "cpu", prompt)
    rows.append(("CPU tier", t_cpu, o))
    eng.close()  # everything cached goes to disk
    files = list(folder.rglob("*.kvb"))
    free(eng)

    for name, cold in (("disk, page cache", False), ("disk, cold", True)):
        fresh = make(disk_cache_dir=str(folder), **common)
        if cuda:
            ttft(fresh, "warm-up", warm[:32])
        if cold:
            for f in files:
                drop_from_page_cache(f)
        t, o, restore_s = ttft(fresh, name, prompt)
        rows.append((name, t, o, fresh.metrics.kv_bytes_from_disk, restore_s))
        free(fresh)
    return rows, label


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefix", type=int, default=4096)
    ap.add_argument("--dir", default=None, help="disk tier folder (default: a temporary one)")
    ap.add_argument("--probe-mib", type=int, default=512)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--model-dir", default=None, help="a bench/engine_gpu.py prepare folder")
    ap.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="dense peak of the model dtype for the cold row's compute floor (default: 989 on "
        "CUDA, the H200's BF16; none on the CPU)",
    )
    args = ap.parse_args()
    peak = args.peak_tflops or (989.0 if args.device != "cpu" else None)
    flops, floor_s = compute_floor(model_shape(args), args.prefix + SUFFIX, peak)

    folder = Path(args.dir or tempfile.mkdtemp(prefix="kv-disk-bench-"))
    rows, label = measure(args, folder)
    t_cold = rows[0][1]
    cold_ok = floor_s is None or t_cold >= floor_s
    cold_gbps, cached_gbps = sequential_read_gbps(folder, args.probe_mib)
    print(
        f"# disk tier: {label} on {args.device}, {args.prefix}-token prefix + {SUFFIX}, 1 token out"
    )
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, folder {folder}"
    )
    print(
        f"# sequential read of a {args.probe_mib} MiB file: cold {cold_gbps:.2f} GB/s, page cache {cached_gbps:.2f} GB/s"
    )
    floor_txt = f"{floor_s * 1e3:.1f} ms at {peak:g} TFLOPS" if floor_s else "no peak given"
    print(f"# cold row's compute floor: {flops / 1e12:.3g} TFLOP, {floor_txt}")
    if not cold_ok:
        print(f"# INVALID: the cold row ({t_cold:.3f} s) is below the compute floor; no ratios")
    print(
        "| prefix from | TTFT (s) | cached tokens (gpu/cpu/disk) | vs cold | read-back GB/s | floor GB/s |"
    )
    print("|---|---:|---|---:|---:|---:|")
    for row in rows:
        name, t, o = row[:3]
        tiers = f"{o.num_gpu_cached_tokens}/{o.num_cpu_cached_tokens}/{o.num_disk_cached_tokens}"
        gbps = floor = ""
        if len(row) > 3 and row[4] > 0:
            gbps = f"{row[3] / row[4] / 1e9:.2f} ({row[3] / 1e6:.0f} MB in {row[4]:.3f} s)"
            floor = f"{cold_gbps if 'cold' in name else cached_gbps:.2f}"
        ratio = f"{t_cold / t:.1f}x" if cold_ok else "-"
        if name.startswith("cold") and not cold_ok:
            name += " INVALID (below the compute floor)"
        print(f"| {name} | {t:.3f} | {tiers} | {ratio} | {gbps} | {floor} |")


if __name__ == "__main__":
    main()
