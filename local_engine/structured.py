"""Constrained decoding: a grammar per request, a token mask per sampled row.

The grammar engine is llguidance (https://github.com/guidance-ai/llguidance, PyPI
``llguidance`` 1.9.1, read 2026-12-03): chosen over xgrammar 0.2.8 and outlines-core 0.2.14
after measuring on this CPU host (``bench/structured_decoding.py`` and
``bench/RESULTS.md`` "## engine-api"): it installs with no dependencies (xgrammar pulls
apache-tvm-ffi and triton), compiles a JSON schema in about 1 ms (xgrammar 5-11 ms, paid per
request since schemas come with requests), names the keywords it does not implement
(``Unimplemented keys: ["not"]``; xgrammar ignores unknown keywords silently), and rolls a
matcher back by any number of tokens (speculative drafts). Its mask costs more per token
(about 30 us warm vs 2 us), which the benchmark weighs against a decode step.

Shapes: a bitmask is int32 ``[rows, ceil(vocab / 32)]`` (bit ``t % 32`` of word ``t // 32``
set = token ``t`` allowed), built on the CPU and applied to float logits ``[rows, vocab]`` on
their device (:func:`local_engine.sampling.apply_token_bitmask`).

The engine knows nothing of HTTP: :class:`StructuredOutput` says what the output must be;
the server builds it from ``response_format`` / ``tool_choice`` / ``responseSchema``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .errors import EngineError


class GrammarError(EngineError):
    """A grammar (JSON schema, regex, Lark) that cannot be compiled: invalid, or using a
    keyword the grammar engine does not implement. The message names it."""


@dataclass(frozen=True)
class StructuredOutput:
    """What the generated text must match.

    Attributes:
        json_schema: a JSON schema (dict) the output must validate against; ``{}`` or
            ``{"type": "object"}`` for "any JSON object" (``json_object`` mode).
        lark: a Lark grammar (llguidance dialect) instead of a schema.
    Exactly one is set. Outputs are compact JSON (``,`` and ``:`` separators, no newlines).
    """

    json_schema: dict | None = None
    lark: str | None = None

    def __post_init__(self) -> None:
        if (self.json_schema is None) == (self.lark is None):
            raise EngineError("StructuredOutput needs exactly one of json_schema or lark")

    def key(self) -> str:
        """A stable key of the grammar (for the compile cache)."""
        if self.json_schema is not None:
            return "json:" + json.dumps(self.json_schema, sort_keys=True, separators=(",", ":"))
        return "lark:" + str(self.lark)


#: compact JSON, no whitespace choices left to the model (fewer tokens, and the schema's own
#: ``pattern``/``format`` stay the only freedom)
_JSON_OPTIONS: Any = {"item_separator": ",", "key_separator": ":", "whitespace_flexible": False}


def grammar_of(spec: StructuredOutput) -> str:
    """The llguidance grammar (a JSON string) of ``spec``. Raises :class:`GrammarError` for
    an invalid grammar or an unimplemented keyword (validated here, without a tokenizer)."""
    import llguidance

    try:
        if spec.json_schema is not None:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                spec.json_schema, overrides=_JSON_OPTIONS
            )
        else:
            grammar = llguidance.LLMatcher.grammar_from_lark(str(spec.lark))
    except ValueError as exc:
        raise GrammarError(f"invalid grammar: {exc}") from None
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        raise GrammarError(error.strip().splitlines()[0] if error.strip() else error)
    return grammar


def check(spec: StructuredOutput) -> None:
    """Raise :class:`GrammarError` when ``spec`` cannot be compiled (see :func:`grammar_of`)."""
    grammar_of(spec)


class GrammarCompiler:
    """Per-engine grammar state: the llguidance tokenizer (built once, about 0.3 s for a
    49k vocabulary) and a small cache of compiled grammars by :meth:`StructuredOutput.key`.

    ``tokenizer``: the engine's :class:`~local_engine.tokenizer.Tokenizer`; ``vocab_size``:
    the model's logits width (may exceed the tokenizer's)."""

    def __init__(self, tokenizer: Any, vocab_size: int, cache_size: int = 256):
        self._tokenizer = tokenizer
        self.vocab_size = int(vocab_size)
        self._lltok: Any = None
        self._cache: dict[str, str] = {}
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._executor: Any = None

    @property
    def lltokenizer(self) -> Any:
        if self._lltok is None:
            import llguidance

            with self._lock:
                if self._lltok is None:
                    self._lltok = llguidance.LLTokenizer(
                        self._tokenizer._tok.to_str(),
                        n_vocab=self.vocab_size,
                        eos_token=sorted(self._tokenizer.stop_token_ids),
                    )
        return self._lltok

    def matcher(self, spec: StructuredOutput) -> Any:
        """A fresh ``llguidance.LLMatcher`` at the start of ``spec``'s grammar.

        Raises:
            GrammarError: the grammar does not compile.
        """
        import llguidance

        key = spec.key()
        grammar = self._cache.get(key)
        if grammar is None:
            grammar = grammar_of(spec)
            with self._lock:
                if len(self._cache) >= self._cache_size:
                    self._cache.pop(next(iter(self._cache)))
                self._cache[key] = grammar
        m = llguidance.LLMatcher(self.lltokenizer, grammar)
        if m.is_error():
            raise GrammarError(m.get_error())
        return m

    @property
    def executor(self) -> Any:
        """The llguidance thread pool computing a batch's masks in parallel."""
        if self._executor is None:
            import llguidance

            self._executor = llguidance.LLExecutor()
        return self._executor

    def fill_masks(self, jobs: Sequence[tuple[Any, int]], rows: int) -> torch.Tensor:
        """int32 bitmask ``[rows, ceil(vocab / 32)]``: row ``i`` of each ``(matcher, i)`` job
        holds that matcher's allowed next tokens; other rows allow everything."""
        words = (self.vocab_size + 31) // 32
        bitmask = torch.full((rows, words), -1, dtype=torch.int32)
        if len(jobs) == 1:
            m, i = jobs[0]
            row = bitmask[i]
            m.unsafe_compute_mask_ptr(row.data_ptr(), words * 4)
        elif jobs:
            self.executor.unsafe_compute_mask_ptr(list(jobs), bitmask.data_ptr(), words * 4, rows)
        return bitmask


