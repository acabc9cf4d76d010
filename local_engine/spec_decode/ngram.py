"""Prompt lookup (n-gram) drafting: propose the tokens that followed the longest earlier
occurrence of the sequence's own suffix.

Saxena, "Prompt Lookup Decoding" (2023); vLLM v1 ``NgramProposer``. For a sequence
``t[0..L)`` the suffix ``t[L-n..L)`` is matched for ``n`` from ``prompt_lookup_max`` down to
``prompt_lookup_min``; at the longest ``n`` with an earlier occurrence ending at ``i < L - 1``
(the most recent such occurrence, which in an edit or a quotation is where the copy is), the
draft is ``t[i+1 .. i+1+K)`` (shorter when the sequence ends first). No model runs.
"""

from __future__ import annotations

import numpy as np


class NgramProposer:
    """Drafts from the sequence's own tokens.

    Args:
        prompt_lookup_min, prompt_lookup_max: n-gram lengths tried (longest first), >= 1.
        max_lookback: only the last this many tokens are searched (bounds the per-step cost:
            ``O(max_lookback * prompt_lookup_max)`` NumPy element operations per sequence).
    """

    def __init__(self, prompt_lookup_min: int, prompt_lookup_max: int, max_lookback: int = 8192):
        if not 1 <= prompt_lookup_min <= prompt_lookup_max:
            raise ValueError("need 1 <= prompt_lookup_min <= prompt_lookup_max")
        self.min_n = prompt_lookup_min
        self.max_n = prompt_lookup_max
        self.max_lookback = max_lookback

    def propose(self, token_ids, k: int) -> list[int]:
        """Up to ``k`` draft tokens for the sequence ``token_ids`` (a list or int array);
        ``[]`` when no suffix of ``prompt_lookup_min`` or more tokens occurred before."""
        return self.lookup(token_ids, k)[0]

    def lookup(self, token_ids, k: int) -> tuple[list[int], int]:
        """:meth:`propose`'s drafts and the length of the suffix n-gram they continue (the
        longest with an earlier occurrence, ``prompt_lookup_min..max``; 0 with no match).

        A scan of the last ``max_lookback`` tokens: ``O(max_lookback * prompt_lookup_max)``
        NumPy element operations (~5-9 us for 600 tokens on this CPU, bench/RESULTS.md)."""
        n_tok = len(token_ids)
        if k <= 0 or n_tok <= self.min_n:
            return [], 0
        start = max(0, n_tok - self.max_lookback)
        t = np.asarray(token_ids[start:], dtype=np.int64)  # no copy for an int64 array
        L = t.shape[0]
        # ends[i]: an earlier occurrence of the suffix may end at position i (i < L - 1);
        # after j rounds, ends[i] says t[i-j..i] == t[L-1-j..L-1]
        cand = np.flatnonzero(t[: L - 1] == t[L - 1])
        best = -1
        best_len = 0
        length = 1
        while cand.size:
            if length >= self.min_n:
                best, best_len = int(cand[-1]), length
            if length == self.max_n:
                break
            cand = cand[cand >= length]  # room for one more token to the left
            cand = cand[t[cand - length] == t[L - 1 - length]]
            length += 1
        if best < 0:
            return [], 0
        return t[best + 1 : best + 1 + k].tolist(), best_len

    def index(self) -> NgramIndex:
        """A new, empty :class:`NgramIndex` with this proposer's n-gram lengths."""
        return NgramIndex(self.min_n, self.max_n)


class NgramIndex:
    """Prompt lookup for one growing sequence at O(1) per step: the same drafts as
    :meth:`NgramProposer.propose` (without its lookback bound), found incrementally.

    For every n-gram of ``prompt_lookup_min..max`` tokens the index keeps the end position of
    its latest occurrence. Appending token ``t[L-1]`` looks up the n-grams ending there before
    recording them, which gives, for each ``n``, the most recent earlier occurrence of the
    sequence's ``n``-token suffix; the longest ``n`` that has one is the match. A step costs
    ``prompt_lookup_max - prompt_lookup_min + 1`` dictionary look-ups per new token (the
    prompt's tokens once, when the sequence first drafts), against NumPy scans of the whole
    sequence for :meth:`NgramProposer.propose`: at batch 64 those scans, ~20 us a sequence,
    were a tenth of an 8B decode step on an H200 (bench/RESULTS.md).
    """

    __slots__ = ("min_n", "max_n", "tokens", "_last", "_match", "match_length")

    def __init__(self, prompt_lookup_min: int, prompt_lookup_max: int):
        self.min_n, self.max_n = prompt_lookup_min, prompt_lookup_max
        self.tokens: list[int] = []
        self._last: dict[tuple[int, ...], int] = {}
        self._match = -1  # end of the latest earlier occurrence of the longest suffix n-gram
        #: length of that n-gram (0: no match), as :meth:`NgramProposer.lookup` returns it
        self.match_length = 0

    def extend(self, token_ids) -> None:
        """Index ``token_ids[len(self.tokens):]`` (``token_ids`` is the whole sequence, of
        which the indexed tokens are a prefix)."""
        t = self.tokens
        last = self._last
        lo, hi = self.min_n, self.max_n
        new = token_ids[len(t) :]
        if len(new) > 1:
            # bulk (the prompt, when a sequence first drafts): record the n-grams ending at
            # every new position but the last with C-level zips (a later occurrence overwrites
            # an earlier one, as the loop below does); only the last position's look-up
            # decides the match, so it goes through the loop. 64 prompts of 513 tokens: 43 ms
            # against 83 ms token by token (this 2-core CPU, 2026-12-01).
            start = len(t)
            t.extend(new[:-1])
            end = len(t)  # positions start .. end-1 are recorded here
            for n in range(lo, hi + 1):
                first = max(start, n - 1)  # the first new position an n-gram can end at
                if first >= end:
                    continue
                grams = zip(*(t[first - n + 1 + i : end - n + 1 + i] for i in range(n)))
                last.update(zip(grams, range(first, end)))
            new = new[-1:]
        for tok in new:
            t.append(tok)
            end = len(t) - 1
            match, match_len = -1, 0
            for n in range(lo, min(hi, end + 1) + 1):
                key = tuple(t[end - n + 1 :])
                prev = last.get(key)
                if prev is not None:  # a longer n overrides: the longest n with an occurrence
                    match, match_len = prev, n
                last[key] = end
            self._match = match
            self.match_length = match_len

    def propose(self, k: int) -> list[int]:
        """Up to ``k`` drafts after the indexed sequence (``[]`` when nothing matched)."""
        if k <= 0 or self._match < 0:
            return []
        i = self._match + 1
        return self.tokens[i : i + k]


__all__ = ["NgramIndex", "NgramProposer"]
