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

from local_engine.cuda_graphs import (
    PrefillGraphRunner,
    choose_prefill_shape,
    prefill_graph_shapes,
)
from local_engine.host_layout import HostLayout
from local_engine.sampling import SamplingParams

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


def test_bucket_layout_by_hand():
    """Bucket (16 tokens, 4 sequences), block tables 6 wide: int64 parts of 16, 16, 16 and 4
    entries, then the int32 part (tables 4 x 6 = 24 entries, cu_seqlens_q 5 from entry 24,
    seq_lens 4 from entry 32 (24 + 5 rounded up to 4), 36 int32 = 18 int64 entries)."""
    lay = HostLayout.plan(16, 4, 6, 4)
    assert (lay.input_ids, lay.positions, lay.slot_mapping, lay.logits_indices) == (0, 16, 32, 48)
    assert (lay.int32, lay.block_tables, lay.cu_seqlens_q, lay.seq_lens) == (52, 0, 24, 32)
    assert (lay.int32_len, lay.total) == (18, 70)
    buf = torch.arange(70)
    ids, pos, slots, lidx, tables, cu, lens = lay.tensors(buf, 7, 2, 2)
    assert ids.tolist() == list(range(7)) and slots.tolist() == list(range(32, 39))
    assert tables.shape == (2, 6) and cu.shape == (3,) and lens.shape == (2,)
    with pytest.raises(ValueError):
        lay.tensors(buf, 17, 2, 2)


def test_prepare_lays_a_step_out_padded_in_its_bucket():
    """A step of 5 + 2 tokens (sequence 0: 5 new over 11 cached, sequence 1: 2 new over 5)
    in bucket (16, 4) with block tables 32 wide, after a step that left other values in the
    graph's input buffer; the values worked out by hand."""
    from local_engine.scheduler import ScheduledSequence, SchedulerOutput
    from local_engine.sequence import Sequence

    from .test_runner_prepare import make_runner

    runner = make_runner()  # block size 16, 512-token rotary table
    pg = PrefillGraphRunner(
        runner.model,
        runner.kv_caches,
        max_tokens=16,
        max_seqs=4,
        max_blocks_per_seq=32,
        shapes=[(16, 4)],
        require_cuda=False,
    )
    pg.graphs = {(16, 4): lambda: None}
    runner.prefill_graphs = pg
    pg.inputs.fill_(9)
    params = SamplingParams()
    s0 = Sequence("a", "a", 0, list(range(100, 116)), params)
    s1 = Sequence("b", "b", 0, list(range(200, 207)), params)
    sched = SchedulerOutput([ScheduledSequence(s0, 11, 5), ScheduledSequence(s1, 5, 2)])
    batch = runner.prepare(sched, [[3], [5]])
    assert batch.graph_shape == (16, 4)
    lay = pg.layouts[(16, 4)]
    ids, pos, slots, lidx, tables, cu, lens = lay.tensors(pg.inputs)
    assert ids.tolist() == [111, 112, 113, 114, 115, 205, 206] + [0] * 9
    assert pos.tolist() == [11, 12, 13, 14, 15, 5, 6] + [0] * 9
    # slot = block * 16 + offset; padding tokens write nowhere
    assert slots.tolist() == [59, 60, 61, 62, 63, 85, 86] + [-1] * 9
    assert cu.tolist() == [0, 5, 7, 7, 7]
    assert lens.tolist() == [16, 7, 0, 0]
    assert lidx.tolist() == [4, 6, 0, 0]
    assert tables.tolist() == [[3] + [0] * 31, [5] + [0] * 31] + [[0] * 32] * 2
    # the batch's tensors are views of the same buffer, cut to the real step
    assert batch.input_ids.data_ptr() == ids.data_ptr() and batch.input_ids.shape == (7,)
    assert batch.meta.block_tables.shape == (2, 32)
    assert batch.meta.logits_indices.tolist() == [4, 6]
    assert batch.sample_rows == [0, 1]
    # steps that do not fit (or no graphs) keep the plain layout
    big = SchedulerOutput([ScheduledSequence(s0, 0, 16), ScheduledSequence(s1, 0, 7)])
    assert runner.prepare(big, [[3], [5]]).graph_shape is None
    runner.prefill_graphs = None
    assert runner.prepare(sched, [[3], [5]]).graph_shape is None


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


