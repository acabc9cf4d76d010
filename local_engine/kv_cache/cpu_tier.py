"""Host (CPU) KV blocks: one allocator shared by swap space for preempted sequences and the CPU
tier of the prefix cache (the second level behind the device pool). Bookkeeping only: block ids
("host slots") and hashes, no tensors (:mod:`local_engine.kv_cache.transfer` moves the bytes).

Policy (docs/DESIGN.md, "CPU tier"):

- The pool has ``num_swap_blocks + num_tier_blocks`` slots. Swap has a reserved floor: it may
  hold up to ``num_swap_blocks`` slots and takes them even when the tier fills the pool, by
  evicting the tier's least recently used blocks. Swap never holds more than its floor (a
  preemption that does not fit recomputes, as without a tier).
- The tier may hold every slot swap does not hold (at least ``num_tier_blocks``; swap's unused
  floor too). A block offered when the tier is full evicts the tier's least recently used one
  (dropped for good); when every tier block is pinned the offer is refused and the device
  block is dropped as it was without a tier.
- A tier block being copied back to the device (a restore in flight) is *pinned*: never
  evicted, never overwritten, until the copy is done.
- Slots given back during a step (swap-in, a finished restore) become free only at the next
  step (:meth:`HostBlockPool.end_step`), so a copy that still reads a slot this step never
  races a copy that writes it.

Keys: the chain hash of :func:`~local_engine.kv_cache.block_pool.hash_block_tokens`, the same
key as on the device (a block moves, it is never re-keyed); a cache salt is mixed into the
first block's hash, so tenants stay apart here exactly as on the device.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable

from .block_pool import BlockHash, PoolInvariantError


class HostBlockPool:
    """Host block slots for swap and for the CPU tier of the prefix cache.

    Args:
        num_swap_blocks: swap's reserved floor (``swap_space // block_bytes``).
        num_tier_blocks: the tier's own share (``cpu_cache_memory // block_bytes``); 0 = tier off.

    Attributes:
        num_blocks: total slots.
        tier: hash -> slot of the tier's blocks, least recently stored first.
        pins: hash -> number of restores in flight reading that tier block.
        num_tier_evictions: tier blocks dropped to make room (for the tier or for swap).
        num_offers_refused: device blocks the tier could not take (every tier block pinned).
    """

    def __init__(self, num_swap_blocks: int = 0, num_tier_blocks: int = 0):
        if num_swap_blocks < 0 or num_tier_blocks < 0:
            raise ValueError("host block counts must be >= 0")
        self.num_swap_blocks = num_swap_blocks
        self.num_tier_blocks = num_tier_blocks
        self.num_blocks = num_swap_blocks + num_tier_blocks
        self.free: list[int] = list(range(self.num_blocks - 1, -1, -1))
        self._deferred: list[int] = []
        self.swap_used = 0
        self.tier: OrderedDict[BlockHash, int] = OrderedDict()
        self.pins: dict[BlockHash, int] = {}
        self.num_tier_evictions = 0
        self.num_offers_refused = 0
        # called as on_evict(slot, hash) when a tier block is evicted for room, before the
        # slot is reused (the disk tier writes it out: KVCacheManager)
        self.on_evict: Callable[[int, BlockHash], None] | None = None

    # ---- queries -------------------------------------------------------------------------
    @property
    def tier_enabled(self) -> bool:
        """Whether the pool has a CPU-tier share (``cpu_cache_memory`` > 0)."""
        return self.num_tier_blocks > 0

    @property
    def num_tier_resident(self) -> int:
        """Blocks the tier holds now."""
        return len(self.tier)

    def num_free_slots(self) -> int:
        """Slots held by nobody (free now or at the next step)."""
        return len(self.free) + len(self._deferred)

    def _evictable(self) -> int:
        return len(self.tier) - len(self.pins)

    def swap_available(self) -> int:
        """Slots a swap-out could take now: up to the floor left, from free slots and then
        unpinned tier blocks (evicted)."""
        return min(self.num_swap_blocks - self.swap_used, len(self.free) + self._evictable())

    # ---- swap ----------------------------------------------------------------------------
    def swap_alloc(self, n: int) -> list[int]:
        """``n`` slots for swapped-out blocks: free ones first, then the tier's least recently
        used unpinned blocks (evicted).

        Raises:
            ValueError: more than :meth:`swap_available` (callers check first).
        """
        if n > self.swap_available():
            raise ValueError(f"swap needs {n} host blocks, {self.swap_available()} available")
        out = []
        for _ in range(n):
            out.append(self.free.pop() if self.free else self._evict_lru())
        self.swap_used += n
        return out

    def swap_release(self, slots: Iterable[int]) -> None:
        """Give swap slots back (swap-in or abort); free from the next step."""
        slots = list(slots)
        self.swap_used -= len(slots)
        self._deferred.extend(slots)

    # ---- tier ----------------------------------------------------------------------------
    def _evict_lru(self) -> int:
        """Drop the least recently stored unpinned tier block; returns its slot."""
        for h in self.tier:
            if h not in self.pins:
                self.num_tier_evictions += 1
                slot = self.tier.pop(h)
                if self.on_evict is not None:
                    self.on_evict(slot, h)
                return slot
        raise ValueError("every tier block is pinned")

    def tier_lookup(self, block_hash: BlockHash) -> int | None:
        """The tier slot holding this hash, or None (no LRU change)."""
        return self.tier.get(block_hash)

    def tier_store(self, block_hash: BlockHash) -> int | None:
        """A slot to copy an evicted device block into, now registered under its hash (the
        tier's most recent entry); None when the tier is off or every tier block is pinned
        (the block is then dropped). Room comes from free slots, else the tier's least
        recently stored unpinned block is evicted. A hash the tier already holds is refreshed
        and None returned (its bytes are already here)."""
        if not self.tier_enabled:
            return None
        if block_hash in self.tier:
            self.tier.move_to_end(block_hash)
            return None
        if self.free:
            slot = self.free.pop()
        elif self._evictable() > 0:
            slot = self._evict_lru()
        else:
            self.num_offers_refused += 1
            return None
        self.tier[block_hash] = slot
        return slot

    def pin(self, hashes: Iterable[BlockHash]) -> None:
        """Pin tier blocks for a restore in flight (each must be in the tier)."""
        for h in hashes:
            if h not in self.tier:
                raise PoolInvariantError(f"pin of a hash the tier does not hold: {h.hex()[:8]}")
            self.pins[h] = self.pins.get(h, 0) + 1

    def unpin(self, hashes: Iterable[BlockHash]) -> None:
        """Undo one :meth:`pin` of each hash (a restore finished or was orphaned). Raises
        ``PoolInvariantError`` for a hash that is not pinned."""
        for h in hashes:
            n = self.pins.get(h, 0)
            if n <= 0:
                raise PoolInvariantError(f"unpin of an unpinned hash: {h.hex()[:8]}")
            if n == 1:
                del self.pins[h]
            else:
                self.pins[h] = n - 1

    def tier_remove(self, block_hash: BlockHash) -> bool:
        """Forget an unpinned tier block (its content is now on the device: a block lives in
        one tier at a time); its slot is free from the next step. Returns whether it was
        removed (False when absent or pinned)."""
        if block_hash in self.pins:
            return False
        slot = self.tier.pop(block_hash, None)
        if slot is None:
            return False
        self._deferred.append(slot)
        return True

    def reset_tier(self) -> int:
        """Drop every unpinned tier block; returns how many."""
        drop = [h for h in self.tier if h not in self.pins]
        for h in drop:
            self._deferred.append(self.tier.pop(h))
        return len(drop)

    # ---- steps ---------------------------------------------------------------------------
    def end_step(self) -> None:
        """Slots given back during the last step become free (their copies are done)."""
        if self._deferred:
            self.free.extend(reversed(self._deferred))
            self._deferred.clear()

    # ---- debugging -----------------------------------------------------------------------
    def check(self, swap_slots: Iterable[int]) -> None:
        """Raise :class:`PoolInvariantError` unless free, deferred, tier and ``swap_slots``
        (the slots swapped-out sequences hold) partition the pool, swap stays within its floor
        and every pin names a tier block."""
        swap = list(swap_slots)
        parts = self.free + self._deferred + list(self.tier.values()) + swap
        if len(parts) != self.num_blocks or set(parts) != set(range(self.num_blocks)):
            raise PoolInvariantError(
                f"host blocks lost or duplicated: free {len(self.free)} + deferred "
                f"{len(self._deferred)} + tier {len(self.tier)} + swap {len(swap)} "
                f"!= {self.num_blocks}"
            )
        if len(swap) != self.swap_used or self.swap_used > self.num_swap_blocks:
            raise PoolInvariantError(
                f"swap holds {len(swap)} host blocks, counted {self.swap_used}, floor "
                f"{self.num_swap_blocks}"
            )
        if any(h not in self.tier or n <= 0 for h, n in self.pins.items()):
            raise PoolInvariantError("a pin names a hash the tier does not hold")


__all__ = ["HostBlockPool"]
