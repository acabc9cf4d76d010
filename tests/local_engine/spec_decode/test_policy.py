"""The speculation policy's arithmetic (local_engine/spec_decode/policy.py), against values
worked out by hand and against direct sums."""

from __future__ import annotations

import pytest

from local_engine.sampling import SamplingParams
from local_engine.spec_decode.policy import (
    AcceptanceEstimate,
    StepCostModel,
    allows_timing,
    best_num_drafts,
    bucket,
    expected_tokens,
)


@pytest.mark.parametrize("a", [0.0, 0.3, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("k", [0, 1, 4, 7])
def test_expected_tokens_is_the_geometric_sum(a, k):
    # E = 1 + a + ... + a**k (the j-th draft is emitted iff the first j are all accepted)
    assert expected_tokens(a, k) == pytest.approx(sum(a**j for j in range(k + 1)))


def test_best_num_drafts_by_hand():
    # a = 0.5, a token worth 1 s, a draft costs 0.2 s: 0.5 > 0.2, 0.25 > 0.2, 0.125 < 0.2
    assert best_num_drafts(0.5, 4, 1.0, 0.2) == 2
    assert best_num_drafts(0.5, 1, 1.0, 0.2) == 1  # capped at k_max
    assert best_num_drafts(0.5, 4, 1.0, 0.6) == 0  # even the first (0.5) does not pay
    assert best_num_drafts(0.0, 4, 1.0, 0.0) == 0  # nothing is ever accepted
    assert best_num_drafts(0.9, 4, 1.0, 0.0) == 4  # free drafts
    assert best_num_drafts(0.9, 4, 1.0, 1.5) == 0  # a draft costs more than a token is worth
    assert best_num_drafts(1.0, 3, 1.0, 0.9) == 3


@pytest.mark.parametrize("a", [0.1, 0.35, 0.6, 0.8, 0.95])
@pytest.mark.parametrize("ratio", [0.01, 0.1, 0.3, 0.7])
def test_best_num_drafts_matches_the_marginal_rule(a, ratio):
    # the largest j <= 8 with a**j > ratio, by enumeration (a**j falls with j)
    want = max([j for j in range(1, 9) if a**j > ratio], default=0)
    assert best_num_drafts(a, 8, 1.0, ratio) == want


def test_cost_model_moving_averages():
    m = StepCostModel(ema_weight=0.2)
    assert m.decode_seconds(4) is None and m.beta_seconds(4) is None
    m.observe(4, 0, 1.0)
    m.observe(4, 4, 2.0)  # 1 s more for 4 extra tokens
    assert m.beta_seconds(4) == pytest.approx(0.25)
    m.observe(4, 0, 2.0)  # T_d = 0.8 * 1.0 + 0.2 * 2.0
    assert m.decode_seconds(4) == pytest.approx(1.2)
    m.observe(4, 8, 3.2)  # (3.2 - 1.2) / 8 = 0.25 again
    assert m.beta_seconds(4) == pytest.approx(0.25)
    m.observe(4, 2, 1.0)  # faster than T_d: beta sample 0, EMA 0.8 * 0.25
    assert m.beta_seconds(4) == pytest.approx(0.2)
    assert m.decode_seconds(3) is None  # another bucket
    m.observe(12, 0, 5.0)
    assert m.decode_seconds(16) == 5.0  # 12 and 16 share a bucket


def test_buckets():
    assert [bucket(n) for n in (1, 5, 8, 9, 16, 17, 64, 65, 256, 257, 300)] == [
        1, 5, 8, 16, 16, 24, 64, 96, 256, 288, 320,
    ]  # fmt: skip


def test_acceptance_estimate_by_hand():
    e = AcceptanceEstimate()
    assert e.rate == 0.5  # Beta(1, 1) prior
    e.update(4, 2)  # 2 accepted, the 3rd tested and rejected
    assert (e.accepted, e.tested) == (2, 3)
    assert e.rate == pytest.approx(3 / 5)
    e.update(4, 4)  # all 4 accepted: 4 tested, none rejected; old counts x 0.9
    assert e.accepted == pytest.approx(5.8) and e.tested == pytest.approx(6.7)
    assert e.rate == pytest.approx(6.8 / 8.7)
    e.update(0, 0)  # no drafts: no evidence
    assert e.rate == pytest.approx(6.8 / 8.7)


def test_timing_only_where_tokens_cannot_depend_on_it():
    assert allows_timing(SamplingParams(temperature=0))
    assert allows_timing(SamplingParams(temperature=0, seed=3))  # greedy: same tokens anyway
    assert allows_timing(SamplingParams(temperature=0.8))
    assert not allows_timing(SamplingParams(temperature=0.8, seed=3))


def test_token_value_with_and_without_waiting_requests():
    m = StepCostModel(ema_weight=1.0)
    assert m.token_seconds(8) is None  # T_d of the bucket unknown
    m.observe(8, 0, 0.064)
    # requests waiting (or nothing smaller measured yet): T_d / B = 8 ms
    assert m.token_seconds(8) == pytest.approx(0.008)
    assert m.token_seconds(8, waiting=False) == pytest.approx(0.008)
    m.observe(1, 0, 0.030)
    m.observe(4, 0, 0.045)
    # none waiting: slope to the smallest measured bucket, (64 - 30) / (8 - 1) ms
    assert m.token_seconds(8, waiting=False) == pytest.approx(0.034 / 7)
    assert m.token_seconds(8, waiting=True) == pytest.approx(0.008)
    assert m.token_seconds(1, waiting=False) == pytest.approx(0.030)  # the batch is the sequence
    m2 = StepCostModel(ema_weight=1.0)
    m2.observe(8, 0, 0.064)
    m2.observe(2, 0, 0.070)  # a noisy bucket: a slope below zero is zero ...
    assert m2.token_seconds(8, waiting=False) == 0.0
    m2.observe(1, 0, 0.001)
    assert m2.token_seconds(8, waiting=False) == pytest.approx(
        0.008
    )  # ... and one above T_d / B (63 / 7 ms) is T_d / B
    # a worthless token buys no drafts
    assert best_num_drafts(0.9, 4, 0.0, 0.001) == 0