@pytest.mark.parametrize("budget", [64, 40])
def test_prepare_in_buckets_matches_the_per_token_definition(budget):
    """The random workloads of test_runner_prepare (prefix hits, chunked prefill, decodes)
    with prefill graphs attached: every step a bucket takes has the definition's values in
    its real part (block tables widened with 0) and the padding in the rest."""
    from .test_runner_prepare import expected, make_runner, schedules

    runner = make_runner()
    pg = PrefillGraphRunner(
        runner.model,
        runner.kv_caches,
        max_tokens=64,
        max_seqs=8,
        max_blocks_per_seq=32,
        require_cuda=False,
    )
    pg.graphs = {s: (lambda: None) for s in pg.shapes}
    runner.prefill_graphs = pg
    taken = set()
    for out, lists, _array in schedules(budget, True, seed=budget + 1):
        exp = expected(out, lists)
        batch = runner.prepare(out, lists)
        decode = all(s.num_new_tokens == 1 for s in out.scheduled)
        t, n = len(exp["ids"]), len(out.scheduled)
        fits = choose_prefill_shape(pg.shapes, t, n)
        assert batch.graph_shape == (None if decode else fits)
        if batch.graph_shape is None:
            continue
        taken.add(batch.graph_shape)
        big_t, big_s = batch.graph_shape
        ids, pos, slots, lidx, tables, cu, lens = pg.layouts[batch.graph_shape].tensors(pg.inputs)
        n_lp = len(exp["lidx"])
        assert ids.tolist() == exp["ids"] + [0] * (big_t - t)
        assert pos.tolist() == exp["pos"] + [0] * (big_t - t)
        assert slots.tolist() == exp["slots"] + [-1] * (big_t - t)
        assert cu.tolist() == exp["cu"] + [t] * (big_s - n)
        assert lens.tolist() == exp["lens"] + [0] * (big_s - n)
        assert lidx.tolist() == exp["lidx"] + [0] * (big_s - n_lp)
        wide = [row + [0] * (32 - len(row)) for row in exp["bt"]]
        assert tables.tolist() == wide + [[0] * 32] * (big_s - n)
        assert batch.meta.cu_seqlens_q.tolist() == exp["cu"]
        assert batch.sample_rows == exp["rows"]
    assert len(taken) >= 2, taken


def test_prefill_graphs_with_speculative_decoding(tmp_path, monkeypatch):
    """With n-gram speculation (drafts every step: verification steps carry several logits
    rows a sequence, so they stay eager), prefill and mixed steps without drafts replay the
    graphs: the same tokens as the engine without graphs, and as no speculation at all."""
    from local_engine.engine import LLMEngine
    from local_engine.spec_decode import decoder

    from .spec_decode.test_spec_graphs import RepeatLast

    monkeypatch.setattr(decoder, "MAX_BACKOFF_STEPS", 0)
    folder = tiny_model_folder(tmp_path)

    def run(graphs: bool, spec: bool):
        eng = LLMEngine.from_config(
            folder,
            device="cpu",
            seed=3,
            max_num_seqs=4,
            num_kv_blocks=64,
            max_model_len=256,
            speculative={"method": "ngram", "num_speculative_tokens": 3} if spec else None,
        )
        if spec:
            eng.spec.ngram = RepeatLast()
        pg = None
        if graphs:
            r = eng.runner
            pg = r.prefill_graphs = ReplayPrefillByRerun(
                r.model, r.kv_caches, max_tokens=32, max_seqs=4, max_blocks_per_seq=16,
                require_cuda=False,
            ).capture()  # fmt: skip
        g = torch.Generator().manual_seed(2)
        prefix = torch.randint(0, 256, (32,), generator=g).tolist()
        p = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
        eng.add_request("first", prefix + [7], p)
        outs = {}
        while eng.has_unfinished_requests():
            eng.step()
        for i in range(3):
            eng.add_request(
                f"r{i}", prefix + torch.randint(0, 256, (3 + 5 * i,), generator=g).tolist(), p
            )
            eng.step()
        while eng.has_unfinished_requests():
            for o in eng.step():
                if o.finished:
                    outs[o.request_id] = o.outputs[0].token_ids
        return eng, outs, pg

    eng_g, outs_g, pg = run(True, True)
    _, outs_e, _ = run(False, True)
    _, outs_plain, _ = run(False, False)
    assert outs_g == outs_e == outs_plain
    assert pg.replays, "no prefill step replayed"
    assert eng_g.metrics.spec_num_draft_tokens > 0
