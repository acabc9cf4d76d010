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

With a CPU tier (``num_cpu_cache_blocks > 0``), a cached block the pool evicts is copied to a
host slot under the same chain hash (:meth:`take_transfers` hands the step's copies to the
runner), and :meth:`find_cpu_hits` / :meth:`begin_restore` continue a prompt's lookup into
the tier: the blocks found there get fresh device blocks and a copy back that runs while other
sequences compute; :meth:`finish_restores` registers them under their hashes once the copy is
done (docs/DESIGN.md, "CPU tier").

With a disk tier (``disk``, a :class:`~local_engine.kv_cache.disk_store.DiskStore`), blocks
the CPU tier evicts (or the device pool, when there is no CPU tier or it refuses them) are
handed to the runner for writing (:meth:`take_disk_writes`), and the lookup continues past the
CPU tier into the disk's files: such blocks get fresh device blocks too, read back by the disk
tier's threads as part of the same restore job. A block that cannot be read (missing, corrupt,
foreign) fails the job: the valid blocks are kept under their hashes, the sequence gives its
blocks back and is looked up again (:meth:`take_failed_restores`), computing what is missing
(docs/DESIGN.md, "Disk tier").
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..sequence import Sequence
from .block_pool import BlockHash, BlockPool, KVBlock, PoolInvariantError, hash_block_tokens
from .block_table import BlockTableRows
from .cpu_tier import HostBlockPool
from .residual import ResidualSlots

if TYPE_CHECKING:
    from .disk_store import DiskStore


@dataclass
class RestoreJob:
    """One sequence's prefix blocks being copied back from the CPU tier to the device.

    Attributes:
        job_id: the runner's handle for the copy (polled for completion).
        seq_id: the sequence the blocks are for.
        copies: ``(host slot, device block)`` per restored block, in block order.
        hashes: the chain hash of each restored block (pinned in the tier until done).
        blocks: the device blocks written (fresh, unhashed until the copy is done).
        disk_reads: ``(chain hash, device block)`` per block read back from the disk tier.
        disk_blocks: their device blocks (fresh, unhashed until the read is done).
        parts_left: copies still running (the CPU-tier copy and the disk reads: one each).
        failed: chain hashes whose disk read failed (recomputed).
    """

    job_id: int
    seq_id: str
    copies: list[tuple[int, int]] = field(default_factory=list)
    hashes: list[BlockHash] = field(default_factory=list)
    blocks: list[KVBlock] = field(default_factory=list)
    disk_reads: list[tuple[BlockHash, int]] = field(default_factory=list)
    disk_blocks: list[KVBlock] = field(default_factory=list)
    parts_left: int = 0
    failed: list[BlockHash] = field(default_factory=list)

    @property
    def all_blocks(self) -> list[KVBlock]:
        """Every device block the job writes (CPU tier's, then the disk's)."""
        return self.blocks + self.disk_blocks


