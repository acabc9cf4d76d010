"""The rejection sampler keeps the target's distribution: chi-square goodness of fit of the
first two emitted tokens against the exact target joint, on a bigram "model" small enough to
enumerate, with a draft model's q and with prompt lookup's one-hot q; a mutated acceptance rule
(accept whenever q > p) must fail the same test."""

from __future__ import annotations

import pytest
import torch

from local_engine.sampling import SamplingParams
from local_engine.spec_decode import rejection_sampler as rs
from local_engine.spec_decode.rejection_sampler import RejectionSampler, processed_probs

V = 6
#: significance of the goodness-of-fit test (the real rule must pass it; probability of a
#: false failure 0.1% per case, and every draw is seeded so the outcome is fixed)
ALPHA = 1e-3
DRAWS = 30_000


def chi2_sf(x: float, df: int) -> float:
    """Survival function of the chi-square distribution: ``Q(df/2, x/2)`` (regularized upper
    incomplete gamma)."""
    return float(
        torch.special.gammaincc(
            torch.tensor(df / 2.0, dtype=torch.float64), torch.tensor(x / 2.0, dtype=torch.float64)
        )
    )


def bigram_tables():
    g = torch.Generator().manual_seed(1234)
    target = torch.randn(V, V, generator=g) * 1.5  # logits of the next token given the previous
    draft = target + torch.randn(V, V, generator=g) * 1.0  # a correlated, imperfect draft
    return target, draft


