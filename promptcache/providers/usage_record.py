"""The normalized usage record: :class:`Usage` (what one request read from the cache, wrote to
it and processed uncached, in tokens) and the field readers the provider parsers share.

A leaf module: the parsers (``promptcache.providers.*_usage``), pricing, the ledger and the
exporters import it; :func:`promptcache.normalize_usage` (in :mod:`promptcache.providers.usage`)
dispatches to the parsers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from promptcache.errors import UsageError

__all__ = [
    "Usage",
    "CACHE_NOT_REPORTED",
    "WRITE_TTL_ASSUMED",
    "USAGE_UNKNOWN",
    "unknown_usage",
    "read_count",
    "subpart",
    "check_part",
]

#: Flag set on a :class:`Usage` whose provider did not report cached tokens at all.
CACHE_NOT_REPORTED = "cache_not_reported"
#: Flag set when writes were reported without a TTL split and the provider default was used.
WRITE_TTL_ASSUMED = "write_ttl_assumed"
#: Flag set on the :class:`Usage` of a call whose response carried no usage at all (a stream
#: without ``stream_options.include_usage``, a provider that omitted it): every count is
#: unknown (stored as 0, never priced, left out of hit rates).
USAGE_UNKNOWN = "usage_unknown"


@dataclass(frozen=True)
class Usage:
    """One request's token usage, normalized. All counts are tokens (ints >= 0).

    The three input kinds are disjoint and sum to :attr:`prompt_tokens`:

    - ``uncached_input_tokens``: processed at the base input price (neither read from nor
      written to the cache). When the provider did not report caching at all
      (``cache_reported`` is False) this is the whole prompt, and :attr:`hit_rate` is None.
    - ``cache_read_tokens``: served from the cache (billed at the cache-read price).
    - ``cache_write_tokens``: written to the cache on this request (Anthropic/Bedrock cache
      creation, OpenAI ``cache_write_tokens``); ``cache_write_by_ttl`` splits it by TTL label
      (``"5m"``, ``"1h"``, OpenAI ``"30m"``/``"12h"``...) and always sums to it.

    ``output_tokens`` includes reasoning/thinking tokens (billed as output by every provider);
    ``reasoning_tokens`` is the part of it the provider reported as reasoning, if any.
    ``flags`` records what the parser had to assume (``"cache_not_reported"``,
    ``"write_ttl_assumed"``). ``provider`` and ``model`` are carried through when known.

    Raises :class:`~promptcache.errors.UsageError` on construction if a count is negative
    or not an integer, or the TTL split does not sum to ``cache_write_tokens``.
    """

    uncached_input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    cache_write_by_ttl: Mapping[str, int] = field(default_factory=dict)
    cache_reported: bool = True
    reasoning_tokens: int | None = None
    provider: str | None = None
    model: str | None = None
    flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in (
            "uncached_input_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "output_tokens",
        ):
            _check_count(name, getattr(self, name))
        if self.reasoning_tokens is not None:
            _check_count("reasoning_tokens", self.reasoning_tokens)
        ttl = dict(self.cache_write_by_ttl)
        for k, v in ttl.items():
            _check_count(f"cache_write_by_ttl[{k!r}]", v)
        if not ttl and self.cache_write_tokens:
            raise UsageError(
                "cache_write_by_ttl is empty but cache_write_tokens is "
                f"{self.cache_write_tokens}; give the TTL split, e.g. {{'5m': n}}"
            )
        if ttl and sum(ttl.values()) != self.cache_write_tokens:
            raise UsageError(
                f"cache_write_by_ttl {ttl} sums to {sum(ttl.values())}, "
                f"not cache_write_tokens={self.cache_write_tokens}"
            )
        if not self.cache_reported and (self.cache_read_tokens or self.cache_write_tokens):
            raise UsageError("cache_reported=False but cache token counts were given")
        object.__setattr__(self, "cache_write_by_ttl", {k: v for k, v in sorted(ttl.items()) if v})
        object.__setattr__(self, "flags", tuple(self.flags))

    @property
    def prompt_tokens(self) -> int:
        """All input tokens: uncached + cache read + cache write."""
        return self.uncached_input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def total_tokens(self) -> int:
        """``prompt_tokens + output_tokens``."""
        return self.prompt_tokens + self.output_tokens

    @property
    def hit_rate(self) -> float | None:
        """``cache_read_tokens / prompt_tokens`` in [0, 1]; None when caching was not
        reported (unknown is not a miss) or the prompt is empty."""
        if not self.cache_reported or self.prompt_tokens == 0:
            return None
        return self.cache_read_tokens / self.prompt_tokens

    @property
    def cache_write_5m_tokens(self) -> int:
        """Tokens written with a 5-minute TTL (Anthropic/Bedrock default)."""
        return self.cache_write_by_ttl.get("5m", 0)

    @property
    def cache_write_1h_tokens(self) -> int:
        """Tokens written with a 1-hour TTL."""
        return self.cache_write_by_ttl.get("1h", 0)

    def replace(self, **changes: Any) -> Usage:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    def __add__(self, other: Usage) -> Usage:
        """Sum of two usages (counts and TTL buckets add). Both must agree on
        ``cache_reported``: adding a known split to an unknown one would invent a miss."""
        if not isinstance(other, Usage):
            return NotImplemented
        if self.cache_reported != other.cache_reported:
            raise UsageError(
                "cannot add a usage whose caching was reported to one whose "
                "caching was not; keep them apart (unknown is not a miss)"
            )
        ttl: dict[str, int] = dict(self.cache_write_by_ttl)
        for k, v in other.cache_write_by_ttl.items():
            ttl[k] = ttl.get(k, 0) + v
        reasoning = (
            None
            if self.reasoning_tokens is None and other.reasoning_tokens is None
            else (self.reasoning_tokens or 0) + (other.reasoning_tokens or 0)
        )
        return Usage(
            uncached_input_tokens=self.uncached_input_tokens + other.uncached_input_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_write_by_ttl=ttl,
            cache_reported=self.cache_reported,
            reasoning_tokens=reasoning,
            provider=self.provider if self.provider == other.provider else None,
            model=self.model if self.model == other.model else None,
            flags=tuple(dict.fromkeys(self.flags + other.flags)),
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict, including the derived ``prompt_tokens`` and ``hit_rate``."""
        d = dataclasses.asdict(self)
        d["cache_write_by_ttl"] = dict(self.cache_write_by_ttl)
        d["flags"] = list(self.flags)
        d["prompt_tokens"] = self.prompt_tokens
        d["hit_rate"] = self.hit_rate
        return d


