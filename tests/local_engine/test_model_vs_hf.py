"""The engine's model against Hugging Face transformers loading the same GGUF file (float32).

Logits: max |ours - ref| / max |ref| <= 1e-4 over every position. Greedy: 32 new tokens equal
on 8 varied chat prompts; a divergence is accepted only at a near-tie, where the reference's two
best logits at that step differ by under 1e-4, and the test reports it.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from local_engine.sampling import SamplingParams

from .conftest import run_to_completion

REL_TOL = 1e-4
NEAR_TIE = 1e-4

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain recursion to a five-year-old.",
    "Translate 'good morning' into Spanish, German and Japanese (日本語).",
    "def fib(n):\n    # complete this Python function\n",
    "List three prime numbers greater than 100 and add them up.",
    "What are the health benefits of green tea? Answer briefly.",
    "Summarize the plot of Romeo and Juliet in two sentences.",
]


def _ref_logits(hf_model, ids):
    with torch.no_grad():
        return hf_model(torch.tensor([ids])).logits[0].float()


def _engine_prefill_logits(engine, ids, chunks):
    """All-position logits from the engine's paged forward, computing ``ids`` in ``chunks``
    (list of chunk lengths) so later chunks attend to K/V cached by earlier ones."""
    from local_engine.scheduler import ScheduledSequence, SchedulerOutput
    from local_engine.sequence import Sequence

    seq = Sequence("logits-probe", "logits-probe", 0, list(ids), SamplingParams())
    kv = engine.kv_cache_manager
    rows = []
    try:
        start = 0
        for n in chunks:
            assert kv.allocate_slots(seq, n) is not None
            sched = SchedulerOutput([ScheduledSequence(seq, start, n)])
            batch = engine.runner.prepare(sched, [kv.block_ids(seq.seq_id)])
            batch.meta.logits_indices = torch.arange(n)
            rows.append(engine.runner.forward_logits(batch))
            start += n
            seq.num_computed_tokens = start
    finally:
        kv.free(seq)
    return torch.cat(rows)


def _ref_greedy(hf_model, ids, n):
    """Reference greedy decoding: argmax of the transformers model's logits, with its own KV
    cache, ``n`` steps, never stopping at EOS (the engine runs with ``ignore_eos``)."""
    out = []
    with torch.no_grad():
        res = hf_model(torch.tensor([ids]), use_cache=True)
        for _ in range(n):
            nxt = int(res.logits[0, -1].argmax())
            out.append(nxt)
            past = getattr(res, "cache", None) or res.past_key_values
            res = hf_model(torch.tensor([[nxt]]), cache=past, use_cache=True)
    return out


def _rel_err(ours, ref):
    return ((ours - ref).abs().max() / ref.abs().max()).item()


@pytest.mark.parametrize("chunks", [None, (17, 16, 1, 40)], ids=["one-pass", "chunked"])
def test_logits_match_transformers(engine, hf_model, chunks):
    tok = engine.tokenizer
    text = tok.apply_chat_template(
        [
            {"role": "system", "content": "You are terse."},
            {
                "role": "user",
                "content": "Compare Rust and Go for a CLI tool; give 3 bullet points. ✓",
            },
        ]
    )
    ids = tok.encode(text)
    if chunks is None:
        chunks = (len(ids),)
    else:
        chunks = tuple(chunks[:-1]) + (len(ids) - sum(chunks[:-1]),)
    assert sum(chunks) == len(ids) and all(c > 0 for c in chunks)
    ours = _engine_prefill_logits(engine, ids, chunks)
    ref = _ref_logits(hf_model, ids)
    assert ours.shape == ref.shape
    err = _rel_err(ours, ref)
    assert err <= REL_TOL, f"max relative logit error {err:.2e} > {REL_TOL}"


@pytest.mark.parametrize("group", [0, 1], ids=["prompts0-3", "prompts4-7"])
def test_greedy_32_tokens_match_transformers(engine, hf_model, group):
    tok = engine.tokenizer
    params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
    prompts = {
        i: tok.encode(tok.apply_chat_template([{"role": "user", "content": p}]))
        for i, p in enumerate(PROMPTS)
        if i // 4 == group
    }
    for i, ids in prompts.items():
        engine.add_request(f"greedy-{i}", ids, params)
    final, _ = run_to_completion(engine)
    near_ties = []
    for i, ids in prompts.items():
        ours = final[f"greedy-{i}"].token_ids
        assert len(ours) == 32
        ref = _ref_greedy(hf_model, ids, 32)
        if ours == ref:
            continue
        k = next(j for j, (a, b) in enumerate(zip(ours, ref)) if a != b)
        logits = _ref_logits(hf_model, ids + ref[:k])[-1]
        top2 = logits.topk(2).values
        gap = (top2[0] - top2[1]).item()
        assert gap < NEAR_TIE, (
            f"prompt {i}: greedy output diverges at token {k} ({ours[k]} vs reference {ref[k]}) "
            f"and the reference's top-2 logit gap there is {gap:.2e}, not a near-tie"
        )
        near_ties.append((i, k, gap))
    if near_ties:
        warnings.warn(
            f"greedy divergences at near-ties (prompt, step, top-2 gap): {near_ties}", stacklevel=1
        )
    assert engine.kv_cache_manager.num_free_blocks == engine.kv_cache_manager.num_blocks