def speculate_two_tokens(params, k, deterministic_draft, draws, seed=0):
    """``draws`` independent runs of speculative decoding from previous token 0 until two tokens
    are emitted; returns counts ``[V, V]`` of (first, second)."""
    target, draft = bigram_tables()
    q_table = processed_probs(draft, [params] * V)  # row t: q(next | t)
    sampler = RejectionSampler(seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    prev = [0] * draws
    emitted: list[list[int]] = [[] for _ in range(draws)]
    live = list(range(draws))
    while live:
        t = torch.tensor([prev[i] for i in live])
        cols, q_rows = [], []
        for _ in range(k):
            if deterministic_draft:
                t = draft[t].argmax(dim=-1)  # prompt lookup: a fixed, deterministic guess
            else:
                q_rows.append(q_table[t])
                t = torch.multinomial(q_table[t], 1, generator=gen).squeeze(1)
            cols.append(t)
        drafts = torch.stack(cols, dim=1).tolist()
        q_all = None if deterministic_draft else torch.stack(q_rows, dim=1)  # [live, k, V]
        qs = [None if q_all is None else q_all[n] for n in range(len(live))]
        ctx = [[prev[i]] + d for i, d in zip(live, drafts)]
        logits = torch.cat([target[c] for c in ctx])  # rows: positions of prev, d1..dk
        out = sampler(logits, drafts, qs, [params] * len(live), [None] * len(live))
        nxt = []
        for i, toks in zip(live, out.token_ids):
            emitted[i].extend(toks)
            prev[i] = toks[-1]
            if len(emitted[i]) < 2:
                nxt.append(i)
        live = nxt
    counts = torch.zeros(V, V, dtype=torch.float64)
    for e in emitted:
        counts[e[0], e[1]] += 1
    return counts


def exact_joint(params):
    target, _ = bigram_tables()
    p = processed_probs(target, [params] * V).double()  # row t: p(next | t)
    return p[0][:, None] * p  # P(x1, x2) = p(x1 | 0) p(x2 | x1)


def chi_square(counts, probs):
    """Pearson's statistic over the cells of positive probability, its degrees of freedom and
    the counts that fell in cells of probability 0 (must be none)."""
    n = counts.sum()
    pos = probs > 0
    expected = probs[pos] * n
    stat = float(((counts[pos] - expected) ** 2 / expected).sum())
    return stat, int(pos.sum()) - 1, float(counts[~pos].sum())


CASES = {
    "draft-T1": (SamplingParams(temperature=1.0), 3, False),
    "draft-T0.7-topk4-topp0.9": (SamplingParams(temperature=0.7, top_k=4, top_p=0.9), 2, False),
    "ngram-T1": (SamplingParams(temperature=1.0), 3, True),
    "ngram-T1.3-topp0.8": (SamplingParams(temperature=1.3, top_p=0.8), 1, True),
}


@pytest.mark.parametrize("case", list(CASES))
def test_distribution_matches_target(case):
    params, k, det = CASES[case]
    counts = speculate_two_tokens(params, k, det, DRAWS)
    stat, df, impossible = chi_square(counts, exact_joint(params))
    pval = chi2_sf(stat, df)
    print(f"{case}: chi2={stat:.1f} df={df} p={pval:.3g} (alpha={ALPHA})")
    assert impossible == 0, "a token outside top-k/top-p was emitted"
    assert pval > ALPHA, f"chi2={stat:.1f} on {df} df, p={pval:.3g} < {ALPHA}"


@pytest.mark.parametrize("case", ["draft-T1", "ngram-T1"])
def test_mutated_acceptance_rule_is_rejected(case, monkeypatch):
    """Accepting every draft whose q exceeds p (instead of with probability p/q) skews the output
    toward the draft; the same test must reject it."""
    real = rs.accept_mask
    monkeypatch.setattr(rs, "accept_mask", lambda u, p, q: (q > p) | real(u, p, q))
    params, k, det = CASES[case]
    counts = speculate_two_tokens(params, k, det, DRAWS)
    stat, df, _ = chi_square(counts, exact_joint(params))
    pval = chi2_sf(stat, df)
    print(f"mutant {case}: chi2={stat:.1f} df={df} p={pval:.3g}")
    assert pval < ALPHA


def test_chi2_sf_matches_tables():
    # chi-square critical values (NIST/SEMATECH e-Handbook, table 1.3.6.7.4): P(X > 16.919) =
    # 0.05 at 9 df; P(X > 27.877) = 0.001 at 9 df
    assert chi2_sf(16.919, 9) == pytest.approx(0.05, abs=2e-4)
    assert chi2_sf(27.877, 9) == pytest.approx(0.001, abs=2e-5)


def test_greedy_verification_accepts_the_matching_prefix():
    # vocab 4; argmax per row: 2, 1, 3, 0
    logits = torch.tensor([[0, 0, 5, 0], [0, 5, 0, 0], [0, 0, 0, 5], [5, 0, 0, 0.0]])
    greedy = SamplingParams(temperature=0)
    s = RejectionSampler()
    out = s(logits, [[2, 1, 0]], [None], [greedy], [None])
    assert out.token_ids == [[2, 1, 3]] and out.num_accepted == [2]  # 3rd draft wrong: fix it
    out = s(logits, [[2, 1, 3]], [None], [greedy], [None])
    assert out.token_ids == [[2, 1, 3, 0]] and out.num_accepted == [3]  # all + bonus
    out = s(logits[:2], [[0]], [None], [greedy], [None])
    assert out.token_ids == [[2]] and out.num_accepted == [0]


def test_mixed_batch_rows_and_logprobs():
    """Two sequences (K=2 and K=0) in one call: rows are split right, and the logprobs of
    emitted tokens are the log-softmax of the raw target logits at their rows."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 10, generator=g)
    a2 = [int(logits[0].argmax()), int(logits[1].argmax())]
    greedy = SamplingParams(temperature=0, logprobs=2)
    out = RejectionSampler()(logits, [a2, []], [None, None], [greedy, greedy], [None, None])
    assert out.token_ids == [a2 + [int(logits[2].argmax())], [int(logits[3].argmax())]]
    logp = torch.log_softmax(logits, dim=-1)
    for j, tok in enumerate(out.token_ids[0]):
        assert out.sampled_logprob[0][j] == pytest.approx(float(logp[j, tok]), abs=1e-6)
        assert len(out.logprobs[0][j]) == 2  # the sampled token is among the top 2
    assert out.sampled_logprob[1][0] == pytest.approx(float(logp[3].max()), abs=1e-6)


def test_seeded_requests_reproducible_alone_or_batched():
    torch.manual_seed(0)
    logits = torch.randn(8, 50)
    p = SamplingParams(temperature=1.0, seed=7)
    drafts = [[3, 4, 5], [1, 2, 3]]

    def gen(seed):
        return torch.Generator().manual_seed(seed)

    alone = RejectionSampler(seed=1)(logits[:4], drafts[:1], [None], [p], [gen(7)])
    batched = RejectionSampler(seed=2)(
        logits, drafts, [None, None], [p, SamplingParams(temperature=1.0)], [gen(7), None]
    )
    assert batched.token_ids[0] == alone.token_ids[0]
