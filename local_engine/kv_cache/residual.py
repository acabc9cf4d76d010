"""Books of int2's residual slots (:mod:`local_engine.kv_cache.int2`): which open block holds
which slot, and the slot ids the runner must write into blocks before the next forward.

A slot ``r`` is ``blocks_per_slot`` pseudo-blocks of the pool from ``first + r *
blocks_per_slot`` (``first`` = the pool's block count): its id is that first pseudo-block.
Slots belong to blocks, not sequences: sequences forked off one another share a block and its
slot until one writes it (copy-on-write copies the slot's pseudo-blocks too). A block keeps its
slot until it is freed or found full (its quantized bytes are written by the write that fills
it; the slot is released lazily, when a sequence holding the block is next given room, or
when the block is freed).
"""

from __future__ import annotations

from .block_pool import PoolInvariantError


class ResidualSlots:
    """Args: num_slots; first: the first pseudo-block id (the pool's block count);
    blocks_per_slot: pseudo-blocks a slot spans.

    Attributes: ``of_block`` (block id -> slot id, the first pseudo-block), ``free`` (slot
    ids)."""

    def __init__(self, num_slots: int, first: int, blocks_per_slot: int):
        self.num_slots = num_slots
        self.first = first
        self.blocks_per_slot = blocks_per_slot
        self.free = [first + r * blocks_per_slot for r in reversed(range(num_slots))]
        self.of_block: dict[int, int] = {}
        self._writes: list[tuple[int, int]] = []

    def has(self, block_id: int) -> bool:
        """Whether open block ``block_id`` holds a residual slot now."""
        return block_id in self.of_block

    def assign(self, block_id: int) -> int:
        """Give open ``block_id`` a slot (it must have none and one must be free)."""
        assert block_id not in self.of_block, f"block {block_id} already has a residual slot"
        slot = self.free.pop()
        self.of_block[block_id] = slot
        self._writes.append((block_id, slot))
        return slot

    def release(self, block_id: int) -> None:
        """The block is full or freed: its slot is free again (no-op without one)."""
        slot = self.of_block.pop(block_id, None)
        if slot is not None:
            self.free.append(slot)

    def copy_pairs(self, src: int, dst: int) -> list[tuple[int, int]]:
        """Copy-on-write of an open block: ``(src pseudo-block, dst pseudo-block)`` pairs
        copying slot ``src``'s contents to slot ``dst`` (whole blocks, every layer)."""
        return [(src + j, dst + j) for j in range(self.blocks_per_slot)]

    def take_writes(self) -> list[tuple[int, int]]:
        """``(block id, slot id)`` assignments since the last call, in order, cleared: the
        runner writes them (:func:`~local_engine.kv_cache.int2.set_residual_ids`) after the
        step's swaps and block copies, before its forward (``ModelRunner.prepare``)."""
        out, self._writes = self._writes, []
        return out

    def check(self, held: set[int]) -> None:
        """Raise :class:`PoolInvariantError` unless every slot is free or owned by one held
        block, once."""
        owned = list(self.of_block.values())
        if len(set(owned)) != len(owned) or set(owned) & set(self.free):
            raise PoolInvariantError("a residual slot is owned twice, or owned and free")
        if len(owned) + len(self.free) != self.num_slots:
            raise PoolInvariantError("residual slots lost")
        if not set(self.of_block) <= held:
            raise PoolInvariantError("a residual slot owned by a block no sequence holds")


__all__ = ["ResidualSlots"]