def verify_masks(
    compiler: GrammarCompiler,
    matchers: Sequence[Any | None],
    drafts: Sequence[Sequence[int]],
    rows: int,
) -> torch.Tensor | None:
    """The bitmask of a speculative verification step: sequence ``s`` owns
    ``len(drafts[s]) + 1`` consecutive rows; row ``j`` of it allows what the grammar allows
    after the sequence's committed tokens plus ``drafts[s][:j]``. Rows past a draft the
    grammar refuses allow everything (that draft is rejected there: its masked probability
    is 0, so verification never reaches them). None when no sequence has a matcher.

    Each matcher is left in the state it was given (the drafts are walked on a copy)."""
    if all(m is None for m in matchers):
        return None
    words = (compiler.vocab_size + 31) // 32
    bitmask = torch.full((rows, words), -1, dtype=torch.int32)
    start = 0
    for m, d in zip(matchers, drafts):
        if m is not None:
            # walk the drafts on a copy: llguidance's rollback after consuming drafts left
            # some matchers accepting tokens the grammar refuses (seen with draft-model drafts)
            walker = m.deep_copy() if d else m
            for j in range(len(d) + 1):
                row = bitmask[start + j]
                walker.unsafe_compute_mask_ptr(row.data_ptr(), words * 4)
                if j == len(d) or not _allowed(row, d[j]) or not walker.consume_token(d[j]):
                    break
        start += len(d) + 1
    return bitmask


def _allowed(row: torch.Tensor, token: int) -> bool:
    return bool((int(row[token // 32]) >> (token % 32)) & 1)


def advance(matcher: Any, tokens: Sequence[int], stop_ids: Collection[int] = ()) -> None:
    """Feed the sampled ``tokens`` to ``matcher`` (an EOS/stop id ends the grammar and is not
    fed). Raises :class:`EngineError` if the matcher refuses one (a bug: the mask allowed it)."""
    for t in tokens:
        if t in stop_ids and (matcher.is_accepting() or matcher.is_stopped()):
            return
        if not matcher.consume_token(t):
            raise EngineError(f"grammar refused sampled token {t}: {matcher.get_error()}")
