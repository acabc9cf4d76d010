"""The hosted providers' documented prompt-cache rules, as a small deterministic model.

Pure Python (no torch, no ``local_engine``): the local server's ``--cache-mode
anthropic|openai`` uses it to compute the usage it reports, and ``promptcache simulate``
replays traces through it.

Model of a prompt
-----------------
A prompt is a sequence of tokens cut into *content blocks* (a tool definition, a system
text block, one message's content block ...). Callers describe it with a
:class:`PromptLayout`: the token ids (or any :class:`PrefixSource` that can fingerprint
a prefix of a given length), the token offsets where blocks end, and the cache
breakpoints (:class:`Breakpoint`: the end offset of the prefix to cache and its TTL).

A :class:`CacheState` holds the live cache entries (prefix fingerprint -> expiry) on a
clock (:class:`ManualClock` in tests). Each ``*_usage`` function takes a state and a
layout, returns a :class:`CacheUsage` (read / written by TTL / uncached token counts) and
updates the state: writes new entries and refreshes the ones it hit.

Sources (all retrieved 2026-11-29)
-----------------------------------
Anthropic — https://platform.claude.com/docs/en/build-with-claude/prompt-caching
  * the prefix is ``tools`` -> ``system`` -> ``messages``, up to and including the block
    that carries ``cache_control``; at most 4 breakpoints per request; the error text
    is "A maximum of 4 blocks with cache_control may be provided. Found N."
  * TTL "5m" (default) or "1h"; a 1h breakpoint may not follow a 5m one (error text
    "...: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control
    block. Note that blocks are processed in the following order: `tools`, `system`,
    `messages`."); the TTL is refreshed each time the entry is read.
  * hits are looked for at the breakpoint and at earlier block boundaries, at most 20
    blocks back from each breakpoint (the breakpoint's own block included).
  * a prefix shorter than the model's minimum cacheable length is silently not cached
    (per-model table: :func:`promptcache.limits.cache_limits`).
  * usage: ``input_tokens`` counts only tokens after the last breakpoint (plus any
    prefix that could not be cached), ``cache_read_input_tokens``,
    ``cache_creation_input_tokens`` split into ``ephemeral_5m``/``ephemeral_1h``.
  * automatic caching: one top-level ``cache_control`` puts the breakpoint on the last
    cacheable block (it counts towards the 4).
OpenAI — https://developers.openai.com/api/docs/guides/prompt-caching
  * caching applies to prompts of 1,024 tokens or more; on models before GPT-5.6 hits
    come in increments of 128 tokens (1024, 1152, 1280, ...) and writes are free and
    not reported.
  * requests are routed by a hash of the prompt's first tokens combined with
    ``prompt_cache_key``: requests with different keys do not share a cache.
  * in-memory retention keeps a prefix 5-10 minutes after its last use, at most one
    hour; ``prompt_cache_retention="24h"`` keeps it up to 24 hours.
  * GPT-5.6 and later: one implicit breakpoint near the latest message plus explicit
    ``prompt_cache_breakpoint`` marks; a request writes at most 4 (the implicit one and
    the latest 3 explicit, or the latest 4 explicit with ``prompt_cache_options.mode =
    "explicit"``); matching considers the latest 80 breakpoints, with no lookback limit
    and no 128-token rounding; TTL "30m" by default or "12h"; writes are reported in
    ``prompt_tokens_details.cache_write_tokens`` and priced at 1.25x uncached input.

Deliberate simplifications (documented, deterministic): OpenAI's overflow routing
(about 15 requests/minute per prefix and key) and its 5-10 minute window are modelled as
one machine per key and a 5-minute idle expiry; provider-side eviction under memory
pressure is not modelled.
"""

from __future__ import annotations

import hashlib
import re
import struct
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from promptcache.limits import (
    ANTHROPIC_DEFAULT_MIN_TOKENS,
    ANTHROPIC_LOOKBACK_BLOCKS,
    ANTHROPIC_MAX_BREAKPOINTS,
    ANTHROPIC_TTL_SECONDS,
    ANTHROPIC_TTLS,
    GEMINI_IMPLICIT_TTL_SECONDS,
    OPENAI_BREAKPOINT_TTLS,
    OPENAI_CACHE_INCREMENT,
    OPENAI_IN_MEMORY_MAX_SECONDS,
    OPENAI_MATCH_BREAKPOINTS,
    OPENAI_MAX_WRITTEN_BREAKPOINTS,
    OPENAI_MIN_CACHED_TOKENS,
    OPENAI_RETENTIONS,
    OPENAI_TTL_SECONDS,
    cache_limits,
)

