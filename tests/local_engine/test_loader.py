"""Model loading: the Hugging Face safetensors folder path (checked against transformers loading
the same folder), model resolution and the errors for missing or bad models."""

from __future__ import annotations

import json

import pytest
import torch

from local_engine.errors import EngineError, ModelNotFoundError
from local_engine.loader import load_model, resolve_model_path
from local_engine.loader.gguf_loader import model_display_name, reverse_rotary_permute

from .conftest import all_position_logits


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory, gguf_path):
    """An HF checkpoint folder written from the GGUF file's dequantized weights."""
    from safetensors.torch import save_file

    from local_engine.tokenizer import Tokenizer

    loaded = load_model(str(gguf_path))
    cfg = loaded.config
    d = tmp_path_factory.mktemp("hf_folder")
    save_file({k: v.contiguous() for k, v in loaded.weights.items()}, str(d / "model.safetensors"))
    (d / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": cfg.hidden_size,
                "intermediate_size": cfg.intermediate_size,
                "num_hidden_layers": cfg.num_layers,
                "num_attention_heads": cfg.num_heads,
                "num_key_value_heads": cfg.num_kv_heads,
                "vocab_size": cfg.vocab_size,
                "rms_norm_eps": cfg.rms_norm_eps,
                "rope_theta": cfg.rope_theta,
                "max_position_embeddings": cfg.max_position_embeddings,
                "tie_word_embeddings": True,
                "hidden_act": "silu",
                "bos_token_id": 1,
                "eos_token_id": 2,
                "torch_dtype": "float32",
            }
        )
    )
    tok = Tokenizer(loaded.tokenizer)
    (d / "tokenizer.json").write_text(tok._tok.to_str())
    (d / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": loaded.tokenizer.chat_template,
                "eos_token": "<|im_end|>",
                "bos_token": "<|im_start|>",
                "pad_token": "<|im_end|>",
                "add_bos_token": False,
            }
        )
    )
    return d


@pytest.mark.slow  # writes a 540 MB checkpoint and loads it twice: ~30-60 s on 2 busy cores
def test_hf_folder_matches_transformers_and_the_gguf_engine(hf_folder, engine, engine_factory):
    transformers = pytest.importorskip("transformers")
    from local_engine.engine import LLMEngine

    eng = LLMEngine.from_model(str(hf_folder), num_kv_blocks=64)
    assert eng.model_name == hf_folder.name
    assert eng.model_config.rope_theta == 100000.0 and eng.model_config.num_kv_heads == 3
    tok = eng.tokenizer
    assert tok.eos_token_id == 2 and 2 in tok.stop_token_ids
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Name three rivers."}]))
    assert ids == engine.tokenizer.encode(
        engine.tokenizer.apply_chat_template([{"role": "user", "content": "Name three rivers."}])
    )
    ours = all_position_logits(eng, ids)
    assert torch.equal(ours, all_position_logits(engine, ids))  # same weights, same numbers
    ref_model = transformers.AutoModelForCausalLM.from_pretrained(
        str(hf_folder), dtype=torch.float32
    ).eval()
    with torch.no_grad():
        ref = ref_model(torch.tensor([ids])).logits[0]
    err = ((ours - ref).abs().max() / ref.abs().max()).item()
    assert err <= 1e-4, err


def test_reverse_permute_inverts_llama_cpp_permute():
    # llama.cpp convert_hf_to_gguf.py: w.reshape(n_head, 2, dim // n_head // 2, *rest)
    #                                     .swapaxes(1, 2).reshape(w.shape)
    n_head, head_dim, cols = 3, 8, 5
    w = (
        torch.arange(n_head * head_dim * cols, dtype=torch.float32)
        .reshape(n_head * head_dim, cols)
        .numpy()
    )
    permuted = w.reshape(n_head, 2, head_dim // 2, cols).swapaxes(1, 2).reshape(w.shape)
    assert (reverse_rotary_permute(permuted, n_head) == w).all()


def test_resolution_and_errors(tmp_path, gguf_path):
    assert resolve_model_path(None) == gguf_path
    assert resolve_model_path(str(gguf_path)) == gguf_path
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        resolve_model_path(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelNotFoundError, match="no .gguf file"):
        resolve_model_path(str(tmp_path))
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelNotFoundError, match="not a .gguf"):
        resolve_model_path(str(tmp_path / "weights.bin"))
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(EngineError, match="not a readable GGUF"):
        load_model(str(bad))
    assert isinstance(ModelNotFoundError("x"), FileNotFoundError)
    assert model_display_name(gguf_path) == "SmolLM2-135M-Instruct"


def test_unknown_engine_option_is_refused():
    from local_engine.engine import LLMEngine

    with pytest.raises(EngineError, match="unknown engine option"):
        LLMEngine.from_model(None, num_kv_blockz=3)
