"""Prompt lookup's match length, the match-length acceptance model and the planner's use of
them (lazy indexing, lookup back-off, drafts priced by match length), against values worked
out by hand and a brute-force reference; no model runs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from local_engine.sampling import SamplingParams
from local_engine.sequence import Sequence
from local_engine.spec_decode import decoder as decoder_mod
from local_engine.spec_decode.config import SpeculativeConfig
from local_engine.spec_decode.decoder import SpeculativeDecoder
from local_engine.spec_decode.ngram import NgramProposer
from local_engine.spec_decode.policy import EXPLORE_EVERY, MatchAcceptance, drafts_that_pay


def test_lookup_match_length_by_hand():
    p = NgramProposer(2, 4)
    # "2 3 4" (3 tokens) occurred before, followed by "5 9 2"
    assert p.lookup([1, 2, 3, 4, 5, 9, 2, 3, 4], 3) == ([5, 9, 2], 3)
    assert p.lookup([1, 2, 3, 4, 5, 6], 3) == ([], 0)
    # "9 1 2" never occurred before; "1 2" did, most recently ending at position 5
    assert NgramProposer(1, 5).lookup([7, 1, 2, 8, 1, 2, 9, 1, 2], 2) == ([9, 1], 2)
    assert NgramProposer(1, 1).lookup([4, 1, 4], 5) == ([1, 4], 1)


def test_drafts_that_pay_by_hand():
    # a token is worth 1 s and a draft costs 0.3 s: 0.8 and 0.48 pay, 0.24 does not
    assert drafts_that_pay([0.8, 0.48, 0.24, 0.12], 1.0, 0.3) == 2
    assert drafts_that_pay([0.8, 0.48], 0.5, 0.3) == 1  # worth 0.4 s, then 0.24 s
    assert drafts_that_pay([0.2, 0.1], 1.0, 0.3) == 0
    assert drafts_that_pay([0.9, 0.9], 1.0, 0.0) == 2  # free drafts
    assert drafts_that_pay([], 1.0, 0.0) == 0


def test_match_acceptance_by_hand():
    m = MatchAcceptance(3, decay=0.5)
    assert m.rate(1) == m.rate(7) == 0.5  # Beta(1, 1) prior
    # 3 drafts after a 2-token match, the first accepted: tested after a 2-token match
    # (accepted) and after a 3-token one (rejected); the third never tested
    m.update(2, 3, 1)
    assert (m.accepted, m.tested) == ([0, 0, 1, 0], [0, 0, 1, 1])
    assert m.rate(2) == pytest.approx(2 / 3) and m.rate(3) == pytest.approx(1 / 3)
    assert m.rate(9) == m.rate(3)  # longer matches count as max_len
    assert m.cumulative(2, 3) == pytest.approx([2 / 3, 2 / 9, 2 / 27])
    # 2 drafts after a 3-token match, both accepted: both tested at length 3 (4 -> 3), each
    # test first halving the old counts: acc 0.5 * 0 + 1 = 1, tested 0.5 * 1 + 1 = 1.5;
    # then acc 0.5 * 1 + 1 = 1.5, tested 0.5 * 1.5 + 1 = 1.75
    m.update(3, 2, 2)
    assert m.accepted[3] == pytest.approx(1.5) and m.tested[3] == pytest.approx(1.75)
    assert m.rate(3) == pytest.approx(2.5 / 3.75)
    m.update(0, 4, 2)  # no match length: no evidence
    m.update(2, 0, 0)  # no drafts: no evidence
    assert m.tested == [0, 0, 1, 1.75]
    # exploration: the EXPLORE_EVERY-th refusal since the last test says "draft anyway"
    assert [m.refuse(1) for _ in range(EXPLORE_EVERY)] == [False] * (EXPLORE_EVERY - 1) + [True]
    assert not m.refuse(1)  # the count starts again
    m.update(1, 1, 0)  # a test resets it too
    assert [m.refuse(1) for _ in range(EXPLORE_EVERY)][-1] is True


def make_decoder(k=4, lo=2, hi=5):
    runner = SimpleNamespace(device="cpu", spec_graphs=None, num_blocks=1 << 16, block_size=16)
    spec = SpeculativeConfig("ngram", k, lo, hi)
    return SpeculativeDecoder(spec, SimpleNamespace(seed=0), runner, None, max_model_len=1 << 14)


def decoding_seq(tokens, max_tokens=200, num_prompt=None):
    """A sequence in decode: ``tokens`` are its prompt (all but the last ``len - num_prompt``)
    plus sampled tokens, the last one not yet computed."""
    num_prompt = len(tokens) - 1 if num_prompt is None else num_prompt
    s = Sequence("s", "s", 0, list(tokens[:num_prompt]), SamplingParams(temperature=0))
    s.all_token_ids = list(tokens)
    s.num_computed_tokens = len(tokens) - 1
    s.max_total_len = len(tokens) + max_tokens
    return s


@pytest.mark.parametrize("step_s", [1e-4, 0.1])
def test_sequence_is_indexed_once_a_lookup_matches_where_lookups_back_off(step_s):
    """Where lookups back off (a 0.1 ms step: a token worth less than 1 ms) a sequence is
    scanned until a lookup matches and indexed from then on; at 0.1 s a step (a lookup
    every step) it is indexed from its first lookup. The drafts are the same."""
    dec = make_decoder()
    dec.adaptive = False
    dec.cost.observe(1, 0, step_s)
    seq = decoding_seq(list(range(100, 140)))  # no repeats: the lookup never matches
    dec.plan([seq])
    st = dec._state[seq]
    assert seq.spec_token_ids == []
    assert (st.index is None) == (step_s < 1e-3)  # scanned, not indexed
    seq.all_token_ids += [120, 121]  # "120 121" occurred: followed by 122 123 124 125
    seq.num_computed_tokens = seq.num_tokens - 1
    st.lookup_wait = 0
    dec.plan([seq])
    assert seq.spec_token_ids == [122, 123, 124, 125] and st.index is not None
    assert st.match_len == 2
    seq.all_token_ids += [122]  # the index carries on from here: "120 121 122", 3 tokens
    seq.num_computed_tokens = seq.num_tokens - 1
    dec.plan([seq])
    assert seq.spec_token_ids == [123, 124, 125, 126] and st.match_len == 3


@pytest.mark.parametrize(
    "step_s, want", [(1e-4, [0, 2, 5, 10, 19, 28, 37]), (0.1, list(range(40)))]
)
def test_lookup_backoff_schedule(step_s, want, monkeypatch):
    """A sequence whose lookups never match, 40 decode steps: where a token is worth less than
    LOOKUP_BACKOFF_TOKEN_SECONDS (1 ms) lookups wait 1, 2, 4, 8, 8 ... steps after each failed
    one (by hand: lookups at steps 0, 2, 5, 10, 19, 28, 37); at 0.1 s a step, every step."""
    dec = make_decoder()
    dec.adaptive = False
    dec.cost.observe(1, 0, step_s)
    calls = []
    lookup = decoder_mod._SeqState.lookup

    def counted(self, *args):
        calls.append(step)
        return lookup(self, *args)

    monkeypatch.setattr(decoder_mod._SeqState, "lookup", counted)
    seq = decoding_seq(list(range(1000, 1010)))
    for step in range(40):
        dec.plan([seq])
        seq.all_token_ids.append(2000 + step)
        seq.num_computed_tokens = seq.num_tokens - 1
    assert calls == want


def test_lookup_backoff_ends_at_a_match():
    dec = make_decoder()
    dec.adaptive = False
    dec.cost.observe(1, 0, 1e-4)
    seq = decoding_seq(list(range(1000, 1010)))
    st = None
    for step in range(6):  # lookups at 0, 2, 5 fail: waits 1, 2, 4
        dec.plan([seq])
        st = dec._state[seq]
        seq.all_token_ids.append(2000 + step)
        seq.num_computed_tokens = seq.num_tokens - 1
    assert (st.lookup_backoff, st.lookup_wait) == (4, 4)
    seq.all_token_ids += [1003, 1004]  # a copy of the prompt starts during the wait
    seq.num_computed_tokens = seq.num_tokens - 1
    for _ in range(4):  # steps 6..9 wait, even though the suffix matches now
        dec.plan([seq])
        assert seq.spec_token_ids == []
    dec.plan([seq])  # step 10: the lookup finds the copy, the backoff ends
    assert seq.spec_token_ids == [1005, 1006, 1007, 1008]
    assert st.lookup_backoff == st.lookup_wait == 0 and st.match_len == 2


def priced_decoder(rates):
    """A decoder with a preloaded cost model (decode step 1 s at batch 1, each extra token
    0.3 s) and match-length estimates ``rates`` (length -> rate, from 10 tests each)."""
    dec = make_decoder()
    dec.cost.observe(1, 0, 1.0)
    dec.cost.observe(1, 1, 1.3)
    for m, r in rates.items():
        dec.match.tested[m] = 10.0
        dec.match.accepted[m] = r * 12.0 - 1.0  # (acc + 1) / (10 + 2) = r
    return dec


def test_drafts_are_cut_to_those_their_match_length_pays_for():
    # after a 2-token match the drafts are emitted with probability 0.8, 0.8 * 0.6 = 0.48,
    # 0.48 * 0.5 = 0.24: worth 1 s a token against 0.3 s each, the first two pay
    dec = priced_decoder({2: 0.8, 3: 0.6, 4: 0.5, 5: 0.5})
    assert dec.match.rate(2) == pytest.approx(0.8)
    seq = decoding_seq([5, 6, 7, 8, 9, 10, 11, 40, 41, 5, 6])
    dec.plan([seq])
    assert seq.num_lookahead_tokens == 2 and seq.spec_token_ids == [7, 8]
    # rejected: no backoff for drafts priced by their match length
    dec.account([seq], [[7, 8]], [0])
    st = dec._state[seq]
    assert st.wait == 0
    assert dec.match.tested[2] == pytest.approx(0.98 * 10 + 1)


def test_refused_drafts_wait_for_nothing_and_are_explored():
    # after a 2-token match the first draft is accepted with probability 0.2 < 0.3: refused,
    # with no backoff (the next step's match may be longer); the EXPLORE_EVERY-th refusal
    # of that length drafts all the lookup has
    dec = priced_decoder({2: 0.2})
    seq = decoding_seq([5, 6, 7, 8, 9, 10, 11, 40, 41, 5, 6])
    for _ in range(EXPLORE_EVERY - 1):
        dec.plan([seq])
        assert seq.num_lookahead_tokens == 0
        assert dec._state[seq].wait == 0
    dec.plan([seq])
    assert seq.spec_token_ids == [7, 8, 9, 10]


def test_unpriced_rejection_still_backs_off():
    dec = make_decoder()
    dec.adaptive = False  # drafts not priced: a fully rejected step waits 1, 2, 4 ...
    seq = decoding_seq([5, 6, 7, 8, 9, 10, 11, 40, 41, 5, 6])
    dec.plan([seq])
    assert seq.spec_token_ids == [7, 8, 9, 10]
    dec.account([seq], [[7, 8, 9, 10]], [0])
    assert dec._state[seq].wait == 1
    assert decoder_mod.MAX_LOOKUP_BACKOFF_STEPS == 8


def test_exploration_every_n_refusals():
    m = MatchAcceptance(5)
    assert [m.refuse(3, every=3) for _ in range(6)] == [False, False, True] * 2
    # the decoder explores after EXPLORE_EVERY * batch refusals: about once per 16 steps
    # whatever the batch (16 refusals at batch 8 came every 2 steps)
    assert [m.refuse(2, every=EXPLORE_EVERY * 8) for _ in range(EXPLORE_EVERY * 8)].count(True) == 1


def test_no_waiting_request_prices_tokens_at_the_marginal_step_cost():
    # batch 2: decode 1.2 s (batch 1: 1.0 s), each extra token 0.3 s. After a 2-token match
    # (rate 0.8, then 0.1) the first draft is emitted with probability 0.8. Requests waiting:
    # a token is worth 1.2 / 2 = 0.6 s, 0.8 * 0.6 = 0.48 > 0.3 pays. None waiting: worth the
    # marginal (1.2 - 1.0) / (2 - 1) = 0.2 s, 0.8 * 0.2 = 0.16 < 0.3: refused.
    for waiting, expect in ((True, 1), (False, 0)):
        dec = priced_decoder({2: 0.8, 3: 0.1, 4: 0.1, 5: 0.1})
        dec.cost.observe(2, 0, 1.2)
        dec.cost.observe(2, 1, 1.5)
        seqs = [decoding_seq([5, 6, 7, 8, 9, 10, 11, 40, 41, 5, 6]) for _ in range(2)]
        dec.plan(seqs, waiting=waiting)
        assert [s.num_lookahead_tokens for s in seqs] == [expect, expect], waiting
