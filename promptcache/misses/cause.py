"""Why a request missed the prompt cache: one cause per request, with where it lies.

:func:`attribute` compares a request (:class:`Observation`: its digest chain, normalized
usage and time) with the previous request of its lineage and names one cause:

=====================  =============================================================
cause                  meaning
=====================  =============================================================
``hit``                it read everything the previous request left cached (or more)
``cold``               the first request of its lineage, or nothing was cached before
``prefix_changed``     the prefix differs inside the previous request's cached part:
                       ``path``, character/token offset and matched length say where
``ttl_expired``        prefix unchanged, but the gap since the previous request is
                       longer than the cached entry's TTL
``below_minimum``      the cacheable prefix is under the model's minimum length
``no_breakpoint``      the provider needs explicit markers and the request has none
``breakpoint_moved``   prefix unchanged, but no breakpoint of this request can reach
                       (lookback) an entry the previous request wrote
``partial``            read less than the matching cached prefix within its TTL
                       (eviction, lookback window)
``provider_unknown``   identical prefix within the TTL and still a miss: the provider's
                       doing (routing, eviction), not the caller's
``unknown``            the request itself is not known (an imported transcript has only
                       usage and time) and the read fell short for no reason that can
                       be told (:mod:`promptcache.transcripts.causes`)
=====================  =============================================================

Expected growth is not a miss: when the first difference from the previous request lies in
this request's *newest turn* -- the messages after its last assistant message (the new
question, the tool results) -- everything before it matched, and the request is a ``hit``
with new content if it read the shared prefix (for explicit-marker providers: up to the
previous request's last breakpoint before the difference). Only a short read then makes it
a miss, for the reasons below (``ttl_expired``, ``partial``, ...), never ``prefix_changed``.

The cause is None when the provider did not report caching at all (unknown is not a miss).

TTLs and minimum lengths come from :mod:`promptcache.limits` (:func:`~promptcache.limits.cache_limits`
and its TTL constants; each row with
its source and date): Anthropic and Bedrock by breakpoint (``ttl`` "5m" default, "1h");
OpenAI by ``prompt_cache_retention`` (in-memory: 5 minutes, the lower bound of the
documented 5-10 minutes; "24h") or, for GPT-5.6+, the breakpoint TTL ("30m" default);
Gemini's implicit cache and self-hosted servers (vLLM, SGLang, the local engine in
automatic mode) document no TTL (LRU eviction), so they never get ``ttl_expired``.

Gemini's implicit caching documents no granularity for its hits, so any read of an
unchanged prefix there counts as ``hit`` (never ``partial``).

Token offsets are estimates: characters of the chain scaled by this request's reported
prompt tokens over the chain's characters (the chain is the request's JSON, so the ratio
includes its structure).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from promptcache.limits import OPENAI_TTL_SECONDS, CacheLimits, cache_limits
from promptcache.misses.digest_chain import DigestChain
from promptcache.misses.locate import FirstDifference, excerpts, first_difference
from promptcache.providers.usage import Usage

__all__ = [
    "CAUSES",
    "MISS_CAUSES",
    "Observation",
    "Attribution",
    "attribute",
    "rules_for",
    "ttl_seconds",
]

CAUSES = (
    "hit",
    "cold",
    "prefix_changed",
    "ttl_expired",
    "below_minimum",
    "no_breakpoint",
    "breakpoint_moved",
    "partial",
    "provider_unknown",
    "unknown",
)
#: The causes that are misses (everything but ``hit``).
MISS_CAUSES = CAUSES[1:]

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def ttl_seconds(label: str | None) -> float | None:
    """Seconds of a TTL label as the providers spell them (``"5m"``, ``"1h"``, ``"24h"``,
    ``"30m"``, ``"12h"``; OpenAI ``"in_memory"``: the lower bound of the documented 5-10
    minutes, :data:`promptcache.limits.OPENAI_TTL_SECONDS`); None for None or an unknown label."""
    if label is None:
        return None
    m = _DURATION.match(label.strip().lower())
    if m:
        return float(int(m.group(1)) * _UNIT[m.group(2)])
    if label == "in_memory":
        return float(OPENAI_TTL_SECONDS["in_memory"])
    return None


def rules_for(provider: str | None, api: str, model: str | None) -> CacheLimits:
    """The cache rules that apply to a recorded request: by API shape first (Anthropic
    Messages bodies follow Anthropic's rules wherever they are served, Converse follows
    Bedrock's), then by the ledger's provider label, then by the model name."""
    label = (provider or "").lower()
    name = model or ""
    if label == "bedrock" or api == "converse":
        return cache_limits(name, "bedrock")
    if api == "messages":
        return cache_limits(name, "anthropic")
    if api == "gemini" or label in ("gemini", "vertex"):
        return cache_limits(name, "gemini")
    if label in ("openai", "azure_openai") or name.lower().startswith(("gpt-", "o1", "o3", "o4")):
        return cache_limits(name, "openai")
    return cache_limits(name, "local")


@dataclass(frozen=True)
class Observation:
    """What is known of one request for attribution.

    Attributes:
        chain: its digest chain.
        usage: its normalized usage.
        ts: when it was sent (Unix seconds).
        retention: OpenAI ``prompt_cache_retention`` when sent (``"24h"``), else None.
    """

    chain: DigestChain
    usage: Usage
    ts: float
    retention: str | None = None


@dataclass(frozen=True)
class Attribution:
    """One request's cause and where it lies.

    Attributes:
        cause: one of :data:`CAUSES`, None when caching was not reported.
        path: the JSON path of the first difference (``prefix_changed``; for other causes
            the difference found, if any), else None.
        matched_prefix_tokens: tokens of the prefix shared with the previous request of the
            lineage (estimated from characters; 0 without one).
        offset_chars: characters of the chain before the first difference (None: none).
        offset_tokens: the same in estimated tokens.
        exact: whether ``offset_chars`` is exact (see :class:`FirstDifference`).
        detail: one sentence for people.
        before, after: excerpts around the difference when both requests' text was in
            memory; else None.
    """

    cause: str | None
    path: str | None = None
    matched_prefix_tokens: int = 0
    offset_chars: int | None = None
    offset_tokens: int | None = None
    exact: bool = False
    detail: str = ""
    before: str | None = None
    after: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict."""
        return dict(self.__dict__)


def _tokens(obs: Observation, chars: int) -> int:
    """Estimated tokens of the first ``chars`` characters of ``obs``'s chain."""
    total = obs.chain.chars
    prompt = obs.usage.prompt_tokens
    if total <= 0:
        return 0
    if prompt <= 0:
        return math.ceil(chars / 4)
    return min(prompt, round(chars * prompt / total))


def _floor(tokens: int, rules: CacheLimits) -> int:
    """The part of a matched prefix a provider with hit increments reports as read."""
    if tokens < rules.min_tokens:
        return 0
    if rules.increment:
        return rules.min_tokens + (tokens - rules.min_tokens) // rules.increment * rules.increment
    return tokens


def _needs_markers(chain: DigestChain) -> bool:
    return chain.api in ("messages", "converse") and not chain.automatic


def _entry_ttl(
    prev: Observation, rules: CacheLimits, end: int, *, longest: bool = False
) -> float | None:
    """TTL in seconds of the entry the previous request left for its prefix up to ``end``
    characters -- with ``longest``, of the longest-lived of its entries (all of them
    expired: nothing can be read) -- or None when the provider documents none."""
    chain = prev.chain
    if chain.api in ("messages", "converse"):
        ttls = [b.ttl for b in chain.breakpoints if b.end <= end] or [
            b.ttl for b in chain.breakpoints
        ]
        secs = [t for t in (ttl_seconds(x) for x in ttls) if t is not None]
        if not secs:
            return None
        return max(secs) if longest else secs[-1]
    if rules.provider == "openai":
        if rules.explicit_breakpoints:
            bps = [b.ttl for b in chain.breakpoints if b.end <= end]
            return ttl_seconds(bps[-1] if bps else rules.ttls[0] if rules.ttls else None)
        return ttl_seconds(prev.retention or "in_memory")
    return None  # Gemini implicit, self-hosted: no documented TTL


def _reachable(prev: DigestChain, cur: DigestChain, matched: int, rules: CacheLimits) -> bool:
    """Can a breakpoint of ``cur`` find an entry ``prev`` wrote (within the shared prefix),
    looking back ``rules.lookback_blocks`` content blocks (0: unlimited)?"""
    written = [b.block for b in prev.breakpoints if b.end <= matched]
    if not written:
        return False
    for bp in cur.breakpoints:
        for q in written:
            if q <= bp.block and (
                not rules.lookback_blocks or bp.block - q < rules.lookback_blocks
            ):
                return True
    return False


@dataclass(frozen=True)
class _Compared:
    """``cur`` against its predecessor: where they first differ and what ``prev`` left cached.

    ``prev`` is None when there is none or it is another conversation (then ``diff`` too);
    ``matched_chars``/``matched`` (estimated tokens) measure the shared prefix; ``where`` holds
    the path, offsets and excerpts a ``prefix_changed`` carries; ``cached_end`` (characters)
    and ``cached_tokens`` what the previous request left in the cache."""

    prev: Observation | None
    diff: FirstDifference | None
    matched_chars: int
    matched: int
    where: dict[str, Any]
    cached_end: int
    cached_tokens: int
    #: the path where this request's newest turn brings new content (expected growth)
    new_content: str | None = None

    def result(self, read: int, cause: str, detail: str, **kw: Any) -> Attribution:
        """The :class:`Attribution` of ``cause``: only ``prefix_changed`` carries the path and
        offsets; a hit's shared prefix is at least what was read."""
        fields = {**self.where, **kw} if cause == "prefix_changed" else dict(kw)
        shared = max(self.matched, read) if cause == "hit" else self.matched
        return Attribution(cause, matched_prefix_tokens=shared, detail=detail, **fields)


def _compare(
    cur: Observation, prev: Observation | None, rules: CacheLimits, related: bool
) -> _Compared:
    diff: FirstDifference | None = None
    matched_chars = 0
    if prev is not None:
        diff = first_difference(prev.chain, cur.chain)
        if (
            not related
            and diff is not None
            and diff.segment < len(cur.chain.segments)
            and cur.chain.segments[diff.segment].kind in ("messages", "system")
        ):
            prev, diff = None, None  # another conversation with the same head
        else:
            matched_chars = prev.chain.chars if diff is None else diff.offset_chars
            matched_chars = min(matched_chars, cur.chain.chars)
    matched = _tokens(cur, matched_chars) if prev is not None else 0
    where: dict[str, Any] = {}
    if diff is not None:
        where = dict(
            path=diff.path,
            offset_chars=diff.offset_chars,
            offset_tokens=_tokens(cur, diff.offset_chars),
            exact=diff.exact,
        )
        if prev is not None:
            ex = excerpts(prev.chain, cur.chain, diff)
            if ex is not None:
                where["before"], where["after"] = ex
    cached_end, cached_tokens = _left_cached(prev, rules)
    return _Compared(prev, diff, matched_chars, matched, where, cached_end, cached_tokens)


def _left_cached(prev: Observation | None, rules: CacheLimits) -> tuple[int, int]:
    """What the previous request left cached: its end (characters) and size (tokens)."""
    if prev is None:
        return 0, 0
    pu = prev.usage
    if _needs_markers(prev.chain) or prev.chain.automatic:
        if pu.cache_read_tokens + pu.cache_write_tokens > 0 and prev.chain.breakpoints:
            return prev.chain.breakpoints[-1].end, pu.cache_read_tokens + pu.cache_write_tokens
    elif pu.prompt_tokens >= rules.min_tokens:
        return prev.chain.chars, _floor(pu.prompt_tokens, rules)
    return 0, 0


def attribute(
    cur: Observation,
    prev: Observation | None,
    *,
    rules: CacheLimits | None = None,
    related: bool = True,
) -> Attribution:
    """The cause of ``cur``'s cache result, given the previous request of its lineage.

    Args:
        cur: the request to explain.
        prev: the previous request of its lineage (same model and lineage key), or None.
        rules: the cache rules to apply (default: :func:`rules_for` from the usage's
            provider, the chain's API and the model).
        related: False when ``prev`` is not of the same lineage but only the most similar
            recent request (another conversation sharing the head): a difference in the
            system prompt or the messages then starts a new lineage (``cold``, or ``hit``
            on what it did read) instead of a ``prefix_changed`` -- system prompts are often
            per tenant or per user; a difference in the tools or routing settings is still
            a ``prefix_changed``.

    Only ``prefix_changed`` carries ``path`` and the offsets; the other causes leave them
    None (a difference after the cached part is not why the request missed).

    Returns:
        An :class:`Attribution`; never raises for well-formed observations.
    """
    u = cur.usage
    if not u.cache_reported:
        return Attribution(None, detail="the provider did not report cached tokens")
    rules = rules or rules_for(u.provider, cur.chain.api, u.model)
    c = _growth(cur, _compare(cur, prev, rules, related), rules)
    return (
        _as_hit_or_changed(cur, c, rules)
        or _as_uncached(cur, c, rules)
        or _as_lost_entry(cur, c, rules)
    )


#: Roles and item types that end a turn: what follows them is the next turn's new content.
_ANSWER_ROLES = frozenset({"assistant", "model"})
_ANSWER_TYPES = frozenset({"function_call", "reasoning", "custom_tool_call"})


def newest_turn_start(chain: DigestChain) -> int | None:
    """Index of the first segment of the request's newest turn: the message segments after
    its last assistant message (or all its message segments when it has none); None when
    the chain has no message segments, or was read back without its values."""
    if len(chain.raws) != len(chain.segments):
        return None
    start: int | None = None
    for i, (seg, raw) in enumerate(zip(chain.segments, chain.raws)):
        if seg.kind != "messages":
            continue
        item = raw if isinstance(raw, dict) else {}
        if item.get("role") in _ANSWER_ROLES or item.get("type") in _ANSWER_TYPES:
            start = None
        elif start is None:
            start = i
    return start


def _growth(cur: Observation, c: _Compared, rules: CacheLimits) -> _Compared:
    """``c`` with what was cached cut at the first difference when that difference lies in
    ``cur``'s newest turn (expected growth: the shared prefix is what could be read)."""
    diff, prev = c.diff, c.prev
    if diff is None or prev is None or diff.kind in ("truncated", "removed"):
        return c
    start = newest_turn_start(cur.chain)
    if start is None or diff.segment < start or diff.offset_chars >= c.cached_end:
        return c
    if _needs_markers(prev.chain) or prev.chain.automatic:
        ends = [b.end for b in prev.chain.breakpoints if b.end <= diff.offset_chars]
        end = ends[-1] if ends else 0
        tokens = _tokens(cur, end)
    else:
        end, tokens = diff.offset_chars, _floor(_tokens(cur, diff.offset_chars), rules)
    return replace(
        c,
        where={},
        cached_end=end,
        cached_tokens=min(c.cached_tokens, tokens),
        new_content=diff.path,
    )


def _as_hit_or_changed(cur: Observation, c: _Compared, rules: CacheLimits) -> Attribution | None:
    """A hit, or a ``prefix_changed`` inside what the previous request cached; None when
    neither can be told yet."""
    u, read = cur.usage, cur.usage.cache_read_tokens
    if c.prev is not None and c.cached_tokens:
        changed_inside = c.diff is not None and c.diff.offset_chars < c.cached_end
        expected = c.cached_tokens
        if not changed_inside and not (_needs_markers(cur.chain) or cur.chain.automatic):
            expected = _floor(min(c.cached_tokens, u.prompt_tokens), rules)
        if changed_inside:
            if read < expected:
                return c.result(
                    read,
                    "prefix_changed",
                    f"the prefix changed at {c.where['path']} after about "
                    f"{c.where['offset_tokens']} tokens; {expected - read} cached tokens "
                    "could not be read",
                )
            return c.result(read, "hit", f"read {read} tokens")
        if read + max(rules.increment, 0) >= expected and read > 0:
            if c.new_content is not None:
                return c.result(
                    read,
                    "hit",
                    f"read {read} tokens, the prefix shared with the previous request; the "
                    f"rest is new content of the newest turn (from {c.new_content})",
                )
            return c.result(read, "hit", f"read {read} of the {expected} cached tokens")
        if read > 0 and rules.provider == "gemini":
            # Gemini's implicit cache documents no hit granularity: a read is a hit
            return c.result(read, "hit", f"read {read} tokens (Gemini reports its own granularity)")
    if read > 0 and (c.prev is None or not c.cached_tokens):
        return c.result(read, "hit", f"read {read} tokens")
    return None


def _as_uncached(cur: Observation, c: _Compared, rules: CacheLimits) -> Attribution | None:
    """Nothing read and nothing that could have been: no breakpoint, below the minimum, or
    cold; None when something was cached before."""
    u = cur.usage
    if u.cache_read_tokens != 0:
        return None
    needs = _needs_markers(cur.chain)
    if needs and not cur.chain.breakpoints:
        return c.result(
            0,
            "no_breakpoint",
            f"{rules.provider} caches only up to explicit cache markers and this request has none",
        )
    cacheable = cur.chain.breakpoints[-1].end if (needs or cur.chain.automatic) else None
    est = u.prompt_tokens if cacheable is None else _tokens(cur, cacheable)
    if rules.min_tokens and est < rules.min_tokens and u.cache_write_tokens == 0:
        return c.result(
            0,
            "below_minimum",
            f"the cacheable prefix is about {est} tokens, under the minimum of "
            f"{rules.min_tokens} for {u.model or 'this model'} ({rules.source}, "
            f"read {rules.read_on})",
        )
    if c.prev is None or not c.cached_tokens:
        return c.result(0, "cold", "nothing of this prefix was cached before")
    return None


def _as_lost_entry(cur: Observation, c: _Compared, rules: CacheLimits) -> Attribution:
    """The prefix was cached and is unchanged, yet less was read: the TTL ran out, no
    breakpoint reaches the entry, it was partly evicted, or the provider's doing."""
    prev, read = c.prev, cur.usage.cache_read_tokens
    assert prev is not None
    gap = cur.ts - prev.ts
    ttl = _entry_ttl(prev, rules, c.cached_end, longest=read == 0)
    if ttl is not None and gap > ttl:
        return c.result(
            read,
            "ttl_expired",
            f"the prefix is unchanged but {gap:.0f} s passed since the previous request, "
            f"more than the {ttl:.0f} s TTL",
        )
    if _needs_markers(cur.chain) and not _reachable(prev.chain, cur.chain, c.matched_chars, rules):
        if read == 0:
            return c.result(
                read,
                "breakpoint_moved",
                "the prefix is unchanged but no breakpoint of this request reaches the "
                f"entry the previous request wrote (lookback {rules.lookback_blocks} blocks)",
            )
        return c.result(
            read,
            "partial",
            f"read {read} of {c.cached_tokens} cached tokens: the last entry is beyond the "
            f"{rules.lookback_blocks}-block lookback of this request's breakpoints",
        )
    if read > 0:
        return c.result(
            read,
            "partial",
            f"read {read} of the {c.cached_tokens} cached tokens within the TTL (evicted?)",
        )
    return c.result(
        read,
        "provider_unknown",
        "identical prefix within the TTL and still a miss: the provider's doing "
        "(routing or eviction), not this code's",
    )
