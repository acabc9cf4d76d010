"""Paged attention: one entry point for prefill (over a cached prefix), chunked prefill and
decode, plus the KV-cache write through the slot mapping.

Backends:
- ``"torch"``: the reference (:mod:`local_engine.attention.torch_ref`), any device.
- ``"triton"``: GPU kernels (:mod:`local_engine.attention.triton_backend`); on the CPU they run
  only under ``TRITON_INTERPRET=1`` (tests).

``backend=None`` picks ``"triton"`` for CUDA tensors and ``"torch"`` otherwise.
"""

from __future__ import annotations

import torch

from local_engine.backend import BACKENDS, backend_module
from local_engine.kv_cache.quant import is_quantized


def _module(backend: str | None, t: torch.Tensor):
    return backend_module(
        backend,
        t,
        "local_engine.attention.torch_ref",
        "local_engine.attention.triton_backend",
        "attention",
    )


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
    backend: str | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of each sequence's new query tokens over its whole paged context.

    Args:
        q: ``[num_tokens, num_heads, head_dim]``, the new tokens of all sequences packed in
            order (sequence ``i`` owns rows ``cu_seqlens_q[i]:cu_seqlens_q[i+1]``).
        k_cache, v_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``; the new
            tokens' K/V must already be written (see :func:`write_kv_cache`). Of a float dtype,
            or quantized (``torch.float8_e4m3fn`` / ``torch.int8``, any strides with a
            contiguous last dim), then read as ``q * scale`` (dequantized in registers).
        block_tables: int32 ``[num_seqs, max_blocks]``; row ``i`` lists sequence ``i``'s
            physical blocks in logical order (entries past its length are ignored).
        cu_seqlens_q: int32 ``[num_seqs + 1]``, cumulative new-token counts (starts at 0).
        seq_lens: int32 ``[num_seqs]``, each sequence's whole context length (cached + new).
            The new tokens are the last ``q_len`` positions of the context, so query ``j`` of
            sequence ``i`` sits at position ``seq_lens[i] - q_len_i + j`` and attends to
            positions ``0..`` that one (causal).
        scale: softmax scale; default ``head_dim ** -0.5``.
        backend: ``"torch"``, ``"triton"`` or None (by device).
        k_scale, v_scale: float32 ``[num_blocks, block_size, num_kv_heads]``, one scale per
            token and KV head (:mod:`local_engine.kv_cache.quant`); required for quantized
            caches, must be None otherwise.

    Returns:
        ``[num_tokens, num_heads, head_dim]`` in ``q``'s dtype.

    Raises:
        ValueError: unknown backend, ``num_heads`` not a multiple of ``num_kv_heads``, or
            scales missing for a quantized cache (or given for a float one).
    """
    check_scales(k_cache, k_scale, v_scale)
    return _module(backend, q).paged_attention(
        q,
        k_cache,
        v_cache,
        block_tables,
        cu_seqlens_q,
        seq_lens,
        scale,
        k_scale=k_scale,
        v_scale=v_scale,
    )


def check_scales(k_cache: torch.Tensor, k_scale, v_scale) -> None:
    """Raise ValueError unless scales come with a quantized cache and only with one, shaped
    ``k_cache.shape[:3]``."""
    if k_scale is not None and k_scale.dtype == torch.float16:
        # int2 (kv_cache.int2): K scales/minima [blocks, kv_heads, 2, D], V pairs [blocks,
        # block_size, kv_heads, 2], both float16
        n, bs, h = k_cache.shape[:3]
        if v_scale is None or v_scale.dtype != torch.float16 or v_scale.shape != (n, bs, h, 2):
            raise ValueError(f"an int2 KV cache needs float16 v_scale [{n}, {bs}, {h}, 2]")
        if k_scale.shape[:3] != (n, h, 2):
            raise ValueError(f"int2 k_scale must be [{n}, {h}, 2, head_dim]")
        return
    if is_quantized(k_cache):
        if k_scale is None or v_scale is None:
            raise ValueError(f"a {k_cache.dtype} KV cache needs k_scale and v_scale")
        if k_scale.shape != k_cache.shape[:3] or v_scale.shape != k_cache.shape[:3]:
            raise ValueError(
                f"k_scale/v_scale must be {tuple(k_cache.shape[:3])}; got "
                f"{tuple(k_scale.shape)} and {tuple(v_scale.shape)}"
            )
        if k_scale.dtype != torch.float32 or v_scale.dtype != torch.float32:
            raise ValueError("k_scale/v_scale must be float32")
    elif k_scale is not None or v_scale is not None:
        raise ValueError(f"scales given for an unquantized {k_cache.dtype} KV cache")


def write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    backend: str | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> None:
    """Write new tokens' K/V into the paged cache, in place.

    Args:
        key, value: ``[num_tokens, num_kv_heads, head_dim]``.
        k_cache, v_cache: ``[num_blocks, block_size, num_kv_heads, head_dim]``.
        slot_mapping: int64 or int32 ``[num_tokens]``; token ``t`` goes to flat slot
            ``slot_mapping[t] = block * block_size + offset``; a negative slot skips the token
            (padding).
        backend: as for :func:`paged_attention`.
        k_scale, v_scale: as for :func:`paged_attention`; a quantized cache gets each token's
            values quantized with a fresh per-(token, KV head) scale written beside them.
    """
    check_scales(k_cache, k_scale, v_scale)
    _module(backend, key).write_kv_cache(
        key, value, k_cache, v_cache, slot_mapping, k_scale=k_scale, v_scale=v_scale
    )


__all__ = ["paged_attention", "write_kv_cache", "check_scales", "BACKENDS"]
