"""Moving whole KV blocks between the device pool and the host pool (swap space and the CPU tier
of the prefix cache): the bytes; :mod:`~local_engine.kv_cache.cpu_tier` keeps the books.

Layouts: the device pool is ``[layers, 2, num_blocks, *block]`` (block = ``[block_size,
kv_heads, head_dim]`` of the model dtype, or the quantized formats' ``[block_bytes]`` uint8 with
the per-token-head scales inside: :mod:`~local_engine.kv_cache.quant`); the host pool is
``[num_host_blocks, layers, 2, *block]`` of the same dtype, so that one host block is one
contiguous range (one DMA copy on CUDA) and carries whatever the device block holds, scales
included.

On CUDA (host pool pinned) the CPU-tier copies run on their own stream through a small device
staging buffer, with events:

- *offload* (device -> host, blocks the pool evicts): the copy stream waits for the compute
  stream (the blocks' last writes), gathers the blocks into staging and copies them out; the
  compute stream waits for the copy's event before this step writes any device block (an
  evicted block is handed out again in the same step). Cost on the step: the copy of the
  evicted blocks only.
- *restore* (host -> device, a prompt's prefix found in the tier): issued after the step's
  swaps, on the copy stream, into the prompt's fresh device blocks; nothing on the compute
  stream waits for it. :meth:`KVTransfer.poll` reports the jobs whose event completed; the
  scheduler runs the prompt only then, so the decodes of other requests never wait for it.

On the CPU the copies are synchronous index copies (the "device" pool is host memory too) and a
restore is done when :meth:`KVTransfer.restore` returns.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

#: Device staging buffer of the CUDA copies, in blocks (8B-shape bf16 blocks of 16 tokens are
#: 2 MiB: 64 MiB); longer copies go through it in chunks on the copy stream.
STAGING_BLOCKS = 32


def allocate_host_cache(device_cache: torch.Tensor, num_blocks: int) -> torch.Tensor:
    """Host blocks shaped like the device pool's blocks: ``[num_blocks, layers, 2, *block]``
    (int2's pool: ``[num_blocks, layers, 1, block_bytes]``) of its dtype, uninitialised, pinned
    when the pool is on CUDA (page-locked memory: asynchronous copies at the link's full
    rate)."""
    shape = (num_blocks,) + tuple(device_cache.shape[:2]) + tuple(device_cache.shape[3:])
    pin = device_cache.device.type == "cuda"
    # empty, not zeros: a host block is always written (offload, swap-out) before it is read
    return torch.empty(shape, dtype=device_cache.dtype, device="cpu", pin_memory=pin)


def _runs(pairs: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """``(host start, staging start, length)`` runs of consecutive host slots in ``pairs``
    ``(host slot, staging index)``."""
    runs: list[tuple[int, int, int]] = []
    for h, j in pairs:
        if runs and runs[-1][0] + runs[-1][2] == h and runs[-1][1] + runs[-1][2] == j:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + 1)
        else:
            runs.append((h, j, 1))
    return runs


class KVTransfer:
    """Block copies between ``device_cache`` ``[layers, 2, N, *block]`` and ``host_cache``
    ``[H, layers, 2, *block]``.

    Attributes (cumulative): ``bytes_to_host``, ``bytes_to_device`` (CPU-tier offloads and
    restores, bytes) and ``seconds_to_host``, ``seconds_to_device`` (copy time: CUDA event
    time on the copy stream, wall time on the CPU).
    """

    def __init__(self, device_cache: torch.Tensor, host_cache: torch.Tensor):
        self.device_cache = device_cache
        self.host_cache = host_cache
        self.block_bytes = (
            host_cache[0].numel() * host_cache.element_size() if len(host_cache) else 0
        )
        self.cuda = device_cache.device.type == "cuda"
        self.bytes_to_host = self.bytes_to_device = 0
        self.seconds_to_host = self.seconds_to_device = 0.0
        # in flight (CUDA): restores (job id, start event, end event) and offload timings
        self._restores: list[tuple[int, torch.cuda.Event, torch.cuda.Event]] = []
        self._offload_timing: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
        self._done: list[int] = []  # CPU: restores finished, not reported yet
        if self.cuda:
            self.stream = torch.cuda.Stream(device_cache.device)
            n = min(STAGING_BLOCKS, max(1, len(host_cache)))
            self.staging = torch.empty(
                (n,) + tuple(host_cache.shape[1:]),
                dtype=device_cache.dtype,
                device=device_cache.device,
            )

    # ---- the two directions --------------------------------------------------------------
    def offload(self, pairs: Sequence[tuple[int, int]]) -> None:
        """Copy ``(device block, host slot)`` pairs out. On CUDA later work on the current
        stream waits for the copy (the blocks may be written this step)."""
        if not pairs:
            return
        self.bytes_to_host += len(pairs) * self.block_bytes
        if not self.cuda:
            t0 = time.perf_counter()
            dev = torch.tensor([d for d, _ in pairs], dtype=torch.long)
            host = torch.tensor([h for _, h in pairs], dtype=torch.long)
            self.host_cache[host] = self.device_cache[:, :, dev].movedim(2, 0)
            self.seconds_to_host += time.perf_counter() - t0
            return
        compute = torch.cuda.current_stream(self.device_cache.device)
        self.stream.wait_stream(compute)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            start.record()
            n = self.staging.shape[0]
            for c in range(0, len(pairs), n):
                chunk = pairs[c : c + n]
                idx = torch.tensor([d for d, _ in chunk], dtype=torch.long).to(
                    self.device_cache.device, non_blocking=True
                )
                self.staging[: len(chunk)].copy_(self.device_cache[:, :, idx].movedim(2, 0))
                for h, j, r in _runs([(h, j) for j, (_, h) in enumerate(chunk)]):
                    self.host_cache[h : h + r].copy_(self.staging[j : j + r], non_blocking=True)
            end.record()
        compute.wait_event(end)
        self._offload_timing.append((start, end))

    def restore(self, job_id: int, pairs: Sequence[tuple[int, int]]) -> None:
        """Copy ``(host slot, device block)`` pairs back, as job ``job_id`` (reported by
        :meth:`poll` once done). On CUDA nothing on the current stream waits for it."""
        self.bytes_to_device += len(pairs) * self.block_bytes
        if not self.cuda:
            t0 = time.perf_counter()
            if pairs:
                host = torch.tensor([h for h, _ in pairs], dtype=torch.long)
                dev = torch.tensor([d for _, d in pairs], dtype=torch.long)
                self.device_cache[:, :, dev] = self.host_cache[host].movedim(0, 2)
            self.seconds_to_device += time.perf_counter() - t0
            self._done.append(job_id)
            return
        compute = torch.cuda.current_stream(self.device_cache.device)
        self.stream.wait_stream(compute)  # after this step's swaps (they may share blocks)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(self.stream):
            start.record()
            n = self.staging.shape[0]
            for c in range(0, len(pairs), n):
                chunk = pairs[c : c + n]
                for h, j, r in _runs([(h, j) for j, (h, _) in enumerate(chunk)]):
                    self.staging[j : j + r].copy_(self.host_cache[h : h + r], non_blocking=True)
                idx = torch.tensor([d for _, d in chunk], dtype=torch.long).to(
                    self.device_cache.device, non_blocking=True
                )
                self.device_cache[:, :, idx] = self.staging[: len(chunk)].movedim(0, 2)
            end.record()
        self._restores.append((job_id, start, end))

    # ---- completion ----------------------------------------------------------------------
    def poll(self) -> list[int]:
        """Job ids of the restores finished since the last call (in issue order), and their
        copy time added to the totals."""
        if not self.cuda:
            done, self._done = self._done, []
            return done
        done = []
        while self._restores and self._restores[0][2].query():
            jid, start, end = self._restores.pop(0)
            self.seconds_to_device += start.elapsed_time(end) / 1e3
            done.append(jid)
        self.poll_timing()
        return done

    def poll_timing(self) -> None:
        """Add the copy time of finished offloads to ``seconds_to_host`` (CUDA)."""
        while self._offload_timing and self._offload_timing[0][1].query():
            start, end = self._offload_timing.pop(0)
            self.seconds_to_host += start.elapsed_time(end) / 1e3

    @property
    def num_in_flight(self) -> int:
        """Restore jobs issued and not yet reported by :meth:`poll` (running or done)."""
        return len(self._restores) + len(self._done)

    def wait_oldest(self) -> None:
        """Block until the oldest restore in flight is done (when the engine has nothing else
        to run)."""
        if self.cuda and self._restores:
            self._restores[0][2].synchronize()


__all__ = ["KVTransfer", "allocate_host_cache", "STAGING_BLOCKS"]
