"""Padding verification steps to K drafts a sequence (so that each replays one CUDA-graph
shape) and the cost-model policy, in the engine on the CPU (tiny random Llama): greedy output
equal to the engine without speculation, padding never verified, accepted or counted, and
drafting only where the (here preloaded) cost model says it pays, else at the probes."""

from __future__ import annotations

import torch

from local_engine.sampling import SamplingParams

from ..attention.test_triton_cuda_graphs import tiny_model_folder

K = 3
LENGTHS = [(3, 20), (17, 14), (33, 25), (5, 18)]


class FirstOnly:
    """One draft (fewer than K): the token the greedy run emitted there when it is known,
    else the last token; sequences whose prompt starts with an even id draft nothing."""

    def __init__(self, truth):
        self.truth = truth

    def propose(self, token_ids, k):
        ids = [int(t) for t in token_ids]
        if ids[0] % 2 == 0:
            return []
        for prompt, out in self.truth:
            if ids[: len(prompt)] == prompt:
                done = len(ids) - len(prompt)
                return out[done : done + 1] or [ids[-1]]
        return [ids[-1]]


class WrongDrafts:
    def propose(self, token_ids, k):
        return [(int(token_ids[-1]) + 1) % 256] * k


def engine(folder, spec=True):
    from local_engine.engine import LLMEngine

    return LLMEngine.from_config(
        folder,
        device="cpu",
        seed=5,
        max_num_seqs=8,
        num_kv_blocks=64,
        max_model_len=256,
        speculative={"method": "ngram", "num_speculative_tokens": K} if spec else None,
    )


def prompts():
    g = torch.Generator().manual_seed(3)
    out = []
    for i, (n, _m) in enumerate(LENGTHS):
        ids = torch.randint(0, 256, (n,), generator=g).tolist()
        ids[0] = 2 * (ids[0] // 2) + (i % 2)  # odd first id: drafts; even: never
        out.append(ids)
    return out


def generate(eng, ps):
    for i, (ids, (_n, m)) in enumerate(zip(ps, LENGTHS)):
        eng.add_request(f"r{i}", ids, SamplingParams(temperature=0, max_tokens=m, ignore_eos=True))
    outs = {}
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished:
                outs[o.request_id] = o
    return [outs[f"r{i}"] for i in range(len(ps))]


def test_padded_drafts_are_never_verified_or_counted(tmp_path):
    folder = tiny_model_folder(tmp_path)
    ps = prompts()
    plain = [o.outputs[0].token_ids for o in generate(engine(folder, spec=False), ps)]
    eng = engine(folder)
    eng.spec.ngram = FirstOnly(list(zip(ps, plain)))
    eng.spec.adaptive = False
    eng.spec.pad = True
    shapes = []
    orig = eng.runner.forward_logits

    def logged(batch):
        if batch.logits_rows is not None:
            shapes.append((batch.input_ids.shape[0], batch.meta.num_seqs, list(batch.logits_rows)))
        return orig(batch)

    eng.runner.forward_logits = logged
    outs = generate(eng, ps)
    assert [o.outputs[0].token_ids for o in outs] == plain
    # every verification step computed K + 1 tokens for every sequence (all decodes padded)
    assert shapes and all(t == (K + 1) * n and rows == [K + 1] * n for t, n, rows in shapes)
    for i, o in enumerate(outs):
        m = o.metrics
        if ps[i][0] % 2 == 0:  # drafted nothing: only padding, none of it counted
            assert m.num_draft_tokens == m.num_verify_steps == m.num_accepted_tokens == 0
        else:  # one real draft a verification; the right token, so accepted
            assert m.num_draft_tokens == m.num_verify_steps > 0
            assert m.num_accepted_tokens == m.num_draft_tokens
    c = eng.spec.counters
    assert c.num_draft_tokens == sum(o.metrics.num_draft_tokens for o in outs)
    eng.kv_cache_manager.check_invariants()  # padding's K/V slots were given back


def test_policy_drafts_only_at_probes_when_drafts_do_not_pay(tmp_path):
    """A preloaded cost model (decode step 1 s, each extra token 10 s: no draft pays at any
    acceptance) and drafts that are always rejected: a sequence drafts once to measure its
    acceptance, then only at its probes, which come after waits of 1, 2, 4, ... steps (each
    refusal and each rejection doubles the wait); worked out by hand below."""
    eng = engine(tiny_model_folder(tmp_path))
    eng.spec.ngram = WrongDrafts()
    eng.spec.pad = False
    eng.spec.observe = lambda shape, seconds: None  # keep the preloaded model
    eng.spec.cost.observe(1, 0, 1.0)
    eng.spec.cost.observe(1, 1, 11.0)
    eng.add_request("a", [1, 2, 3], SamplingParams(temperature=0, max_tokens=60, ignore_eos=True))
    while eng.has_unfinished_requests():
        for o in eng.step():
            if o.finished:
                out = o
    # by hand: 59 decode steps; drafting possible while k = min(3, 60 - generated - 1) > 0
    # (the first drafts, with no evidence yet, are drafted like a probe)
    wait, backoff, probe, verified = 0, 0, True, []
    for generated in range(1, 60):
        if min(K, 60 - generated - 1) <= 0:
            continue
        if wait:
            wait -= 1
            continue
        backoff = min(max(1, 2 * backoff), 32)  # refused (not a probe) or rejected (a probe)
        wait = backoff
        if probe:
            verified.append(generated)
        probe = not probe
    # 1 first drafts (rejected: wait 1), 3 refused (wait 2), 6 probe (rejected: 4), 11 refused
    # (8), 20 probe (16), 37 refused (32), then waiting past the end
    assert verified == [1, 6, 20]
    assert out.metrics.num_verify_steps == len(verified)
    assert out.metrics.num_accepted_tokens == 0


def test_policy_drafts_every_step_when_drafts_are_free(tmp_path):
    """The same with extra tokens free (0 s): every decode step with room for a draft
    verifies (the drafts are the greedy tokens, all accepted), and the output is the greedy
    one."""
    folder = tiny_model_folder(tmp_path)
    ps = prompts()[:1]
    plain = [o.outputs[0].token_ids for o in generate(engine(folder, spec=False), ps)]
    eng = engine(folder)

    class Truth:
        def propose(self, token_ids, k):
            done = len(token_ids) - len(ps[0])
            return plain[0][done : done + k]

    eng.spec.ngram = Truth()
    eng.spec.pad = False
    eng.spec.observe = lambda shape, seconds: None
    eng.spec.cost.observe(1, 0, 1.0)
    eng.spec.cost.observe(1, 1, 1.0)
    (o,) = generate(eng, ps)
    assert o.outputs[0].token_ids == plain[0]
    # 20 tokens: 1 from the prefill, then k = min(K, 20 - generated - 1) drafts, all
    # accepted, + 1 a step: 1 -> 5 -> 9 -> 13 -> 17 (k = 3 each) -> 20 (k = 2)
    assert o.metrics.num_verify_steps == 5
    assert o.metrics.num_draft_tokens == o.metrics.num_accepted_tokens == 4 * K + 2
