"""KV-cache manager: per-sequence block tables on top of the :class:`BlockPool`, automatic prefix
caching, copy-on-write for forked samples.

Lifecycle of a sequence (vLLM v1's ``KVCacheManager`` shape):

1. :meth:`get_computed_blocks` looks its full prompt blocks up by chain hash and returns the
   longest cached run, capped so that at least one prompt token is still computed.
2. :meth:`allocate_slots` takes references on those hits and allocates blocks for the tokens to
   compute this step (copying a shared partial block first: copy-on-write). It returns None
   when the pool cannot supply them, and changes nothing then.
3. After the step ran, :meth:`cache_computed_blocks` registers the newly full, computed
   blocks under their hashes so later requests can hit them.
4. :meth:`free` drops the sequence's references tail first.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

import numpy as np

from ..sequence import Sequence
from .block_pool import BlockPool, KVBlock, PoolInvariantError, hash_block_tokens
from .block_table import BlockTableRows


class KVCacheManager:
    """Block tables for all live sequences.

    Args:
        num_blocks: pool size.
        block_size: tokens per block.
        enable_caching: automatic prefix caching on/off.

    Attributes:
        num_blocks, block_size; ``num_free_blocks`` (free + evictable cached);
        ``prefix_cache_queries`` / ``prefix_cache_hits``: prompt tokens looked up / found.
    """

    def __init__(
        self, num_blocks: int, block_size: int, enable_caching: bool = True, num_cpu_blocks: int = 0
    ):
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.pool = BlockPool(num_blocks, enable_caching)
        self.req_blocks: dict[str, list[KVBlock]] = {}
        # per sequence: its block ids as a row of one int32 matrix (kept in step with
        # req_blocks, so a step gathers its block tables with one NumPy index), and how many of
        # its leading blocks are known to carry a hash (cache_computed_blocks starts there)
        self.block_tables = BlockTableRows()
        self._num_hashed: dict[str, int] = {}
        # swap space: CPU block ids, free list and per-sequence tables of swapped-out blocks
        self.num_cpu_blocks = num_cpu_blocks
        self.free_cpu_blocks: list[int] = list(range(num_cpu_blocks - 1, -1, -1))
        self.swapped: dict[str, list[int]] = {}
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0

    # ---- sizes ---------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    def usage(self) -> float:
        """Fraction of blocks held by live sequences (0..1)."""
        return self.pool.usage()

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks that hold ``num_tokens`` tokens: ``ceil(num_tokens / block_size)``."""
        return -(-num_tokens // self.block_size)

    def block_ids(self, seq_id: str) -> list[int]:
        """The sequence's block table (physical block ids in logical order)."""
        return [b.block_id for b in self.req_blocks.get(seq_id, ())]

    def block_table_array(self, seq_ids: Seq[str]) -> np.ndarray:
        """The block tables of ``seq_ids`` as one int32 array ``[len(seq_ids), max_blocks]``
        (a new array; each row the sequence's physical block ids in logical order, padded with
        0; ``max_blocks`` the longest table, at least 1) — what
        :meth:`~local_engine.runner.ModelRunner.prepare` takes, gathered without a Python
        loop over the blocks."""
        return self.block_tables.gather(seq_ids)

    # ---- hashing -------------------------------------------------------------------------
    def update_block_hashes(self, seq: Sequence) -> list[bytes]:
        """Extend ``seq.block_hashes`` to cover every full block of ``seq.all_token_ids``."""
        bs = self.block_size
        hashes = seq.block_hashes
        n_full = seq.num_tokens // bs
        while len(hashes) < n_full:
            i = len(hashes)
            parent = hashes[-1] if hashes else None
            tokens = seq.all_token_ids[i * bs : (i + 1) * bs]
            hashes.append(hash_block_tokens(parent, tokens, seq.extra_keys() if i == 0 else None))
        return hashes

    # ---- lookup --------------------------------------------------------------------------
    def get_computed_blocks(self, seq: Sequence) -> tuple[list[KVBlock], int]:
        """Longest run of cached full blocks at the start of ``seq``'s tokens.

        At least one token is left to compute: a fully cached token list (its length a
        multiple of the block size included) gives back its last block.

        Returns: ``(blocks, num_cached_tokens)``; references are not taken yet.
        """
        if not self.enable_caching or seq.num_computed_tokens > 0:
            return [], 0
        hashes = self.update_block_hashes(seq)
        max_blocks = (seq.num_tokens - 1) // self.block_size
        hits: list[KVBlock] = []
        for h in hashes[:max_blocks]:
            b = self.pool.lookup(h)
            if b is None:
                break
            hits.append(b)
        return hits, len(hits) * self.block_size

    def record_lookup(self, num_query_tokens: int, num_hit_tokens: int) -> None:
        """Count a prefix-cache query (tokens looked up) and its hits, for metrics."""
        self.prefix_cache_queries += num_query_tokens
        self.prefix_cache_hits += num_hit_tokens

    def num_blocks_to_allocate(
        self, seq: Sequence, num_new_tokens: int, computed_blocks: Seq[KVBlock] = ()
    ) -> int:
        """Free blocks ``allocate_slots`` would consume (new blocks, copy-on-write copies and
        cached-free hits that leave the evictable list)."""
        held = self.req_blocks.get(seq.seq_id, [])
        num_computed = seq.num_computed_tokens + len(computed_blocks) * self.block_size
        total = self.blocks_needed(num_computed + num_new_tokens)
        need = max(0, total - len(held) - len(computed_blocks))
        if self._needs_cow(held, seq.num_computed_tokens, num_new_tokens):
            need += 1
        need += sum(1 for b in computed_blocks if b.ref_cnt == 0)
        return need

    def _needs_cow(self, held: list[KVBlock], num_computed: int, num_new: int) -> bool:
        return (
            num_new > 0
            and len(held) > 0
            and num_computed % self.block_size != 0
            and num_computed // self.block_size < len(held)
            and held[num_computed // self.block_size].ref_cnt > 1
        )

    # ---- allocation ----------------------------------------------------------------------
    def allocate_slots(
        self, seq: Sequence, num_new_tokens: int, computed_blocks: Seq[KVBlock] = ()
    ) -> list[tuple[int, int]] | None:
        """Make room for ``num_new_tokens`` more tokens of ``seq`` (after ``computed_blocks``,
        the prefix-cache hits from :meth:`get_computed_blocks`, when it is first scheduled).

        Returns: the list of ``(src_block, dst_block)`` copies the runner must do before the
        forward (copy-on-write of a shared partial block), or None when the pool is short —
        in which case nothing changed.
        """
        if not computed_blocks:
            # the common decode case: the held blocks already have room and the block written
            # to is not shared, so nothing is allocated or copied
            held = self.req_blocks.get(seq.seq_id)
            if held:
                nc = seq.num_computed_tokens
                if -(-(nc + num_new_tokens) // self.block_size) <= len(held) and not (
                    num_new_tokens > 0
                    and nc % self.block_size
                    and nc // self.block_size < len(held)
                    and held[nc // self.block_size].ref_cnt > 1
                ):
                    return []
        if (
            self.num_blocks_to_allocate(seq, num_new_tokens, computed_blocks)
            > self.pool.num_free_blocks
        ):
            return None
        held = self.req_blocks.setdefault(seq.seq_id, [])
        table = self.block_tables
        copies: list[tuple[int, int]] = []
        if computed_blocks:
            assert not held, "prefix-cache hits only for a sequence holding no blocks"
            self.pool.touch(computed_blocks)
            held.extend(computed_blocks)
            table.append(seq.seq_id, [b.block_id for b in computed_blocks])
        num_computed = seq.num_computed_tokens + len(computed_blocks) * self.block_size
        if self._needs_cow(held, seq.num_computed_tokens, num_new_tokens):
            i = seq.num_computed_tokens // self.block_size
            old = held[i]
            (new,) = self.pool.allocate(1)
            copies.append((old.block_id, new.block_id))
            held[i] = new
            table.set(seq.seq_id, i, new.block_id)
            if self._num_hashed.get(seq.seq_id, 0) > i:
                self._num_hashed[seq.seq_id] = i
            self.pool.free([old])
        extra = self.blocks_needed(num_computed + num_new_tokens) - len(held)
        if extra > 0:
            new_blocks = self.pool.allocate(extra)
            held.extend(new_blocks)
            table.append(seq.seq_id, [b.block_id for b in new_blocks])
        return copies

    def cache_computed_blocks(self, seq: Sequence) -> None:
        """Register every full block whose tokens are all computed under its chain hash.

        Blocks a sequence holds keep their hash while held (only freed blocks are evicted), so
        the blocks before the first unhashed one are skipped: a decode step that completes no
        block costs a dict lookup."""
        if not self.enable_caching:
            return
        held = self.req_blocks.get(seq.seq_id)
        if not held:
            return
        n_full = min(seq.num_computed_tokens // self.block_size, len(held))
        start = self._num_hashed.get(seq.seq_id, 0)
        if start >= n_full:
            return
        hashes = self.update_block_hashes(seq)
        done = start
        for i in range(start, n_full):
            b = held[i]
            if b.block_hash is None:
                self.pool.cache_block(b, hashes[i])
            if done == i and b.block_hash is not None:
                done = i + 1
        self._num_hashed[seq.seq_id] = done

    def trim(self, seq: Sequence, num_tokens: int) -> None:
        """Give back ``seq``'s blocks past the first ``blocks_needed(num_tokens)`` (speculative
        decoding: blocks allocated for drafts that were rejected), tail first. The kept blocks
        and their hashes are unchanged; a trimmed block never had a hash (it held no
        accepted token)."""
        held = self.req_blocks.get(seq.seq_id)
        if not held:
            return
        keep = self.blocks_needed(num_tokens)
        if len(held) <= keep:
            return
        extra = held[keep:]
        del held[keep:]
        self.block_tables.assign(seq.seq_id, [b.block_id for b in held])
        if self._num_hashed.get(seq.seq_id, 0) > keep:
            self._num_hashed[seq.seq_id] = keep
        self.pool.free(reversed(extra))

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Give ``child`` the same block table as ``parent`` (one more reference on each
        block); the first write to a shared partial block copies it (copy-on-write)."""
        blocks = self.req_blocks.get(parent.seq_id, [])
        self.pool.touch(blocks)
        self.req_blocks[child.seq_id] = list(blocks)
        self.block_tables.assign(child.seq_id, [b.block_id for b in blocks])
        self._num_hashed.pop(child.seq_id, None)

    def free(self, seq: Sequence) -> None:
        """Drop ``seq``'s blocks, tail first (its unshared tail becomes the LRU victim before
        a shared prefix), and any swapped-out copy. Unknown sequences are a no-op."""
        self.drop_swapped(seq)
        self.block_tables.release(seq.seq_id)
        self._num_hashed.pop(seq.seq_id, None)
        blocks = self.req_blocks.pop(seq.seq_id, None)
        if blocks:
            self.pool.free(reversed(blocks))

    def reset_prefix_cache(self) -> int:
        """Evict every freed cached block (its hash is forgotten, it becomes a plain free block);
        blocks in use keep their hashes. Returns how many were evicted."""
        return self.pool.reset_prefix_cache()

    # ---- swapping (CPU memory) -----------------------------------------------------------
    def can_swap_out(self, seq: Sequence) -> bool:
        """True when ``seq`` holds device blocks and enough CPU swap blocks are free for all of them."""
        return 0 < len(self.req_blocks.get(seq.seq_id, ())) <= len(self.free_cpu_blocks)

    def swap_out(self, seq: Sequence) -> list[tuple[int, int]]:
        """Give ``seq``'s device blocks back, keeping their contents in CPU blocks.

        Returns: ``(device_block, cpu_block)`` copies the runner must do before anything
        overwrites those device blocks (i.e. first thing in the next forward step)."""
        blocks = self.req_blocks.pop(seq.seq_id)
        self.block_tables.release(seq.seq_id)
        self._num_hashed.pop(seq.seq_id, None)
        cpu = [self.free_cpu_blocks.pop() for _ in blocks]
        self.swapped[seq.seq_id] = cpu
        self.pool.free(reversed(blocks))
        return [(b.block_id, c) for b, c in zip(blocks, cpu)]

    def num_swapped_blocks(self, seq: Sequence) -> int:
        """Number of CPU blocks holding ``seq``'s swapped-out KV (0 when it is not swapped)."""
        return len(self.swapped.get(seq.seq_id, ()))

    def swap_in(self, seq: Sequence) -> list[tuple[int, int]] | None:
        """Bring a swapped-out sequence's blocks back into fresh device blocks.

        Returns: ``(cpu_block, device_block)`` copies, or None when the pool is short (nothing
        changes then)."""
        cpu = self.swapped.get(seq.seq_id)
        if cpu is None:
            return []
        if len(cpu) > self.pool.num_free_blocks:
            return None
        blocks = self.pool.allocate(len(cpu))
        del self.swapped[seq.seq_id]
        self.req_blocks[seq.seq_id] = blocks
        self.block_tables.assign(seq.seq_id, [b.block_id for b in blocks])
        self._num_hashed.pop(seq.seq_id, None)
        self.free_cpu_blocks.extend(reversed(cpu))
        return [(c, b.block_id) for c, b in zip(cpu, blocks)]

    def drop_swapped(self, seq: Sequence) -> None:
        """Forget a swapped-out sequence's CPU blocks (abort)."""
        cpu = self.swapped.pop(seq.seq_id, None)
        if cpu:
            self.free_cpu_blocks.extend(cpu)

    # ---- debugging -----------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise :class:`PoolInvariantError` unless every block's ref count equals the number
        of block tables holding it and the pool's own invariants hold."""
        refs: dict[int, int] = {}
        for blocks in self.req_blocks.values():
            for b in blocks:
                refs[b.block_id] = refs.get(b.block_id, 0) + 1
        self.pool.check(refs)
        held_cpu = [c for cpu in self.swapped.values() for c in cpu]
        if (
            len(set(held_cpu)) != len(held_cpu)
            or set(held_cpu) & set(self.free_cpu_blocks)
            or len(held_cpu) + len(self.free_cpu_blocks) != self.num_cpu_blocks
        ):
            raise PoolInvariantError("CPU swap blocks: lost, duplicated, or both free and held")
        if set(self.swapped) & set(self.req_blocks):
            raise PoolInvariantError("a sequence holds both device blocks and swapped-out blocks")
        for seq_id, blocks in self.req_blocks.items():
            if self.block_tables.ids(seq_id) != [b.block_id for b in blocks]:
                raise PoolInvariantError(
                    f"sequence {seq_id}: block-id table out of step with its blocks"
                )
            if any(b.block_hash is None for b in blocks[: self._num_hashed.get(seq_id, 0)]):
                raise PoolInvariantError(
                    f"sequence {seq_id}: a block before the hashed mark has no hash"
                )


__all__ = ["KVCacheManager", "PoolInvariantError"]
