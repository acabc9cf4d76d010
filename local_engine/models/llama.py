"""Llama-family decoder over a flat packed batch with a paged KV cache.

Architecture (Touvron et al. 2023; Hugging Face ``modeling_llama.py``): token embedding, N blocks
of [RMSNorm -> grouped-query attention with rotary position embeddings -> residual, RMSNorm ->
SwiGLU MLP -> residual], final RMSNorm, LM head (tied to the embedding when the file has no
``output.weight``). SmolLM2-135M: 30 blocks, width 576, 9 query heads over 3 KV heads of 64,
MLP 1536, rotary base 100000.

The forward pass takes every scheduled token of every sequence as one flat batch
(``[num_tokens]`` ids and positions) and an :class:`~local_engine.attention.metadata.
AttentionMetadata`. RMSNorm (fused with the residual add), rotary embedding with the KV write,
and SiLU-and-multiply go through :mod:`local_engine.ops`; attention through
:func:`local_engine.attention.paged_attention`. No Python loop over sequences here.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .. import ops
from ..attention import paged_attention
from ..attention.metadata import AttentionMetadata
from ..config import ModelConfig
from ..errors import EngineError
from ..ops import cpu as cpu_kernels
from .linear import Linear
from .weights import fused_hf_weights, is_prepared, load_prepared, prepare_weights


class Embedding(nn.Module):
    """Token embedding: ``weight`` ``[vocab, hidden]`` (uninitialised until loaded),
    ``ids`` int64 ``[T]`` -> ``[T, hidden]``."""

    def __init__(self, num_embeddings: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, dim), requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight)


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * weight``, computed in float32 (as HF's LlamaRMSNorm),
    optionally fused with the residual add (:func:`local_engine.ops.rms_norm`)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim), requires_grad=False)
        self.eps = eps

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None = None, backend: str | None = None
    ):
        """``x`` ``[T, hidden]``. Without ``residual`` returns ``norm(x)``; with it returns
        ``(norm(x + residual), x + residual)`` (the new residual stream)."""
        out, h = ops.rms_norm(x, self.weight, self.eps, residual, backend=backend)
        return out if residual is None else (out, h)


def rope_inv_freq(head_dim: int, theta: float, scaling: dict | None) -> torch.Tensor:
    """Rotary inverse frequencies ``theta ** (-2i / head_dim)``, float32 ``[head_dim // 2]``;
    with ``rope_scaling = {"rope_type": "llama3", ...}`` adjusted as in Llama 3.1
    (transformers ``_compute_llama3_parameters``)."""
    inv = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim)
    )
    if scaling and scaling.get("rope_type", scaling.get("type")) == "llama3":
        factor = scaling["factor"]
        low, high = scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
        old_len = scaling["original_max_position_embeddings"]
        low_wl, high_wl = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wl, inv / factor, inv)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
        inv = torch.where(medium, smoothed, scaled)
    return inv


class RotaryEmbedding(nn.Module):
    """Rotate-half rotary embedding's float32 cos/sin tables ``[max_pos, head_dim]`` (applied by
    :func:`local_engine.ops.rotary_and_write_kv`)."""

    def __init__(self, head_dim: int, max_positions: int, theta: float, scaling: dict | None):
        super().__init__()
        self.head_dim, self.max_positions, self.theta, self.scaling = (
            head_dim,
            max_positions,
            theta,
            scaling,
        )
        self.build_tables("cpu")

    def build_tables(self, device) -> None:
        """(Re)compute the float32 cos/sin tables on ``device``."""
        inv = rope_inv_freq(self.head_dim, self.theta, self.scaling)
        pos = torch.arange(self.max_positions, dtype=torch.int64, device="cpu").float()
        freqs = torch.outer(pos, inv)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos = emb.cos().to(device)
        self.sin = emb.sin().to(device)


class LlamaAttention(nn.Module):
    """Grouped-query self-attention over the paged KV cache: fused q/k/v projection, rotary
    embedding, KV write through the slot mapping, :func:`paged_attention`, output projection.
    Shapes: ``x`` ``[num_tokens, hidden]`` -> ``[num_tokens, hidden]``."""

    def __init__(self, cfg: ModelConfig, rope: RotaryEmbedding):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (
            cfg.num_heads,
            cfg.num_kv_heads,
            cfg.head_dim,
        )
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim
        self.qkv_proj = Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size)
        self.o_proj = Linear(self.q_size, cfg.hidden_size)
        self.rope = rope
        self.scale = self.head_dim**-0.5

    def forward(
        self, x, positions, meta: AttentionMetadata, kv_cache: tuple[torch.Tensor, torch.Tensor]
    ):
        """``x`` ``[T, hidden]``, ``positions`` int64 ``[T]``; ``kv_cache`` this layer's
        ``(k_cache, v_cache)``, each ``[num_blocks, block_size, num_kv_heads, head_dim]``, written
        in place at ``meta.slot_mapping``. Returns ``[T, hidden]`` in ``x``'s dtype."""
        T = x.shape[0]
        qkv = self.qkv_proj(x)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(T, self.num_heads, self.head_dim)
        k = k.view(T, self.num_kv_heads, self.head_dim)
        v = v.view(T, self.num_kv_heads, self.head_dim)
        # [KVQUANT] a quantized cache comes with (k_scale, v_scale) (local_engine/kv_cache/quant.py)
        k_cache, v_cache = kv_cache[0], kv_cache[1]
        k_scale, v_scale = (kv_cache[2], kv_cache[3]) if len(kv_cache) == 4 else (None, None)
        q = ops.rotary_and_write_kv(
            q,
            k,
            v,
            positions,
            self.rope.cos,
            self.rope.sin,
            k_cache,
            v_cache,
            meta.slot_mapping,
            backend=meta.backend,
            k_scale=k_scale,
            v_scale=v_scale,
        )
        out = paged_attention(
            q,
            k_cache,
            v_cache,
            meta.block_tables,
            meta.cu_seqlens_q,
            meta.seq_lens,
            scale=self.scale,
            backend=meta.backend,
            k_scale=k_scale,
            v_scale=v_scale,
        )
        return self.o_proj(out.reshape(T, self.q_size))


