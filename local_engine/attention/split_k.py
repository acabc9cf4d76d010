"""Split-K (flash-decoding) scratch: the per-segment partials both decode kernels write (the
Triton one in :mod:`~local_engine.attention.triton_attention`, the CUDA one in
:mod:`~local_engine.attention.cuda_decode`) and
:func:`local_engine.attention.triton_backend.merge_segments` reads."""

from __future__ import annotations

from collections.abc import Callable

import torch


def alloc_partials(
    num_tokens: int,
    num_heads: int,
    num_segments: int,
    width: int,
    device: torch.device,
    alloc: Callable[..., torch.Tensor] = torch.empty,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Uninitialised float32 ``(seg_out [num_tokens, num_heads, num_segments, width], seg_max,
    seg_sum [num_tokens, num_heads, num_segments])``: each segment's normalised output (``width``
    = head_dim, or the Triton kernel's power-of-two padding of it), its base-2 row maximum and
    its sum of exponentials. ``alloc(shape, dtype=, device=)`` makes each tensor (tests pass one
    that poisons)."""
    stats = (num_tokens, num_heads, num_segments)
    f32 = torch.float32
    return (
        alloc((*stats, width), dtype=f32, device=device),
        alloc(stats, dtype=f32, device=device),
        alloc(stats, dtype=f32, device=device),
    )


__all__ = ["alloc_partials"]
