"""Where to put explicit cache breakpoints (Anthropic ``cache_control``, Bedrock
``cachePoint``, OpenAI ``prompt_cache_breakpoint``): one rule for every provider.

A renderer lays the request out as a sequence of content blocks in the provider's cache
order (Anthropic and Bedrock: tools -> system -> messages), each with a token count, a layer
name and whether it may carry a marker. :func:`plan` then chooses the breakpoints:

1. **frozen** -- the last block of the frozen layers (tools, system, documents), TTL ``ttl``;
2. **session** -- the last block of the session layer, TTL ``ttl``;
3. **history** -- the last markable block of the newest stable history turn (the last message
   of ``messages``; ``dynamic`` is never cached), TTL ``history_ttl``;
4. **lookback** -- when the provider only looks back a fixed number of blocks from a
   breakpoint for an earlier cache entry (Anthropic: 20) and the history breakpoint is more
   than that many blocks after the previous breakpoint, one more breakpoint ``lookback``
   blocks before the history breakpoint, so that a cache entry written up to ``2 x lookback``
   blocks back (the previous request's history breakpoint) is still found.

Each candidate is dropped when the cumulative prefix up to and including its block is under
the model's minimum cacheable length (writing it would cache nothing), when no markable block
is found, or when the budget of breakpoints is spent (candidates are taken in the order
above). TTLs must not increase along the prompt: a ``1h`` breakpoint may not follow a ``5m``
one (Anthropic rejects it), so ``ttl="5m", history_ttl="1h"`` is an error.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from promptcache.memo import Memo
from promptcache.prompt.canonical import dumps_sorted
from promptcache.prompt.tokens import count_tokens_memo, counter_generation, text_tokens

__all__ = [
    "LayoutBlock",
    "PlacedBreakpoint",
    "Plan",
    "plan",
    "TTL_ORDER",
    "text_tokens",
    "block_tokens",
]

# longer lifetimes first; a breakpoint's TTL may not exceed the TTL of any earlier one
TTL_ORDER = {"24h": 4, "12h": 3, "1h": 2, "30m": 1, "5m": 0}


@dataclass(**({"slots": True} if sys.version_info >= (3, 10) else {}))
class LayoutBlock:
    """One content block of a rendered request, in cache order (a renderer's ``layout``
    returns them; not the engine's KV blocks): ``layer``, a renderer-defined ``locator``,
    ``tokens`` (its own count) and whether it can carry a marker (``markable``)."""

    layer: str
    locator: Any
    tokens: int
    markable: bool = True


@dataclass(frozen=True)
class PlacedBreakpoint:
    """A breakpoint :func:`plan` placed on a :class:`LayoutBlock` (the emulator's request-side
    breakpoint, by token offset, is :class:`promptcache.simulation.emulation.Breakpoint`): which rule placed it (``kind``: frozen/session/history/lookback),
    the block's ``layer``, ``locator`` and global ``index``, its ``ttl``, the cumulative
    prefix length in tokens up to and including the block, and a sentence saying why."""

    kind: str
    layer: str
    locator: Any
    index: int
    ttl: str
    prefix_tokens: int
    reason: str


@dataclass
class Plan:
    """The breakpoints chosen (in prompt order) and why candidates were skipped."""

    breakpoints: list[PlacedBreakpoint] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    total_tokens: int = 0
    cumulative: list[int] = field(default_factory=list)


def plan(
    blocks: Sequence[LayoutBlock],
    *,
    min_tokens: int,
    max_breakpoints: int = 4,
    lookback: int = 0,
    ttl: str = "5m",
    history_ttl: str = "5m",
    min_per_segment: bool = False,
) -> Plan:
    """Choose breakpoints over ``blocks`` by the rule in the module docstring.

    Args:
        blocks: the request's content blocks in cache order.
        min_tokens: the model's minimum cacheable prefix length (tokens).
        max_breakpoints: how many markers one request may carry.
        lookback: blocks the provider checks before a breakpoint (0: unlimited).
        ttl: TTL of the frozen and session breakpoints; ``history_ttl``: of the others.
        min_per_segment: also require ``min_tokens`` between consecutive breakpoints
            (Bedrock's rule); a breakpoint too close to the previous one is dropped.

    Raises:
        ValueError: an unknown TTL, or ``history_ttl`` longer than ``ttl``.
    """
    _check_ttls(ttl, history_ttl)
    out = Plan()
    cum = 0
    for b in blocks:
        cum += b.tokens
        out.cumulative.append(cum)
    out.total_tokens = cum
    f_idx, s_idx, h_idx = _last_markable(blocks)
    chosen: list[PlacedBreakpoint] = []

    def consider(kind: str, idx: int | None, t: str, why: str) -> None:
        if idx is None or any(bp.index == idx for bp in chosen):
            return
        tokens = out.cumulative[idx]
        if tokens < min_tokens:
            out.skipped.append(
                f"{kind}: not placed -- the prefix up to {blocks[idx].layer} is "
                f"{tokens} tokens, under the model's minimum of {min_tokens}"
            )
        elif len(chosen) >= max_breakpoints:
            out.skipped.append(f"{kind}: not placed -- all {max_breakpoints} breakpoints in use")
        else:
            chosen.append(
                PlacedBreakpoint(kind, blocks[idx].layer, blocks[idx].locator, idx, t, tokens, why)
            )

    consider(
        "frozen",
        f_idx,
        ttl,
        "end of the frozen layers (system, tools, documents): "
        "reused by every request with this prefix_hash",
    )
    consider(
        "session",
        s_idx,
        ttl,
        "end of the session layer: reused while the session context is unchanged",
    )
    consider(
        "history",
        h_idx,
        history_ttl,
        "newest stable history turn: the next request appends after it and reads it from the cache",
    )
    if lookback and h_idx is not None and any(bp.index == h_idx for bp in chosen):
        prev = max((bp.index for bp in chosen if bp.index < h_idx), default=-1)
        if h_idx - prev > lookback:
            consider(
                "lookback",
                _stepping_stone(blocks, h_idx - lookback, prev),
                history_ttl,
                f"the history breakpoint is {h_idx - prev} blocks after the previous one, "
                f"beyond the provider's {lookback}-block lookback: a stepping stone "
                f"{lookback} blocks back keeps the previous request's entry reachable",
            )
    ordered = sorted(chosen, key=lambda bp: bp.index)
    if min_per_segment:
        ordered = _min_per_segment(ordered, min_tokens, out.skipped)
    out.breakpoints = ordered
    return out


def _check_ttls(ttl: str, history_ttl: str) -> None:
    for t in (ttl, history_ttl):
        if t not in TTL_ORDER:
            raise ValueError(f"unknown cache TTL {t!r}; expected one of {sorted(TTL_ORDER)}")
    if TTL_ORDER[history_ttl] > TTL_ORDER[ttl]:
        raise ValueError(
            f"history_ttl={history_ttl!r} is longer than ttl={ttl!r}: a longer-lived "
            "breakpoint may not follow a shorter-lived one"
        )


def _last_markable(
    blocks: Sequence[LayoutBlock],
) -> tuple[int | None, int | None, int | None]:
    """Indexes of the last markable block of the frozen layers, of the session layer and
    of the history (None where a layer has none), in one pass."""
    f_idx = s_idx = h_idx = None
    for i, b in enumerate(blocks):
        if b.markable:
            layer = b.layer
            if layer == "messages":
                h_idx = i
            elif layer == "session":
                s_idx = i
            elif layer in ("tools", "system", "documents"):
                f_idx = i
    return f_idx, s_idx, h_idx


def _stepping_stone(blocks: Sequence[LayoutBlock], target: int, prev: int) -> int | None:
    """The last markable history block at or before ``target`` and after ``prev``."""
    for i in range(target, prev, -1):
        if blocks[i].markable and blocks[i].layer == "messages":
            return i
    return None


def _min_per_segment(
    ordered: list[PlacedBreakpoint], min_tokens: int, skipped: list[str]
) -> list[PlacedBreakpoint]:
    """Drop breakpoints closer than ``min_tokens`` to the previous kept one (Bedrock),
    saying why in ``skipped``."""
    kept: list[PlacedBreakpoint] = []
    for bp in ordered:
        since = bp.prefix_tokens - (kept[-1].prefix_tokens if kept else 0)
        if since < min_tokens:
            skipped.append(
                f"{bp.kind}: not placed -- only {since} tokens since the "
                f"previous breakpoint, under the per-checkpoint minimum "
                f"of {min_tokens}"
            )
            continue
        kept.append(bp)
    return kept


# ---- token counts of the neutral form ------------------------------------------------------


def memo_tokens(key: str, text: str, model: str | None) -> int:
    """Token count memoized by a content hash (frozen and session segments)."""
    return count_tokens_memo(key, text, model).tokens


IMAGE_TOKENS = 1600  # a flat estimate for one image (Anthropic: ~1,600 for a 1.15 MP image)


def block_tokens(block: Mapping[str, Any], model: str | None) -> int:
    """Estimated tokens of one neutral content block (see ``promptcache.build``)."""
    t = block.get("type")
    if t == "text":
        return text_tokens(block["text"], model)
    if t == "tool_call":
        args = block.get("arguments_raw")
        if args is None:
            args = dumps_sorted(block.get("arguments", {}))
        return text_tokens(block["name"], model) + text_tokens(args, model)
    if t == "tool_result":
        return sum(block_tokens(b, model) for b in block.get("content", ())) + 1
    if t == "image":
        return IMAGE_TOKENS
    if t == "native":
        return text_tokens(dumps_sorted(block.get("block", {})), model)
    return 0


_segment_memo: Memo[tuple[Any, ...], list[int]] = Memo(1024)


def _segments(key: tuple[Any, ...], make: Callable[[], list[int]]) -> list[int]:
    """``make()`` memoized by ``key`` and the token counter's generation (the 1,024 most
    recently used)."""
    return _segment_memo.get_or_make(key + (counter_generation(),), make)


def frozen_text_tokens(prompt: Any, model: str | None) -> list[int]:
    """Token counts of ``prompt.frozen_texts()`` (system texts, then rendered documents),
    memoized by the prompt's prefix hash and the model."""
    return _segments(
        ("f", prompt.prefix_hash, model),
        lambda: [
            memo_tokens(f"{prompt.prefix_hash}:f{i}", t, model)
            for i, t in enumerate(prompt.frozen_texts())
        ],
    )


def session_text_tokens(prompt: Any, model: str | None) -> list[int]:
    """Token counts of ``prompt.session`` texts, memoized by the session hash and the model."""
    return _segments(
        ("s", prompt.session_hash, model),
        lambda: [
            memo_tokens(f"{prompt.session_hash}:s{i}", t, model)
            for i, t in enumerate(prompt.session)
        ],
    )


def tool_tokens(prompt: Any, model: str | None) -> list[int]:
    """Token counts of each tool schema's canonical JSON, memoized by the prefix hash."""
    return _segments(
        ("t", prompt.prefix_hash, model),
        lambda: [
            memo_tokens(f"{prompt.prefix_hash}:t{i}", dumps_sorted(t), model)
            for i, t in enumerate(prompt.tools)
        ],
    )
