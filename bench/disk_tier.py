"""Disk tier of the prefix cache on this CPU, with the real SmolLM2-135M-Instruct (float32).

TTFT of one request whose prompt is a ``--prefix`` token prefix (default 4,096) plus a 16-token
suffix, 1 output token, when the prefix is:

- ``cold``: nowhere (a full prefill: the peer, today's restart);
- ``device pool``: cached in the device pool (here host memory too, the CPU engine's "GPU");
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

Usage: ``PYTHONPATH=. .venv/bin/python bench/disk_tier.py [--prefix 4096] [--dir DIR]``.
Not a test: it prints, it does not assert.
"""

from __future__ import annotations

import argparse
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


def ttft(engine, rid: str, ids: list[int]) -> tuple[float, object, float]:
    """Wall seconds from add_request to the request's first output, that output, and the
    seconds until its restore (CPU tier or disk) was done (0 without one)."""
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
            if o.request_id == rid:
                dt = time.perf_counter() - t0
                while engine.has_unfinished_requests():
                    engine.step()
                return dt, o, restored


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefix", type=int, default=4096)
    ap.add_argument("--dir", default=None, help="disk tier folder (default: a temporary one)")
    ap.add_argument("--probe-mib", type=int, default=512)
    args = ap.parse_args()

    from local_engine.engine import LLMEngine

    folder = Path(args.dir or tempfile.mkdtemp(prefix="kv-disk-bench-"))
    rng = random.Random(0)
    prefix = [rng.randrange(1000, 40000) for _ in range(args.prefix)]
    prompt = prefix + [rng.randrange(1000, 40000) for _ in range(SUFFIX)]
    other = [rng.randrange(1000, 40000) for _ in range(args.prefix + SUFFIX)]
    blocks = -(-(args.prefix + SUFFIX + 1) // 16)
    common = dict(num_kv_blocks=blocks + 8, max_num_batched_tokens=2048)
    block_bytes = 2 * 30 * 3 * 64 * 4 * 16  # SmolLM2 float32: 737,280 B a block
    tier_bytes = (blocks + 8) * block_bytes

    rows = []
    eng = LLMEngine.from_model(
        None, cpu_cache_memory=tier_bytes, disk_cache_dir=str(folder), **common
    )
    t_cold, o, _ = ttft(eng, "cold", prompt)
    rows.append(("cold (full prefill)", t_cold, o))
    t_dev, o, _ = ttft(eng, "device", prompt)
    rows.append(("device pool", t_dev, o))
    ttft(eng, "evict", other)  # the prefix's blocks move to the CPU tier
    t_cpu, o, _ = ttft(eng, "cpu", prompt)
    rows.append(("CPU tier", t_cpu, o))
    eng.close()  # everything cached goes to disk
    files = list(folder.rglob("*.kvb"))
    del eng

    for label, cold in (("disk, page cache", False), ("disk, cold", True)):
        if cold:
            for f in files:
                drop_from_page_cache(f)
        fresh = LLMEngine.from_model(None, disk_cache_dir=str(folder), **common)
        t, o, restore_s = ttft(fresh, label, prompt)
        rows.append((label, t, o, fresh.metrics.kv_bytes_from_disk, restore_s))
        del fresh

    cold_gbps, cached_gbps = sequential_read_gbps(folder, args.probe_mib)
    print(f"# disk tier: SmolLM2-135M float32, {args.prefix}-token prefix + {SUFFIX}, 1 token out")
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} CPUs, folder {folder}"
    )
    print(
        f"# sequential read of a {args.probe_mib} MiB file: cold {cold_gbps:.2f} GB/s, page cache {cached_gbps:.2f} GB/s"
    )
    print(
        "| prefix from | TTFT (s) | cached tokens (gpu/cpu/disk) | vs cold | read-back GB/s | floor GB/s |"
    )
    print("|---|---:|---|---:|---:|---:|")
    for row in rows:
        label, t, o = row[:3]
        tiers = f"{o.num_gpu_cached_tokens}/{o.num_cpu_cached_tokens}/{o.num_disk_cached_tokens}"
        gbps = floor = ""
        if len(row) > 3 and row[4] > 0:
            gbps = f"{row[3] / row[4] / 1e9:.2f} ({row[3] / 1e6:.0f} MB in {row[4]:.2f} s)"
            floor = f"{cold_gbps if 'cold' in label else cached_gbps:.2f}"
        print(f"| {label} | {t:.3f} | {tiers} | {t_cold / t:.1f}x | {gbps} | {floor} |")


if __name__ == "__main__":
    main()
