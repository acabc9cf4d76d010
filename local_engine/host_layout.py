"""The layout of one step's integer inputs in a single int64 buffer.

:meth:`~local_engine.runner.ModelRunner.prepare` writes every integer input of a step (token
ids, positions, slot mapping, logits indices, block tables, ``cu_seqlens_q``, ``seq_lens``)
into one host buffer laid out as :class:`HostLayout` says, which reaches the device in one
copy; the batch tensors are views of the copy. A prefill CUDA graph
(:class:`~local_engine.cuda_graphs.PrefillGraphRunner`) reads its inputs from such a layout of
its bucket's padded sizes, so a step replayed there needs that one copy and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


@dataclass(frozen=True, slots=True)
class HostLayout:
    """Where :meth:`~local_engine.runner.ModelRunner.prepare` puts each batch input in its one
    int64 host buffer (which reaches the device in one copy; the batch tensors are views into
    the copy).

    Offsets are in entries of their part; every part starts on a 16-byte boundary (2 int64
    or 4 int32 entries) so that each view is aligned. In order, in int64 entries:

    ========================  ==================  ========================================
    offset                    length              holds
    ========================  ==================  ========================================
    ``input_ids``             ``num_tokens``      token ids, int64
    ``positions``             ``num_tokens``      positions, int64
    ``slot_mapping``          ``num_tokens``      KV slot of each token, int64
    ``logits_indices``        ``num_logits``      flat row of each sampling sequence, int64
    ``int32``                 ``int32_len``       the int32 part, viewed as int32 below
    ========================  ==================  ========================================

    and inside the int32 part, in int32 entries: ``block_tables`` (0) ``[num_seqs,
    max_blocks]``, ``cu_seqlens_q`` ``[num_seqs + 1]``, ``seq_lens`` ``[num_seqs]``.
    ``total`` is the int64 entries of the whole buffer.
    """

    num_tokens: int
    num_seqs: int
    max_blocks: int
    num_logits: int
    input_ids: int
    positions: int
    slot_mapping: int
    logits_indices: int
    int32: int
    int32_len: int
    total: int
    block_tables: int  # int32 offsets from here on, inside the int32 part
    cu_seqlens_q: int
    seq_lens: int

    @classmethod
    def plan(cls, num_tokens: int, num_seqs: int, max_blocks: int, num_logits: int) -> HostLayout:
        """The layout for a batch of ``num_tokens`` tokens in ``num_seqs`` sequences with
        block tables ``max_blocks`` wide, ``num_logits`` of which sample."""
        n = num_seqs
        o_cu = _round_up(n * max_blocks, 4)
        o_sl = _round_up(o_cu + n + 1, 4)
        int32_len = _round_up(o_sl + n, 4) // 2
        offsets = []
        total = 0
        for size in (num_tokens, num_tokens, num_tokens, num_logits, int32_len):
            offsets.append(total)
            total += _round_up(size, 2)
        o_ids, o_pos, o_slot, o_lp, o_32 = offsets
        return cls(
            num_tokens, n, max_blocks, num_logits,
            o_ids, o_pos, o_slot, o_lp, o_32, int32_len, total,
            0, o_cu, o_sl,
        )  # fmt: skip

    def tensors(
        self,
        buf: torch.Tensor,
        num_tokens: int | None = None,
        num_seqs: int | None = None,
        num_logits: int | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """Views of an int64 tensor ``buf`` laid out this way, each cut to the real counts
        (default the layout's own): ``(input_ids [t], positions [t], slot_mapping [t],
        logits_indices [l])`` int64 and ``(block_tables [n, max_blocks], cu_seqlens_q [n + 1],
        seq_lens [n])`` int32, in that order.

        Raises:
            ValueError: a count above the layout's, or ``buf`` too short.
        """
        t = self.num_tokens if num_tokens is None else num_tokens
        n = self.num_seqs if num_seqs is None else num_seqs
        lp = self.num_logits if num_logits is None else num_logits
        if t > self.num_tokens or n > self.num_seqs or lp > self.num_logits:
            raise ValueError(
                f"({t} tokens, {n} sequences, {lp} logits) do not fit the layout of "
                f"({self.num_tokens}, {self.num_seqs}, {self.num_logits})"
            )
        if buf.shape[0] < self.total:
            raise ValueError(f"buffer of {buf.shape[0]} entries for a layout of {self.total}")
        w = self.max_blocks
        d32 = buf[self.int32 : self.int32 + self.int32_len].view(torch.int32)
        return (
            buf[self.input_ids : self.input_ids + t],
            buf[self.positions : self.positions + t],
            buf[self.slot_mapping : self.slot_mapping + t],
            buf[self.logits_indices : self.logits_indices + lp],
            d32[self.block_tables : self.block_tables + n * w].view(n, w),
            d32[self.cu_seqlens_q : self.cu_seqlens_q + n + 1],
            d32[self.seq_lens : self.seq_lens + n],
        )
