"""Torch reference of :mod:`local_engine.ops`: the unfused arithmetic of Hugging Face
``modeling_llama.py`` (``LlamaRMSNorm``, ``apply_rotary_pos_emb`` with ``rotate_half``,
``silu(gate) * up``), each op rounding to the tensor dtype as transformers does."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from local_engine.attention import write_kv_cache


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """See :func:`local_engine.ops.rms_norm` (returns a new ``h``; ``residual`` is not written).

    float32 (the CPU engine's dtype) runs the same arithmetic with in-place updates of the
    ``[T, 1]`` scale column and of the output: bit-identical, two fewer allocations."""
    h = x if residual is None else x + residual
    if h.dtype == torch.float32:
        # the same arithmetic in 5 ops instead of 7, the scalar column updated in place
        inv = h.pow(2).mean(-1, keepdim=True).add_(eps).rsqrt_()
        return torch.mul(h, inv).mul_(weight), h
    hf = h.float()
    hf = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * hf.to(h.dtype), h


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def rotary_and_write_kv(
    q, k, v, positions, cos, sin, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None
) -> torch.Tensor:
    """See :func:`local_engine.ops.rotary_and_write_kv` (returns a new rotated ``q``)."""
    c = cos[positions].unsqueeze(1).to(q.dtype)
    s = sin[positions].unsqueeze(1).to(q.dtype)
    q, k = _rotate(q, c, s), _rotate(k, c, s)
    write_kv_cache(
        k, v, k_cache, v_cache, slot_mapping, backend="torch", k_scale=k_scale, v_scale=v_scale
    )
    return q


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """See :func:`local_engine.ops.silu_and_mul`."""
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate).mul_(up)
