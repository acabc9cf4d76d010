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
        n_tok = len(token_ids)
        if k <= 0 or n_tok <= self.min_n:
            return []
        start = max(0, n_tok - self.max_lookback)
        t = np.asarray(token_ids[start:], dtype=np.int64)  # no copy for an int64 array
        L = t.shape[0]
        # ends[i]: an earlier occurrence of the suffix may end at position i (i < L - 1);
        # after j rounds, ends[i] says t[i-j..i] == t[L-1-j..L-1]
        cand = np.flatnonzero(t[: L - 1] == t[L - 1])
        best = -1
        length = 1
        while cand.size:
            if length >= self.min_n:
                best = int(cand[-1])
            if length == self.max_n:
                break
            cand = cand[cand >= length]  # room for one more token to the left
            cand = cand[t[cand - length] == t[L - 1 - length]]
            length += 1
        if best < 0:
            return []
        return t[best + 1 : best + 1 + k].tolist()


__all__ = ["NgramProposer"]
