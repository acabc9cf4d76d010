"""The KV-cache block pool: physical blocks, reference counts, the hash -> block map of cached
blocks, and the two free lists (uncached blocks, and cached blocks in least-recently-used order).

Modelled on vLLM v1's ``BlockPool`` (vllm/v1/core/block_pool.py), with one difference the
design asks for: a freed block that holds cached content is evicted only when no free uncached
block remains, so allocation takes plain free blocks first and then the least recently used
cached one.

Block hashes chain: ``hash(block i) = SHA-256(hash(block i-1) || token ids || extra keys)``, so
equal hashes mean equal whole prefixes (up to SHA-256 collisions). Extra keys carry anything
else that changes the K/V for the same tokens: a per-tenant ``cache_salt`` (in the first block,
hence in every later hash) and room for adapter names.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

BlockHash = bytes

#: Parent hash of a sequence's first block: a fixed seed, so the first block's hash still
#: depends on a fixed 32-byte value (the chain never starts from an empty string).
ROOT_HASH: BlockHash = hashlib.sha256(b"promptcache-kv-root").digest()


def hash_block_tokens(
    parent: BlockHash | None, token_ids: Sequence[int], extra_keys: tuple | None = None
) -> BlockHash:
    """SHA-256 chain hash of one full block.

    Args:
        parent: the previous block's hash, or None for the first block (uses :data:`ROOT_HASH`).
        token_ids: the block's ``block_size`` token ids.
        extra_keys: a tuple of JSON-serializable values (cache salt, adapter name) or None.

    Returns: 32 raw bytes.
    """
    h = hashlib.sha256(parent if parent is not None else ROOT_HASH)
    h.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    if extra_keys:
        h.update(b"\x00extra")
        h.update(json.dumps(list(extra_keys), separators=(",", ":"), sort_keys=True).encode())
    return h.digest()


class KVBlock:
    """One physical block: its id (index into the cache tensors), reference count (number of
    sequences whose block table holds it) and, when full and cached, its chain hash."""

    __slots__ = ("block_id", "ref_cnt", "block_hash")

    def __init__(self, block_id: int):
        self.block_id = block_id
        self.ref_cnt = 0
        self.block_hash: BlockHash | None = None

    def __repr__(self) -> str:
        h = self.block_hash.hex()[:8] if self.block_hash else None
        return f"KVBlock(id={self.block_id}, ref={self.ref_cnt}, hash={h})"


class PoolInvariantError(AssertionError):
    """The block pool's bookkeeping is inconsistent (raised by :meth:`BlockPool.check`)."""


