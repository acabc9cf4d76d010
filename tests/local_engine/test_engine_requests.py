"""LLMEngine request handling on the real model: seeds, stop strings and stop tokens,
max_tokens, n > 1 with copy-on-write, logprobs, refusal, abort, metrics, preemption and LRU
eviction."""

from __future__ import annotations

import pytest
import torch

from local_engine.errors import EngineError, RequestTooLongError
from local_engine.sampling import SamplingParams

from .conftest import all_position_logits, run_to_completion


def chat_ids(engine, text):
    tok = engine.tokenizer
    return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))


def run(engine, rid, ids, params):
    engine.add_request(rid, ids, params)
    return run_to_completion(engine)[0][rid]


def test_same_seed_same_text_alone_or_batched(engine):
    ids = chat_ids(engine, "Invent a name for a cat.")
    p = SamplingParams(temperature=1.0, top_p=0.95, seed=7, max_tokens=16)
    alone = run(engine, "seed-alone", ids, p)
    engine.add_request(
        "seed-noise-1",
        chat_ids(engine, "Count to five."),
        SamplingParams(temperature=1.0, max_tokens=20),
    )
    engine.add_request("seed-batched", ids, p)
    engine.add_request(
        "seed-noise-2",
        chat_ids(engine, "Name a fruit."),
        SamplingParams(temperature=1.0, max_tokens=20),
    )
    final, _ = run_to_completion(engine)
    assert final["seed-batched"].token_ids == alone.token_ids
    assert final["seed-batched"].text == alone.text
    other = [
        run(
            engine, f"seed-{s}", ids, SamplingParams(temperature=1.0, seed=s, max_tokens=16)
        ).token_ids
        for s in (8, 9)
    ]
    assert len({tuple(alone.token_ids), *map(tuple, other)}) > 1


def test_stop_string_ends_generation_and_is_not_in_the_text(engine):
    ids = chat_ids(engine, "List the days of the week, comma separated.")
    full = run(engine, "stop-full", ids, SamplingParams(temperature=0, max_tokens=40))
    words = [w for w in full.text.replace(",", " ").split() if len(w) > 3]
    assert len(words) >= 3, full.text
    stop = words[2]
    cut = run(
        engine, "stop-cut", ids, SamplingParams(temperature=0, max_tokens=40, stop=[stop, "zzzz"])
    )
    assert cut.outputs[0].finish_reason == "stop"
    assert cut.outputs[0].stop_reason == stop
    assert cut.text == full.text[: full.text.index(stop)]
    assert stop not in cut.text


def test_the_earliest_stop_string_in_the_text_wins_whatever_the_list_order(engine):
    """Two stop strings completed by the same character: the text is cut at the one that
    starts first in the text (OpenAI: generation stops at the first stop sequence met), not at
    the one listed first. From the greedy output: ``early`` = the 3 characters at i..i+2 and
    ``late`` = the 2 at i+1..i+2, both first occurring there, so both complete when character
    i+2 arrives; the old rule (first in the list) cut at i+1 when ``late`` was listed first."""
    ids = chat_ids(engine, "Write one sentence about the sea.")
    full = run(engine, "early-full", ids, SamplingParams(temperature=0, max_tokens=30)).text
    i = next(
        k
        for k in range(1, len(full) - 3)
        if full[k : k + 3].isalpha()
        and full.find(full[k : k + 3]) == k
        and full.find(full[k + 1 : k + 3]) == k + 1
    )
    early, late = full[i : i + 3], full[i + 1 : i + 3]
    for stops in ([late, early], [early, late]):
        out = run(
            engine,
            f"early-{stops[0]}",
            ids,
            SamplingParams(temperature=0, max_tokens=30, stop=stops),
        )
        assert out.text == full[:i], (stops, full, out.text)
        assert out.outputs[0].stop_reason == early


