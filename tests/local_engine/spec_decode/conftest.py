"""Tiny random-weight Llama checkpoints with SmolLM2's vocabulary (a draft model and a target
for the speculative-decoding tests), written as Hugging Face folders so that transformers can
load the very same weights as the reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")


def write_tiny_llama(
    folder: Path, num_layers: int, seed: int, hidden: int = 64, vocab_size: int | None = None
) -> Path:
    """A Llama folder (config.json, model.safetensors, tokenizer.json, tokenizer_config.json):
    ``num_layers`` blocks of width ``hidden``, 4 query heads over 2 KV heads, SmolLM2's
    tokenizer; weights from transformers' initialisation (seeded) with ``initializer_range``
    0.2 so that next-token distributions are peaked (argmax gaps far above float32 noise).
    ``vocab_size`` below the tokenizer's keeps only the first ids (sampling tests: sampling
    49,152 logits per row dominates the step on the CPU)."""
    transformers = pytest.importorskip("transformers")
    from gguf import GGUFReader

    from local_engine.loader import default_model_path
    from local_engine.loader.gguf_loader import read_gguf_tokenizer
    from local_engine.tokenizer import Tokenizer

    spec = read_gguf_tokenizer(GGUFReader(str(default_model_path())))
    tok = Tokenizer(spec)
    cfg = dict(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=hidden // 4,
        vocab_size=vocab_size or tok.vocab_size,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        initializer_range=0.2,
        torch_dtype="float32",
    )
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).eval()
    model.save_pretrained(str(folder), safe_serialization=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    (folder / "tokenizer.json").write_text(tok._tok.to_str())
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": tok.bos_token, "eos_token": tok.eos_token})
    )
    return folder


@pytest.fixture(scope="session")
def tiny_target_dir(tmp_path_factory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("tiny_target"), num_layers=4, seed=11)


@pytest.fixture(scope="session")
def tiny_draft_dir(tmp_path_factory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("tiny_draft"), num_layers=1, seed=12)


@pytest.fixture(scope="session")
def small_vocab_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A 4-layer target with a 512-id vocabulary (SmolLM2's first ids) and a draft made of the
    same weights plus Gaussian noise (std 0.005 against weights of std 0.2), so that the draft's
    q is close to the target's p but not equal (acceptance strictly between 0 and 1)."""
    import shutil

    transformers = pytest.importorskip("transformers")
    t = write_tiny_llama(tmp_path_factory.mktemp("sv_target"), 4, seed=21, vocab_size=512)
    d = tmp_path_factory.mktemp("sv_draft")
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(t / f, d / f)
    model = transformers.LlamaForCausalLM.from_pretrained(str(t)).eval()
    g = torch.Generator().manual_seed(22)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.add_(torch.randn(p.shape, generator=g) * 0.005)
    model.save_pretrained(str(d), safe_serialization=True)
    (d / "config.json").write_text((t / "config.json").read_text())
    return t, d
