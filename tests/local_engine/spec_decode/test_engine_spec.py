"""Speculative decoding inside the engine (the real SmolLM2): greedy output token-identical to
the engine without speculation for 16 prompts (long lookup matches and none) at K = 1, 3, 8
with requests of different K and without speculation batched together; logprobs of accepted
tokens equal; stop strings and max_tokens inside an accepted run; KV rollback (pool invariants,
only accepted tokens hashed)."""

from __future__ import annotations

import pytest

from local_engine.sampling import SamplingParams

from ..conftest import run_to_completion

SOURCE = '''def merge_intervals(intervals):
    """Merge overlapping [start, end] intervals; returns a sorted list."""
    if not intervals:
        return []
    intervals = sorted(intervals, key=lambda iv: iv[0])
    merged = [list(intervals[0])]
    for start, end in intervals[1:]:
        last = merged[-1]
        if start <= last[1]:
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return merged
'''
DOC = (
    "The prefix cache stores the key and value tensors of every full block of sixteen tokens "
    "under a hash of the block's tokens and of all tokens before it. A later request whose "
    "prompt starts with the same blocks reuses them instead of computing them again."
)


def prompts(tok):
    chat = [
        f"Copy this function exactly, renaming merge_intervals to merge:\n{SOURCE}",
        f"Repeat the following text word for word.\n\n{DOC}",
        f"Quote the first sentence of this document.\n\n{DOC}",
        f"Here is code:\n{SOURCE}\nWrite it again with a docstring in French.",
        "List the numbers from 1 to 30 separated by commas.",
        "Say 'hello world' five times.",
        f"{DOC}\n\nWhat is stored under the hash?",
        f"{SOURCE}\n\nWhat does this function return for an empty list?",
        "Tell me a short story about a lighthouse keeper.",
        "What is the capital of France?",
        "Write a haiku about autumn leaves.",
        "Explain photosynthesis in one paragraph.",
        "Give three tips for learning to play the guitar.",
        "Why is the sky blue?",
        "Translate 'good morning' into Spanish and German.",
        "Describe your ideal weekend.",
    ]
    return [
        tok.encode(
            tok.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True)
        )
        for c in chat
    ]


def generate(engine, ids_list, params_list):
    for i, (ids, p) in enumerate(zip(ids_list, params_list)):
        engine.add_request(f"r{i}", ids, p)
    final, _ = run_to_completion(engine)
    return [final[f"r{i}"] for i in range(len(ids_list))]


NEAR_TIE = 1e-3  # nats between the top two log-probabilities (float32 batch-shape noise ~1e-5)
LOGPROB_TOL = 1e-4


def assert_same_greedy(base, spec):
    """Token-identical, except that a divergence at a detected near-tie (the baseline's top two
    log-probabilities within NEAR_TIE) ends the comparison of that request."""
    for b, s in zip(base, spec):
        bt, st = b.outputs[0].token_ids, s.outputs[0].token_ids
        for j, (x, y) in enumerate(zip(bt, st)):
            if x != y:
                top = sorted(b.outputs[0].logprobs[j].values(), reverse=True)
                assert len(top) >= 2 and top[0] - top[1] < NEAR_TIE, (b.request_id, j, x, y)
                break
            blp, slp = b.outputs[0].logprobs[j], s.outputs[0].logprobs[j]
            assert (
                blp.keys() == slp.keys()
                or abs(sorted(blp.values())[-2] - sorted(blp.values())[-1]) < NEAR_TIE
            )
            assert slp[y] == pytest.approx(blp[x], abs=LOGPROB_TOL)
        else:
            assert bt == st, b.request_id
            assert b.outputs[0].finish_reason == s.outputs[0].finish_reason


@pytest.fixture(scope="module")
def baseline(engine_factory):
    eng = engine_factory(num_kv_blocks=512)
    ids = prompts(eng.tokenizer)
    params = [SamplingParams(temperature=0, max_tokens=40, logprobs=2) for _ in ids]
    return ids, generate(eng, ids, params)


