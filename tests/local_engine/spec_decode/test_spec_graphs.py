"""Verification steps replayed through a CUDA-graph runner of ``query_len = K + 1`` (checked on
the CPU by re-running the forward over the runner's fixed, padded buffers, as
``tests/local_engine/attention/test_triton_cuda_graphs.py`` does for decode): the same tokens
and logits as eager verification, the same tokens as no speculation, and padding rows write
no K/V."""

from __future__ import annotations

import torch

from local_engine.sampling import SamplingParams

from ..attention.test_triton_cuda_graphs import ReplayByRerun, tiny_model_folder

K = 3


class RepeatLast:
    """Always ``k`` drafts (so every decode step has the uniform K + 1 shape): the last token."""

    def propose(self, token_ids, k):
        return [token_ids[-1]] * k


def run(folder, graphs: bool, spec: bool):
    from local_engine.engine import LLMEngine

    eng = LLMEngine.from_config(
        folder,
        device="cpu",
        seed=5,
        max_num_seqs=8,
        num_kv_blocks=48,
        max_model_len=256,
        speculative={"method": "ngram", "num_speculative_tokens": K} if spec else None,
    )
    runner = eng.runner
    if spec:
        eng.spec.ngram = RepeatLast()
        eng.spec.adaptive = False  # draft every step (no cost-model measurement steps)
        eng.spec.pad = True  # the same padded shapes with and without the graph runner
    if graphs:
        runner.spec_graphs = ReplayByRerun(
            runner.model,
            runner.kv_caches,
            max_batch=8,
            max_blocks_per_seq=16,
            batch_sizes=[1, 2, 4, 8],
            require_cuda=False,
            query_len=K + 1,
        ).capture()
    log = []
    orig = runner.forward_logits

    def logged(batch):
        out = orig(batch)
        log.append(out.clone())
        return out

    runner.forward_logits = logged
    g = torch.Generator().manual_seed(1)
    for i, (n, m) in enumerate(zip([3, 17, 33, 5, 40], [30, 24, 40, 28, 36])):
        ids = torch.randint(0, 256, (n,), generator=g).tolist()
        eng.add_request(f"r{i}", ids, SamplingParams(temperature=0, max_tokens=m, ignore_eos=True))
    outs = {}
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished:
                outs[o.request_id] = o.outputs[0].token_ids
    return eng, outs, log


def test_graph_verification_matches_eager_and_no_speculation(tmp_path, monkeypatch):
    from local_engine.spec_decode import decoder

    monkeypatch.setattr(decoder, "MAX_BACKOFF_STEPS", 0)  # draft every step: uniform shapes
    folder = tiny_model_folder(tmp_path)
    eager, outs_e, log_e = run(folder, graphs=False, spec=True)
    graph, outs_g, log_g = run(folder, graphs=True, spec=True)
    _, outs_plain, _ = run(folder, graphs=False, spec=False)
    assert outs_g == outs_e == outs_plain
    assert len(log_e) == len(log_g)
    for a, b in zip(log_e, log_g):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
    replays = graph.runner.spec_graphs.replays
    assert len(set(replays)) >= 2, replays  # several padded batch sizes replayed
    assert graph.metrics.spec_num_draft_tokens > 0
    # padding rows wrote nothing: both pools hold the same K/V
    torch.testing.assert_close(graph.runner.kv_cache, eager.runner.kv_cache, rtol=1e-5, atol=1e-5)


class WrongDrafts:
    def propose(self, token_ids, k):
        return [(int(token_ids[-1]) + 1) % 256] * k


def test_backoff_after_rejected_drafts(tmp_path):
    """Drafts that are always rejected: drafting waits 1, 2, 4, 8, 16, 32, 32, ... decode
    steps after each fully rejected step (MAX_BACKOFF_STEPS = 32; the cost model off)."""
    from local_engine.engine import LLMEngine

    eng = LLMEngine.from_config(
        tiny_model_folder(tmp_path),
        device="cpu",
        num_kv_blocks=32,
        speculative={"method": "ngram", "num_speculative_tokens": 2},
    )
    eng.spec.ngram = WrongDrafts()
    eng.spec.adaptive = False
    eng.add_request("a", [1, 2, 3], SamplingParams(temperature=0, max_tokens=80, ignore_eos=True))
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished:
                out = o
    # by hand: 79 decode steps after the prefill; drafting allowed while 2 drafts + the bonus
    # fit (k = min(2, 80 - generated - 1) > 0: the first 78 decode steps)
    wait, backoff, verified = 0, 0, 0
    for generated in range(1, 80):
        if min(2, 80 - generated - 1) <= 0:
            continue
        if wait:
            wait -= 1
            continue
        verified += 1
        backoff = min(max(1, 2 * backoff), 32)
        wait = backoff
    assert out.metrics.num_verify_steps == verified == 7  # steps 1, 3, 6, 11, 20, 37, 70
    assert out.metrics.num_accepted_tokens == 0
    assert len(out.outputs[0].token_ids) == 80
