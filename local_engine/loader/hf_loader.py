"""Hugging Face checkpoint folders: ``config.json`` + ``*.safetensors`` + ``tokenizer.json``."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..config import ModelConfig
from ..errors import EngineError, ModelNotFoundError
from . import LoadedModel, TokenizerSpec

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2")


def read_hf_config(folder: Path) -> ModelConfig:
    """Architecture numbers from ``config.json``.

    Raises:
        EngineError: not a Llama-family model, or attention biases (unsupported).
    """
    cfg = json.loads((folder / "config.json").read_text())
    model_type = cfg.get("model_type")
    if model_type not in ("llama", "mistral"):
        raise EngineError(
            f"{folder}: model_type {model_type!r} is not supported; supported: llama, mistral"
        )
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise EngineError(f"{folder}: attention/MLP biases are not supported")
    hidden = int(cfg["hidden_size"])
    heads = int(cfg["num_attention_heads"])
    rope_scaling = cfg.get("rope_scaling")
    if rope_scaling and rope_scaling.get("rope_type", rope_scaling.get("type")) not in (
        "llama3",
        "default",
    ):
        raise EngineError(f"{folder}: rope_scaling {rope_scaling!r} is not supported")
    theta = cfg.get("rope_theta")
    if theta is None and isinstance(cfg.get("rope_parameters"), dict):
        theta = cfg["rope_parameters"].get("rope_theta")
    return ModelConfig(
        name=folder.name,
        hidden_size=hidden,
        num_layers=int(cfg["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        intermediate_size=int(cfg["intermediate_size"]),
        vocab_size=int(cfg["vocab_size"]),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
        rope_theta=float(theta if theta is not None else 10000.0),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        rope_scaling=rope_scaling
        if rope_scaling and rope_scaling.get("rope_type", rope_scaling.get("type")) == "llama3"
        else None,
    )


def read_hf_tokenizer(folder: Path) -> TokenizerSpec:
    """``tokenizer.json`` plus the special tokens and chat template of ``tokenizer_config.json``."""
    tok_file = folder / "tokenizer.json"
    if not tok_file.is_file():
        raise ModelNotFoundError(f"{folder}: tokenizer.json is missing")
    tok_json = tok_file.read_text()
    vocab = {}
    try:
        parsed = json.loads(tok_json)
        vocab = dict(parsed.get("model", {}).get("vocab", {}) or {})
        for added in parsed.get("added_tokens", []):
            vocab[added["content"]] = added["id"]
    except (ValueError, AttributeError):
        pass
    tcfg = {}
    if (folder / "tokenizer_config.json").is_file():
        tcfg = json.loads((folder / "tokenizer_config.json").read_text())

    def token_text(v):
        if isinstance(v, dict):
            return v.get("content")
        return v

    def tid(name):
        text = token_text(tcfg.get(name))
        return vocab.get(text) if text is not None else None

    extra = []
    gen = folder / "generation_config.json"
    if gen.is_file():
        eos = json.loads(gen.read_text()).get("eos_token_id")
        extra = list(eos) if isinstance(eos, list) else ([eos] if eos is not None else [])
    template = tcfg.get("chat_template")
    if template is None and (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text()
    return TokenizerSpec(
        tokenizer_json=tok_json,
        bos_token_id=tid("bos_token"),
        eos_token_id=tid("eos_token"),
        pad_token_id=tid("pad_token"),
        extra_stop_token_ids=extra,
        add_bos_token=bool(tcfg.get("add_bos_token", False)),
        chat_template=template,
    )


def load_hf_folder(folder: Path) -> LoadedModel:
    """Load config, float32 weights (all ``*.safetensors`` shards) and tokenizer of a folder."""
    from safetensors.torch import load_file

    config = read_hf_config(folder)
    weights: dict[str, torch.Tensor] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        for name, t in load_file(str(shard)).items():
            weights[name] = t.to(torch.float32)
    if "lm_head.weight" not in weights:
        config.tie_word_embeddings = True
    return LoadedModel(
        config=config, weights=weights, tokenizer=read_hf_tokenizer(folder), path=folder
    )
