"""The disk tier's files: one file per KV block, checksummed, written by atomic rename, kept
under a byte cap by least-recently-used eviction (docs/DESIGN.md, "Disk tier").

Layout under ``disk_cache_dir``::

    <dir>/<fingerprint, 16 hex>/<chain hash[:2] hex>/<chain hash, 64 hex>.kvb

A file is an 88-byte header then the block's bytes (the device block ``[layers, 2, *block]``
as the pool stores it, quantized formats with their scales inside):

    magic  8 bytes  b"PCKVBLK" + format version (1)
    fingerprint   32 bytes  everything that makes the bytes valid (:func:`kv_fingerprint`)
    chain hash    32 bytes  the block's prefix-cache key
    payload bytes  uint64 little-endian
    crc32          uint32 little-endian, of the payload (zlib)
    reserved       uint32 (0)

A reader accepts a file only when the magic, fingerprint, chain hash, length and CRC all
match; anything else (a corrupt, truncated, renamed or foreign file) is reported as a miss,
logged once and unlinked, and the block is recomputed. Writers write ``.<name>.<pid>.<random>.tmp``
in the same folder and ``os.replace`` it onto the final name, so a reader (this process or
another engine on the same folder) sees either no file or a whole one. Recency is the file's
mtime (bumped by every hit), so least-recently-used order survives restarts and is shared
between engines; the cap is enforced over every ``*.kvb`` file in the folder.

Threads: :class:`DiskStore` methods are called from the engine thread and from the disk
tier's IO threads (:mod:`local_engine.kv_cache.disk_tier`); the index is guarded by a lock.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import threading
import time
import zlib
from collections import OrderedDict
from pathlib import Path

logger = logging.getLogger("local_engine.kv_cache.disk")

MAGIC = b"PCKVBLK\x01"
_HEADER = struct.Struct("<8s32s32sQII")
HEADER_BYTES = _HEADER.size  # 88
SUFFIX = ".kvb"
#: Bytes written between two scans of the whole folder (so the cap also counts the files
#: other engines wrote): this fraction of the cap.
RESCAN_FRACTION = 1 / 16


def kv_fingerprint(parts: dict) -> bytes:
    """SHA-256 (32 bytes) of the sorted ``key=value`` lines of ``parts`` (model identity,
    dtype, KV dtype, block size, layout, rotary settings: see ``LLMEngine``)."""
    text = "\n".join(f"{k}={parts[k]}" for k in sorted(parts))
    return hashlib.sha256(text.encode()).digest()


class BadBlockFile(Exception):
    """A block file that must not be served (its reason is the message)."""


def pack_block(fingerprint: bytes, block_hash: bytes, payload: memoryview) -> list:
    """The header (bytes) and payload of a block file, to be written in order."""
    crc = zlib.crc32(payload)
    return [_HEADER.pack(MAGIC, fingerprint, block_hash, payload.nbytes, crc, 0), payload]


def unpack_block(
    data: bytes | bytearray, fingerprint: bytes, block_hash: bytes, nbytes: int
) -> memoryview:
    """The payload of a block file's bytes ``data``, checked.

    Raises:
        BadBlockFile: short file, wrong magic/version, another fingerprint or hash, wrong
            length, CRC mismatch."""
    if len(data) < HEADER_BYTES:
        raise BadBlockFile(f"truncated header ({len(data)} bytes)")
    magic, fp, h, n, crc, _ = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise BadBlockFile("not a block file of this format")
    if fp != fingerprint:
        raise BadBlockFile("written for another model or KV format (fingerprint differs)")
    if h != block_hash:
        raise BadBlockFile("holds another block (chain hash differs from its name)")
    if n != nbytes or len(data) != HEADER_BYTES + n:
        raise BadBlockFile(f"length {len(data) - HEADER_BYTES} / header {n}, expected {nbytes}")
    payload = memoryview(data)[HEADER_BYTES:]
    if zlib.crc32(payload) != crc:
        raise BadBlockFile("checksum mismatch")
    return payload


class DiskStore:
    """The block files of one fingerprint under ``root``, and the folder's byte cap.

    Args:
        root: the folder (created when missing).
        fingerprint: 32 bytes (:func:`kv_fingerprint`).
        block_bytes: payload bytes of one block.
        capacity: most bytes of ``*.kvb`` files the folder keeps (all fingerprints).

    Attributes:
        index: chain hash -> file bytes of this fingerprint's files known to this process,
            least recently used first.
        num_evicted, bytes_evicted: files this process deleted to keep the cap (cumulative).
        num_bad: files found corrupt, truncated or foreign (deleted, cumulative).
    """

    def __init__(
        self, root: str | os.PathLike, fingerprint: bytes, block_bytes: int, capacity: int
    ):
        if capacity < block_bytes + HEADER_BYTES:
            raise ValueError(
                f"disk_cache_size={capacity} bytes holds no KV block file "
                f"({block_bytes + HEADER_BYTES} bytes here)"
            )
        self.root = Path(root)
        self.fingerprint = fingerprint
        self.block_bytes = block_bytes
        self.capacity = capacity
        self.dir = self.root / fingerprint.hex()[:16]
        self.dir.mkdir(parents=True, exist_ok=True)
        self.index: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()
        self._total = 0  # bytes of all *.kvb files in the folder at the last scan + since
        self._since_scan = 0
        self.num_evicted = self.bytes_evicted = self.num_bad = 0
        self.rescan()

    # ---- paths -----------------------------------------------------------------------------
    def path(self, block_hash: bytes) -> Path:
        """The file of the block with chain hash ``block_hash``: ``DIR/<2 hex>/<hex><SUFFIX>``."""
        hx = block_hash.hex()
        return self.dir / hx[:2] / (hx + SUFFIX)

    @property
    def file_bytes(self) -> int:
        """Bytes of one block file: the checksummed header plus the block's KV bytes."""
        return HEADER_BYTES + self.block_bytes

    # ---- index -----------------------------------------------------------------------------
    def _scan(self) -> list[tuple[float, int, Path]]:
        """``(mtime, size, path)`` of every ``*.kvb`` file under the folder (any fingerprint)."""
        out = []
        for dirpath, _, names in os.walk(self.root):
            for name in names:
                if not name.endswith(SUFFIX):
                    continue
                p = Path(dirpath) / name
                try:
                    st = p.stat()
                except FileNotFoundError:
                    continue  # deleted by another engine meanwhile
                out.append((st.st_mtime, st.st_size, p))
        return out

    def rescan(self) -> None:
        """Rebuild the index and the folder total from the files (oldest mtime first), then
        evict down to the cap."""
        files = sorted(self._scan(), key=lambda f: f[0])
        with self._lock:
            self.index.clear()
            for _, size, p in files:
                if p.parent.parent == self.dir and len(p.stem) == 64:
                    try:
                        self.index[bytes.fromhex(p.stem)] = size
                    except ValueError:
                        pass
            self._total = sum(f[1] for f in files)
            self._since_scan = 0
        self._evict(files)

    def _evict(self, files: list[tuple[float, int, Path]]) -> None:
        """Delete the least recently used files (``files`` oldest first) while over the cap."""
        for _, size, p in files:
            if self._total <= self.capacity:
                return
            try:
                p.unlink()
            except FileNotFoundError:
                pass  # another engine took it
            with self._lock:
                self._total -= size
                self.num_evicted += 1
                self.bytes_evicted += size
                if p.parent.parent == self.dir:
                    try:
                        self.index.pop(bytes.fromhex(p.stem), None)
                    except ValueError:
                        pass

    def contains(self, block_hash: bytes) -> bool:
        """Whether a file for this hash is known or exists now (written by another engine
        since the last scan: a ``stat``). No LRU change."""
        with self._lock:
            if block_hash in self.index:
                return True
        try:
            size = self.path(block_hash).stat().st_size
        except OSError:
            return False
        with self._lock:
            self.index[block_hash] = size
            self.index.move_to_end(block_hash, last=False)
        return True

    def __len__(self) -> int:
        return len(self.index)

    @property
    def total_bytes(self) -> int:
        """Bytes of ``*.kvb`` files in the folder as this process knows them."""
        return self._total

    # ---- IO (called from the IO threads) ---------------------------------------------------
    def write(self, block_hash: bytes, payload: memoryview) -> int:
        """Write one block file atomically (temporary file, then ``os.replace``). Returns the
        bytes written (0 when the file is already there). ``payload``: the block's bytes."""
        if payload.nbytes != self.block_bytes:
            raise ValueError(
                f"block payload is {payload.nbytes} bytes, expected {self.block_bytes}"
            )
        with self._lock:
            if block_hash in self.index:
                return 0
        final = self.path(block_hash)
        final.parent.mkdir(exist_ok=True)
        tmp = final.parent / f".{final.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
        try:
            with open(tmp, "wb") as f:
                for part in pack_block(self.fingerprint, block_hash, payload):
                    f.write(part)
            os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        size = self.file_bytes
        with self._lock:
            self.index[block_hash] = size
            self._total += size
            self._since_scan += size
            rescan = (
                self._total > self.capacity or self._since_scan > self.capacity * RESCAN_FRACTION
            )
        if rescan:
            self.rescan()
        return size

    def read(self, block_hash: bytes) -> memoryview:
        """The checked payload of a block's file; bumps its mtime (recency).

        Raises:
            FileNotFoundError: no file (evicted, possibly by another engine): forgotten.
            BadBlockFile: a file that must not be served: logged once, deleted, forgotten."""
        p = self.path(block_hash)
        try:
            with open(p, "rb") as f:
                data = bytearray(os.fstat(f.fileno()).st_size)  # writable: torch.frombuffer
                n = f.readinto(data)
                del data[n:]
        except FileNotFoundError:
            self.forget(block_hash)
            raise
        try:
            payload = unpack_block(data, self.fingerprint, block_hash, self.block_bytes)
        except BadBlockFile as exc:
            logger.warning("disk tier: skipping %s: %s (recomputed)", p, exc)
            with self._lock:
                self.num_bad += 1
            p.unlink(missing_ok=True)
            self.forget(block_hash)
            raise
        now = time.time()
        try:
            os.utime(p, (now, now))
        except OSError:
            pass
        with self._lock:
            if block_hash in self.index:
                self.index.move_to_end(block_hash)
        return payload

    def forget(self, block_hash: bytes) -> None:
        """Drop a hash from the index (its file is gone)."""
        with self._lock:
            size = self.index.pop(block_hash, None)
            if size is not None:
                self._total -= size


