"""Moving KV blocks between the device pool and the disk tier's files, off the engine thread:
one writer thread (evicted blocks, in order, bounded by bytes pending) and a small pool of
reader threads (prefix blocks a prompt found on disk). :mod:`~local_engine.kv_cache.disk_store`
owns the files; :class:`~local_engine.kv_cache.manager.KVCacheManager` keeps the books.

A read job is the disk part of one :class:`~local_engine.kv_cache.manager.RestoreJob`: each
block is read, checked (:func:`~local_engine.kv_cache.disk_store.unpack_block`) and copied into
its fresh device block by the reader thread (on CUDA on the thread's own stream, after an event
recorded on the compute stream when the job was issued: the fresh block's previous readers are
done). :meth:`DiskTier.poll` reports finished jobs with the hashes that failed (missing, corrupt
or foreign files), which the manager recomputes. Nothing on the engine thread waits for a read.
"""

from __future__ import annotations

import atexit
import queue
import threading
import time
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from .disk_store import BadBlockFile, DiskStore

#: Reader threads (each reads one block file at a time; the CRC and the copy release the GIL).
NUM_READERS = 2
#: Bytes of evicted blocks queued for the writer before further ones are dropped (not written).
MAX_PENDING_WRITE_BYTES = 512 << 20


class DiskTier:
    """Asynchronous block IO between ``device_cache`` ``[layers, 2, N, *block]`` and ``store``.

    Attributes (cumulative): ``num_writes`` / ``bytes_written`` (files written),
    ``num_writes_dropped`` (evicted blocks not written: the writer was too far behind),
    ``bytes_read`` / ``seconds_read`` (blocks read back and copied, wall time of the reader
    threads), ``num_read_failures`` (blocks that could not be served).
    """

    def __init__(self, store: DiskStore, device_cache: torch.Tensor):
        self.store = store
        self.device_cache = device_cache
        self.cuda = device_cache.device.type == "cuda"
        self.num_writes = self.bytes_written = self.num_writes_dropped = 0
        self.bytes_read = 0
        self.seconds_read = 0.0
        self.num_read_failures = 0
        self._pending_bytes = 0
        self._lock = threading.Lock()
        self._writes: queue.Queue = queue.Queue()
        self._writer = threading.Thread(target=self._write_loop, name="kv-disk-writer", daemon=True)
        self._writer.start()
        self._readers = ThreadPoolExecutor(NUM_READERS, thread_name_prefix="kv-disk-reader")
        self._results: queue.Queue = queue.Queue()
        self._jobs: dict[int, list] = {}  # job id -> [reads left, failed hashes]
        self._done: list[tuple[int, list[bytes]]] = []
        # queued writes reach the disk before the interpreter exits (the writer is a daemon)
        atexit.register(_flush_at_exit, weakref.ref(self))

    # ---- writes ----------------------------------------------------------------------------
    def write(self, hashes: Sequence[bytes], blocks: torch.Tensor) -> None:
        """Queue ``blocks`` (host tensor ``[len(hashes), layers, 2, *block]``, owned by the
        tier from now on) for writing under ``hashes``; hashes already on disk are skipped, and
        blocks past :data:`MAX_PENDING_WRITE_BYTES` queued are dropped (counted)."""
        for i, h in enumerate(hashes):
            if self.store.contains(h):
                continue
            data = blocks[i].reshape(-1).view(torch.uint8)
            with self._lock:
                if self._pending_bytes + data.numel() > MAX_PENDING_WRITE_BYTES:
                    self.num_writes_dropped += 1
                    continue
                self._pending_bytes += data.numel()
            self._writes.put((h, data))

    def _write_loop(self) -> None:
        while True:
            item = self._writes.get()
            try:
                if item is None:
                    return
                h, data = item
                try:
                    n = self.store.write(h, memoryview(data.numpy()))
                except OSError as exc:  # disk full, permissions: the block is just not kept
                    from .disk_store import logger

                    logger.warning("disk tier: could not write a block: %s", exc)
                    n = 0
                with self._lock:
                    self._pending_bytes -= data.numel()
                    if n:
                        self.num_writes += 1
                        self.bytes_written += n
            finally:
                self._writes.task_done()

    def flush(self) -> None:
        """Block until every queued write is on disk."""
        self._writes.join()

    # ---- reads -----------------------------------------------------------------------------
    def read(self, job_id: int, pairs: Sequence[tuple[bytes, int]]) -> None:
        """Read ``(chain hash, device block)`` pairs into the device blocks, as job ``job_id``
        (reported by :meth:`poll` once every block is done)."""
        if not pairs:
            self._done.append((job_id, []))
            return
        ready = None
        if self.cuda:
            ready = torch.cuda.Event()
            ready.record(torch.cuda.current_stream(self.device_cache.device))
        self._jobs[job_id] = [len(pairs), []]
        for h, b in pairs:
            self._readers.submit(self._read_one, job_id, h, b, ready)

    def _read_one(self, job_id: int, h: bytes, block: int, ready) -> None:
        t0 = time.perf_counter()
        ok = False
        try:
            payload = self.store.read(h)
            src = torch.frombuffer(payload, dtype=torch.uint8)
            dst = self.device_cache[:, :, block]
            src = src.view(self.device_cache.dtype).view(dst.shape)
            if self.cuda:
                stream = torch.cuda.Stream(self.device_cache.device)
                stream.wait_event(ready)
                with torch.cuda.stream(stream):
                    dst.copy_(src)
                stream.synchronize()
            else:
                dst.copy_(src)
            ok = True
        except (OSError, BadBlockFile):
            pass  # missing or bad (logged by the store): recomputed
        except Exception:  # noqa: BLE001 - never lose a job: a failed read is recomputed
            from .disk_store import logger

            logger.exception("disk tier: reading a block failed (recomputed)")
        dt = time.perf_counter() - t0
        self._results.put((job_id, h, ok, dt))

    def poll(self) -> list[tuple[int, list[bytes]]]:
        """``(job id, hashes that failed)`` of the read jobs finished since the last call."""
        while True:
            try:
                job_id, h, ok, dt = self._results.get_nowait()
            except queue.Empty:
                break
            self.seconds_read += dt
            state = self._jobs[job_id]
            state[0] -= 1
            if ok:
                self.bytes_read += self.store.block_bytes
            else:
                self.num_read_failures += 1
                state[1].append(h)
            if state[0] == 0:
                del self._jobs[job_id]
                self._done.append((job_id, state[1]))
        done, self._done = self._done, []
        return done

    @property
    def num_in_flight(self) -> int:
        """Read jobs issued and not yet reported by :meth:`poll`."""
        return len(self._jobs) + len(self._done)

    def wait_any(self, timeout: float = 0.05) -> None:
        """Block until a read finishes (or ``timeout`` seconds): nothing else to run."""
        if self._done or not self._jobs:
            return
        try:
            item = self._results.get(timeout=timeout)
        except queue.Empty:
            return
        self._results.put(item)

    def close(self) -> None:
        """Finish the queued writes and stop the threads."""
        self._writes.put(None)
        self._writer.join()
        self._readers.shutdown(wait=True)


def _flush_at_exit(ref: weakref.ref) -> None:
    tier = ref()
    if tier is not None:
        tier.flush()


__all__ = ["DiskTier", "NUM_READERS", "MAX_PENDING_WRITE_BYTES"]
