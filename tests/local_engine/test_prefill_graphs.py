"""Prefill and mixed-step CUDA graphs (:class:`~local_engine.cuda_graphs.PrefillGraphRunner`),
checked on the CPU.

The bucket choice and the padding of the fixed buffers are plain Python and tensor copies, tested
against values worked out by hand. Capture itself needs a GPU, so the engine test replaces it
the way ``tests/local_engine/attention/test_triton_cuda_graphs.py`` does for decode: the
'graph' re-runs the forward pass over the runner's fixed, padded buffers (what a replay
computes). Two engines with the same random weights run the same requests, one eager and one
through the runner: a prefix-cache hit (a short chunk over a cached prefix), prefill chunks mixed
with decodes, a long prompt that goes eager. Every step's logits must agree (fp32, 1e-4),
greedy tokens must be equal and the KV pools identical (padding writes nothing). On the GPU,
``bench/prefix_hit_gpu.py`` checks the real graphs against eager steps.
"""

from __future__ import annotations

import pytest
import torch

from local_engine.attention.metadata import AttentionMetadata
from local_engine.cuda_graphs import (
    PrefillGraphRunner,
    choose_prefill_shape,
    prefill_graph_shapes,
)

from .attention.test_triton_cuda_graphs import tiny_model_folder


def test_prefill_graph_shapes():
    assert prefill_graph_shapes(32, 4) == [(16, 1), (16, 2), (16, 4), (32, 1), (32, 2), (32, 4)]
    # a limit between the default sizes is a bucket itself; sequences never reach the tokens
    assert prefill_graph_shapes(100, 64)[-1] == (100, 64)
    shapes = prefill_graph_shapes(512, 256)
    assert (16, 8) in shapes and (16, 16) not in shapes and (512, 256) in shapes
    assert len(shapes) == 4 + 5 + 6 + 7 + 8 + 9  # seqs below 16, 32, ..., 512 tokens
    assert prefill_graph_shapes(0, 64) == []
    with pytest.raises(ValueError):
        prefill_graph_shapes(32, 0)


def test_choose_prefill_shape():
    shapes = prefill_graph_shapes(32, 4)
    assert choose_prefill_shape(shapes, 20, 3) == (32, 4)
    assert choose_prefill_shape(shapes, 16, 4) == (16, 4)
    assert choose_prefill_shape(shapes, 3, 1) == (16, 1)
    assert choose_prefill_shape(shapes, 100, 1) is None  # too many tokens: eager
    assert choose_prefill_shape(shapes, 20, 5) is None  # too many sequences: eager
    # the 8B warm request of issue 13: 100 new tokens of one sequence
    assert choose_prefill_shape(prefill_graph_shapes(512, 64), 100, 1) == (128, 1)


def meta_of(slots, tables, cu, lens, lidx):
    return AttentionMetadata(
        slot_mapping=torch.tensor(slots, dtype=torch.long),
        block_tables=torch.tensor(tables, dtype=torch.int32),
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32),
        seq_lens=torch.tensor(lens, dtype=torch.int32),
        logits_indices=torch.tensor(lidx, dtype=torch.long),
    )


def test_run_pads_the_fixed_buffers():
    """A step of 5 + 2 tokens (sequence 0: 5 new over 11 cached, sequence 1: a decode-like
    chunk of 2) in bucket (16, 4), after a larger step left stale values in every buffer."""
    kv = [(torch.zeros(8, 4, 1, 8), torch.zeros(8, 4, 1, 8))]
    r = PrefillGraphRunner(
        None, kv, max_tokens=16, max_seqs=4, max_blocks_per_seq=6, require_cuda=False
    )
    assert r.shapes == [(16, 1), (16, 2), (16, 4)]
    calls = []
    r.graphs = {s: (lambda s=s: calls.append(s)) for s in r.shapes}
    for buf in (r.input_ids, r.positions, r.slot_mapping, r.logits_indices):
        buf.fill_(9)
    r.cu_seqlens_q.fill_(9)
    r.seq_lens.fill_(9)
    r.block_tables.fill_(9)
    meta = meta_of(
        slots=[11, 12, 13, 14, 15, 21, 22],
        tables=[[0, 1, 2, 3], [5, 0, 0, 0]],  # 4 wide (the batch's), the buffer is 6 wide
        cu=[0, 5, 7],
        lens=[16, 7],
        lidx=[4, 6],
    )
    ids = torch.arange(100, 107)
    pos = torch.tensor([11, 12, 13, 14, 15, 5, 6])
    shape = r.shape_for(7, meta)
    assert shape == (16, 2)
    shape = (16, 4)  # a wider bucket pads sequences too
    out = r.run(shape, ids, pos, meta)
    assert calls == [(16, 4)]
    assert out.shape == (2, 0)  # the two sampling rows (no model here: vocab 0)
    assert r.input_ids[:7].tolist() == list(range(100, 107))
    assert r.positions[:7].tolist() == [11, 12, 13, 14, 15, 5, 6]
    assert r.slot_mapping.tolist() == [11, 12, 13, 14, 15, 21, 22] + [-1] * 9
    assert r.cu_seqlens_q.tolist() == [0, 5, 7, 7, 7]
    assert r.seq_lens[:2].tolist() == [16, 7]
    assert r.logits_indices.tolist() == [4, 6, 0, 0]
    assert r.block_tables[:2].tolist() == [[0, 1, 2, 3, 9, 9], [5, 0, 0, 0, 9, 9]]
    # no bucket for a step too large, or a block table wider than the buffers
    assert r.shape_for(17, meta) is None
    wide = meta_of([1], [[0] * 7], [0, 1], [1], [0])
    assert r.shape_for(1, wide) is None


