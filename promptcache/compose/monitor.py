"""Prefix drift in production: notice when a prompt's frozen prefix changes, say where, and
surface the provider's own explanation of a miss where it gives one.

- :class:`PrefixMonitor` remembers, per named prompt, the last frozen layers it saw and
  reports a :class:`PrefixChange` when the prefix hash changes: which layer, the first
  differing character (in that layer's canonical text) and token offset (from the start of
  the frozen prefix), and how often the prompt changed within the window (default 1 h).
- :func:`cache_miss_reason` reads Anthropic's cache diagnostics (``diagnostics.
  cache_miss_reason`` of a response to a request sent with ``diagnostics.
  previous_message_id``; ``Prompt.to_anthropic(..., previous_message_id=...)`` asks for it).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from promptcache.prompt.tokens import count_tokens

__all__ = ["PrefixMonitor", "PrefixChange", "CacheMiss", "cache_miss_reason"]

_FROZEN_ORDER = ("tools", "system", "documents")


@dataclass(frozen=True)
class PrefixChange:
    """A change of one named prompt's frozen prefix.

    Attributes:
        name: the prompt's name.
        layer: the first layer (in cache order tools -> system -> documents) that differs.
        char_offset: first differing character in that layer's canonical text.
        token_offset: tokens of the frozen prefix before the difference (an estimate unless
            the model has an exact tokenizer; see :mod:`promptcache.prompt.tokens`).
        old_hash / new_hash: the prefix hashes before and after.
        changes_in_window: changes of this prompt within the monitor's window, this one
            included.
        before / after: up to 40 characters around the difference, old and new.
        at: the time of the observation (seconds since the epoch).
    """

    name: str
    layer: str
    char_offset: int
    token_offset: int
    old_hash: str
    new_hash: str
    changes_in_window: int
    before: str
    after: str
    at: float

    def __str__(self) -> str:
        return (
            f"prompt {self.name!r}: frozen prefix changed in layer {self.layer!r} at "
            f"character {self.char_offset} (about token {self.token_offset}); "
            f"{self.before!r} -> {self.after!r}; {self.changes_in_window} change(s) in the "
            f"last window"
        )


@dataclass
class _State:
    prefix_hash: str
    layers: dict[str, str]
    changes: deque  # timestamps of changes


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    # compare in chunks first (fast path for long equal prefixes)
    step = 4096
    while i + step <= n and a[i : i + step] == b[i : i + step]:
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PrefixMonitor:
    """Track the frozen prefix of named prompts and report changes.

    Args:
        window_s: the window, in seconds, over which changes are counted (default 3600).
        model: the model whose tokenizer gives the token offsets (``None``: an estimate).
        clock: a function returning the time in seconds (``time.time``); injectable for tests.
        on_change: called with each :class:`PrefixChange` (e.g. a logger or a metric).

    Thread-safe. Holds the last frozen text of each name in memory (nothing is persisted).
    """

    def __init__(
        self,
        window_s: float = 3600.0,
        *,
        model: str | None = None,
        clock: Callable[[], float] = time.time,
        on_change: Callable[[PrefixChange], Any] | None = None,
    ) -> None:
        if window_s <= 0:
            raise ValueError(f"window_s must be positive, got {window_s!r}")
        self.window_s = float(window_s)
        self.model = model
        self._clock = clock
        self._on_change = on_change
        self._state: dict[str, _State] = {}
        self._lock = threading.Lock()
        self.miss_reasons: dict[str, CacheMiss] = {}

    def observe(self, name: str, prompt: Any) -> PrefixChange | None:
        """Record ``prompt`` (a :class:`promptcache.Prompt`) as the current version of
        ``name``; return a :class:`PrefixChange` if its prefix hash differs from the last
        one seen, else ``None`` (also on the first observation)."""
        now = self._clock()
        layers = prompt.layer_texts()
        frozen = {k: layers[k] for k in _FROZEN_ORDER}
        with self._lock:
            st = self._state.get(name)
            if st is None:
                self._state[name] = _State(prompt.prefix_hash, frozen, deque())
                return None
            if st.prefix_hash == prompt.prefix_hash:
                self._trim(st, now)
                return None
            change = self._describe(name, st, frozen, prompt.prefix_hash, now)
            st.prefix_hash, st.layers = prompt.prefix_hash, frozen
        if self._on_change is not None:
            self._on_change(change)
        return change

    def _trim(self, st: _State, now: float) -> None:
        while st.changes and st.changes[0] <= now - self.window_s:
            st.changes.popleft()

    def _describe(
        self, name: str, st: _State, new: dict[str, str], new_hash: str, now: float
    ) -> PrefixChange:
        st.changes.append(now)
        self._trim(st, now)
        before_tokens = 0  # tokens of the layers before the differing one
        for layer in _FROZEN_ORDER:
            old_t, new_t = st.layers.get(layer, ""), new[layer]
            if old_t != new_t:
                off = _common_prefix(old_t, new_t)
                tok = before_tokens + count_tokens(new_t[:off], self.model).tokens
                return PrefixChange(
                    name,
                    layer,
                    off,
                    tok,
                    st.prefix_hash,
                    new_hash,
                    len(st.changes),
                    old_t[max(0, off - 10) : off + 30],
                    new_t[max(0, off - 10) : off + 30],
                    now,
                )
            before_tokens += count_tokens(new_t, self.model).tokens if new_t else 0
        # equal texts but different hash (e.g. document titles): report the whole prefix
        return PrefixChange(
            name, "documents", 0, 0, st.prefix_hash, new_hash, len(st.changes), "", "", now
        )

    def changes(self, name: str) -> int:
        """How many times ``name``'s prefix changed within the window (0 if never seen)."""
        with self._lock:
            st = self._state.get(name)
            if st is None:
                return 0
            self._trim(st, self._clock())
            return len(st.changes)

    def prefix_hash(self, name: str) -> str | None:
        """The last prefix hash seen for ``name`` (``None`` if never seen)."""
        with self._lock:
            st = self._state.get(name)
            return st.prefix_hash if st else None

    def observe_response(self, name: str, response: Any) -> CacheMiss | None:
        """Record the provider's explanation of a cache miss for ``name`` (see
        :func:`cache_miss_reason`) and return it (``None`` when there was none)."""
        miss = cache_miss_reason(response)
        if miss is not None:
            with self._lock:
                self.miss_reasons[name] = miss
        return miss


