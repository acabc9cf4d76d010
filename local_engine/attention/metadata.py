"""Per-step attention metadata: the tensors that tell the model where each new token's K/V
goes and which blocks each sequence reads. Built by the runner, consumed by the model; all of
them are tensors so that a CUDA-graph runner can copy them into fixed-size buffers."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class AttentionMetadata:
    """Attributes:
    slot_mapping: int64 ``[num_tokens]``; flat KV slot (``block * block_size + offset``) of
        each new token, negative for padding.
    block_tables: int32 ``[num_seqs, max_blocks]``, physical blocks in logical order
        (unused entries 0).
    cu_seqlens_q: int32 ``[num_seqs + 1]``, cumulative new-token counts.
    seq_lens: int32 ``[num_seqs]``, whole context length (cached + new) per sequence.
    logits_indices: int64 ``[num_sample_rows]``, rows of the flat batch whose logits are
        needed (each sequence's last new token when it samples).
    backend: attention backend name or None (by device).
    """

    slot_mapping: torch.Tensor
    block_tables: torch.Tensor
    cu_seqlens_q: torch.Tensor
    seq_lens: torch.Tensor
    logits_indices: torch.Tensor
    backend: str | None = None

    @property
    def num_seqs(self) -> int:
        return int(self.seq_lens.shape[0])
