"""Per-provider pieces of the cache emulation that the shared prefix rules do not cover:
the invalidation table (settings outside the prompt text that still void cached
segments), Gemini's implicit and explicit caching, and Bedrock's checkpoint minimum.

Invalidation (:data:`promptcache.limits.INVALIDATION_RULES`): a request's settings that a
provider keys its cache on (Anthropic: ``tool_choice``, ``thinking``, images, web search,
citations) are folded into the prefix fingerprints of the segments the table says they
invalidate: :class:`SegmentedPrefix` digests a prefix that reaches into the system segment
with the system-level settings, and one that reaches into the messages with the
message-level settings as well. Changing ``tool_choice`` therefore misses every entry past
the system segment while the tools and system entries still read, exactly the documented
row; tool definitions are prompt text rendered first, so changing them misses everything.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Mapping, Sequence

from promptcache.limits import (
    SEGMENTS,
    cache_limits,
    invalidation_rules,
)
from promptcache.simulation.emulation import Breakpoint


def segment_salts(provider: str, changes: Mapping[str, object]) -> tuple[bytes, bytes]:
    """(system salt, messages salt) of a request's invalidating settings ``changes`` (change
    name -> its value, e.g. ``{"tool_choice": {"type": "any"}}``) under ``provider``'s rows:
    a setting whose row invalidates the system segment goes into the system salt (which the
    messages' digests include too), one that invalidates only messages into the messages
    salt. Settings without a row for the provider change nothing."""
    system: dict[str, object] = {}
    messages: dict[str, object] = {}
    for rule in invalidation_rules(provider):
        if rule.change not in changes or rule.change == "tool_definitions":
            continue  # tool definitions are prompt text: their tokens already differ
        first = min(SEGMENTS.index(s) for s in rule.invalidates)
        target = system if first <= SEGMENTS.index("system") else messages
        target[rule.change] = changes[rule.change]

    def salt(d: dict) -> bytes:
        return json.dumps(d, sort_keys=True, default=str).encode() if d else b""

    return salt(system), salt(messages)


class SegmentedPrefix:
    """Prefix fingerprints of token ids with per-segment salts (see the module docstring).

    ``tokens``: the prompt; ``tools_end`` / ``system_end``: where those segments end (token
    offsets; 0 when absent); ``system_salt`` / ``messages_salt``: bytes from
    :func:`segment_salts`. Without salts the digests equal plain token-prefix digests'
    behaviour (equal prefixes, equal digests)."""

    def __init__(
        self,
        tokens: Sequence[int],
        tools_end: int,
        system_end: int,
        system_salt: bytes = b"",
        messages_salt: bytes = b"",
    ):
        self.tokens = list(tokens)
        self.length = len(self.tokens)
        self.tools_end = tools_end
        self.system_end = max(system_end, tools_end)
        self.salts = (system_salt, messages_salt)

    def digests(self, lengths: Iterable[int]) -> dict[int, bytes]:
        wanted = sorted({int(n) for n in lengths if 0 < int(n) <= self.length})
        out: dict[int, bytes] = {}
        h = hashlib.sha256()
        pos = 0
        for n in wanted:
            if n > pos:
                h.update(struct.pack(f"<{n - pos}q", *self.tokens[pos:n]))
                pos = n
            d = h.copy()
            if n > self.tools_end:
                d.update(b"\x00system" + self.salts[0])
            if n > self.system_end:
                d.update(b"\x00messages" + self.salts[1])
            out[n] = d.digest()
        return out


def gemini_min_tokens(model: str) -> int:
    """The documented minimum cacheable length of a Gemini model (the provider default for
    an unknown name), from :func:`promptcache.limits.cache_limits`."""
    return cache_limits(model, "gemini").min_tokens


def bedrock_breakpoints(model: str, breakpoints: Sequence[Breakpoint]) -> list[Breakpoint]:
    """The ``cachePoint`` breakpoints Bedrock honours: each must end at least the model's
    minimum after the previous honoured one ("the first checkpoint after 1,024 tokens, the
    second after 2,048", :data:`promptcache.limits.SRC_BEDROCK`); shorter segments are
    ignored (no write, as Bedrock does)."""
    limits = cache_limits(model, "bedrock")
    out: list[Breakpoint] = []
    prev = 0
    for bp in sorted(breakpoints, key=lambda b: b.end):
        if bp.end - prev >= limits.min_tokens:
            out.append(bp)
            prev = bp.end
    return out


def bedrock_min_tokens(model: str) -> int:
    """Bedrock's minimum tokens per checkpoint for ``model``."""
    return cache_limits(model, "bedrock").min_tokens