def test_stop_string_spanning_tokens_and_streamed_text(engine):
    """A stop string that starts inside one token's text and ends inside a later one's: the
    text ends right before it; while streaming, every step's text is a prefix of the final
    text (a tail that could begin the stop string is held back) and the token ids grow by one
    a step."""
    tok = engine.tokenizer
    ids = chat_ids(engine, "Describe a sunrise over the sea in two sentences.")
    full = run(
        engine, "span-full", ids, SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    )
    pieces = [tok.decode(full.token_ids[:k]) for k in range(len(full.token_ids) + 1)]
    # token k's text is pieces[k + 1][len(pieces[k]):]; start 1 character into token 3's
    # text and end 1 character into the first later token, so the stop spans >= 2 tokens
    start = len(pieces[3]) + 1
    k = next(k for k in range(4, len(pieces) - 1) if len(pieces[k]) > start + 1)
    stop = full.text[start : len(pieces[k]) + 1]
    assert len(pieces[4]) > start and not stop.isspace()
    first = full.text.index(stop)
    engine.add_request(
        "span-cut", ids, SamplingParams(temperature=0, max_tokens=30, ignore_eos=True, stop=stop)
    )
    seen = []
    while engine.has_unfinished_requests():
        seen += [o for o in engine.step() if o.request_id == "span-cut"]
    final = seen[-1]
    assert final.outputs[0].finish_reason == "stop" and final.outputs[0].stop_reason == stop
    assert final.text == full.text[:first]
    assert final.token_ids == full.token_ids[: len(final.token_ids)]
    for prev, cur in zip(seen, seen[1:]):
        assert final.text.startswith(prev.text) and cur.text.startswith(prev.text)
        assert len(cur.token_ids) == len(prev.token_ids) + 1
        assert stop not in cur.text


def test_stop_token_ids_and_max_tokens(engine):
    ids = chat_ids(engine, "Write one sentence about rivers.")
    full = run(
        engine, "stoptok-full", ids, SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    )
    assert full.outputs[0].finish_reason == "length" and len(full.token_ids) == 20
    target = full.token_ids[5]
    first = full.token_ids.index(target)
    cut = run(
        engine,
        "stoptok-cut",
        ids,
        SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[target]),
    )
    assert cut.token_ids == full.token_ids[: first + 1]
    assert cut.outputs[0].finish_reason == "stop" and cut.outputs[0].stop_reason == target
    eos = run(
        engine,
        "eos",
        chat_ids(engine, "Say just: yes"),
        SamplingParams(temperature=0, max_tokens=30),
    )
    assert (
        eos.outputs[0].finish_reason == "stop"
        and eos.token_ids[-1] in engine.tokenizer.stop_token_ids
    )
    assert "<|im_end|>" not in eos.text


def test_logprobs_match_teacher_forcing(engine):
    ids = chat_ids(engine, "What is the boiling point of water?")
    out = run(engine, "lp", ids, SamplingParams(temperature=0.7, seed=3, max_tokens=8, logprobs=3))
    c = out.outputs[0]
    assert len(c.logprobs) == 8
    ref = torch.log_softmax(all_position_logits(engine, ids + c.token_ids[:-1]), -1)
    for k, (tok, d) in enumerate(zip(c.token_ids, c.logprobs)):
        row = ref[len(ids) - 1 + k]
        assert tok in d and 3 <= len(d) <= 4
        assert d[tok] == pytest.approx(row[tok].item(), abs=1e-4)
        top3 = row.topk(3).indices.tolist()
        assert set(top3) <= set(d)
    assert c.cumulative_logprob == pytest.approx(
        sum(d[t] for t, d in zip(c.token_ids, c.logprobs)), abs=1e-4
    )


def test_n_samples_share_the_prompt_copy_on_write(engine):
    kv = engine.kv_cache_manager
    ids = chat_ids(engine, "Give me a random word.")
    assert len(ids) % 16 != 0  # the prompt's last block is partial: forked samples share it
    out = run(
        engine,
        "n3",
        ids,
        SamplingParams(temperature=1.0, seed=11, n=3, max_tokens=10, ignore_eos=True, logprobs=0),
    )
    assert [c.index for c in out.outputs] == [0, 1, 2]
    assert all(c.finish_reason == "length" and len(c.token_ids) == 10 for c in out.outputs)
    assert len({tuple(c.token_ids) for c in out.outputs}) > 1
    # each sample's logprobs equal a fresh teacher-forced pass over its own tokens: no sample
    # read K/V another one wrote into the shared block
    for c in out.outputs:
        ref = torch.log_softmax(all_position_logits(engine, ids + c.token_ids[:-1]), -1)
        got = [d[t] for t, d in zip(c.token_ids, c.logprobs)]
        want = [ref[len(ids) - 1 + k, t].item() for k, t in enumerate(c.token_ids)]
        assert got == pytest.approx(want, abs=1e-4)
    greedy = run(engine, "n2-greedy", ids, SamplingParams(temperature=0, n=2, max_tokens=8))
    single = run(engine, "n1-greedy", ids, SamplingParams(temperature=0, max_tokens=8))
    assert greedy.outputs[0].token_ids == greedy.outputs[1].token_ids == single.token_ids
    assert kv.num_free_blocks == kv.num_blocks


