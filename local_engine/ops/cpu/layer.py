"""One decoder layer per call on the CPU: the C++ ``decode_layer`` of ``decode.cpp``.

A batch-1 decode step of SmolLM2 issues ~50 torch calls per layer from Python (norms, the
rotary gather, the KV write, the context gather, SDPA, casts, views), ~11 ms of a 20 ms int8
step at 1-2 us each (``bench/RESULTS.md`` "## cpu", session 2). For a few rows (a decode step,
a small batched decode, a speculative verification: at most :data:`MAX_ROWS`) the whole layer
(RMSNorm + residual, qkv, rotary, KV write through the slot mapping, paged GQA attention over
the block tables, o_proj, RMSNorm + residual, gate_up, SiLU-and-multiply, down) is one call
here, over the linears' C++ kernels (:mod:`local_engine.models.linear`).

It applies when the kernels are built (AVX-512 or AVX2), every linear of the layer runs a C++ kernel
for that many rows, activations and the KV cache are float32 (not quantized), the tensors are
on the CPU and the attention backend is ``"torch"`` or automatic; otherwise the caller runs
the module-by-module path. Arithmetic: the torch path's (``ops/torch_ops.py``,
``attention/torch_ref.py``) up to float32 summation order and a polynomial ``exp`` (tested
against it in ``tests/local_engine/test_cpu_kernels.py``).
"""

from __future__ import annotations

import torch

from . import kernels

# Rows (new tokens in the step) up to which the fused layer runs: a batch-8 verification of K =
# 4..7 drafts (8 x 5..8 rows) included. The C++ layer has no row limit of its own (its scratch
# is sized per call; the float32 linears run any row count, 1.0-3.3x oneMKL's GEMM up to 512
# rows, bench/gemv_cpu.py); the linears' own limits (bfloat16 32, int8 16 rows) still apply
# through ``max_rows``. Its attention is one query row at a time, single-threaded, so long
# prefill chunks stay on the torch path (SDPA's blocked kernels).
MAX_ROWS = 64
_EMPTY = torch.empty(0)


class DecodeLayerOp:
    """The fused layer for one decoder layer's weights.

    Args:
        w_in, w_post: float32 ``[hidden]`` RMSNorm weights (before attention, before the MLP).
        eps: RMSNorm epsilon.
        specs: the four linears' :meth:`~local_engine.models.linear.Linear.kernel_spec`
            (qkv, o, gate_up, down), each ``(kind, (a, b, c), out_features, max_rows)``.
        num_heads, num_kv_heads: attention heads (``num_heads % num_kv_heads == 0``).
        scale: attention score scale (``head_dim ** -0.5``).
    """

    def __init__(self, w_in, w_post, eps, specs, num_heads, num_kv_heads, scale):
        mod = kernels()
        assert mod is not None
        self._fn = mod.decode_layer
        self.w_in, self.w_post, self.eps = w_in, w_post, float(eps)
        self.tensors: list[torch.Tensor] = []
        self.meta: list[int] = []
        rows = [MAX_ROWS]
        for kind, ts, n, max_rows in specs:
            self.tensors.extend(t if t is not None else _EMPTY for t in ts)
            self.meta.extend((kind, n))
            if max_rows is not None:
                rows.append(max_rows)
        self.max_rows = min(rows)
        self.num_heads, self.num_kv_heads, self.scale = num_heads, num_kv_heads, float(scale)
        self.sources = tuple(ts[0] for _, ts, _, _ in specs)  # to notice reloaded weights

    def applies(self, x: torch.Tensor, residual, kv_cache, backend) -> bool:
        """Whether this step's layer can run fused (see the module docstring)."""
        return (
            0 < x.shape[0] <= self.max_rows
            and x.dtype == torch.float32
            and not x.is_cuda
            and backend in (None, "torch")
            and len(kv_cache) == 2
            and kv_cache[0].dtype == torch.float32
            and x.is_contiguous()
            and (residual is None or residual.is_contiguous())
        )

    def __call__(self, x, residual, positions, cos, sin, k_cache, v_cache, meta):
        """``x``, ``residual`` float32 ``[T, hidden]`` (``residual`` None for the first layer),
        ``positions`` int64 ``[T]``, ``cos``/``sin`` float32 ``[max_pos, head_dim]``, this
        layer's caches ``[blocks, block_size, kv_heads, head_dim]`` (written at
        ``meta.slot_mapping``), ``meta`` the step's attention metadata. Returns ``(mlp_out,
        residual)`` as :class:`~local_engine.models.llama.LlamaDecoderLayer` does."""
        out, h = self._fn(
            x,
            residual,
            positions,
            cos,
            sin,
            k_cache,
            v_cache,
            meta.slot_mapping,
            meta.block_tables,
            meta.cu_seqlens_q,
            meta.seq_lens,
            self.w_in,
            self.w_post,
            self.eps,
            self.tensors,
            self.meta,
            self.num_heads,
            self.num_kv_heads,
            self.scale,
        )
        return out, h


__all__ = ["MAX_ROWS", "DecodeLayerOp"]
