"""Automatic prefix caching end to end on the real model."""

from __future__ import annotations

import pytest

from local_engine.sampling import SamplingParams

from .conftest import run_to_completion

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


def _prompt(engine, n_tokens, seed_text):
    ids = engine.tokenizer.encode((seed_text + " ") * 400)
    assert len(ids) >= n_tokens
    return ids[:n_tokens]


def _run_one(engine, rid, ids, params=GREEDY, salt=None):
    engine.add_request(rid, ids, params, cache_salt=salt)
    final, _ = run_to_completion(engine)
    return final[rid]


@pytest.mark.parametrize("shared", [0, 15, 16, 37, 64, 100])
def test_num_cached_tokens_is_shared_length_rounded_down(engine, shared):
    engine.kv_cache_manager.reset_prefix_cache()
    base = _prompt(engine, 140, f"The committee met on day {shared} to discuss budgets")
    first = list(base)
    second = list(base[:shared]) + [
        t + 1 for t in base[shared : shared + 40]
    ]  # differs from `shared` on
    assert first[:shared] == second[:shared] and (
        shared == len(first) or first[shared] != second[shared]
    )
    a = _run_one(engine, f"pc-a-{shared}", first)
    b = _run_one(engine, f"pc-b-{shared}", second)
    assert a.num_cached_tokens == 0
    assert b.num_cached_tokens == (shared // 16) * 16  # whole 16-token blocks only


def test_fully_cached_prompt_still_computes_one_token(engine):
    engine.kv_cache_manager.reset_prefix_cache()
    ids = _prompt(engine, 64, "Exactly four blocks of prompt")  # 64 = 4 full blocks
    a = _run_one(engine, "full-a", ids)
    b = _run_one(engine, "full-b", ids)
    assert a.num_cached_tokens == 0
    assert b.num_cached_tokens == 48  # the last block is recomputed: never a zero-length query
    assert a.token_ids == b.token_ids
    c_ids = ids[:50]
    c = _run_one(engine, "full-c", c_ids)
    assert c.num_cached_tokens == 48


def test_outputs_identical_with_and_without_prefix_caching(engine, engine_factory):
    plain = engine_factory(enable_prefix_caching=False)
    engine.kv_cache_manager.reset_prefix_cache()
    tok = engine.tokenizer
    system = {"role": "system", "content": "You are a concise assistant for a bike shop. " * 12}
    questions = [
        "Do you repair e-bikes?",
        "What are your opening hours?",
        "Can I rent a tandem?",
        "How much is a tune-up?",
    ]
    prompts = [
        tok.encode(tok.apply_chat_template([system, {"role": "user", "content": q}]))
        for q in questions
    ]
    params = SamplingParams(temperature=0.0, max_tokens=10)
    with_cache, without = [], []
    for i, ids in enumerate(prompts):  # one after another so later ones hit the cache
        with_cache.append(_run_one(engine, f"cache-on-{i}", ids, params))
        without.append(_run_one(plain, f"cache-off-{i}", ids, params))
    assert [o.num_cached_tokens for o in without] == [0, 0, 0, 0]
    shared = next(i for i, (x, y) in enumerate(zip(prompts[0], prompts[1])) if x != y)
    assert all(o.num_cached_tokens == shared // 16 * 16 for o in with_cache[1:])
    assert with_cache[1].num_cached_tokens > 0
    for a, b in zip(with_cache, without):
        assert a.token_ids == b.token_ids
        assert a.text == b.text
    assert engine.metrics.prefix_cache_hits >= 3 * (shared // 16 * 16)


def test_cache_salt_isolates_tenants(engine):
    engine.kv_cache_manager.reset_prefix_cache()
    ids = _prompt(engine, 80, "Tenant data that must not leak")
    assert _run_one(engine, "salt-a1", ids, salt="tenant-a").num_cached_tokens == 0
    assert _run_one(engine, "salt-b1", ids, salt="tenant-b").num_cached_tokens == 0
    assert _run_one(engine, "salt-none", ids).num_cached_tokens == 0
    assert _run_one(engine, "salt-a2", ids, salt="tenant-a").num_cached_tokens == 64
