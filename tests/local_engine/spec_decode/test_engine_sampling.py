"""Speculative sampling through the whole engine on a tiny random-weight Llama (SmolLM2's
vocabulary) with a separate tiny draft model: the joint distribution of the first three sampled
tokens with speculation equals the one without (two-sample chi-square test of homogeneity at
significance 0.001), and a mutated acceptance rule fails the same test; seeded requests are
reproducible alone or batched; n > 1, chunked prefill and a ``layers`` draft in one run."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from local_engine.engine import LLMEngine
from local_engine.errors import EngineError
from local_engine.sampling import SamplingParams
from local_engine.spec_decode import rejection_sampler as rs

from ..conftest import run_to_completion
from .test_rejection_sampler import chi2_sf

ALPHA = 1e-3
DRAWS = 4000
PROMPT = [5, 17, 400, 90, 12, 77, 301, 45, 201, 23]
PARAMS = SamplingParams(temperature=1.0, top_k=4, max_tokens=4, ignore_eos=True)


def engine(folder, **kw):
    kw.setdefault("num_kv_blocks", 2048)
    return LLMEngine.from_model(str(folder), max_num_seqs=256, **kw)


def first_tokens(eng, draws, params=PARAMS):
    for i in range(draws):
        eng.add_request(str(i), PROMPT, params)
    final, _ = run_to_completion(eng)
    return Counter(tuple(o.outputs[0].token_ids[:3]) for o in final.values()), eng


def homogeneity(a: Counter, b: Counter):
    """Pearson's two-sample chi-square over the joint cells (cells where the pooled expected
    count is below 5 are merged into one); returns (statistic, degrees of freedom)."""
    na, nb = sum(a.values()), sum(b.values())
    cells = set(a) | set(b)
    n = na + nb
    small = {c for c in cells if (a[c] + b[c]) * min(na, nb) / n < 5}
    rows = [(a[c], b[c]) for c in cells - small]
    if small:
        rows.append((sum(a[c] for c in small), sum(b[c] for c in small)))
    stat = 0.0
    for x, y in rows:
        tot = x + y
        for obs, size in ((x, na), (y, nb)):
            exp = tot * size / n
            stat += (obs - exp) ** 2 / exp
    return stat, len(rows) - 1


@pytest.fixture(scope="module")
def without_speculation(small_vocab_pair):
    counts, _ = first_tokens(engine(small_vocab_pair[0], seed=1), DRAWS)
    return counts


def test_sampled_distribution_unchanged(small_vocab_pair, without_speculation):
    target, draft = small_vocab_pair
    spec = {"method": "draft", "model": str(draft), "num_speculative_tokens": 3}
    counts, eng = first_tokens(engine(target, seed=2, speculative=spec), DRAWS)
    stat, df = homogeneity(without_speculation, counts)
    pval = chi2_sf(stat, df)
    print(
        f"engine draft K=3: chi2={stat:.1f} df={df} p={pval:.3g} "
        f"acceptance={eng.metrics.spec_acceptance_rate:.3f}"
    )
    assert eng.metrics.spec_num_draft_tokens >= DRAWS  # every request verified drafts
    assert 0.3 < eng.metrics.spec_acceptance_rate < 0.98
    assert pval > ALPHA


def test_mutated_rule_is_detected(small_vocab_pair, without_speculation, monkeypatch):
    real = rs.accept_mask
    monkeypatch.setattr(rs, "accept_mask", lambda u, p, q: (q > p) | real(u, p, q))
    target, draft = small_vocab_pair
    spec = {"method": "draft", "model": str(draft), "num_speculative_tokens": 3}
    counts, _ = first_tokens(engine(target, seed=2, speculative=spec), DRAWS)
    stat, df = homogeneity(without_speculation, counts)
    print(f"engine mutant: chi2={stat:.1f} df={df} p={chi2_sf(stat, df):.3g}")
    assert chi2_sf(stat, df) < ALPHA


def test_seeded_reproducible_n2_chunked_and_layers_draft(tiny_target_dir):
    spec = {"method": "draft", "layers": 2, "num_speculative_tokens": 4}
    seeded = SamplingParams(temperature=0.9, top_p=0.9, seed=42, max_tokens=12)
    eng = engine(tiny_target_dir, speculative=spec, max_num_batched_tokens=64, debug_checks=True)
    eng.add_request("alone", PROMPT, seeded)
    alone = run_to_completion(eng)[0]["alone"].outputs[0].token_ids
    # the same request batched with a long prompt in chunked prefill, an n=2 request and a
    # greedy one without speculation
    eng.add_request("long", list(range(300, 500)), SamplingParams(temperature=0.7, max_tokens=8))
    eng.add_request("batched", PROMPT, seeded)
    eng.add_request("n2", PROMPT, SamplingParams(temperature=1.0, n=2, max_tokens=10, seed=3))
    eng.add_request(
        "off", PROMPT, SamplingParams(temperature=0, max_tokens=10, num_speculative_tokens=0)
    )
    final = run_to_completion(eng)[0]
    assert final["batched"].outputs[0].token_ids == alone
    assert len(final["long"].outputs[0].token_ids) == 8
    assert [len(o.token_ids) for o in final["n2"].outputs] == [10, 10]
    assert final["n2"].metrics.num_draft_tokens > 0
    assert final["off"].metrics.num_draft_tokens == 0
    plain = engine(tiny_target_dir)
    plain.add_request("off", PROMPT, SamplingParams(temperature=0, max_tokens=10))
    assert (
        final["off"].outputs[0].token_ids == run_to_completion(plain)[0]["off"].outputs[0].token_ids
    )


def test_request_k_errors(tiny_target_dir):
    eng = engine(
        tiny_target_dir,
        num_kv_blocks=32,
        speculative={"method": "ngram", "num_speculative_tokens": 2},
    )
    with pytest.raises(EngineError, match="exceeds the engine's 2; ask for at most 2"):
        eng.add_request("x", PROMPT, SamplingParams(num_speculative_tokens=3))
    plain = engine(tiny_target_dir, num_kv_blocks=32)
    with pytest.raises(EngineError, match="needs speculative decoding on"):
        plain.add_request("x", PROMPT, SamplingParams(num_speculative_tokens=1))
    with pytest.raises(EngineError, match="fewer than the target's 4 decoder layers"):
        engine(
            tiny_target_dir,
            num_kv_blocks=32,
            speculative={"method": "draft", "layers": 4, "num_speculative_tokens": 2},
        )
    assert torch.is_tensor(torch.zeros(1))
