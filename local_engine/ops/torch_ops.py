"""Torch reference of :mod:`local_engine.ops`: the unfused arithmetic of Hugging Face
``modeling_llama.py`` (``LlamaRMSNorm``, ``apply_rotary_pos_emb`` with ``rotate_half``,
``silu(gate) * up``), each op rounding to the tensor dtype as transformers does."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from local_engine.attention import write_kv_cache
from local_engine.attention.torch_ref import version_of


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """See :func:`local_engine.ops.rms_norm` (returns a new ``h``; ``residual`` is not written).

    float32 (the CPU engine's dtype) runs ``torch.rms_norm``, ATen's fused kernel: the same
    float32 arithmetic as the unfused ``h * rsqrt(mean(h^2) + eps) * weight`` (bit-identical
    on the model's shapes, tested) in one call instead of five."""
    h = x if residual is None else x + residual
    if h.dtype == torch.float32 and weight.dtype == torch.float32:
        return torch.rms_norm(h, (h.shape[-1],), weight, eps), h
    hf = h.float()
    hf = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * hf.to(h.dtype), h


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` for ``x`` ``[T, H, D]``; ``sin_signed`` is
    ``[-sin, sin]`` over the two halves, so ``rotate_half(x) * sin`` is the halves of ``x``
    swapped (one ``flip`` over a size-2 axis) times ``sin_signed``: the same three roundings
    (two products and a sum) as transformers' ``rotate_half`` form, with no ``cat``/``neg``."""
    t, h, d = x.shape
    swapped = x.view(t, h, 2, d // 2).flip(2).view(t, h, d)
    out = x * cos
    return out.add_(swapped.mul_(sin_signed))


# The last step's gathered rotary rows: every layer of a forward pass rotates by the same
# positions with the same tables, so the gather runs once per step instead of once per layer.
# Keyed by the tensors' identity and version counter (an in-place torch write to `positions`
# invalidates it; an inference-mode tensor has no version counter and is never reused); the
# memo holds the keyed tensors, so a new step's tensors cannot reuse their ids.
_ROWS: tuple | None = None


def _rotary_rows(positions, cos, sin, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos[positions], [-sin, sin][positions])`` as ``[T, 1, D]`` in ``dtype``."""
    global _ROWS
    memo = _ROWS
    if (
        memo is not None
        and memo[0] is positions
        and memo[1] == version_of(positions)
        and memo[1] is not None
        and memo[2] is cos
        and memo[3] is sin
        and memo[4] == dtype
    ):
        return memo[5], memo[6]
    half = cos.shape[-1] // 2
    c = cos.index_select(0, positions).unsqueeze(1).to(dtype)
    s = sin.index_select(0, positions).unsqueeze(1).to(dtype)
    s[..., :half].neg_()  # a fresh tensor: index_select copies
    _ROWS = (positions, version_of(positions), cos, sin, dtype, c, s)
    return c, s


def _adjacent(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether ``k``'s heads directly follow ``q``'s in memory with the same row stride (the
    q and k slices of one fused qkv projection), so both rotate as one ``[T, Hq + Hkv, D]``."""
    return (
        q.dtype == k.dtype
        and (q.shape[0] == 1 or q.stride(0) == k.stride(0))  # a size-1 dim's stride is moot
        and q.stride(1) == k.stride(1)
        and q.stride(2) == 1
        and k.stride(2) == 1
        and q.stride(1) == q.shape[2]
        and k.data_ptr() == q.data_ptr() + q.shape[1] * q.shape[2] * q.element_size()
    )


def rotary_and_write_kv(
    q, k, v, positions, cos, sin, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None
) -> torch.Tensor:
    """See :func:`local_engine.ops.rotary_and_write_kv` (returns a new rotated ``q``)."""
    c, s = _rotary_rows(positions, cos, sin, q.dtype)
    if _adjacent(q, k):
        t, hq, d = q.shape
        row = k.stride(0) if t > 1 else (hq + k.shape[1]) * d
        qk = _rotate(q.as_strided((t, hq + k.shape[1], d), (row, d, 1)), c, s)
        q, k = qk[:, :hq], qk[:, hq:]
    else:
        q, k = _rotate(q, c, s), _rotate(k, c, s)
    write_kv_cache(
        k, v, k_cache, v_cache, slot_mapping, backend="torch", k_scale=k_scale, v_scale=v_scale
    )
    return q


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """See :func:`local_engine.ops.silu_and_mul`."""
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate).mul_(up)
