"""The engine's side of the disk tier: opening it for an engine's model and KV format, copying
the step's evicted blocks out to its writer, writing back what is cached at shutdown, and its
metrics. The pieces: :mod:`~local_engine.kv_cache.disk_store` (files),
:mod:`~local_engine.kv_cache.disk_tier` (IO threads), the manager (books)."""

from __future__ import annotations

from typing import Any

import torch

from .disk_store import DiskStore, kv_fingerprint
from .disk_tier import DiskTier
from .manager import KVCacheManager
from .quant import DEFAULT_LAYOUT

#: Bumped when what a block file's bytes mean changes in a way the fingerprint's other parts
#: do not show (a new quantized layout, a change to the rotary tables' arithmetic).
DISK_FORMAT_VERSION = 1


def fingerprint_parts(config, mc, kv_format, identity: str) -> dict[str, Any]:
    """Everything that makes a KV block's bytes valid, beside its chain hash (which already
    covers the tokens, the prefix and the cache salt)."""
    return {
        "format": DISK_FORMAT_VERSION,
        "model": identity,
        "dtype": str(config.torch_dtype()),
        "weight_dtype": config.cpu_weight_dtype(),
        "kv_cache_dtype": kv_format.name,
        "kv_storage": str(kv_format.dtype),
        "kv_layout": (
            "int2_residual_slots"  # the int2 blocks of 2026-12-03's second layout
            if kv_format.name == "int2"
            else DEFAULT_LAYOUT
            if kv_format.quantized
            else "dense"
        ),
        "block_size": config.block_size,
        "shape": (mc.num_layers, mc.num_kv_heads, mc.head_dim),
        "rope_theta": mc.rope_theta,
        "rope_scaling": repr(sorted((mc.rope_scaling or {}).items())),
    }


def open_disk_tier(config, mc, kv_format, identity: str, runner) -> DiskTier:
    """The disk tier of ``config.disk_cache_dir`` for this engine's model and KV format, over
    the runner's device pool (allocated)."""
    cache = runner.kv_cache
    block_bytes = cache[:, :, 0].numel() * cache.element_size()
    fp = kv_fingerprint(fingerprint_parts(config, mc, kv_format, identity))
    store = DiskStore(config.disk_cache_dir, fp, block_bytes, config.disk_cache_size)
    return DiskTier(store, cache)


def spill_to_disk(kv: KVCacheManager, runner, disk: DiskTier) -> None:
    """Copy the blocks evicted this step (from CPU-tier slots and device blocks) to host
    tensors and queue them for writing; before anything this step writes those slots or
    blocks. Device blocks are copied synchronously (on CUDA a device-to-host copy of the
    evicted blocks only)."""
    host_spills, dev_spills = kv.take_disk_writes()
    if host_spills:
        xfer = runner.kv_transfer
        if xfer is not None and xfer.cuda:
            xfer.stream.synchronize()  # earlier offloads into these slots are done
        idx = torch.tensor([s for s, _ in host_spills], dtype=torch.long)
        disk.write([h for _, h in host_spills], runner.cpu_kv_cache[idx])
    if dev_spills:
        cache = runner.kv_cache
        idx = torch.tensor([b for b, _ in dev_spills], dtype=torch.long, device=cache.device)
        data = cache[:, :, idx].movedim(2, 0).contiguous().to("cpu")
        disk.write([h for _, h in dev_spills], data)


def flush_to_disk(kv: KVCacheManager, runner, disk: DiskTier) -> None:
    """Queue every cached block of the device pool and the CPU tier that is not on disk yet,
    and wait until all queued writes are done (engine shutdown: the next start finds them)."""
    cache = runner.kv_cache
    dev = [(b.block_id, h) for h, b in kv.pool.hash_to_block.items() if not disk.store.contains(h)]
    for i in range(0, len(dev), 64):
        chunk = dev[i : i + 64]
        idx = torch.tensor([b for b, _ in chunk], dtype=torch.long, device=cache.device)
        disk.write([h for _, h in chunk], cache[:, :, idx].movedim(2, 0).contiguous().to("cpu"))
        disk.flush()  # bounded host memory: the writer keeps up chunk by chunk
    tier = [(s, h) for h, s in kv.host.tier.items() if not disk.store.contains(h)]
    if tier:
        xfer = runner.kv_transfer
        if xfer is not None and xfer.cuda:
            xfer.stream.synchronize()
        for i in range(0, len(tier), 64):
            chunk = tier[i : i + 64]
            idx = torch.tensor([s for s, _ in chunk], dtype=torch.long)
            disk.write([h for _, h in chunk], runner.cpu_kv_cache[idx])
            disk.flush()
    disk.flush()


def disk_metrics(kv: KVCacheManager, disk: DiskTier | None) -> dict[str, Any]:
    """The disk tier's fields of :class:`~local_engine.metrics.EngineMetrics`."""
    if disk is None:
        return {"prefix_cache_hits_disk": kv.prefix_cache_hits_disk}
    st = disk.store
    return {
        "prefix_cache_hits_disk": kv.prefix_cache_hits_disk,
        "disk_cache_blocks_resident": len(st),
        "disk_cache_bytes": st.total_bytes,
        "disk_cache_size": st.capacity,
        "disk_cache_evictions": st.num_evicted,
        "disk_cache_bad_files": st.num_bad,
        "disk_cache_writes_dropped": disk.num_writes_dropped,
        "kv_bytes_to_disk": disk.bytes_written,
        "kv_bytes_from_disk": disk.bytes_read,
        "kv_disk_read_seconds": disk.seconds_read,
    }


__all__ = [
    "open_disk_tier",
    "spill_to_disk",
    "flush_to_disk",
    "disk_metrics",
    "fingerprint_parts",
    "DISK_FORMAT_VERSION",
    "DiskStore",
]