def _check_count(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{name} must be an integer token count, got {value!r}")
    if value < 0:
        raise UsageError(f"{name} is negative ({value}); token counts cannot be negative")


@overload
def read_count(
    data: Mapping[str, Any] | None, *keys: str, where: str, required: Literal[True]
) -> int: ...


@overload
def read_count(
    data: Mapping[str, Any] | None, *keys: str, where: str, required: bool = False
) -> int | None: ...


def read_count(
    data: Mapping[str, Any] | None, *keys: str, where: str, required: bool = False
) -> int | None:
    """The first of ``keys`` present (not None) in ``data`` as a validated token count.

    Returns None when none is present (or ``data`` is None) unless ``required``, in which
    case a :class:`UsageError` names the missing field. Floats that are whole numbers are
    accepted (JSON numbers); anything else non-integer, or negative, raises ``UsageError``.
    """
    if data is not None:
        for key in keys:
            value = data.get(key)
            if value is None:
                continue
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(f"{where}.{key} must be an integer token count, got {value!r}")
            if value < 0:
                raise UsageError(
                    f"{where}.{key} is negative ({value}); token counts cannot be negative"
                )
            return value
    if required:
        raise UsageError(
            f"{where} has no {' / '.join(keys)} field; is this a "
            "usage payload of the right provider?"
        )
    return None


def subpart(data: Any, key: str) -> Mapping[str, Any] | None:
    """``data[key]`` if it is a mapping, else None."""
    if isinstance(data, Mapping):
        value = data.get(key)
        if isinstance(value, Mapping):
            return value
    return None


def check_part(part: int, whole: int, part_name: str, whole_name: str) -> None:
    """Raise :class:`UsageError` when a reported sub-count exceeds its total."""
    if part > whole:
        raise UsageError(
            f"inconsistent usage: {part_name}={part} is more than {whole_name}={whole}"
        )


def unknown_usage(provider: str | None = None, model: str | None = None) -> Usage:
    """The :class:`Usage` of a call whose response reported no usage: no counts, caching
    not reported, flagged :data:`USAGE_UNKNOWN` (so the ledger records the call without a
    cost or a cause, and reports count it apart)."""
    return Usage(
        cache_reported=False,
        provider=provider,
        model=model,
        flags=(CACHE_NOT_REPORTED, USAGE_UNKNOWN),
    )
