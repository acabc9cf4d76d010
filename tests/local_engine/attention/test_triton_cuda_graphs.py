"""The decode CUDA-graph runner's buffers and padding, checked on the CPU.

CUDA graphs need a GPU, so here :class:`~local_engine.cuda_graphs.DecodeGraphRunner` is
subclassed to *replay* by re-running the forward pass over its fixed buffers (exactly what a
captured graph does: same buffers, same padded batch size). Two engines with the same random
weights run the same requests, one eager and one through the runner; every step's logits must
agree (fp32, 1e-4), greedy tokens must be equal, and the KV pools must end up identical (padding
rows write nothing). The batch shrinks as requests of different lengths finish, so several
padded sizes are replayed, and prefill steps in between go eager. (On the GPU, bench/engine_gpu.py
checks the real captured graphs against transformers.)
"""

from __future__ import annotations

import json

import pytest
import torch

from local_engine.cuda_graphs import DecodeGraphRunner, graph_batch_sizes


class ReplayByRerun(DecodeGraphRunner):
    """A stand-in for capture: the 'graph' re-runs the forward pass on the fixed buffers."""

    replays: list

    def _capture_one(self, b, pool):
        out = self._forward(b).clone()
        self.replays = getattr(self, "replays", [])

        def replay():
            self.replays.append(b)
            out.copy_(self._forward(b))

        return replay, out


def tiny_model_folder(tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    (tmp_path / "tokenizer.json").write_text(tok.to_str())
    cfg = dict(
        model_type="llama",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=len(vocab),
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


def run_engine(folder, seed, use_graphs, kv_cache_dtype="auto"):
    from local_engine import SamplingParams
    from local_engine.engine import LLMEngine

    eng = LLMEngine.from_config(
        folder,
        device="cpu",
        seed=seed,
        max_num_seqs=8,
        num_kv_blocks=40,
        max_model_len=256,
        block_size=16,
        kv_cache_dtype=kv_cache_dtype,
    )
    runner = eng.runner
    if use_graphs:
        runner.graphs = ReplayByRerun(
            runner.model,
            runner.kv_caches,
            max_batch=8,
            max_blocks_per_seq=256 // 16,
            batch_sizes=[1, 2, 4, 8],
            require_cuda=False,
        ).capture()
    logits_log = []
    orig = runner.forward_logits

    def logged(batch):
        out = orig(batch)
        logits_log.append((batch.is_decode, out.clone()))
        return out

    runner.forward_logits = logged
    g = torch.Generator().manual_seed(seed)
    lengths = [3, 17, 33, 5, 40]
    max_tokens = [9, 4, 12, 7, 2]
    for i, (n, m) in enumerate(zip(lengths, max_tokens)):
        ids = torch.randint(0, 256, (n,), generator=g).tolist()
        eng.add_request(
            f"r{i}", ids, SamplingParams(temperature=0.0, max_tokens=m, ignore_eos=True)
        )
    outs = {}
    steps = 0
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished:
                outs[o.request_id] = o.outputs[0].token_ids
        steps += 1
        if steps == 3:  # a late arrival: its prefill step runs eagerly between replays
            eng.add_request(
                "late",
                torch.randint(0, 256, (21,), generator=g).tolist(),
                SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True),
            )
    return eng, outs, logits_log


def test_graph_batch_sizes():
    assert graph_batch_sizes(64) == [1, 2, 4, 8, 16, 24, 32, 48, 64]
    assert graph_batch_sizes(100)[-2:] == [96, 100]
    assert graph_batch_sizes(1) == [1]
    with pytest.raises(ValueError):
        graph_batch_sizes(0)


def test_requires_cuda_by_default():
    kv = [(torch.zeros(2, 16, 1, 8), torch.zeros(2, 16, 1, 8))]
    with pytest.raises(ValueError, match="CUDA"):
        DecodeGraphRunner(None, kv, max_batch=4, max_blocks_per_seq=4)


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "int8", "fp8"])
def test_replayed_decode_matches_eager(tmp_path, kv_cache_dtype):
    folder = tiny_model_folder(tmp_path)
    seed = int.from_bytes(__import__("os").urandom(2), "little")
    eager, outs_e, log_e = run_engine(folder, seed, False, kv_cache_dtype)
    graph, outs_g, log_g = run_engine(folder, seed, True, kv_cache_dtype)
    assert outs_e == outs_g, f"seed={seed}"
    assert len(log_e) == len(log_g)
    for (dec_e, a), (dec_g, b) in zip(log_e, log_g):
        assert dec_e == dec_g
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4, msg=f"seed={seed}")
    replays = graph.runner.graphs.replays
    assert replays, "no decode step went through the graph runner"
    assert {8, 4, 2, 1} & set(replays) and len(set(replays)) >= 2, replays  # padded sizes used
    assert any(not d for d, _ in log_g[1:]), "expected a prefill step between decode steps"
    # padding rows (slot -1) wrote nothing: both pools hold the same K/V
    if kv_cache_dtype == "auto":
        torch.testing.assert_close(
            graph.runner.kv_cache, eager.runner.kv_cache, rtol=1e-5, atol=1e-5
        )
        return
    from local_engine.kv_cache.quant import dequantize

    # quantized: scales agree to float32 rounding and the values to one quantization level
    # (the padded batch's matmuls may round the last bit of a K/V differently)
    for layer_g, layer_e in zip(graph.runner.kv_caches, eager.runner.kv_caches):
        for cg, ce, sg, se in (
            (layer_g[0], layer_e[0], layer_g[2], layer_e[2]),
            (layer_g[1], layer_e[1], layer_g[3], layer_e[3]),
        ):
            torch.testing.assert_close(sg, se, rtol=1e-4, atol=1e-7)
            a = dequantize(cg, sg, torch.float64)
            b = dequantize(ce, se, torch.float64)
            step = se.double().unsqueeze(-1) * (1.0 if kv_cache_dtype == "int8" else 64.0)
            assert ((a - b).abs() <= step * 1.01 + 1e-7).all()
            assert (sg > 0).any(), "the quantized pool was written"