class LlamaMLP(nn.Module):
    """SwiGLU feed-forward: ``down(silu(gate(x)) * up(x))`` with gate and up fused into one
    matmul. ``[T, hidden]`` -> ``[T, hidden]``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.inter = cfg.intermediate_size
        self.gate_up_proj = Linear(cfg.hidden_size, 2 * cfg.intermediate_size)
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x, backend: str | None = None):
        """``x`` ``[T, hidden]`` -> ``[T, hidden]``."""
        return self.down_proj(ops.silu_and_mul(self.gate_up_proj(x), backend=backend))


class LlamaDecoderLayer(nn.Module):
    """One pre-norm transformer block: ``x + attn(norm(x))``, then ``x + mlp(norm(x))``, written
    over a separate residual stream so each norm is fused with the add before it."""

    def __init__(self, cfg: ModelConfig, rope: RotaryEmbedding):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = LlamaAttention(cfg, rope)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = LlamaMLP(cfg)
        self._fused: object = None  # the CPU's one-call layer (local_engine.ops.cpu.layer)

    def fused_op(self):
        """The C++ one-call layer over this layer's weights (:class:`~local_engine.ops.cpu.
        layer.DecodeLayerOp`), or None when some linear has no C++ kernel or the kernels are
        not built; rebuilt when the weights are reloaded."""
        attn, mlp = self.self_attn, self.mlp
        lins = (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)
        specs = [lin.kernel_spec() for lin in lins]
        op = self._fused
        if op is not None and op is not False:
            if all(s is not None and s[1][0] is src for s, src in zip(specs, op.sources)):
                return op
        if any(s is None for s in specs) or cpu_kernels.isa() is None:
            self._fused = False
            return None
        from ..ops.cpu.layer import DecodeLayerOp

        self._fused = DecodeLayerOp(
            self.input_layernorm.weight,
            self.post_attention_layernorm.weight,
            self.input_layernorm.eps,
            specs,
            attn.num_heads,
            attn.num_kv_heads,
            attn.scale,
        )
        return self._fused

    def forward(self, x, residual, positions, meta, kv_cache):
        """``x`` ``[T, hidden]`` (the previous block's MLP output, or the embeddings for block 0
        with ``residual=None``), ``residual`` ``[T, hidden]`` or None, ``positions`` int64
        ``[T]``, ``meta`` the step's :class:`AttentionMetadata`, ``kv_cache`` this layer's cache
        pair. Returns ``(mlp_out, residual)``, both ``[T, hidden]``; the block's output is their
        sum. On the CPU, a step of a few rows runs the C++ one-call layer when it applies
        (:meth:`fused_op`)."""
        op = self._fused
        if op is not False and not x.is_cuda:
            op = self.fused_op()
            if op is not None and op.applies(x, residual, kv_cache, meta.backend):
                rope = self.self_attn.rope
                return op(
                    x, residual, positions, rope.cos, rope.sin, kv_cache[0], kv_cache[1], meta
                )
        if residual is None:
            h, residual = self.input_layernorm(x, backend=meta.backend), x
        else:
            h, residual = self.input_layernorm(x, residual, backend=meta.backend)
        h = self.self_attn(h, positions, meta, kv_cache)
        h, residual = self.post_attention_layernorm(h, residual, backend=meta.backend)
        return self.mlp(h, backend=meta.backend), residual


class LlamaForCausalLM(nn.Module):
    """The whole model. ``forward`` returns final hidden states ``[num_tokens, hidden]``;
    :meth:`compute_logits` maps selected rows to float32 logits ``[rows, vocab]``."""

    def __init__(self, cfg: ModelConfig, max_positions: int | None = None):
        super().__init__()
        self.config = cfg
        rope = RotaryEmbedding(
            cfg.head_dim,
            max_positions or cfg.max_position_embeddings,
            cfg.rope_theta,
            cfg.rope_scaling,
        )
        self.rope = rope
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg, rope) for _ in range(cfg.num_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size)
        for p in self.parameters():
            p.requires_grad_(False)

    def load_weights(
        self, weights: dict[str, torch.Tensor], weight_dtype: str | None = None
    ) -> None:
        """Install the weights.

        Args:
            weights: HF-named float tensors (``model.layers.0.self_attn.q_proj.weight`` ...),
                or a prepared dict from :func:`~local_engine.models.weights.prepare_weights`
                (the weight cache's; its own layout wins over ``weight_dtype``).
            weight_dtype: None keeps the ``"dense"`` ``[out, in]`` layout in the parameters'
                dtype (CUDA, and the reference); ``"float32"``/``"bfloat16"``/``"int8"``
                prepares the CPU layouts (:mod:`local_engine.models.linear`).

        Raises:
            EngineError: a tensor is missing or has the wrong shape.
        """
        if is_prepared(weights):
            load_prepared(self, weights)
            return
        if weight_dtype is not None:
            load_prepared(
                self,
                prepare_weights(weights, self.config, weight_dtype, self.embed_tokens.weight.dtype),
            )
            return
        for name, tensor in fused_hf_weights(weights, self.config):
            if name == "lm_head" and self.config.tie_word_embeddings:
                self.lm_head.weight = self.embed_tokens.weight
                continue
            param = self.get_parameter(name if name.endswith(".weight") else name + ".weight")
            if tuple(param.shape) != tuple(tensor.shape):
                raise EngineError(
                    f"{name}: expected shape {tuple(param.shape)}, file has {tuple(tensor.shape)}"
                )
            param.data.copy_(tensor)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> torch.Tensor:
        """Args:
            input_ids: int64 ``[num_tokens]``; positions: int64 ``[num_tokens]`` (position of
                each token in its sequence); meta: see :class:`AttentionMetadata`;
            kv_caches: one ``(k_cache, v_cache)`` per layer, each ``[num_blocks, block_size,
                num_kv_heads, head_dim]``.

        Returns: final-norm hidden states ``[num_tokens, hidden_size]``.
        """
        x = self.embed_tokens(input_ids)
        residual = None
        for layer, kv in zip(self.layers, kv_caches):
            x, residual = layer(x, residual, positions, meta, kv)
        if residual is None:  # a model with no layers
            return self.norm(x, backend=meta.backend)
        return self.norm(x, residual, backend=meta.backend)[0]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``hidden`` ``[rows, hidden_size]`` -> float32 logits ``[rows, vocab_size]``."""
        return self.lm_head(hidden).float()