class BlockPool:
    """``num_blocks`` physical blocks and their bookkeeping.

    States of a block: *free* (ref 0, no hash; in ``free_uncached``), *cached-free* (ref 0,
    hashed; in the LRU ``cached_free``), *in use* (ref > 0; hashed or not). Every block is in
    exactly one state.
    """

    def __init__(self, num_blocks: int, enable_caching: bool = True):
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.blocks: list[KVBlock] = [KVBlock(i) for i in range(num_blocks)]
        # Plain free blocks; popped from the end. Initially ordered so block 0 is taken first.
        self.free_uncached: list[KVBlock] = list(reversed(self.blocks))
        # Cached blocks with ref 0, least recently used first (block_id -> block).
        self.cached_free: OrderedDict[int, KVBlock] = OrderedDict()
        self.hash_to_block: dict[BlockHash, KVBlock] = {}
        self.num_evictions = 0
        # called as on_evict(block, hash) when allocate() evicts a cached-free block, before
        # the block is handed out (the CPU tier copies it out: KVCacheManager)
        self.on_evict: Callable[[KVBlock, BlockHash], None] | None = None

    # ---- queries -------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be handed out now: free plus cached-free (evictable)."""
        return len(self.free_uncached) + len(self.cached_free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def usage(self) -> float:
        """Fraction of blocks in use (0..1); cached-free blocks count as free."""
        return self.num_used_blocks / self.num_blocks

    def lookup(self, block_hash: BlockHash) -> KVBlock | None:
        """The cached block with this hash, if any (does not touch it)."""
        return self.hash_to_block.get(block_hash)

    # ---- state changes -------------------------------------------------------------------
    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """Take a reference on cache hits: a cached-free block leaves the LRU list."""
        for b in blocks:
            if b.ref_cnt == 0:
                self.cached_free.pop(b.block_id, None)
            b.ref_cnt += 1

    def allocate(self, n: int) -> list[KVBlock]:
        """``n`` blocks with ref 1: plain free ones first, then evict LRU cached ones.

        Raises:
            ValueError: fewer than ``n`` blocks are free (callers check first).
        """
        if n > self.num_free_blocks:
            raise ValueError(f"need {n} free blocks, have {self.num_free_blocks}")
        out = []
        for _ in range(n):
            if self.free_uncached:
                b = self.free_uncached.pop()
            else:
                _, b = self.cached_free.popitem(last=False)
                h = b.block_hash
                self._evict(b)
                if self.on_evict is not None and h is not None:
                    self.on_evict(b, h)
            b.ref_cnt = 1
            out.append(b)
        return out

    def _evict(self, b: KVBlock) -> None:
        if b.block_hash is not None:
            if self.hash_to_block.get(b.block_hash) is b:
                del self.hash_to_block[b.block_hash]
            b.block_hash = None
            self.num_evictions += 1

    def cache_block(self, block: KVBlock, block_hash: BlockHash) -> None:
        """Register a full, computed block under its chain hash (no-op when caching is off,
        when the block is already hashed, or when another block already holds the hash)."""
        if not self.enable_caching or block.block_hash is not None:
            return
        if block_hash in self.hash_to_block:
            return
        block.block_hash = block_hash
        self.hash_to_block[block_hash] = block

    def free(self, blocks: Iterable[KVBlock]) -> None:
        """Drop one reference on each block, in the given order. A block reaching ref 0 goes
        to the LRU tail when hashed (most recently used), else back to the plain free list.
        Callers pass a sequence's blocks tail first so its unshared tail is evicted before a
        shared prefix."""
        for b in blocks:
            if b.ref_cnt <= 0:
                raise PoolInvariantError(f"double free of {b!r}")
            b.ref_cnt -= 1
            if b.ref_cnt == 0:
                if b.block_hash is not None:
                    self.cached_free[b.block_id] = b
                else:
                    self.free_uncached.append(b)

    def reset_prefix_cache(self) -> int:
        """Forget every cached-free block's hash (in-use blocks keep theirs). Returns how many
        were dropped."""
        n = 0
        while self.cached_free:
            _, b = self.cached_free.popitem(last=False)
            self._evict(b)
            self.free_uncached.append(b)
            n += 1
        return n

    # ---- debugging -----------------------------------------------------------------------
    def check(self, expected_refs: dict[int, int] | None = None) -> None:
        """Check the invariants; raise :class:`PoolInvariantError` on the first violation.

        - free + cached-free + in-use = total, each block in exactly one state;
        - no duplicates in either free list; free blocks have ref 0, used blocks ref > 0;
        - plain free blocks carry no hash, cached-free blocks do, and the hash map points back;
        - with ``expected_refs`` (block id -> number of block tables holding it), every
          block's ref count equals it.
        """
        free_ids = [b.block_id for b in self.free_uncached]
        cached_ids = list(self.cached_free.keys())
        if len(set(free_ids)) != len(free_ids):
            raise PoolInvariantError("duplicate block in the free list")
        if set(free_ids) & set(cached_ids):
            raise PoolInvariantError("block both free and cached-free")
        used = [b for b in self.blocks if b.ref_cnt > 0]
        if len(free_ids) + len(cached_ids) + len(used) != self.num_blocks:
            raise PoolInvariantError(
                f"free {len(free_ids)} + cached-free {len(cached_ids)} + in-use {len(used)}"
                f" != total {self.num_blocks}"
            )
        for b in self.free_uncached:
            if b.ref_cnt != 0 or b.block_hash is not None:
                raise PoolInvariantError(f"free block in a bad state: {b!r}")
        for bid, b in self.cached_free.items():
            if b.block_id != bid or b.ref_cnt != 0 or b.block_hash is None:
                raise PoolInvariantError(f"cached-free block in a bad state: {b!r}")
        for h, b in self.hash_to_block.items():
            if b.block_hash != h:
                raise PoolInvariantError(f"hash map points at {b!r} for another hash")
        for b in self.blocks:
            if b.ref_cnt < 0:
                raise PoolInvariantError(f"negative ref count: {b!r}")
            if expected_refs is not None and b.ref_cnt != expected_refs.get(b.block_id, 0):
                raise PoolInvariantError(
                    f"{b!r}: ref count {b.ref_cnt} but held by "
                    f"{expected_refs.get(b.block_id, 0)} block tables"
                )


__all__ = [
    "BlockPool",
    "KVBlock",
    "BlockHash",
    "hash_block_tokens",
    "PoolInvariantError",
    "ROOT_HASH",
]