def test_refusals_name_the_lengths(engine_factory):
    eng = engine_factory(max_model_len=64, num_kv_blocks=3)
    with pytest.raises(RequestTooLongError, match=r"64 tokens.*") as exc:
        eng.add_request("long", list(range(100, 200)), SamplingParams())
    assert "100" in str(exc.value) and exc.value.prompt_len == 100 and exc.value.limit == 64
    with pytest.raises(RequestTooLongError, match="48 tokens"):
        eng.add_request("pool", list(range(100, 150)), SamplingParams())  # 3 blocks = 48 slots
    with pytest.raises(EngineError, match="empty"):
        eng.add_request("empty", [], SamplingParams())
    with pytest.raises(EngineError, match="out of range"):
        eng.add_request("bad", [1, 10**9], SamplingParams())
    eng.add_request("ok", [1, 2, 3], SamplingParams(max_tokens=200, ignore_eos=True))
    with pytest.raises(EngineError, match="already in use"):
        eng.add_request("ok", [1, 2, 3], SamplingParams())
    final, _ = run_to_completion(eng)
    assert final["ok"].outputs[0].finish_reason == "length"
    assert len(final["ok"].token_ids) == 48 - 3  # capped by the pool (48 < max_model_len 64)
    assert not eng.has_unfinished_requests()


def test_abort_mid_flight_returns_kv_to_idle(engine):
    kv = engine.kv_cache_manager
    idle = kv.num_free_blocks
    engine.add_request(
        "ab-1", chat_ids(engine, "Tell me a long story."), SamplingParams(max_tokens=100)
    )
    engine.add_request(
        "ab-2", chat_ids(engine, "Another long story."), SamplingParams(max_tokens=100, n=2)
    )
    engine.step()
    engine.step()
    assert kv.num_free_blocks < idle
    engine.abort_request("ab-1")
    engine.abort_request("ab-2")
    engine.abort_request("never-existed")
    assert kv.num_free_blocks == idle and not engine.has_unfinished_requests()
    kv.check_invariants()


