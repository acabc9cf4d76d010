"""GGUF loading with the ``gguf`` package (llama.cpp's reader).

Weights are dequantized once to float32 with :func:`gguf.quants.dequantize` (Q4_1, Q8_0, F16,
F32 ... whatever the package supports). llama.cpp's converter permutes the rows of the Q and K
projections so that its rotary code can rotate adjacent pairs; the loader undoes that
permutation exactly as Hugging Face transformers does (``LlamaTensorProcessor.
_reverse_permute_weights`` in ``modeling_gguf_pytorch_utils.py``), giving the "rotate half"
layout the model code expects.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import ModelConfig
from ..errors import EngineError
from . import LoadedModel, TokenizerSpec

SUPPORTED_ARCHITECTURES = ("llama",)

_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$")


def hf_tensor_name(gguf_name: str) -> str | None:
    """Map a llama.cpp tensor name (``blk.3.attn_q.weight``) to its HF Llama name
    (``model.layers.3.self_attn.q_proj.weight``); None for tensors the model does not use
    (e.g. ``rope_freqs.weight``)."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _BLOCK_RE.match(gguf_name)
    if m and m.group(2) in _LAYER_NAMES:
        return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"
    return None


def reverse_rotary_permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation.

    llama.cpp's ``convert_hf_to_gguf.py`` (``LlamaModel.permute``) reshapes the ``[n_head *
    head_dim, in]`` matrix to ``[n_head, 2, head_dim/2, in]`` and swaps axes 1 and 2 so that
    rotary pairs become adjacent rows. This reshapes to ``[n_head, head_dim/2, 2, in]`` and swaps
    back (the same code as transformers' ``_reverse_permute_weights``). For K, ``n_head`` is
    the number of KV heads.
    """
    dim = weights.shape[0] // n_head // 2
    w = weights.reshape(n_head, dim, 2, *weights.shape[1:])
    return w.swapaxes(2, 1).reshape(weights.shape)


def _field(reader, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def model_display_name(path: Path) -> str:
    """``SmolLM2-135M-Instruct.Q4_1.gguf`` -> ``SmolLM2-135M-Instruct`` (drops the
    quantization suffix llama.cpp tools append)."""
    stem = path.name[: -len(".gguf")] if path.name.endswith(".gguf") else path.stem
    return re.sub(r"[.-](I?Q\d[\w]*|F16|F32|BF16|fp16|f16|f32|bf16)$", "", stem, flags=re.I)


def read_gguf_config(reader, path: Path) -> ModelConfig:
    """Architecture numbers from a GGUF file's metadata.

    Raises:
        EngineError: not a Llama-family file, or a required key missing.
    """
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise EngineError(
            f"{path.name}: architecture {arch!r} is not supported; supported: {SUPPORTED_ARCHITECTURES}"
        )

    def need(key: str):
        value = _field(reader, f"{arch}.{key}")
        if value is None:
            raise EngineError(f"{path.name}: metadata key {arch}.{key} is missing")
        return value

    hidden = int(need("embedding_length"))
    heads = int(need("attention.head_count"))
    kv_heads = int(_field(reader, f"{arch}.attention.head_count_kv", heads))
    head_dim = int(_field(reader, f"{arch}.attention.key_length", hidden // heads))
    tokens = _field(reader, "tokenizer.ggml.tokens") or []
    vocab = int(_field(reader, f"{arch}.vocab_size", len(tokens)))
    names = {t.name for t in reader.tensors}
    rope_scaling = None
    scaling_type = _field(reader, f"{arch}.rope.scaling.type")
    if scaling_type not in (None, "none"):
        raise EngineError(f"{path.name}: rope scaling {scaling_type!r} is not supported")
    return ModelConfig(
        name=model_display_name(path),
        hidden_size=hidden,
        num_layers=int(need("block_count")),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=int(need("feed_forward_length")),
        vocab_size=vocab,
        rms_norm_eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        max_position_embeddings=int(_field(reader, f"{arch}.context_length", 2048)),
        tie_word_embeddings="output.weight" not in names,
        rope_scaling=rope_scaling,
    )


def read_gguf_tokenizer(reader) -> TokenizerSpec:
    """The tokenizer description stored in the file's ``tokenizer.*`` metadata."""
    tokens = _field(reader, "tokenizer.ggml.tokens")
    if not tokens:
        raise EngineError("GGUF file holds no tokenizer.ggml.tokens")

    def opt_int(key):
        v = _field(reader, key)
        return None if v is None else int(v)

    return TokenizerSpec(
        tokens=list(tokens),
        merges=list(_field(reader, "tokenizer.ggml.merges") or []),
        token_types=[int(t) for t in (_field(reader, "tokenizer.ggml.token_type") or [])],
        model=_field(reader, "tokenizer.ggml.model"),
        pre=_field(reader, "tokenizer.ggml.pre"),
        bos_token_id=opt_int("tokenizer.ggml.bos_token_id"),
        eos_token_id=opt_int("tokenizer.ggml.eos_token_id"),
        pad_token_id=opt_int("tokenizer.ggml.padding_token_id"),
        extra_stop_token_ids=[
            i
            for i in [
                opt_int("tokenizer.ggml.eot_token_id"),
                opt_int("tokenizer.ggml.eom_token_id"),
            ]
            if i is not None
        ],
        add_bos_token=bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
        chat_template=_field(reader, "tokenizer.chat_template"),
    )


def load_gguf(path: Path) -> LoadedModel:
    """Read a GGUF file: config, dequantized float32 weights (HF names), tokenizer spec.

    Raises:
        EngineError: unsupported architecture or an unreadable file.
    """
    import gguf

    try:
        reader = gguf.GGUFReader(str(path))
    except Exception as exc:  # the reader raises ValueError/struct.error on a damaged file
        raise EngineError(f"{path}: not a readable GGUF file ({exc})") from exc
    config = read_gguf_config(reader, path)
    weights: dict[str, torch.Tensor] = {}
    for t in reader.tensors:
        name = hf_tensor_name(t.name)
        if name is None:
            continue
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        w = np.require(w, dtype=np.float32, requirements=["C", "W"])
        if t.name.endswith("attn_q.weight"):
            w = reverse_rotary_permute(w, config.num_heads)
        elif t.name.endswith("attn_k.weight"):
            w = reverse_rotary_permute(w, config.num_kv_heads)
        weights[name] = torch.from_numpy(np.ascontiguousarray(w))
    return LoadedModel(
        config=config, weights=weights, tokenizer=read_gguf_tokenizer(reader), path=path
    )
