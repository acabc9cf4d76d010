"""``EngineConfig.speculative`` validation (one error naming the fix) and the prompt-lookup
proposer against a brute-force reference."""

from __future__ import annotations

import random

import pytest

from local_engine.config import EngineConfig
from local_engine.errors import EngineError
from local_engine.spec_decode.config import SpeculativeConfig, parse_cli
from local_engine.spec_decode.ngram import NgramProposer


def test_dict_becomes_config_with_defaults():
    cfg = EngineConfig(speculative={"method": "ngram", "num_speculative_tokens": 4})
    assert cfg.speculative == SpeculativeConfig("ngram", 4, 1, 5)  # the defaults: lookup 1..5
    assert EngineConfig().speculative is None


@pytest.mark.parametrize(
    "value, message",
    [
        ({"method": "eagle", "num_speculative_tokens": 3}, "must be 'ngram' or 'draft'"),
        ({"method": "ngram", "num_speculative_tokens": 0}, r"integer in 1\.\.32.*speculative=None"),
        ({"method": "ngram", "num_speculative_tokens": 33}, r"1\.\.32"),
        ({"method": "ngram", "num_speculative_tokens": True}, r"1\.\.32"),
        ({"method": "ngram"}, "lacks 'num_speculative_tokens'"),
        ({"method": "ngram", "num_speculative_tokens": 2, "k": 1}, r"unknown speculative option"),
        (
            {
                "method": "ngram",
                "num_speculative_tokens": 2,
                "prompt_lookup_min": 4,
                "prompt_lookup_max": 3,
            },
            r"prompt_lookup_min \(4\) must not exceed prompt_lookup_max \(3\)",
        ),
        (
            {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 0},
            "prompt_lookup_min must be a positive integer",
        ),
        ({"method": "ngram", "num_speculative_tokens": 2, "model": "x"}, "takes no 'model'"),
        ({"method": "draft", "num_speculative_tokens": 2}, "exactly one of 'model'"),
        (
            {"method": "draft", "num_speculative_tokens": 2, "model": "x", "layers": 2},
            "exactly one of 'model'",
        ),
        ({"method": "draft", "num_speculative_tokens": 2, "layers": 0}, "positive integer"),
        ("ngram", "must be None or a dict"),
    ],
)
def test_bad_values_name_the_fix(value, message):
    with pytest.raises(EngineError, match=message):
        EngineConfig(speculative=value)


def test_k_must_fit_the_step_budget():
    with pytest.raises(EngineError, match="max_num_batched_tokens is 4; lower K or raise"):
        EngineConfig(
            max_num_batched_tokens=4, speculative={"method": "ngram", "num_speculative_tokens": 4}
        )


def test_cli_forms():
    assert parse_cli(None, None) is None
    assert parse_cli("ngram", 3) == SpeculativeConfig("ngram", 3)
    assert parse_cli("draft:/m", 2) == SpeculativeConfig("draft", 2, model="/m")
    assert parse_cli("layers:6", None) == SpeculativeConfig("draft", 4, layers=6)
    with pytest.raises(EngineError, match="needs --speculative"):
        parse_cli(None, 3)
    with pytest.raises(EngineError, match="'ngram', 'draft:PATH' or 'layers:N'"):
        parse_cli("draft:", 3)


def reference_lookup(tokens, lo, hi, k):
    """Brute force: the longest n in hi..lo whose suffix occurs earlier (ending before the
    last token), its most recent occurrence; (the k tokens after it, n), ([], 0) if none."""
    L = len(tokens)
    for n in range(hi, lo - 1, -1):
        if n >= L:
            continue
        suffix = tokens[L - n :]
        for end in range(L - 2, n - 2, -1):  # occurrence tokens[end-n+1 .. end]
            if tokens[end - n + 1 : end + 1] == suffix:
                return tokens[end + 1 : end + 1 + k], n
    return [], 0


def test_ngram_matches_brute_force():
    rng = random.Random(0)
    for _trial in range(400):
        vocab = rng.choice([2, 3, 5, 50])
        tokens = [rng.randrange(vocab) for _ in range(rng.randrange(1, 60))]
        lo = rng.randrange(1, 4)
        hi = lo + rng.randrange(0, 4)
        k = rng.randrange(1, 9)
        assert NgramProposer(lo, hi).propose(tokens, k) == reference_lookup(tokens, lo, hi, k)[0], (
            tokens,
            lo,
            hi,
            k,
        )


def test_ngram_examples():
    p = NgramProposer(2, 4)
    # "3 4" occurred before, followed by "5 9 2"; the suffix "2 3 4" is the longest match
    assert p.propose([1, 2, 3, 4, 5, 9, 2, 3, 4], 3) == [5, 9, 2]
    assert p.propose([1, 2, 3, 4, 5, 6], 3) == []  # nothing repeats
    assert p.propose([7, 1, 2, 8, 1, 2, 9, 1, 2], 2) == [9, 1]  # the most recent occurrence
    assert NgramProposer(1, 1).propose([4, 1, 4], 5) == [1, 4]


def test_incremental_index_matches_propose_and_brute_force():
    """NgramIndex (the engine's O(1)-a-step lookup) drafts what NgramProposer.propose drafts,
    and NgramProposer.lookup and the index's match length equal the brute-force reference,
    after every token of random sequences over small vocabularies (many repeats)."""
    import random

    from local_engine.spec_decode.ngram import NgramProposer

    rng = random.Random(0)
    for lo, hi in ((1, 1), (2, 5), (1, 4), (3, 4)):
        p = NgramProposer(lo, hi)
        for _ in range(40):
            vocab = rng.choice([2, 3, 5, 20])
            seq = [rng.randrange(vocab) for _ in range(rng.randrange(1, 90))]
            index = p.index()
            for n in range(1, len(seq) + 1):
                index.extend(seq[:n])
                for k in (1, 4):
                    want = reference_lookup(seq[:n], lo, hi, k)
                    assert p.lookup(seq[:n], k) == want, (lo, hi, seq[:n], k)
                    assert index.propose(k) == p.propose(seq[:n], k), (lo, hi, seq[:n], k)
                    assert (index.propose(k), index.match_length) == want, (lo, hi, seq[:n], k)


def test_bulk_extend_equals_token_by_token():
    """Indexing many tokens at once (a prompt) records the same latest occurrences and drafts
    the same as indexing them one at a time, and as NgramProposer.propose, for prompts of
    every length (shorter than an n-gram too) followed by single tokens."""
    import random

    from local_engine.spec_decode.ngram import NgramProposer

    rng = random.Random(1)
    for lo, hi in ((1, 1), (2, 5), (3, 4), (1, 6)):
        p = NgramProposer(lo, hi)
        for _ in range(60):
            vocab = rng.choice([2, 3, 7, 50])
            seq = [rng.randrange(vocab) for _ in range(rng.randrange(1, 80))]
            m = rng.randrange(1, len(seq) + 1)  # the prompt: indexed in one call
            bulk, single = p.index(), p.index()
            bulk.extend(seq[:m])
            for n in range(1, m + 1):
                single.extend(seq[:n])
            assert bulk._last == single._last and bulk.tokens == single.tokens
            for n in range(m, len(seq) + 1):
                bulk.extend(seq[:n])
                for k in (1, 4):
                    assert bulk.propose(k) == p.propose(seq[:n], k), (lo, hi, seq[:n], m, k)
