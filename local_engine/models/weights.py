"""Prepared weights: the model's tensors in the layout the CPU runs, keyed by module path.

:func:`prepare_weights` turns a checkpoint's Hugging Face-named float32 tensors into that
layout once (fusing q/k/v and gate/up, transposing for ``"dense_t"``, quantizing for
``"int8"``); :func:`load_prepared` puts such a dict into a :class:`~local_engine.models.llama.
LlamaForCausalLM`. The dict holds only tensors, so the loader's weight cache
(:mod:`local_engine.loader.weight_cache`) stores it as one safetensors file and a warm start
skips dequantizing the GGUF file and every transform here.

Names (``L`` each linear layer: ``layers.{i}.self_attn.qkv_proj``, ``layers.{i}.self_attn.
o_proj``, ``layers.{i}.mlp.gate_up_proj``, ``layers.{i}.mlp.down_proj``, ``lm_head``)::

    embed_tokens.weight            [vocab, hidden]  activation dtype
    norm.weight, layers.{i}.input_layernorm.weight, layers.{i}.post_attention_layernorm.weight
                                   [hidden]         activation dtype
    float32, C++ kernels built (local_engine.ops.cpu):
                         L.panels    [ceil(out/32), in, 32] float32 (every linear)
    float32, without:    L.weight_t  [in, out]      float32, for out >= in (qkv, o, gate_up, lm_head)
                         L.weight    [out, in]      float32, for out < in (down_proj)
    bfloat16:            L.weight    [out, in]      bfloat16 (reordered for oneDNN at load)
    int8:                L.qweight   [out, in] int8, L.scale [out] float32
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ..config import WEIGHT_DTYPES, ModelConfig
from ..errors import EngineError
from ..ops import cpu as cpu_kernels
from .linear import quantize_int8


def linear_names(mc: ModelConfig) -> Iterator[str]:
    """Module paths of every linear layer, in model order (``lm_head`` last)."""
    for i in range(mc.num_layers):
        p = f"layers.{i}."
        yield from (
            p + "self_attn.qkv_proj",
            p + "self_attn.o_proj",
            p + "mlp.gate_up_proj",
            p + "mlp.down_proj",
        )
    yield "lm_head"


def fused_hf_weights(
    hf: dict[str, torch.Tensor], mc: ModelConfig
) -> Iterator[tuple[str, torch.Tensor]]:
    """``(module path, tensor)`` for every model tensor from HF names, with q/k/v and gate/up
    concatenated along the output dim (``[out, in]`` layout for linears). The LM head is the
    embedding when the checkpoint ties them.

    Raises:
        EngineError: a tensor is missing.
    """

    def take(name):
        if name not in hf:
            raise EngineError(f"model weights lack {name}")
        return hf[name]

    yield "embed_tokens.weight", take("model.embed_tokens.weight")
    yield "norm.weight", take("model.norm.weight")
    for i in range(mc.num_layers):
        h, p = f"model.layers.{i}.", f"layers.{i}."
        yield p + "input_layernorm.weight", take(h + "input_layernorm.weight")
        yield p + "post_attention_layernorm.weight", take(h + "post_attention_layernorm.weight")
        qkv = [take(h + f"self_attn.{n}_proj.weight") for n in "qkv"]
        yield p + "self_attn.qkv_proj", torch.cat(qkv, dim=0)
        yield p + "self_attn.o_proj", take(h + "self_attn.o_proj.weight")
        gu = [take(h + "mlp.gate_proj.weight"), take(h + "mlp.up_proj.weight")]
        yield p + "mlp.gate_up_proj", torch.cat(gu, dim=0)
        yield p + "mlp.down_proj", take(h + "mlp.down_proj.weight")
    if mc.tie_word_embeddings:
        yield "lm_head", take("model.embed_tokens.weight")
    else:
        yield "lm_head", take("lm_head.weight")


def prepare_weights(
    hf: dict[str, torch.Tensor],
    mc: ModelConfig,
    weight_dtype: str,
    act_dtype: torch.dtype = torch.float32,
    panels: bool | None = None,
) -> dict[str, torch.Tensor]:
    """HF-named float tensors -> the prepared dict of the module docstring (CPU tensors).

    Args:
        hf: checkpoint tensors (``model.layers.0.self_attn.q_proj.weight`` ...), ``[out, in]``.
        mc: the architecture (layer count, tied head).
        weight_dtype: one of :data:`WEIGHT_DTYPES`, the storage of the linear layers.
        act_dtype: dtype of the embedding and norm weights (the activations').
        panels: float32 linears as the C++ kernel's panels (``L.panels``); None = whenever
            the float32 kernel is built here (:func:`local_engine.ops.cpu.has`).

    Raises:
        EngineError: unknown ``weight_dtype`` or a missing tensor.
    """
    if weight_dtype not in WEIGHT_DTYPES:
        raise EngineError(f"weight_dtype must be one of {WEIGHT_DTYPES}, got {weight_dtype!r}")
    if panels is None:
        panels = weight_dtype == "float32" and cpu_kernels.has("float32")
    out: dict[str, torch.Tensor] = {}
    for name, t in fused_hf_weights(hf, mc):
        if name.endswith(".weight"):  # embedding and norms
            out[name] = t.to(act_dtype).contiguous()
        elif weight_dtype == "int8":
            out[name + ".qweight"], out[name + ".scale"] = quantize_int8(t)
        elif weight_dtype == "bfloat16":
            out[name + ".weight"] = t.to(torch.bfloat16).contiguous()
        elif panels:
            out[name + ".panels"] = cpu_kernels.pack_f32(t)
        elif float32_transposed(t.shape[0], t.shape[1]):
            out[name + ".weight_t"] = t.t().float().contiguous()
        else:
            out[name + ".weight"] = t.float().contiguous()
    return out


def float32_transposed(out_features: int, in_features: int) -> bool:
    """Whether a float32 CPU linear is stored ``[in, out]`` (``dense_t``, ``torch.mm``) rather
    than ``[out, in]`` (``dense``, ``F.linear``). oneMKL's batch-1 GEMV on one Zen 4 core,
    cold weights, 30 matrices per shape (``bench/RESULTS.md`` "## cpu", 2026-12-01 11:10, load
    1): ``[in, out]`` 14.2 / 17.5 / 17.9 GB/s for qkv 960x576, gate_up 3072x576, lm_head
    49152x576 against 11.0-11.3 for ``[out, in]``; for down_proj 576x1536 the reverse, 12.0
    against 15.0; o_proj 576x576 11.8 against 11.1. So: transposed unless ``out < in``."""
    return out_features >= in_features


def prepared_weight_dtype(prepared: dict[str, torch.Tensor]) -> str:
    """Which :data:`WEIGHT_DTYPES` entry a prepared dict holds (read from ``lm_head``).

    Raises:
        EngineError: the dict is not a prepared one.
    """
    if "lm_head.qweight" in prepared:
        return "int8"
    if "lm_head.weight" in prepared:  # float32 heads are stored transposed (out >= in)
        return "bfloat16" if prepared["lm_head.weight"].dtype == torch.bfloat16 else "float32"
    if "lm_head.weight_t" in prepared or "lm_head.panels" in prepared:
        return "float32"
    raise EngineError(
        "not a prepared weight dict (no lm_head.panels, .weight_t, .weight or .qweight)"
    )


def is_prepared(weights: dict) -> bool:
    """True for a dict from :func:`prepare_weights`, False for HF names."""
    return "embed_tokens.weight" in weights


def load_prepared(model, prepared: dict[str, torch.Tensor]) -> None:
    """Install a prepared dict into ``model`` (a ``LlamaForCausalLM`` on the CPU): norm and
    embedding weights are copied into the parameters; each linear switches to ``panels``,
    ``dense_t``, ``dense``, ``bf16`` or ``int8`` (fbgemm prepacking and the C++ kernels'
    packing of bf16/int8 happen here). Float32 panels are unpacked to the torch layout where
    the kernels are off, and a torch-layout float32 dict is packed where they are on, so one
    cache file serves both.

    Raises:
        EngineError: a tensor is missing or has the wrong shape.
    """
    mc = model.config

    def take(name):
        if name not in prepared:
            raise EngineError(f"prepared weights lack {name}")
        return prepared[name]

    def copy(param, name):
        t = take(name)
        if tuple(param.shape) != tuple(t.shape):
            raise EngineError(
                f"{name}: expected shape {tuple(param.shape)}, prepared weights have {tuple(t.shape)}"
            )
        param.data = t.to(param.dtype)

    copy(model.embed_tokens.weight, "embed_tokens.weight")
    copy(model.norm.weight, "norm.weight")
    for i, layer in enumerate(model.layers):
        copy(layer.input_layernorm.weight, f"layers.{i}.input_layernorm.weight")
        copy(layer.post_attention_layernorm.weight, f"layers.{i}.post_attention_layernorm.weight")
    kind = prepared_weight_dtype(prepared)
    for name in linear_names(mc):
        lin = model.get_submodule(name)
        try:
            if kind == "int8":
                lin.set_int8(take(name + ".qweight"), take(name + ".scale"))
            elif kind == "bfloat16":
                lin.set_bf16(take(name + ".weight"))
            elif name + ".panels" in prepared:
                if cpu_kernels.has("float32"):
                    lin.set_panels(prepared[name + ".panels"])
                else:
                    w = cpu_kernels.unpack_f32(prepared[name + ".panels"], lin.out_features)
                    if float32_transposed(lin.out_features, lin.in_features):
                        lin.set_dense_t(w.t().contiguous())
                    else:
                        lin.set_dense(w)
            elif name + ".weight_t" in prepared:
                lin.set_dense_t(prepared[name + ".weight_t"])
            else:
                lin.set_dense(take(name + ".weight"))
        except ValueError as exc:
            raise EngineError(f"{name}: {exc}") from exc


__all__ = [
    "WEIGHT_DTYPES",
    "fused_hf_weights",
    "is_prepared",
    "linear_names",
    "load_prepared",
    "prepare_weights",
    "prepared_weight_dtype",
    "float32_transposed",
]