@pytest.mark.parametrize(
    "k", [pytest.param(1, marks=pytest.mark.slow), 3, pytest.param(8, marks=pytest.mark.slow)]
)
def test_greedy_identical_with_and_without_speculation(k, engine_factory, baseline):
    ids, base = baseline
    eng = engine_factory(
        num_kv_blocks=512,
        debug_checks=True,
        speculative={"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2},
    )
    # in one batch: the engine's K, smaller K, and no speculation (0)
    per_request = [None, 0, None, max(1, k // 2)] * 4
    params = [
        SamplingParams(temperature=0, max_tokens=40, logprobs=2, num_speculative_tokens=r)
        for r in per_request
    ]
    spec = generate(eng, ids, params)
    assert_same_greedy(base, spec)
    drafted = [o.metrics.num_draft_tokens for o in spec]
    accepted = [o.metrics.num_accepted_tokens for o in spec]
    assert all(d == 0 for d, r in zip(drafted, per_request) if r == 0)
    assert sum(accepted) > 0 and max(a / max(d, 1) for a, d in zip(accepted, drafted)) > 0.5
    assert any(d == 0 for d, r in zip(drafted, per_request) if r != 0)  # no lookup match
    m = eng.metrics
    assert m.spec_num_draft_tokens == sum(drafted)
    assert m.spec_num_accepted_tokens == sum(accepted)
    for o in spec:
        if o.metrics.num_verify_steps:
            assert o.metrics.mean_accepted_length == pytest.approx(
                1 + o.metrics.num_accepted_tokens / o.metrics.num_verify_steps
            )
            assert o.metrics.num_accepted_tokens <= k * o.metrics.num_verify_steps


class OracleList:
    """Drafts the known greedy continuation of one prompt (every draft is accepted)."""

    def __init__(self, prompt, continuation):
        self.prompt, self.continuation = list(prompt), list(continuation)

    def propose(self, token_ids, k):
        n = len(self.prompt)
        if list(token_ids[:n]) != self.prompt:
            return []
        done = len(token_ids) - n
        return self.continuation[done : done + k]


class WrongDrafts:
    """Drafts ``k`` copies of a token greedy decoding never picks after this prompt."""

    def __init__(self, token):
        self.token = token

    def propose(self, token_ids, k):
        return [self.token] * k


def test_stop_string_and_max_tokens_inside_an_accepted_run(engine_factory, baseline):
    ids, base = baseline
    eng = engine_factory(
        num_kv_blocks=512,
        debug_checks=True,
        speculative={"method": "ngram", "num_speculative_tokens": 8},
    )
    i = 4  # "List the numbers from 1 to 30": a long output to cut
    full = base[i].outputs[0]
    eng.spec.ngram = OracleList(ids[i], full.token_ids)
    eng.spec.adaptive = False  # draft from the first decode on (no cost-model measurement step)
    # max_tokens inside an 8-token accepted run
    (o,) = generate(eng, [ids[i]], [SamplingParams(temperature=0, max_tokens=5)])
    assert o.outputs[0].token_ids == full.token_ids[:5]
    assert o.outputs[0].finish_reason == "length"
    assert o.metrics.num_draft_tokens == 3  # token 1 from the prefill, then 3 drafts + bonus
    assert o.metrics.num_accepted_tokens == 3
    # a stop string that ends inside an accepted run
    text = full.text
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    cut = text.index(stop)
    (o,) = generate(eng, [ids[i]], [SamplingParams(temperature=0, max_tokens=40, stop=stop)])
    assert o.outputs[0].text == text[:cut]
    assert o.outputs[0].finish_reason == "stop" and o.outputs[0].stop_reason == stop
    assert o.metrics.num_accepted_tokens > 0


def test_rejected_drafts_are_rolled_back(engine_factory):
    """30-token prompt, block size 16: the first decode drafts 4 wrong tokens at positions
    31..34 (completing block 1 with a draft); all are rejected. The block holding only drafts is
    given back, block 1 is not hashed until its last token is accepted, the pool's invariants
    hold after every step, and afterwards a prompt sharing the accepted tokens hits 2 blocks
    while one sharing the rejected draft hits only 1."""
    plain = engine_factory(num_kv_blocks=64)
    prompt = plain.tokenizer.encode(
        "The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat by"
    )
    prompt = (prompt * 3)[:30]
    (ref,) = generate(plain, [prompt], [SamplingParams(temperature=0, max_tokens=6)])
    greedy = ref.outputs[0].token_ids
    wrong = next(t for t in range(1000, 2000) if t not in greedy)

    eng = engine_factory(
        num_kv_blocks=64,
        debug_checks=True,
        speculative={"method": "ngram", "num_speculative_tokens": 4},
    )
    eng.spec.ngram = WrongDrafts(wrong)
    eng.spec.adaptive = False  # draft from the first decode on (no cost-model measurement step)
    kv = eng.kv_cache_manager
    eng.add_request("a", prompt, SamplingParams(temperature=0, max_tokens=6))
    eng.step()  # prefill, samples token 30
    free_before = kv.num_free_blocks
    eng.step()  # drafts at 31..34, all rejected; emits token 31
    blocks = kv.req_blocks["a"]
    assert len(blocks) == 2  # the block holding only drafts 32..34 was given back
    assert kv.num_free_blocks == free_before
    assert blocks[0].block_hash is not None and blocks[1].block_hash is None
    kv.check_invariants()
    eng.step()  # token 31 computed: block 1 is full of accepted tokens now
    assert kv.req_blocks["a"][1].block_hash is not None
    final, _ = run_to_completion(eng)
    out = final["a"]
    assert out.outputs[0].token_ids == greedy
    assert out.metrics.num_draft_tokens > 0 and out.metrics.num_accepted_tokens == 0

    shared_accepted = prompt + greedy[:2] + [wrong] * 5
    shared_rejected = prompt + [greedy[0], wrong] + [wrong] * 5
    (b, c) = generate(
        eng, [shared_accepted, shared_rejected], [SamplingParams(temperature=0, max_tokens=1)] * 2
    )
    assert b.num_cached_tokens == 32
    assert c.num_cached_tokens == 16


@pytest.mark.slow
def test_greedy_identical_with_lookup_backoff_and_priced_drafts(
    engine_factory, baseline, monkeypatch
):
    """The 16 prompts with prompt lookup of 1..5 tokens, lookups backing off after failures
    (forced: every token counts as cheap) and a preloaded cost model (decode step 1 s at every
    batch size, 0.05 s an extra token) under which drafts are cut to what their match length
    pays for: still the tokens without speculation."""
    from local_engine.spec_decode import decoder

    monkeypatch.setattr(decoder, "LOOKUP_BACKOFF_TOKEN_SECONDS", 1e9)
    ids, base = baseline
    eng = engine_factory(
        num_kv_blocks=512,
        debug_checks=True,
        speculative={"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1},
    )
    eng.spec.observe = lambda shape, seconds: None  # keep the preloaded cost model
    for b in range(1, 17):
        eng.spec.cost.observe(b, 0, 1.0)
        eng.spec.cost.observe(b, 1, 1.05)
    params = [SamplingParams(temperature=0, max_tokens=40, logprobs=2) for _ in ids]
    spec = generate(eng, ids, params)
    assert_same_greedy(base, spec)
    assert sum(o.metrics.num_accepted_tokens for o in spec) > 0
    assert sum(eng.spec.match.tested) > 0  # the match-length estimates saw verifications