# ---- Anthropic cache diagnostics --------------------------------------------------------------

_MISS_TEXT = {
    "model_changed": "the model differs from the previous request's",
    "system_changed": "the system prompt differs from the previous request's",
    "tools_changed": "the tools differ (added, removed or reordered) from the previous request's",
    "messages_changed": "an earlier message differs, instead of new ones only being appended",
    "previous_message_not_found": "the API has no record of the previous message id",
    "unavailable": "the API could not give a diagnosis",
}


@dataclass(frozen=True)
class CacheMiss:
    """A provider-reported cache miss: ``reason`` (Anthropic's ``cache_miss_reason.type``),
    ``missed_tokens`` (input tokens that would have been read from the cache, when given)
    and a readable ``description``."""

    reason: str
    missed_tokens: int | None
    description: str

    def __str__(self) -> str:
        extra = (
            f" (~{self.missed_tokens} tokens not read from the cache)"
            if self.missed_tokens is not None
            else ""
        )
        return f"cache miss: {self.description}{extra}"


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)


def cache_miss_reason(response: Any) -> CacheMiss | None:
    """Anthropic's explanation of a prompt-cache miss, from a ``Message`` (SDK object) or its
    JSON dict: ``diagnostics.cache_miss_reason`` (source: anthropic-python 2.14.0,
    ``anthropic/types/diagnostics.py`` and ``cache_miss_*.py``). ``None`` when the response
    carries no diagnosis (not requested, still pending, or a full hit)."""
    reason = _get(_get(response, "diagnostics"), "cache_miss_reason")
    if reason is None:
        return None
    rtype = _get(reason, "type")
    if not isinstance(rtype, str):
        return None
    missed = _get(reason, "cache_missed_input_tokens")
    return CacheMiss(
        rtype,
        int(missed) if isinstance(missed, int) else None,
        _MISS_TEXT.get(rtype, rtype.replace("_", " ")),
    )