def test_metrics_snapshot(engine_factory):
    eng = engine_factory()
    ids = chat_ids(eng, "Short question?")
    run(eng, "m1", ids, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    run(eng, "m2", ids, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    m = eng.metrics
    assert m.prefix_cache_queries == 2 * len(ids)
    assert m.prefix_cache_hits == (len(ids) - 1) // 16 * 16
    assert m.prefix_cache_hit_rate == pytest.approx(m.prefix_cache_hits / m.prefix_cache_queries)
    assert m.num_running == 0 and m.num_waiting == 0 and m.kv_usage == 0.0
    assert m.requests_finished == 2 and m.generation_tokens == 8
    assert m.prompt_tokens == 2 * len(ids) - m.prefix_cache_hits
    assert len(m.ttft_seconds) == 2 and all(t > 0 for t in m.ttft_seconds)
    assert len(m.tpot_seconds) == 2 and all(t > 0 for t in m.tpot_seconds)
    assert set(m.as_dict()) >= {"kv_usage_percent", "prefix_cache_hit_rate", "num_running"}


@pytest.mark.parametrize("swap_space", [0, 64 * 737_280], ids=["recompute", "swap"])
def test_preemption_gives_the_same_outputs(engine, engine_factory, swap_space):
    # 10 blocks = 160 token slots; swap: 64 CPU blocks of 737,280 B (30 layers x 2 x 16 tokens
    # x 3 KV heads x 64 x 4 B)
    tight = engine_factory(num_kv_blocks=10, debug_checks=True, swap_space=swap_space)
    prompts = [
        chat_ids(engine, q)
        for q in [
            "Describe a sunset.",
            "Describe a forest.",
            "Describe the ocean.",
            "Describe a city.",
        ]
    ]
    p = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    for i, ids in enumerate(prompts):
        tight.add_request(f"pre-{i}", ids, p)
        engine.add_request(f"roomy-{i}", ids, p)
    tight_out, _ = run_to_completion(tight)
    roomy_out, _ = run_to_completion(engine)
    assert tight.metrics.num_preemptions > 0
    assert (tight.metrics.num_swaps > 0) == (swap_space > 0)
    for i in range(4):
        assert tight_out[f"pre-{i}"].token_ids == roomy_out[f"roomy-{i}"].token_ids
    assert tight.kv_cache_manager.num_free_blocks == 10


def test_lru_eviction_loses_the_least_recently_used_prefix(engine_factory):
    eng = engine_factory(num_kv_blocks=12, debug_checks=True)
    tok = eng.tokenizer
    prefixes = {
        name: tok.encode(f"Document {name}: " + f"{name} facts. " * 30)[:48]
        for name in ("alpha", "beta", "gamma")
    }
    p = SamplingParams(temperature=0, max_tokens=1)
    # each request is 49 prompt tokens = 4 blocks; its 3 full blocks stay cached after it ends:
    # 9 cached-free blocks + 3 plain free ones
    for name, pre in prefixes.items():
        run(eng, f"warm-{name}", pre + [13], p)
    assert eng.kv_cache_manager.pool.num_evictions == 0
    assert run(eng, "touch-alpha", prefixes["alpha"] + [14], p).num_cached_tokens == 48
    # least recently used is now beta. A cold 65-token request needs 5 blocks: 3 plain free
    # ones plus 2 evicted, beta's, tail first (its blocks 2 and 1)
    run(eng, "cold", tok.encode("Unrelated text " * 40)[:64] + [15], p)
    assert eng.kv_cache_manager.pool.num_evictions == 2
    hits = {
        name: run(eng, f"probe-{name}", prefixes[name] + [16], p).num_cached_tokens
        for name in ("gamma", "alpha", "beta")
    }
    assert hits == {"gamma": 48, "alpha": 48, "beta": 16}


def test_pool_sized_from_kv_cache_memory_and_logged(engine_factory, caplog):
    import logging

    # one block = 2 (K,V) x 30 layers x 3 KV heads x 64 dims x 4 bytes x 16 tokens = 737,280 B;
    # 10.5 blocks' worth of bytes gives 10 whole blocks = 160 tokens
    with caplog.at_level(logging.INFO, logger="local_engine"):
        eng = engine_factory(num_kv_blocks=None, kv_cache_memory=737_280 * 21 // 2)
    assert eng.kv_cache_manager.num_blocks == 10
    assert tuple(eng.runner.kv_cache.shape) == (30, 2, 10, 16, 3, 64)
    line = next(r.getMessage() for r in caplog.records if "KV cache" in r.getMessage())
    assert "10 blocks x 16 tokens = 160 tokens" in line and "46080 bytes/token" in line


def test_unforked_samples_are_fork_pending_in_no_queue_until_sample_0_prefills(engine):
    from local_engine.sequence import SequenceStatus

    ids = chat_ids(engine, "Name three colours.")
    engine.add_request("fp-1", ids, SamplingParams(temperature=1.0, seed=3, n=3, max_tokens=4))
    state = engine.output_processor.requests["fp-1"]
    first, *siblings = (s.seq for s in state.samples)
    sched = engine.scheduler
    assert first.status == SequenceStatus.WAITING and first in sched.waiting
    for sib in siblings:
        assert sib.status == SequenceStatus.FORK_PENDING
        assert sib not in sched.waiting and sib not in sched.running
        assert not engine.kv_cache_manager.req_blocks.get(sib.seq_id)
    engine.step()  # the whole prompt fits one step: sample 0 samples and the siblings fork
    assert [s.status for s in (first, *siblings)] == [SequenceStatus.RUNNING] * 3
    assert all(s in sched.running for s in (first, *siblings))
    # the forks share sample 0's full prompt blocks (copy-on-write)
    kv = engine.kv_cache_manager
    full = len(ids) // kv.block_size
    assert kv.req_blocks[siblings[0].seq_id][:full] == kv.req_blocks[first.seq_id][:full]
    engine.abort_request("fp-1")
    sched.check_invariants()


def test_abort_before_the_fork_finishes_pending_samples_without_a_queue(engine):
    from local_engine.sequence import SequenceStatus

    kv = engine.kv_cache_manager
    idle = kv.num_free_blocks
    engine.add_request("fp-2", chat_ids(engine, "Hi."), SamplingParams(n=2, max_tokens=4))
    state = engine.output_processor.requests["fp-2"]
    engine.abort_request("fp-2")  # before any step: sample 1 was never forked
    assert [s.seq.status for s in state.samples] == [SequenceStatus.FINISHED_ABORTED] * 2
    assert [s.finish_reason for s in state.samples] == ["abort", "abort"]
    assert kv.num_free_blocks == idle and not engine.has_unfinished_requests()
    engine.scheduler.check_invariants()