__all__ = [
    "gemini_implicit_usage",
    "CacheRuleError",
    "ManualClock",
    "PrefixSource",
    "TokenPrefix",
    "BlockPrefix",
    "Breakpoint",
    "PromptLayout",
    "CacheUsage",
    "CacheState",
    "anthropic_min_cacheable_tokens",
    "check_anthropic_breakpoints",
    "anthropic_usage",
    "openai_uses_breakpoints",
    "openai_round_cached",
    "openai_usage",
    "openai_breakpoint_usage",
]

# The documented numbers (breakpoint count, TTLs, lookback, OpenAI's minimum and increment)
# are read from the one table, :mod:`promptcache.limits`.


class CacheRuleError(ValueError):
    """A request breaks a provider rule that the provider answers with HTTP 400.

    ``message`` is the provider's own wording; ``param`` the offending field's path when
    known (e.g. ``"messages.0.content.4.cache_control.ttl"``)."""

    def __init__(self, message: str, *, param: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param


# --------------------------------------------------------------------------------------
# Clock and prefix fingerprints
# --------------------------------------------------------------------------------------


class ManualClock:
    """A clock that only moves when told: ``now()`` in seconds, ``advance(seconds)``."""

    def __init__(self, start: float = 0.0):
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move the clock forward by ``seconds`` (>= 0); returns the new time."""
        if seconds < 0:
            raise ValueError(f"cannot move a clock backwards ({seconds} s)")
        self._now += float(seconds)
        return self._now

    __call__ = now


class PrefixSource(Protocol):
    """Anything that can fingerprint its own prefixes: ``length`` tokens in all, and
    ``digests(lengths)`` -> {length: bytes} where equal bytes mean equal prefixes."""

    length: int

    def digests(self, lengths: Iterable[int]) -> dict[int, bytes]: ...


class TokenPrefix:
    """Exact fingerprints of a token-id sequence: ``digest(L)`` is SHA-256 over the first
    ``L`` ids (int64 little-endian), so two prompts share a digest at ``L`` exactly when
    their first ``L`` tokens agree."""

    def __init__(self, tokens: Sequence[int]):
        self.tokens = list(tokens)
        self.length = len(self.tokens)

    def digests(self, lengths: Iterable[int]) -> dict[int, bytes]:
        wanted = sorted({int(n) for n in lengths if 0 < int(n) <= self.length})
        out: dict[int, bytes] = {}
        h = hashlib.sha256()
        pos = 0
        for n in wanted:
            if n > pos:
                h.update(struct.pack(f"<{n - pos}q", *self.tokens[pos:n]))
                pos = n
            out[n] = h.copy().digest()
        return out


class BlockPrefix:
    """Fingerprints from per-block ``(num_tokens, content_digest)`` pairs, for callers
    that know block sizes and identities but not token ids (``promptcache simulate``).

    A prefix ending inside a block is identified by the blocks before it, that block's
    digest and the offset, so it matches only a prompt whose same block is identical.
    """

    def __init__(self, blocks: Sequence[tuple[int, bytes | str]]):
        self.blocks = [(int(n), d if isinstance(d, bytes) else str(d).encode()) for n, d in blocks]
        if any(n < 0 for n, _ in self.blocks):
            raise ValueError("block token counts must be >= 0")
        self.length = sum(n for n, _ in self.blocks)
        self.block_ends = []
        pos = 0
        for n, _ in self.blocks:
            pos += n
            self.block_ends.append(pos)

    def digests(self, lengths: Iterable[int]) -> dict[int, bytes]:
        wanted = sorted({int(n) for n in lengths if 0 < int(n) <= self.length})
        out: dict[int, bytes] = {}
        chain = hashlib.sha256(b"blocks")
        start = 0
        i = 0
        for n in wanted:
            while i < len(self.blocks) and start + self.blocks[i][0] < n:
                chain.update(struct.pack("<Q", self.blocks[i][0]) + self.blocks[i][1])
                start += self.blocks[i][0]
                i += 1
            h = chain.copy()
            if n > start:  # prefix ends inside (or at the end of) block i
                h.update(struct.pack("<Q", self.blocks[i][0]) + self.blocks[i][1])
                h.update(struct.pack("<Q", n - start))
            out[n] = h.digest()
        return out


# --------------------------------------------------------------------------------------
# Layout, usage, state
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Breakpoint:
    """A cache breakpoint: cache the prefix ``[0, end)`` (tokens) for ``ttl``.

    ``ttl``: Anthropic "5m" | "1h"; OpenAI GPT-5.6+ "30m" | "12h". ``param``: the
    request path of the marker, used in error messages."""

    end: int
    ttl: str = "5m"
    param: str | None = None


@dataclass(frozen=True)
class PromptLayout:
    """One request's prompt: ``prefix`` (token ids or a :class:`PrefixSource`),
    ``block_ends`` (ascending token offsets where content blocks end; each in
    ``[0, length]``) and ``breakpoints`` (in request order: tools, system, messages)."""

    prefix: PrefixSource | Sequence[int]
    block_ends: Sequence[int] = ()
    breakpoints: Sequence[Breakpoint] = ()

    def source(self) -> PrefixSource:
        p = self.prefix
        if isinstance(p, Sequence):
            return TokenPrefix(p)
        return p


@dataclass
class CacheUsage:
    """Token accounting of one request, in tokens.

    ``prompt_tokens == cache_read_tokens + sum(cache_write_tokens.values()) +
    uncached_tokens`` always holds. ``cache_write_tokens`` maps TTL -> tokens written.
    ``writes_reported`` is False where the provider does not report writes (OpenAI
    before GPT-5.6): those tokens are then billed (and counted) as uncached input."""

    prompt_tokens: int
    cache_read_tokens: int = 0
    cache_write_tokens: dict[str, int] = field(default_factory=dict)
    uncached_tokens: int = 0
    writes_reported: bool = True

    @property
    def cache_write_total(self) -> int:
        return sum(self.cache_write_tokens.values())

    def __post_init__(self) -> None:
        total = self.cache_read_tokens + self.cache_write_total + self.uncached_tokens
        if (
            total != self.prompt_tokens
            or min(
                self.cache_read_tokens, self.uncached_tokens, *self.cache_write_tokens.values(), 0
            )
            < 0
        ):
            raise ValueError(f"inconsistent usage: {self}")


@dataclass
class _Entry:
    expires_at: float
    ttl: float
    hard_expiry: float
    length: int
    stamp: int


class CacheState:
    """Live emulated cache entries on a clock.

    ``clock``: a zero-argument callable returning seconds (default ``time.monotonic``;
    use :class:`ManualClock` to test expiry). Entries are keyed by ``(partition,
    digest)``; ``partition`` is any hashable that separates caches that must not share
    (model, tenant salt, OpenAI ``prompt_cache_key``). Not thread-safe: callers
    serialize access (the server holds a lock).
    """

    def __init__(self, clock: Callable[[], float] | None = None):
        self.clock: Callable[[], float] = clock or time.monotonic
        self._entries: dict[tuple[Hashable, bytes], _Entry] = {}
        self._stamp = 0

    def __len__(self) -> int:
        self._expire(self.clock())
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def _expire(self, now: float) -> None:
        dead = [k for k, e in self._entries.items() if e.expires_at <= now or e.hard_expiry <= now]
        for k in dead:
            del self._entries[k]

    def _live(self, partition: Hashable, digest: bytes, now: float) -> _Entry | None:
        e = self._entries.get((partition, digest))
        if e is None:
            return None
        if e.expires_at <= now or e.hard_expiry <= now:
            del self._entries[(partition, digest)]
            return None
        return e

    def _touch(self, e: _Entry, now: float, ttl: float | None = None) -> None:
        if ttl is not None and ttl > e.ttl:
            e.ttl = ttl
        e.expires_at = now + e.ttl
        self._stamp += 1
        e.stamp = self._stamp

    def _write(
        self,
        partition: Hashable,
        digest: bytes,
        length: int,
        ttl: float,
        now: float,
        max_age: float | None = None,
    ) -> None:
        e = self._live(partition, digest, now)
        if e is not None:
            self._touch(e, now, ttl)
            return
        self._stamp += 1
        hard = now + max_age if max_age is not None else float("inf")
        self._entries[(partition, digest)] = _Entry(now + ttl, ttl, hard, length, self._stamp)

    def _lengths(self, partition: Hashable, now: float, latest: int | None = None) -> list[int]:
        self._expire(now)
        es = [e for (p, _), e in self._entries.items() if p == partition]
        if latest is not None:
            es = sorted(es, key=lambda e: e.stamp)[-latest:]
        return sorted({e.length for e in es})


# --------------------------------------------------------------------------------------
# Anthropic
# --------------------------------------------------------------------------------------


def anthropic_min_cacheable_tokens(
    model: str | None, default: int = ANTHROPIC_DEFAULT_MIN_TOKENS
) -> int:
    """The minimum cacheable prompt length (tokens) for an Anthropic model id such as
    ``"claude-sonnet-4-5-20250929"``, from the SDK's per-model table
    (:func:`promptcache.limits.cache_limits`, each row citing its page and date); ``default``
    for a model that table does not know."""
    if not model:
        return default
    try:
        rules = cache_limits(model, "anthropic")
    except ValueError:
        return default
    return rules.min_tokens if rules.known else default


def check_anthropic_breakpoints(breakpoints: Sequence[Breakpoint]) -> None:
    """Validate breakpoints given in processing order (tools, system, messages).

    Raises :class:`CacheRuleError` with Anthropic's message for more than
    :data:`ANTHROPIC_MAX_BREAKPOINTS` breakpoints, an unknown TTL, or a "1h" breakpoint
    after a "5m" one."""
    if len(breakpoints) > ANTHROPIC_MAX_BREAKPOINTS:
        raise CacheRuleError(
            f"A maximum of {ANTHROPIC_MAX_BREAKPOINTS} blocks with cache_control may be "
            f"provided. Found {len(breakpoints)}."
        )
    seen_5m = False
    for bp in breakpoints:
        if bp.ttl not in ANTHROPIC_TTL_SECONDS:
            where = f"{bp.param}: " if bp.param else ""
            allowed = " or ".join(repr(t) for t in ANTHROPIC_TTLS)
            raise CacheRuleError(f"{where}Input should be {allowed}", param=bp.param)
        if bp.ttl == "5m":
            seen_5m = True
        elif seen_5m:
            where = f"{bp.param}: " if bp.param else ""
            raise CacheRuleError(
                f"{where}a ttl='1h' cache_control block must not come after a ttl='5m' "
                "cache_control block. Note that blocks are processed in the following "
                "order: `tools`, `system`, `messages`.",
                param=bp.param,
            )


def anthropic_usage(
    state: CacheState,
    layout: PromptLayout,
    *,
    min_cacheable_tokens: int = ANTHROPIC_DEFAULT_MIN_TOKENS,
    partition: Hashable = None,
) -> CacheUsage:
    """Apply Anthropic's rules to one request: find the longest cached prefix, write the
    breakpoints' prefixes, return the usage.

    Reads: for each breakpoint, the boundaries of its own block and the 19 blocks before
    it (:data:`ANTHROPIC_LOOKBACK_BLOCKS` in all) are checked; the longest live entry is
    read (and its TTL refreshed), ``cache_read_tokens`` = its length. Writes: every
    breakpoint past the read point whose prefix is at least ``min_cacheable_tokens``
    long writes an entry with its TTL; the tokens between the read point (or the
    previous written breakpoint) and a written breakpoint count as written for that
    breakpoint's TTL. Everything else is ``uncached_tokens`` (Anthropic's
    ``input_tokens``). Call :func:`check_anthropic_breakpoints` first.
    """
    src = layout.source()
    n = src.length
    now = state.clock()
    bps = sorted((b for b in layout.breakpoints if 0 < b.end <= n), key=lambda b: b.end)
    ends = sorted({e for e in layout.block_ends if 0 < e <= n} | {b.end for b in bps})

    candidates: set[int] = set()
    for bp in bps:
        k = ends.index(bp.end)
        candidates.update(ends[max(0, k - ANTHROPIC_LOOKBACK_BLOCKS + 1) : k + 1])
    digests = src.digests(candidates | {b.end for b in bps})

    read = 0
    hit: _Entry | None = None
    for length in sorted(candidates, reverse=True):
        e = state._live(partition, digests[length], now)
        if e is not None:
            read, hit = length, e
            break
    if hit is not None:
        state._touch(hit, now)

    writes: dict[str, int] = {}
    pos = read
    for bp in bps:
        if bp.end <= read:
            e = state._live(partition, digests[bp.end], now)
            if e is not None:
                state._touch(e, now)
            continue
        if bp.end <= pos:
            continue  # a second breakpoint on the same boundary writes nothing more
        if bp.end < min_cacheable_tokens:
            continue  # silently not cached
        state._write(partition, digests[bp.end], bp.end, ANTHROPIC_TTL_SECONDS[bp.ttl], now)
        writes[bp.ttl] = writes.get(bp.ttl, 0) + (bp.end - pos)
        pos = bp.end
    written = sum(writes.values())
    return CacheUsage(n, read, writes, n - read - written)


# --------------------------------------------------------------------------------------
# OpenAI
# --------------------------------------------------------------------------------------

_GPT_VERSION = re.compile(r"^(?:ft:)?gpt-(\d+)(?:\.(\d+))?")


def openai_uses_breakpoints(model: str | None) -> bool | None:
    """True for GPT-5.6 and later (explicit/implicit breakpoints, reported writes), False
    for known older OpenAI models (gpt-4o, gpt-4.1, o1/o3/o4, gpt-5 ... gpt-5.5), None
    when the name is not an OpenAI model id."""
    if not model:
        return None
    m = model.lower()
    g = _GPT_VERSION.match(m)
    if g:
        major, minor = int(g.group(1)), int(g.group(2) or 0)
        return (major, minor) >= (5, 6)
    if re.match(r"^(?:o1|o3|o4|chatgpt-4o|codex-mini)", m):
        return False
    return None


def openai_round_cached(matched_tokens: int) -> int:
    """Models before GPT-5.6: the cached_tokens reported for a prefix match of
    ``matched_tokens`` tokens: 0 below 1,024, else ``1024 + 128*k`` rounded down."""
    if matched_tokens < OPENAI_MIN_CACHED_TOKENS:
        return 0
    steps = (matched_tokens - OPENAI_MIN_CACHED_TOKENS) // OPENAI_CACHE_INCREMENT
    return OPENAI_MIN_CACHED_TOKENS + steps * OPENAI_CACHE_INCREMENT


def openai_usage(
    state: CacheState,
    layout: PromptLayout,
    *,
    retention: str = "in_memory",
    partition: Hashable = None,
) -> CacheUsage:
    """Models before GPT-5.6. Every prefix of length ``1024 + 128*k`` (within the
    prompt) is cached after the request; the read is the longest such live prefix.
    ``retention``: "in_memory" (idle expiry 5 minutes, at most 1 hour) or "24h".
    ``partition`` should include the ``prompt_cache_key``. Writes are not reported:
    ``cache_write_tokens`` is empty and ``writes_reported`` False."""
    if retention not in OPENAI_RETENTIONS:
        raise CacheRuleError(
            f"Invalid value for 'prompt_cache_retention': {retention!r}; expected "
            "'in_memory' or '24h'.",
            param="prompt_cache_retention",
        )
    src = layout.source()
    n = src.length
    now = state.clock()
    lengths = list(range(OPENAI_MIN_CACHED_TOKENS, n + 1, OPENAI_CACHE_INCREMENT))
    digests = src.digests(lengths)
    read = 0
    for length in reversed(lengths):
        e = state._live(partition, digests[length], now)
        if e is not None:
            read = length
            break
    ttl = OPENAI_TTL_SECONDS[retention]
    max_age = (
        OPENAI_IN_MEMORY_MAX_SECONDS if retention == "in_memory" else OPENAI_TTL_SECONDS["24h"]
    )
    for length in lengths:
        state._write(partition, digests[length], length, ttl, now, max_age=max_age)
    return CacheUsage(n, read, {}, n - read, writes_reported=False)


def openai_breakpoint_usage(
    state: CacheState,
    layout: PromptLayout,
    *,
    implicit_end: int | None = None,
    mode: str = "implicit",
    ttl: str = "30m",
    partition: Hashable = None,
) -> CacheUsage:
    """GPT-5.6 and later. ``layout.breakpoints`` are the explicit
    ``prompt_cache_breakpoint`` marks in request order; ``implicit_end`` is where the
    implicit breakpoint goes (the end of the latest user or tool message), used when
    ``mode == "implicit"``. Written: the implicit breakpoint and the latest 3 explicit
    ones (``mode="implicit"``) or the latest 4 explicit ones (``mode="explicit"``), each
    only if at least 1,024 tokens long. Read: the longest live entry among this
    partition's latest 80 that matches a prefix of the prompt, exact (no rounding).
    ``cache_write_tokens`` = tokens from the read point to the furthest written
    breakpoint, under that breakpoint's TTL ("30m" or "12h")."""
    if mode not in ("implicit", "explicit"):
        raise CacheRuleError(
            f"Invalid value for 'prompt_cache_options.mode': {mode!r}; expected 'implicit' or 'explicit'.",
            param="prompt_cache_options.mode",
        )
    for t in [ttl, *(b.ttl for b in layout.breakpoints)]:
        if t not in OPENAI_BREAKPOINT_TTLS:
            raise CacheRuleError(
                f"Invalid prompt cache ttl {t!r}; expected '30m' or '12h'.", param="ttl"
            )
    src = layout.source()
    n = src.length
    now = state.clock()
    explicit = [b for b in layout.breakpoints if 0 < b.end <= n]
    if mode == "implicit":
        chosen = explicit[-(OPENAI_MAX_WRITTEN_BREAKPOINTS - 1) :]
        if implicit_end is not None and 0 < implicit_end <= n:
            chosen = chosen + [Breakpoint(implicit_end, ttl, "implicit")]
    else:
        chosen = explicit[-OPENAI_MAX_WRITTEN_BREAKPOINTS:]
    chosen = [b for b in chosen if b.end >= OPENAI_MIN_CACHED_TOKENS]

    candidates = [
        L for L in state._lengths(partition, now, latest=OPENAI_MATCH_BREAKPOINTS) if L <= n
    ]
    digests = src.digests(set(candidates) | {b.end for b in chosen})
    read = 0
    for length in reversed(candidates):
        e = state._live(partition, digests[length], now)
        if e is not None:
            read = length
            state._touch(e, now)
            break
    writes: dict[str, int] = {}
    pos = read
    for bp in sorted(chosen, key=lambda b: b.end):
        state._write(partition, digests[bp.end], bp.end, OPENAI_TTL_SECONDS[bp.ttl], now)
        if bp.end > pos:
            writes[bp.ttl] = writes.get(bp.ttl, 0) + (bp.end - pos)
            pos = bp.end
    written = sum(writes.values())
    return CacheUsage(n, read, writes, n - read - written)


def gemini_implicit_usage(
    state: CacheState,
    layout: PromptLayout,
    *,
    min_tokens: int,
    partition: Hashable,
) -> CacheUsage:
    """Gemini implicit caching: the longest live prefix ending at a content boundary
    (``layout.block_ends``) of at least ``min_tokens`` tokens is read; every such prefix of
    this request is written (TTL :data:`~promptcache.limits.GEMINI_IMPLICIT_TTL_SECONDS`;
    None: kept while the server runs). Writes are not reported (Gemini bills no write for
    implicit caching)."""
    src = layout.source()
    n = src.length
    now = state.clock()
    lengths = sorted({e for e in layout.block_ends if min_tokens <= e <= n})
    digests = src.digests(lengths)
    read = 0
    for length in reversed(lengths):
        e = state._live(partition, digests[length], now)
        if e is not None:
            read = length
            state._touch(e, now)
            break
    ttl = float("inf") if GEMINI_IMPLICIT_TTL_SECONDS is None else GEMINI_IMPLICIT_TTL_SECONDS
    for length in lengths:
        state._write(partition, digests[length], length, ttl, now)
    return CacheUsage(n, read, {}, n - read, writes_reported=False)
