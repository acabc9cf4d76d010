"""The model's elementwise layers as single fused launches: RMSNorm with the residual add,
rotary embedding with the KV-cache write, and SiLU-and-multiply.

Why: a Llama decode step at batch 1 streams the weights once (a few GEMVs per layer) but
unfused it also runs ~35 small elementwise kernels per layer (float32 casts, ``pow``, ``mean``,
``rsqrt``, the rotary ``cat``/``neg``/``mul``/``add``, ``silu``, ``mul``, residual adds); a CUDA
graph still runs them one by one, and on the 8B shape they cost more GPU time than the KV
reads (``bench/RESULTS.md``, "## triton"). Each function here is one Triton launch.

Backends, chosen as :mod:`local_engine.attention` chooses: ``"torch"`` (the reference, any
device; the same arithmetic as Hugging Face ``modeling_llama.py``), ``"triton"``
(:mod:`local_engine.ops.triton_ops`; CUDA, or the CPU under ``TRITON_INTERPRET=1``),
``None`` = triton for CUDA tensors, torch otherwise.
"""

from __future__ import annotations

import torch

from local_engine.attention import check_scales
from local_engine.backend import BACKENDS, backend_module


def _module(backend: str | None, t: torch.Tensor):
    return backend_module(
        backend, t, "local_engine.ops.torch_ops", "local_engine.ops.triton_ops", "ops"
    )


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
    backend: str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm, optionally after adding the residual stream.

    Without ``residual``: returns ``(norm(x) * weight, x)``. With it: ``h = x + residual``
    (rounded to ``x.dtype``, as an unfused add would), returns ``(norm(h) * weight, h)``; the
    triton backend writes ``h`` into ``residual`` in place (so ``h`` *is* ``residual``).
    ``norm(h) = h / sqrt(mean(h^2) + eps)`` in float32, cast to ``x.dtype`` before the weight
    multiply (Hugging Face ``LlamaRMSNorm``).

    Args:
        x, residual: ``[num_tokens, hidden]``, same dtype; ``weight``: ``[hidden]``.

    Raises:
        ValueError: shapes that disagree, or an unknown backend.
    """
    if x.dim() != 2 or weight.shape != (x.shape[1],):
        raise ValueError(
            f"rms_norm: x must be [tokens, hidden] and weight [hidden]; got "
            f"{tuple(x.shape)} and {tuple(weight.shape)}"
        )
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"rms_norm: residual {tuple(residual.shape)} != x {tuple(x.shape)}")
    return _module(backend, x).rms_norm(x, weight, eps, residual)


def rotary_and_write_kv(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    backend: str | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rotate ``q`` and ``k`` by their positions (rotate-half rotary embedding) and write the
    rotated ``k`` and ``v`` into the paged cache through the slot mapping.

    Args:
        q: ``[num_tokens, num_heads, head_dim]``; k, v: ``[num_tokens, num_kv_heads, head_dim]``
            (views into the fused qkv projection are fine: the last dim must be contiguous).
        positions: int64 ``[num_tokens]``, each token's position in its sequence.
        cos, sin: float32 ``[max_positions, head_dim]`` tables (both halves equal, as
            :class:`~local_engine.models.llama.RotaryEmbedding` builds them).
        k_cache, v_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``.
        slot_mapping: int ``[num_tokens]``; a negative slot skips the write (padding).
        k_scale, v_scale: for a quantized cache (``float8_e4m3fn``/``int8``), float32
            ``[num_blocks, block_size, num_kv_heads]``: the rotated keys (rounded to ``k``'s
            dtype first) and the values are quantized per token and KV head as they are
            written (:func:`local_engine.kv_cache.quant.quantize`), scales beside them.

    Returns:
        the rotated queries ``[num_tokens, num_heads, head_dim]`` (the triton backend rotates
        ``q`` in place and returns it).

    Raises:
        ValueError: shapes that disagree, or an unknown backend.
    """
    if (
        q.dim() != 3
        or k.dim() != 3
        or v.shape != k.shape
        or q.shape[0] != k.shape[0]
        or q.shape[2] != k.shape[2]
    ):
        raise ValueError(
            f"rotary_and_write_kv: q [T, Hq, D] and k, v [T, Hkv, D] expected; got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if positions.shape != (q.shape[0],) or slot_mapping.shape != (q.shape[0],):
        raise ValueError(
            f"rotary_and_write_kv: positions {tuple(positions.shape)} and slot_mapping "
            f"{tuple(slot_mapping.shape)} must be [{q.shape[0]}]"
        )
    check_scales(k_cache, k_scale, v_scale)
    return _module(backend, q).rotary_and_write_kv(
        q, k, v, positions, cos, sin, k_cache, v_cache, slot_mapping, k_scale, v_scale
    )


def silu_and_mul(x: torch.Tensor, backend: str | None = None) -> torch.Tensor:
    """SwiGLU's gate: ``silu(x[:, :I]) * x[:, I:]`` for ``x`` ``[num_tokens, 2 * I]`` (the fused
    gate/up projection), returning ``[num_tokens, I]`` in ``x``'s dtype.

    Raises:
        ValueError: ``x`` not 2-D with an even last dimension, or an unknown backend.
    """
    if x.dim() != 2 or x.shape[1] % 2:
        raise ValueError(
            f"silu_and_mul: x must be [tokens, 2 * intermediate]; got {tuple(x.shape)}"
        )
    return _module(backend, x).silu_and_mul(x)


__all__ = ["rms_norm", "rotary_and_write_kv", "silu_and_mul", "BACKENDS"]
