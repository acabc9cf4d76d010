"""The sampler on hand-made logits: greedy, temperature, top-k, top-p, seeds, logprobs.
Frequencies are checked against the probabilities worked out in each test, within 5 standard
deviations of a binomial count (so a correct sampler fails with probability < 1e-6)."""

from __future__ import annotations

import math

import pytest
import torch

from local_engine.errors import EngineError
from local_engine.sampling import Sampler, SamplingParams, make_generator

PROBS = torch.tensor([0.5, 0.3, 0.15, 0.05])
LOGITS = PROBS.log()
N = 4000


def draw(params, n=N, seed=0, generators=None):
    sampler = Sampler(seed)
    logits = LOGITS.repeat(n, 1)
    out = sampler(logits, [params] * n, generators or [None] * n)
    return torch.bincount(torch.tensor(out.token_ids), minlength=4).float() / n


def assert_freqs(freqs, expected):
    expected = torch.tensor(expected, dtype=torch.float32)
    for f, p in zip(freqs.tolist(), expected.tolist()):
        sd = math.sqrt(max(p * (1 - p), 1e-12) / N)
        assert abs(f - p) <= 5 * sd + 1e-9, (freqs, expected)


def test_greedy_is_argmax():
    out = Sampler(0)(
        torch.tensor([[0.1, 3.0, 2.9], [5.0, -1.0, 0.0]]),
        [SamplingParams(temperature=0)] * 2,
        [None, None],
    )
    assert out.token_ids == [1, 0]


def test_plain_sampling_follows_softmax():
    assert_freqs(draw(SamplingParams(temperature=1.0)), [0.5, 0.3, 0.15, 0.05])


def test_temperature_half_squares_the_probabilities():
    # p_i^(1/0.5) renormalized: [0.25, 0.09, 0.0225, 0.0025] / 0.365
    assert_freqs(
        draw(SamplingParams(temperature=0.5)),
        [0.25 / 0.365, 0.09 / 0.365, 0.0225 / 0.365, 0.0025 / 0.365],
    )


def test_top_k_two():
    # keep the two best, renormalize: 0.5/0.8, 0.3/0.8
    assert_freqs(draw(SamplingParams(top_k=2)), [0.625, 0.375, 0.0, 0.0])


@pytest.mark.parametrize(
    "top_p,expected",
    [
        (0.7, [0.625, 0.375, 0.0, 0.0]),  # mass before token 2 is 0.8 >= 0.7: cut
        (0.85, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0]),  # mass before token 3 is 0.95: cut
        (0.4, [1.0, 0.0, 0.0, 0.0]),  # the best token is always kept
    ],
)
def test_top_p(top_p, expected):
    assert_freqs(draw(SamplingParams(top_p=top_p)), expected)


def test_top_k_and_top_p_together():
    # top_k=3 first -> [0.5, 0.3, 0.15]/0.95; then top_p=0.8: mass before token 2 is 0.842 -> cut
    assert_freqs(draw(SamplingParams(top_k=3, top_p=0.8)), [0.625, 0.375, 0.0, 0.0])


def test_seeded_rows_are_reproducible_and_independent_of_the_batch():
    p = SamplingParams(temperature=1.0, seed=1234)
    g = make_generator(1234, 0)
    draws_alone = [Sampler(0)(LOGITS[None], [p], [g]).token_ids[0] for _ in range(20)]
    g = make_generator(1234, 0)
    other = SamplingParams(temperature=1.0)
    sampler = Sampler(99)
    draws_batched = [
        sampler(
            torch.stack([LOGITS, LOGITS, LOGITS]), [other, p, other], [None, g, None]
        ).token_ids[1]
        for _ in range(20)
    ]
    assert draws_alone == draws_batched
    assert len(set(draws_alone)) > 1  # it does sample
    g2 = make_generator(1234, 1)  # sample 1 of the same request draws differently
    assert [Sampler(0)(LOGITS[None], [p], [g2]).token_ids[0] for _ in range(20)] != draws_alone
    assert make_generator(None, 0) is None


def test_logprobs_are_log_softmax_of_the_raw_logits():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]])
    out = Sampler(0)(logits, [SamplingParams(temperature=0, logprobs=2)], [None])
    ref = torch.log_softmax(logits[0], -1)
    assert out.token_ids == [0]
    assert set(out.logprobs[0]) == {0, 1}
    assert out.logprobs[0][0] == pytest.approx(ref[0].item(), abs=1e-6)
    assert out.logprobs[0][1] == pytest.approx(ref[1].item(), abs=1e-6)
    assert out.sampled_logprob[0] == pytest.approx(ref[0].item(), abs=1e-6)


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_k": -5}, "top_k"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"n": 0}, "n"),
        ({"logprobs": 50}, "logprobs"),
        ({"stop": [3]}, "stop"),
        ({"seed": "x"}, "seed"),
    ],
)
def test_bad_params_name_the_field(kwargs, field):
    with pytest.raises(EngineError, match=field):
        SamplingParams(**kwargs)


def test_greedy_batch_on_the_cpu_matches_torch_argmax_including_ties():
    """The all-greedy CPU path (NumPy argmax) against torch's argmax: random rows, rows with a
    planted tie (the first maximum wins in both), an all-equal row; with and without logprobs
    (which take the torch path)."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 1000, generator=g)
    logits[3, 10] = logits[3, 900] = 50.0  # tie: index 10 is first
    logits[7] = 0.0  # all equal: index 0
    ref = logits.argmax(dim=-1).tolist()
    assert ref[3] == 10 and ref[7] == 0
    out = Sampler(0)(logits, [SamplingParams(temperature=0)] * 64, [None] * 64)
    assert out.token_ids == ref and all(isinstance(t, int) for t in out.token_ids)
    assert out.logprobs == [None] * 64
    with_lp = Sampler(0)(logits, [SamplingParams(temperature=0, logprobs=1)] * 64, [None] * 64)
    assert with_lp.token_ids == ref
    lp = torch.log_softmax(logits, dim=-1)
    assert with_lp.sampled_logprob[0] == pytest.approx(lp[0, ref[0]].item(), abs=1e-6)
