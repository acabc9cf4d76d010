"""Continuous batching on the real model: several requests per step, joining between steps,
blocks freed at once when a request finishes."""

from __future__ import annotations

from local_engine.sampling import SamplingParams

from .conftest import run_to_completion


def _ids(engine, text):
    return engine.tokenizer.encode(text)


def test_several_requests_in_one_step_and_join_between_steps(engine):
    kv = engine.kv_cache_manager
    idle = kv.num_free_blocks
    p = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    engine.add_request("cb-0", _ids(engine, "One, two, three,"), p)
    engine.add_request("cb-1", _ids(engine, "The quick brown fox"), p)
    engine.add_request("cb-2", _ids(engine, "Once upon a time"), p)
    outs = engine.step()
    assert sorted(o.request_id for o in outs) == [
        "cb-0",
        "cb-1",
        "cb-2",
    ]  # three prefills, one step
    assert all(len(o.token_ids) == 1 for o in outs)
    outs = engine.step()
    assert sorted(o.request_id for o in outs) == ["cb-0", "cb-1", "cb-2"]  # three decodes, one step
    engine.add_request("cb-3", _ids(engine, "In a galaxy far away"), p)  # joins mid-flight
    outs = engine.step()
    assert sorted(o.request_id for o in outs) == ["cb-0", "cb-1", "cb-2", "cb-3"]
    by_id = {o.request_id: o for o in outs}
    assert len(by_id["cb-0"].token_ids) == 3 and len(by_id["cb-3"].token_ids) == 1
    final, _ = run_to_completion(engine)
    assert all(len(final[r].token_ids) == 6 for r in ["cb-0", "cb-1", "cb-2", "cb-3"])
    assert kv.num_free_blocks == idle


def test_finished_request_frees_its_blocks_at_once(engine_factory):
    eng = engine_factory(enable_prefix_caching=False)
    kv = eng.kv_cache_manager
    eng.add_request("short", _ids(eng, "Hi " * 40), SamplingParams(temperature=0, max_tokens=1))
    eng.add_request(
        "long",
        _ids(eng, "Hello " * 20),
        SamplingParams(temperature=0, max_tokens=50, ignore_eos=True),
    )
    outs = {o.request_id: o for o in eng.step()}
    assert outs["short"].finished and not outs["long"].finished
    # only "long" holds blocks now: ceil(21 tokens computed+1 / 16) blocks
    held = kv.num_blocks - kv.num_free_blocks
    assert held == len(kv.block_ids("long"))
    assert kv.block_ids("short") == []
    eng.abort_request("long")
    assert kv.num_free_blocks == kv.num_blocks
    assert not eng.has_unfinished_requests()


def test_batched_equals_alone_greedy(engine):
    tok = engine.tokenizer
    prompts = [
        _ids(engine, tok.apply_chat_template([{"role": "user", "content": q}]))
        for q in ["Name a color.", "What is 2+2?", "Say hello in French."]
    ]
    p = SamplingParams(temperature=0.0, max_tokens=16)
    alone = []
    for i, ids in enumerate(prompts):
        engine.add_request(f"alone-{i}", ids, p)
        alone.append(run_to_completion(engine)[0][f"alone-{i}"].token_ids)
    for i, ids in enumerate(prompts):
        engine.add_request(f"batch-{i}", ids, p)
    final, _ = run_to_completion(engine)
    assert [final[f"batch-{i}"].token_ids for i in range(3)] == alone