class KVCacheManager:
    """Block tables for all live sequences.

    Args:
        num_blocks: pool size.
        block_size: tokens per block.
        enable_caching: automatic prefix caching on/off.
        num_cpu_blocks: swap space in host blocks (swap's reserved floor).
        num_cpu_cache_blocks: the CPU tier's share of host blocks (0 = tier off; ignored
            with caching off).
        disk: the disk tier's file index (None = off; ignored with caching off).
        residual: int2's residual slots (:mod:`~local_engine.kv_cache.residual`; None for
            every other format): the block a sequence's last computed token leaves partly
            written holds one; a sequence holding one is preempted by recompute, not swapped.

    Attributes:
        num_blocks, block_size; ``num_free_blocks`` (free + evictable cached);
        ``prefix_cache_queries`` / ``prefix_cache_hits``: prompt tokens looked up / found
        (either tier); ``prefix_cache_hits_cpu``: of the hits, tokens restored from the CPU
        tier; ``host``: the :class:`~local_engine.kv_cache.cpu_tier.HostBlockPool`.
    """

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_caching: bool = True,
        num_cpu_blocks: int = 0,
        num_cpu_cache_blocks: int = 0,
        disk: DiskStore | None = None,
        residual: ResidualSlots | None = None,
    ):
        self.block_size = block_size
        self.residual = residual
        self.enable_caching = enable_caching
        self.pool = BlockPool(num_blocks, enable_caching)
        self.req_blocks: dict[str, list[KVBlock]] = {}
        # per sequence: its block ids as a row of one int32 matrix (kept in step with
        # req_blocks, so a step gathers its block tables with one NumPy index), and how many of
        # its leading blocks are known to carry a hash (cache_computed_blocks starts there)
        self.block_tables = BlockTableRows()
        self._num_hashed: dict[str, int] = {}
        # host blocks: swap space (num_cpu_blocks, a reserved floor) and the CPU tier of the
        # prefix cache (num_cpu_cache_blocks) share one allocator (cpu_tier.HostBlockPool)
        self.num_cpu_blocks = num_cpu_blocks
        self.host = HostBlockPool(num_cpu_blocks, num_cpu_cache_blocks if enable_caching else 0)
        self.swapped: dict[str, list[int]] = {}
        # int2: a swapped-out sequence's open block (its index) and how many of its host
        # blocks, at the end of swapped[seq_id], hold that block's residual slot
        self._swapped_open: dict[str, tuple[int, int]] = {}
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0  # both tiers
        self.prefix_cache_hits_cpu = 0  # of those, restored from the CPU tier
        self.prefix_cache_hits_disk = 0  # of those, read back from the disk tier
        # CPU tier: device blocks evicted this step with the slots they go to; restores issued
        # this step; restores in flight by job id, by live sequence, and of aborted sequences
        # (their device blocks are held until the copy is done); sequences whose restore is done
        self._offloads: list[tuple[int, int, bytes]] = []
        self._new_restores: list[RestoreJob] = []
        self._jobs: dict[int, RestoreJob] = {}
        self.restoring: dict[str, RestoreJob] = {}
        self._orphans: dict[int, RestoreJob] = {}
        self._restored: set[str] = set()
        self._next_job = 0
        self.num_blocks_offloaded = 0  # device -> CPU tier, blocks (cumulative)
        self.num_blocks_restored = 0  # CPU tier -> device, blocks (cumulative)
        # disk tier: evicted blocks to write, from host slots / device blocks, with their
        # hashes; sequences whose restore failed (to be looked up again)
        self.disk = disk if enable_caching else None
        self._spill_host: list[tuple[int, BlockHash]] = []
        self._spill_device: list[tuple[int, BlockHash]] = []
        self._failed: set[str] = set()
        self.num_blocks_from_disk = 0  # disk tier -> device, blocks (cumulative)
        if self.host.tier_enabled:
            self.pool.on_evict = self._offload
            if self.disk is not None:
                self.host.on_evict = self._spill_host_slot
        elif self.disk is not None:
            self.pool.on_evict = self._spill_device_block

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

    def record_lookup(
        self,
        num_query_tokens: int,
        num_hit_tokens: int,
        num_cpu_hit_tokens: int = 0,
        num_disk_hit_tokens: int = 0,
    ) -> None:
        """Count a prefix-cache query (tokens looked up) and its hits (all tiers; of those
        ``num_cpu_hit_tokens`` restored from the CPU tier and ``num_disk_hit_tokens`` read
        from the disk tier), for metrics. A failed restore is taken back with negative counts."""
        self.prefix_cache_queries += num_query_tokens
        self.prefix_cache_hits += num_hit_tokens
        self.prefix_cache_hits_cpu += num_cpu_hit_tokens
        self.prefix_cache_hits_disk += num_disk_hit_tokens

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
                if (
                    -(-(nc + num_new_tokens) // self.block_size) <= len(held)
                    and not (
                        num_new_tokens > 0
                        and nc % self.block_size
                        and nc // self.block_size < len(held)
                        and held[nc // self.block_size].ref_cnt > 1
                    )
                    and not self._needs_slot(held, nc + num_new_tokens)
                ):
                    return []
        if (
            self.num_blocks_to_allocate(seq, num_new_tokens, computed_blocks)
            > self.pool.num_free_blocks
        ):
            return None
        if self.residual is not None and not self._residual_room(seq, num_new_tokens):
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
            res = self.residual
            if res is not None and res.has(old.block_id):  # the open block's residual too
                copies.extend(res.copy_pairs(res.of_block[old.block_id], res.assign(new.block_id)))
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
        if self._needs_slot(held, num_computed + num_new_tokens):
            assert self.residual is not None
            self.residual.assign(held[(num_computed + num_new_tokens) // self.block_size].block_id)
        return copies

    # ---- int2's residual slots -------------------------------------------------------------
    def _needs_slot(self, held: list[KVBlock], end: int) -> bool:
        """Whether block ``end // block_size``, which a step ending at token ``end`` leaves
        partly written, lacks a residual slot (int2 only)."""
        res = self.residual
        if res is None or end % self.block_size == 0:
            return False
        i = end // self.block_size
        return i < len(held) and not res.has(held[i].block_id)

    def _residual_room(self, seq: Sequence, num_new: int) -> bool:
        """Release the slots of ``seq``'s blocks that are full now, then whether the slots a
        step of ``num_new`` tokens may take (a copy-on-write and the block it leaves open: at
        most 2) are free."""
        res = self.residual
        assert res is not None
        held = self.req_blocks.get(seq.seq_id, [])
        full = seq.num_computed_tokens // self.block_size
        for b in held[max(0, full - 2) : full]:
            res.release(b.block_id)
        end = seq.num_computed_tokens + num_new  # (hits are whole blocks: same offset)
        need = int(self._needs_cow(held, seq.num_computed_tokens, num_new))
        i = end // self.block_size
        if end % self.block_size and not (i < len(held) and res.has(held[i].block_id)):
            need += 1
        return need <= len(res.free)

    def _drop_residuals(self, blocks: Seq[KVBlock]) -> None:
        """Slots of blocks no sequence holds any more are free again."""
        res = self.residual
        if res is not None:
            for b in blocks:
                if b.ref_cnt == 0:
                    res.release(b.block_id)

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
        tier = self.host.tier
        done = start
        for i in range(start, n_full):
            b = held[i]
            if b.block_hash is None:
                self.pool.cache_block(b, hashes[i])
                if tier and b.block_hash is not None:
                    self.host.tier_remove(b.block_hash)  # one tier at a time
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
        self._drop_residuals(extra)

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
        a shared prefix), and any swapped-out copy. Unknown sequences are a no-op. The fresh
        blocks of a restore still in flight come back when its copy is done."""
        self.drop_swapped(seq)
        self.block_tables.release(seq.seq_id)
        self._num_hashed.pop(seq.seq_id, None)
        self._restored.discard(seq.seq_id)
        self._failed.discard(seq.seq_id)
        blocks = self.req_blocks.pop(seq.seq_id, None)
        job = self.restoring.pop(seq.seq_id, None)
        if job is not None and blocks:
            # a restore still writes these device blocks: they come back when it is done
            self._orphans[job.job_id] = job
            writing = {id(b) for b in job.all_blocks}
            blocks = [b for b in blocks if id(b) not in writing]
        if blocks:
            self.pool.free(reversed(blocks))
            self._drop_residuals(blocks)

    def reset_prefix_cache(self) -> int:
        """Evict every freed cached block (its hash is forgotten, it becomes a plain free block);
        blocks in use keep their hashes; the CPU tier is emptied too (but for blocks a restore
        is reading). Returns how many device blocks were evicted."""
        self.host.reset_tier()
        return self.pool.reset_prefix_cache()

    # ---- swapping (CPU memory) -----------------------------------------------------------
    @property
    def free_cpu_blocks(self) -> list[int]:
        """Host blocks held neither by swap nor by the CPU tier (free now or next step)."""
        return self.host.free + self.host._deferred

    def can_swap_out(self, seq: Sequence) -> bool:
        """True when ``seq`` holds device blocks and swap can take host blocks for all of them
        (within its floor; evicting CPU-tier blocks if need be), int2's open block's residual
        slot included."""
        blocks = self.req_blocks.get(seq.seq_id, ())
        return 0 < len(blocks) + self._open_slot_blocks(seq) <= self.host.swap_available()

    def _open_slot_blocks(self, seq: Sequence) -> int:
        """Host blocks int2's residual slot of ``seq``'s open block takes (0 without one)."""
        res = self.residual
        if res is None or seq.num_computed_tokens % self.block_size == 0:
            return 0
        blocks = self.req_blocks.get(seq.seq_id, ())
        i = seq.num_computed_tokens // self.block_size
        return res.blocks_per_slot if i < len(blocks) and res.has(blocks[i].block_id) else 0

    def swap_out(self, seq: Sequence) -> list[tuple[int, int]]:
        """Give ``seq``'s device blocks back, keeping their contents in CPU blocks.

        Returns: ``(device_block, cpu_block)`` copies the runner must do before anything
        overwrites those device blocks (i.e. first thing in the next forward step)."""
        n_res = self._open_slot_blocks(seq)
        blocks = self.req_blocks.pop(seq.seq_id)
        self.block_tables.release(seq.seq_id)
        self._num_hashed.pop(seq.seq_id, None)
        cpu = self.host.swap_alloc(len(blocks) + n_res)
        self.swapped[seq.seq_id] = cpu
        out = [(b.block_id, c) for b, c in zip(blocks, cpu)]
        if n_res:  # int2: the open block's residual slot goes along (its pseudo-blocks)
            assert self.residual is not None
            i = seq.num_computed_tokens // self.block_size
            slot = self.residual.of_block[blocks[i].block_id]
            out += [(slot + j, c) for j, c in enumerate(cpu[len(blocks) :])]
            self._swapped_open[seq.seq_id] = (i, n_res)
        self.pool.free(reversed(blocks))
        self._drop_residuals(blocks)
        return out

    def num_swapped_blocks(self, seq: Sequence) -> int:
        """Number of device blocks ``seq``'s swapped-out KV comes back into (0 when it is not
        swapped; int2's residual slot not counted)."""
        n_res = self._swapped_open.get(seq.seq_id, (0, 0))[1]
        return len(self.swapped.get(seq.seq_id, ())) - n_res

    def swap_in(self, seq: Sequence) -> list[tuple[int, int]] | None:
        """Bring a swapped-out sequence's blocks back into fresh device blocks.

        Returns: ``(cpu_block, device_block)`` copies, or None when the pool is short (nothing
        changes then)."""
        cpu = self.swapped.get(seq.seq_id)
        if cpu is None:
            return []
        i, n_res = self._swapped_open.get(seq.seq_id, (0, 0))
        n = len(cpu) - n_res
        if n > self.pool.num_free_blocks or (
            n_res and self.residual is not None and not self.residual.free
        ):
            return None
        blocks = self.pool.allocate(n)
        del self.swapped[seq.seq_id]
        self.req_blocks[seq.seq_id] = blocks
        self.block_tables.assign(seq.seq_id, [b.block_id for b in blocks])
        self._num_hashed.pop(seq.seq_id, None)
        self.host.swap_release(cpu)
        out = [(c, b.block_id) for c, b in zip(cpu, blocks)]
        if n_res:  # int2: the open block's residual slot comes back into a fresh slot
            assert self.residual is not None
            del self._swapped_open[seq.seq_id]
            slot = self.residual.assign(blocks[i].block_id)
            out += [(c, slot + j) for j, c in enumerate(cpu[n:])]
        return out

    def drop_swapped(self, seq: Sequence) -> None:
        """Forget a swapped-out sequence's CPU blocks (abort)."""
        cpu = self.swapped.pop(seq.seq_id, None)
        self._swapped_open.pop(seq.seq_id, None)
        if cpu:
            self.host.swap_release(cpu)

    # ---- CPU and disk tiers of the prefix cache -------------------------------------------
    @property
    def cpu_tier_enabled(self) -> bool:
        """Whether evicted cached blocks go to a CPU tier (``EngineConfig.cpu_cache_memory``)."""
        return self.host.tier_enabled

    @property
    def lower_tiers_enabled(self) -> bool:
        """Whether a lookup continues past the device pool (a CPU or a disk tier)."""
        return self.host.tier_enabled or self.disk is not None

    def _offload(self, block: KVBlock, block_hash: BlockHash) -> None:
        """BlockPool.on_evict: keep an evicted cached block in the CPU tier when it has room
        (else, with a disk tier, write it to disk)."""
        slot = self.host.tier_store(block_hash)
        if slot is not None:
            self._offloads.append((block.block_id, slot, block_hash))
        elif self.disk is not None and block_hash not in self.host.tier:
            self._spill_device_block(block, block_hash)

    def _spill_device_block(self, block: KVBlock, block_hash: BlockHash) -> None:
        """BlockPool.on_evict without a CPU tier: the block goes to disk (unless it is there)."""
        assert self.disk is not None
        if not self.disk.contains(block_hash):
            self._spill_device.append((block.block_id, block_hash))

    def _spill_host_slot(self, slot: int, block_hash: BlockHash) -> None:
        """HostBlockPool.on_evict: the CPU tier's evicted block goes to disk (unless it is
        there, or its bytes were never copied in: stored and evicted within this step)."""
        assert self.disk is not None
        if any(h == block_hash and s == slot for _, s, h in self._offloads):
            return
        if not self.disk.contains(block_hash):
            self._spill_host.append((slot, block_hash))

    def take_disk_writes(self) -> tuple[list[tuple[int, BlockHash]], list[tuple[int, BlockHash]]]:
        """The blocks to write to disk this step, cleared: ``(host slot, hash)`` evicted from
        the CPU tier and ``(device block, hash)`` evicted from the device pool. The runner
        copies their bytes out before this step's offloads, swaps or computation write
        those slots and blocks."""
        out = self._spill_host, self._spill_device
        self._spill_host, self._spill_device = [], []
        return out

    def end_step(self) -> None:
        """Start of a scheduler step: host slots given back last step become free."""
        self.host.end_step()

    def take_transfers(self) -> tuple[list[tuple[int, int]], list[RestoreJob]]:
        """The CPU-tier copies of this step, cleared: ``(device block, host slot)`` offloads
        (one per slot: a block stored and evicted again within the step is not copied) and the
        restores begun. The runner does the offloads before anything writes a device block
        this step, and issues the restores after the swaps."""
        tier = self.host.tier
        offloads = [(b, slot) for b, slot, h in self._offloads if tier.get(h) == slot]
        self.num_blocks_offloaded += len(offloads)
        restores = self._new_restores
        self._offloads, self._new_restores = [], []
        return offloads, restores

    def find_cpu_hits(
        self, seq: Sequence, gpu_hits: Seq[KVBlock]
    ) -> list[tuple[BlockHash, KVBlock | None]]:
        """Continue ``seq``'s prefix lookup past its device hits ``gpu_hits`` (from
        :meth:`get_computed_blocks`): the longest run of blocks found in the CPU tier or on
        disk (entry ``(hash, None)``) or, after one, on the device again (``(hash, block)``),
        capped as there so that one prompt token is left to compute. Empty when both tiers
        are off or hold none of the next blocks."""
        if not self.lower_tiers_enabled or seq.num_computed_tokens > 0:
            return []
        hashes = self.update_block_hashes(seq)
        max_blocks = (seq.num_tokens - 1) // self.block_size
        tier, disk = self.host.tier, self.disk
        out: list[tuple[BlockHash, KVBlock | None]] = []
        for i in range(len(gpu_hits), max_blocks):
            h = hashes[i]
            if h in tier:
                out.append((h, None))
                continue
            b = self.pool.lookup(h)
            if b is not None:
                out.append((h, b))
                continue
            if disk is not None and disk.contains(h):
                out.append((h, None))
                continue
            break
        while out and out[-1][1] is not None:  # nothing to restore after the last lower hit
            out.pop()
        return out

    def restore_blocks_needed(
        self, gpu_hits: Seq[KVBlock], cont: Seq[tuple[BlockHash, KVBlock | None]], num_new: int
    ) -> int:
        """Free device blocks :meth:`begin_restore` would consume."""
        n_hit = len(gpu_hits) + len(cont)
        total = self.blocks_needed(n_hit * self.block_size + num_new)
        n_cpu = sum(1 for _, b in cont if b is None)
        touched = list(gpu_hits) + [b for _, b in cont if b is not None]
        return (total - n_hit) + n_cpu + sum(1 for b in touched if b.ref_cnt == 0)

    def begin_restore(
        self,
        seq: Sequence,
        gpu_hits: Seq[KVBlock],
        cont: Seq[tuple[BlockHash, KVBlock | None]],
        num_new: int,
    ) -> RestoreJob | None:
        """Give ``seq`` (holding no blocks) its whole cached prefix and room for its next
        ``num_new`` tokens: the device hits and the device blocks in ``cont`` take a
        reference, each CPU-tier or disk block in ``cont`` gets a fresh device block and a
        copy back (a tier block is pinned until the copy is done). The sequence must not run
        until :meth:`finish_restores` reports the job done.

        Returns: the job (also handed to the runner by :meth:`take_transfers`), or None when
        the pool cannot supply the blocks (nothing changed then)."""
        assert not self.req_blocks.get(seq.seq_id), "restore for a sequence holding blocks"
        if self.restore_blocks_needed(gpu_hits, cont, num_new) > self.pool.num_free_blocks:
            return None
        n_hit = len(gpu_hits) + len(cont)
        end = n_hit * self.block_size + num_new
        if self.residual is not None and end % self.block_size and not self.residual.free:
            return None
        total = self.blocks_needed(end)
        job = RestoreJob(self._next_job, seq.seq_id)
        self._next_job += 1
        tier = self.host.tier
        slots = {h: tier[h] for h, b in cont if b is None and h in tier}
        self.host.pin(slots)
        self.pool.touch(list(gpu_hits) + [b for _, b in cont if b is not None])
        # evictions here offload other blocks to the tier; the pinned ones stay
        n_lower = sum(1 for _, b in cont if b is None)
        fresh = iter(self.pool.allocate(n_lower + total - n_hit))
        held = list(gpu_hits)
        for h, b in cont:
            if b is None:
                b = next(fresh)
                if h in slots:
                    job.copies.append((slots[h], b.block_id))
                    job.hashes.append(h)
                    job.blocks.append(b)
                else:
                    job.disk_reads.append((h, b.block_id))
                    job.disk_blocks.append(b)
            held.append(b)
        held.extend(fresh)
        if self._needs_slot(held, end):
            assert self.residual is not None
            self.residual.assign(held[end // self.block_size].block_id)
        job.parts_left = int(bool(job.copies)) + int(bool(job.disk_reads))
        self.req_blocks[seq.seq_id] = held
        self.block_tables.assign(seq.seq_id, [b.block_id for b in held])
        self._num_hashed.pop(seq.seq_id, None)
        self._jobs[job.job_id] = job
        self.restoring[seq.seq_id] = job
        self._new_restores.append(job)
        return job

    def restore_done(self, seq: Sequence) -> bool:
        """Whether ``seq``'s restore finished (it may run now)."""
        return seq.seq_id in self._restored and seq.seq_id not in self.restoring

    def admit_restored(self, seq: Sequence) -> None:
        """The scheduler admitted ``seq`` after its restore."""
        self._restored.discard(seq.seq_id)

    @property
    def num_restores_in_flight(self) -> int:
        """Restore jobs begun and not yet finished (their copies may still be running)."""
        return len(self._jobs)

    @property
    def has_restored(self) -> bool:
        """Whether a sequence's restore is done and it waits to be admitted."""
        return bool(self._restored)

    def restore_failed(self, seq: Sequence) -> bool:
        """Whether ``seq``'s restore failed and it is not looked up again yet."""
        return seq.seq_id in self._failed

    def take_failed_restores(self) -> set[str]:
        """Ids of the sequences whose restore failed since the last call (a disk block could
        not be read), cleared; each gives its blocks back now (tail first) and the scheduler
        looks it up again."""
        out, self._failed = self._failed, set()
        for seq_id in out:
            self._give_back(seq_id)
        return out

    def finish_restores(
        self, job_ids: Seq[int], failed: dict[int, list[BlockHash]] | None = None
    ) -> None:
        """The runner finished a part of these restores (the CPU-tier copy, or the disk
        reads with the hashes in ``failed[job_id]`` that could not be read). Once every part
        of a job is done: unpin its tier blocks; for a live sequence register the restored
        device blocks under their hashes (unless another block got the hash meanwhile) and
        drop the tier copies (a block lives in one of device and CPU tier; the disk keeps
        its files); for an aborted one give its fresh device blocks back (the tiers keep the
        blocks). A job with a failed read registers the blocks read well and reports the
        sequence by :meth:`take_failed_restores` (which gives its blocks back)."""
        for jid in job_ids:
            job = self._jobs[jid]
            if failed and failed.get(jid):
                job.failed.extend(failed[jid])
            job.parts_left -= 1
            if job.parts_left > 0:
                continue
            del self._jobs[jid]
            self.host.unpin(job.hashes)
            bad = set(job.failed)
            if self._orphans.pop(jid, None) is not None:
                self.pool.free(reversed(job.all_blocks))
            else:
                for b, h in zip(job.blocks, job.hashes):
                    self.pool.cache_block(b, h)
                for b, (h, _) in zip(job.disk_blocks, job.disk_reads):
                    if h not in bad:
                        self.pool.cache_block(b, h)
                del self.restoring[job.seq_id]
                self.num_blocks_restored += len(job.blocks)
                self.num_blocks_from_disk += len(job.disk_blocks) - len(bad)
                if bad:
                    self._failed.add(job.seq_id)
                else:
                    self._restored.add(job.seq_id)
            for h in job.hashes:
                if self.pool.lookup(h) is not None:
                    self.host.tier_remove(h)

    def _give_back(self, seq_id: str) -> None:
        """Free a sequence's blocks, tail first (a failed restore: it is looked up again)."""
        self.block_tables.release(seq_id)
        self._num_hashed.pop(seq_id, None)
        blocks = self.req_blocks.pop(seq_id, None)
        if blocks:
            self.pool.free(reversed(blocks))
            self._drop_residuals(blocks)

    # ---- debugging -----------------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise :class:`PoolInvariantError` unless every block's ref count equals the number
        of block tables holding it and the pool's own invariants hold."""
        refs: dict[int, int] = {}
        for blocks in self.req_blocks.values():
            for b in blocks:
                refs[b.block_id] = refs.get(b.block_id, 0) + 1
        for job in self._orphans.values():  # an aborted sequence's blocks a restore writes
            for b in job.all_blocks:
                refs[b.block_id] = refs.get(b.block_id, 0) + 1
        self.pool.check(refs)
        if self.residual is not None:
            self.residual.check(set(refs))
        self.host.check(c for cpu in self.swapped.values() for c in cpu)
        for h in self.host.tier:  # a block lives in one tier (but while a restore reads it)
            if h not in self.host.pins and self.pool.lookup(h) is not None:
                raise PoolInvariantError(f"block {h.hex()[:8]} cached on the device and the CPU")
        pinned: dict[bytes, int] = {}
        for jid, job in self._jobs.items():
            if (jid in self._orphans) == (self.restoring.get(job.seq_id) is job):
                raise PoolInvariantError(f"restore {jid}: neither live nor orphaned, or both")
            if any(b.block_hash is not None for b in job.all_blocks):
                raise PoolInvariantError(f"restore {jid}: a block being written has a hash")
            for h in job.hashes:
                pinned[h] = pinned.get(h, 0) + 1
        if pinned != self.host.pins:
            raise PoolInvariantError("CPU-tier pins differ from the restores in flight")
        for seq_id, job in self.restoring.items():
            held = {id(b) for b in self.req_blocks.get(seq_id, ())}
            if job.seq_id != seq_id or not all(id(b) in held for b in job.all_blocks):
                raise PoolInvariantError(f"restore of {seq_id}: its blocks left its table")
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