def test_requires_cuda_by_default():
    kv = [(torch.zeros(2, 16, 1, 8), torch.zeros(2, 16, 1, 8))]
    with pytest.raises(ValueError, match="CUDA"):
        PrefillGraphRunner(None, kv, max_tokens=16, max_seqs=2, max_blocks_per_seq=4)


class ReplayPrefillByRerun(PrefillGraphRunner):
    """A stand-in for capture: the 'graph' re-runs the forward pass on the fixed buffers."""

    def _capture_one(self, shape, pool):
        self._forward(*shape)
        self.replays = getattr(self, "replays", [])

        def replay():
            self.replays.append(shape)
            self._forward(*shape)

        return replay


def run_engine(folder, seed, use_graphs, device="cpu"):
    from local_engine import SamplingParams
    from local_engine.engine import LLMEngine

    eng = LLMEngine.from_config(
        folder,
        device=device,
        dtype="float32",
        seed=seed,
        max_num_seqs=4,
        num_kv_blocks=64,
        max_model_len=256,
        block_size=16,
        max_num_batched_tokens=64,
        # on CUDA the engine captures the real graphs itself (decode graphs in both runs)
        prefill_graph_max_tokens=32 if use_graphs else 0,
    )
    runner = eng.runner
    if use_graphs and device == "cpu":
        runner.prefill_graphs = ReplayPrefillByRerun(
            runner.model,
            runner.kv_caches,
            max_tokens=32,
            max_seqs=4,
            max_blocks_per_seq=256 // 16,
            require_cuda=False,
        ).capture()
    elif use_graphs:  # count the real graphs' replays
        pg = runner.prefill_graphs
        pg.replays = []

        def counted(key, replay):
            def f():
                pg.replays.append(key)
                replay()

            return f

        pg.graphs = {k: counted(k, f) for k, f in pg.graphs.items()}
    log = []
    orig = runner.forward_logits

    def logged(batch):
        out = orig(batch)
        log.append((batch.input_ids.shape[0], batch.meta.num_seqs, out.clone()))
        return out

    runner.forward_logits = logged
    g = torch.Generator().manual_seed(seed)
    params = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    prefix = torch.randint(0, 256, (48,), generator=g).tolist()  # 3 full blocks
    outs = {}

    def drain():
        while eng.has_unfinished_requests():
            for o in eng.step():
                if o.finished:
                    outs[o.request_id] = (o.outputs[0].token_ids, o.num_cached_tokens)

    eng.add_request("cold", prefix + [1, 2, 3], params)  # 51 tokens: an eager step
    drain()
    # a prefix hit (10 new tokens over 48 cached) next to two short prompts: mixed steps
    eng.add_request("hit", prefix + torch.randint(0, 256, (10,), generator=g).tolist(), params)
    eng.add_request("a", torch.randint(0, 256, (7,), generator=g).tolist(), params)
    eng.add_request("b", torch.randint(0, 256, (3,), generator=g).tolist(), params)
    eng.step()
    eng.add_request("late", torch.randint(0, 256, (5,), generator=g).tolist(), params)
    drain()
    return eng, outs, log


def test_replayed_prefill_matches_eager(tmp_path):
    folder = tiny_model_folder(tmp_path)
    seed = int.from_bytes(__import__("os").urandom(2), "little")
    eager, outs_e, log_e = run_engine(folder, seed, False)
    graph, outs_g, log_g = run_engine(folder, seed, True)
    assert outs_e == outs_g, f"seed={seed}"
    assert outs_g["hit"][1] == 48  # the prefix was a cache hit
    assert len(log_e) == len(log_g)
    for (t_e, n_e, a), (t_g, n_g, b) in zip(log_e, log_g):
        assert (t_e, n_e) == (t_g, n_g)
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4, msg=f"seed={seed}")
    replays = graph.runner.prefill_graphs.replays
    # the hit's step (10 + 7 + 3 tokens in 3 sequences) and mixed steps with decodes replayed;
    # the 51-token cold prompt did not (over the 32-token buckets)
    assert (32, 4) in replays, replays
    assert len(set(replays)) >= 2, replays
    assert all(t > 32 for t, _, _ in log_g[:1])
    # padding wrote nothing: both pools hold the same K/V
    torch.testing.assert_close(graph.runner.kv_cache, eager.runner.kv_cache, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (real capture)")
def test_captured_prefill_graphs_match_eager_on_cuda(tmp_path):
    """The real captured graphs (Triton attention, float32): the same tokens, logits within
    1e-3 (the graphs' block tables are max_model_len wide, which may change the split-K
    segment count and so the summation order), and the same KV pool."""
    folder = tiny_model_folder(tmp_path)
    eager, outs_e, log_e = run_engine(folder, 7, False, "cuda")
    graph, outs_g, log_g = run_engine(folder, 7, True, "cuda")
    pg = graph.runner.prefill_graphs
    assert pg is not None and eager.runner.prefill_graphs is None
    assert pg.shapes == prefill_graph_shapes(32, 4)
    assert outs_e == outs_g
    assert outs_g["hit"][1] == 48
    assert (32, 4) in pg.replays and len(set(pg.replays)) >= 2, pg.replays
    for (t_e, n_e, a), (t_g, n_g, b) in zip(log_e, log_g):
        assert (t_e, n_e) == (t_g, n_g)
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(graph.runner.kv_cache, eager.runner.kv_cache, rtol=1e-4, atol=1e-4)
