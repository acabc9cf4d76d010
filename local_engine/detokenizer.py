"""Streaming detokenization for the engine's output path: one ``tokenizers`` call per token.

:class:`StreamDetokenizer` wraps ``tokenizers.decoders.DecodeStream`` (tokenizers >= 0.21),
which keeps the prefix/read offsets of vLLM's ``detokenize_incrementally`` in Rust: each
``step`` decodes only the few ids since the last emitted text and returns the newly completed
text, holding back a token that ends in the middle of a multi-byte UTF-8 character until the
character is complete. It does the work of
:class:`~local_engine.tokenizer.IncrementalDetokenizer` (two Python ``decode`` calls and list
slices per token) in about a third of the time (measured 2.6 vs 7.2 us a token on SmolLM2's
vocabulary, 2026-11-29, ``bench/step_overhead.py``), and gives the same text.

Where ``DecodeStream`` is missing (older ``tokenizers``) or refuses a step (its
``InvalidPrefix`` error, when re-decoding changes text it already gave out), the rest of the
sequence goes through :class:`IncrementalDetokenizer`, seeded with the recent ids.
"""

from __future__ import annotations

from typing import List, Sequence

from .tokenizer import IncrementalDetokenizer, Tokenizer

try:  # tokenizers >= 0.21
    from tokenizers.decoders import DecodeStream as _DecodeStream
except ImportError:  # pragma: no cover - older tokenizers
    _DecodeStream = None

#: Prompt ids given as context (so the first output token decodes as it would mid-text).
CONTEXT_IDS = 6


class StreamDetokenizer:
    """Token ids in, text deltas out, one id at a time.

    Args:
        tokenizer: the engine's :class:`~local_engine.tokenizer.Tokenizer`.
        prompt_tail: ids before the first one added (only the last :data:`CONTEXT_IDS` are
            used, as context; their text is not emitted).
        skip_special_tokens: drop control tokens from the text.

    The caller keeps the text (the engine appends each delta to the sample's text, where the
    stop strings are checked).
    """

    __slots__ = ("tokenizer", "skip", "_stream", "_hf", "_recent", "_fallback")

    def __init__(self, tokenizer: Tokenizer, prompt_tail: Sequence[int] = (),
                 skip_special_tokens: bool = True):
        self.tokenizer = tokenizer
        self.skip = skip_special_tokens
        context = list(prompt_tail)[-CONTEXT_IDS:]
        self._recent: List[int] = context
        self._fallback = None
        self._hf = getattr(tokenizer, "_tok", None)
        if _DecodeStream is None or self._hf is None:
            self._stream = None
            self._fallback = IncrementalDetokenizer(tokenizer, context, skip_special_tokens)
        else:
            self._stream = _DecodeStream(ids=context, skip_special_tokens=skip_special_tokens)

    def add(self, token_id: int) -> str:
        """Append one id; returns the newly completed text (possibly empty)."""
        if self._fallback is None:
            try:
                delta = self._stream.step(self._hf, token_id)
            except Exception:  # DecodeStream's InvalidPrefix: finish with the Python method
                self._fallback = IncrementalDetokenizer(self.tokenizer, self._recent, self.skip)
            else:
                recent = self._recent
                recent.append(token_id)
                if len(recent) > 2 * CONTEXT_IDS:
                    del recent[:-CONTEXT_IDS]
                return delta or ""
        return self._fallback.add(token_id)


__all__ = ["StreamDetokenizer", "CONTEXT_IDS"]