__all__ = [
    "DiskStore",
    "BadBlockFile",
    "kv_fingerprint",
    "model_identity",
    "pack_block",
    "unpack_block",
    "HEADER_BYTES",
    "MAGIC",
]


#: Bytes hashed from each end of every model file for :func:`model_identity`.
IDENTITY_SAMPLE_BYTES = 4 << 20


def model_identity(path: Path, weights: dict | None, seed: int) -> str:
    """A string naming the model weights, for the fingerprint (hex SHA-256).

    - Weights read from files (a ``.gguf`` file, or an HF folder's ``*.safetensors``): each
      file's name, size and first and last :data:`IDENTITY_SAMPLE_BYTES` bytes (a 16 GB
      checkpoint is not read whole at every start; a checkpoint edited in its middle only,
      keeping its size, would not be told apart).
    - Random weights (``LLMEngine.from_config`` without weights): ``config.json`` and the seed.
    - Weights handed over as tensors: every tensor's name, shape, dtype and first 4 KiB.
    """
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(path.glob("*.safetensors"))
    if weights is None:
        h.update(b"random-init\0" + (path / "config.json").read_bytes() + f"\0{seed}".encode())
    elif files:
        for f in files:
            size = f.stat().st_size
            h.update(f"{f.name}\0{size}\0".encode())
            with open(f, "rb") as fh:
                h.update(fh.read(IDENTITY_SAMPLE_BYTES))
                fh.seek(max(0, size - IDENTITY_SAMPLE_BYTES))
                h.update(fh.read(IDENTITY_SAMPLE_BYTES))
    else:
        import torch

        for name in sorted(weights):
            t = weights[name]
            if not isinstance(t, torch.Tensor):
                h.update(f"{name}\0{t!r}".encode())
                continue
            head = t.detach().reshape(-1)[: 4096 // max(1, t.element_size())].cpu()
            h.update(f"{name}\0{tuple(t.shape)}\0{t.dtype}\0".encode())
            h.update(head.contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()
