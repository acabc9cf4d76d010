"""``promptcache simulate TRACE.jsonl --provider anthropic --model M``: replay a trace of
requests under a provider's prompt-cache rules and predict hit rate and cost.

The rules are :mod:`promptcache.simulation.emulation` (the same model the local engine's
``--cache-mode anthropic|openai`` reports from): Anthropic (and Bedrock's Claude models)
-- explicit breakpoints, at most 4, 5m/1h TTLs refreshed on every hit, the model's minimum
cacheable length, the 20-block lookback; OpenAI -- 1,024-token minimum and 128-token steps
(models before GPT-5.6), breakpoints with 30m/12h TTLs and reported writes (GPT-5.6+),
caches partitioned by ``prompt_cache_key``.

Trace format: JSON Lines, one request per line, in time order. Either

- **segments** (what a privacy-preserving recorder keeps: hashes and token counts)::

    {"ts": 1732870000.0, "model": "claude-sonnet-4-6", "output_tokens": 120,
     "prompt_cache_key": null,
     "segments": [{"tokens": 2100, "hash": "sys-v3", "layer": "system", "cache": "5m"},
                  {"tokens": 40, "hash": "q-17", "layer": "messages"}]}

  ``segments`` are the prompt's content blocks in cache order (tools -> system ->
  messages); ``hash`` identifies a block's content (equal hash = equal tokens);
  ``cache`` ("5m"/"1h", OpenAI GPT-5.6+ "30m"/"12h") puts a breakpoint at the block's end;
  ``boundary: false`` marks a span that does not end a content block (template glue);
  ``layer`` (tools, system, documents, session, messages, dynamic) is used by
  ``--compare``;
- or a **request** payload: ``{"ts": ..., "request": {...}, "output_tokens": n}`` with the
  keyword arguments of Anthropic ``messages.create`` or OpenAI ``chat.completions.create``;
  it is cut into blocks and counted with :func:`promptcache.prompt.tokens.text_tokens` (exact for
  OpenAI models, an estimate for others; register an exact counter for yours).

``--compare`` replays the same requests re-laid by ``promptcache.build`` and prints both
runs side by side. Payload traces are rebuilt with :func:`promptcache.build` itself
(system lines holding volatile values moved to ``dynamic``, tools canonical, breakpoints
from ``Prompt.to_anthropic``, ``prompt_cache_key`` from ``Prompt.to_openai``); segment
traces are re-ordered by layer (tools, system, documents, session, messages, dynamic) with
breakpoints from :func:`promptcache.prompt.breakpoints.plan`, the rule build's renderers use.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from promptcache.compose.build import build
from promptcache.errors import PromptCacheError
from promptcache.ledger.pricing import cost, load_prices
from promptcache.limits import (
    ANTHROPIC_LOOKBACK_BLOCKS,
    ANTHROPIC_TTLS,
    OPENAI_BREAKPOINT_TTLS,
    cache_limits,
)
from promptcache.prompt.breakpoints import LayoutBlock, plan
from promptcache.prompt.tokens import text_tokens
from promptcache.prompt.volatile import find_volatile
from promptcache.providers.usage_record import Usage
from promptcache.simulation import emulation as cr
from promptcache.simulation.emulation import BlockPrefix, Breakpoint, PromptLayout

__all__ = [
    "Segment",
    "TraceRequest",
    "SimulationResult",
    "load_trace",
    "simulate",
    "relayout",
    "segments_from_tokens",
    "segments_from_request",
    "add_arguments",
    "run",
    "TraceError",
    "TraceWriter",
    "trace_line",
    "TRACE_HELP",
]

PROVIDERS = ("anthropic", "bedrock", "gemini", "openai")
LAYER_ORDER = {"tools": 0, "system": 1, "documents": 2, "session": 3, "messages": 4, "dynamic": 5}
# cache TTLs a trace segment may ask for: Anthropic/Bedrock and OpenAI GPT-5.6+ breakpoints
_SEGMENT_TTLS = ANTHROPIC_TTLS + OPENAI_BREAKPOINT_TTLS


class TraceError(ValueError):
    """A trace line is malformed or breaks a provider rule; the message names the line."""


@dataclass(frozen=True)
class Segment:
    """One content block of a traced request: ``tokens`` (int >= 0), ``hash`` (content
    identity), breakpoint TTL ``cache`` or None, ``boundary`` (its end is a content-block
    end) and ``layer`` (for ``--compare``)."""

    tokens: int
    hash: str
    cache: str | None = None
    boundary: bool = True
    layer: str | None = None


@dataclass
class TraceRequest:
    """One traced request: Unix time ``ts`` (seconds), ``segments``, ``output_tokens``,
    ``model``, OpenAI ``prompt_cache_key``/``retention``, and the trace ``line``."""

    ts: float
    segments: list[Segment]
    output_tokens: int = 0
    model: str | None = None
    prompt_cache_key: str | None = None
    retention: str | None = None
    line: int = 0
    request: dict[str, Any] | None = None

    @property
    def prompt_tokens(self) -> int:
        return sum(s.tokens for s in self.segments)


@dataclass
class SimulationResult:
    """Per-request predicted usages and their totals (``Usage`` sum, cost if priced)."""

    usages: list[Usage]
    total: Usage
    cost: Decimal | None = None
    baseline: Decimal | None = None
    unpriced: int = 0
    requests: list[TraceRequest] = field(default_factory=list)

    @property
    def hit_rate(self) -> float | None:
        return self.total.hit_rate

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": len(self.usages),
            "prompt_tokens": self.total.prompt_tokens,
            "cache_read_tokens": self.total.cache_read_tokens,
            "cache_write_tokens": dict(self.total.cache_write_by_ttl),
            "uncached_input_tokens": self.total.uncached_input_tokens,
            "output_tokens": self.total.output_tokens,
            "hit_rate": self.hit_rate,
            "cost": None if self.cost is None else str(self.cost),
            "no_cache_cost": None if self.baseline is None else str(self.baseline),
            "saving": None
            if self.cost is None or self.baseline is None
            else str(self.baseline - self.cost),
            "unpriced_requests": self.unpriced,
            "per_request": [
                {
                    "line": r.line,
                    "ts": r.ts,
                    "prompt_tokens": u.prompt_tokens,
                    "cache_read_tokens": u.cache_read_tokens,
                    "cache_write_tokens": dict(u.cache_write_by_ttl),
                    "uncached_input_tokens": u.uncached_input_tokens,
                }
                for r, u in zip(self.requests, self.usages)
            ],
        }


# --- reading traces -------------------------------------------------------------------


def _int(v: Any, what: str, line: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise TraceError(f"line {line}: {what} must be an integer >= 0, got {v!r}")
    return v


def _segments_from_json(raw: Any, line: int) -> list[Segment]:
    if not isinstance(raw, list) or not raw:
        raise TraceError(f"line {line}: 'segments' must be a non-empty list")
    out = []
    for i, s in enumerate(raw):
        if not isinstance(s, dict):
            raise TraceError(f"line {line}: segments[{i}] must be an object")
        unknown = set(s) - {"tokens", "hash", "cache", "boundary", "layer"}
        if unknown:
            raise TraceError(
                f"line {line}: segments[{i}] has unknown field(s) {', '.join(sorted(unknown))}"
            )
        if "hash" not in s or not isinstance(s["hash"], str):
            raise TraceError(f"line {line}: segments[{i}].hash must be a string")
        cache = s.get("cache")
        if cache is not None and cache not in _SEGMENT_TTLS:
            raise TraceError(
                f"line {line}: segments[{i}].cache must be one of {', '.join(_SEGMENT_TTLS)}"
            )
        layer = s.get("layer")
        if layer is not None and layer not in LAYER_ORDER:
            raise TraceError(
                f"line {line}: segments[{i}].layer must be one of {', '.join(LAYER_ORDER)}"
            )
        out.append(
            Segment(
                _int(s.get("tokens"), f"segments[{i}].tokens", line),
                s["hash"],
                cache,
                bool(s.get("boundary", True)),
                layer,
            )
        )
    return out


def segments_from_tokens(
    token_ids: Sequence[int],
    block_ends: Sequence[int],
    breakpoints: dict[int, str] | None = None,
    *,
    salt: str = "",
    grid: tuple[int, int] = (1024, 128),
) -> list[Segment]:
    """Record one prompt known as token ids (e.g. from your own engine) as segments that
    replay EXACTLY like the token ids themselves, without storing them.

    The prompt is cut at every content-block end (``block_ends``, token offsets) and at
    every length ``grid[0] + k * grid[1]`` (OpenAI's cacheable lengths); each piece's
    ``hash`` is a salted SHA-256 of its token ids. Since every length at which a provider
    can match a prefix is a cut point, two recorded prompts share a prefix digest there
    exactly when their token prefixes are equal. ``breakpoints``: ``{end_offset: ttl}``.
    """
    n = len(token_ids)
    ends = {int(e) for e in block_ends if 0 < int(e) <= n}
    cuts = set(ends) | set((breakpoints or {}).keys())
    cuts |= set(range(grid[0], n + 1, grid[1]))
    cuts.add(n)
    out, start = [], 0
    for end in sorted(c for c in cuts if 0 < c <= n):
        h = hashlib.sha256(salt.encode() + b"|" + ",".join(map(str, token_ids[start:end])).encode())
        out.append(
            Segment(
                end - start, h.hexdigest()[:32], (breakpoints or {}).get(end), end in ends, None
            )
        )
        start = end
    return out


def _h(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def _json_text(value: Any) -> str:
    # the bytes as sent: key order kept (an unsorted tool schema is a different prefix)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))  # noqa: PC002


def segments_from_request(req: dict[str, Any], model: str | None) -> list[Segment]:
    """Cut an Anthropic ``messages.create`` or OpenAI ``chat.completions.create`` payload
    into content blocks in cache order, counting each block's text with
    :func:`promptcache.prompt.tokens.text_tokens` (``model`` picks the tokenizer)."""

    segs: list[Segment] = []

    def add(text: str, layer: str, cc: Any = None) -> None:
        ttl = None
        if isinstance(cc, dict):
            ttl = cc.get("ttl", "5m")
        # noqa below: a known false positive of PC006 (text_tokens returns an int; the linter
        # follows the counters dict it looks up); see the issue 28 closing note
        segs.append(Segment(text_tokens(text, model), _h(text), ttl, True, layer))  # noqa: PC006

    for tool in req.get("tools") or []:
        cc = tool.get("cache_control") if isinstance(tool, dict) else None
        add(_json_text({k: v for k, v in tool.items() if k != "cache_control"}), "tools", cc)
    system = req.get("system")
    if isinstance(system, str) and system:
        add(system, "system")
    elif isinstance(system, list):
        for b in system:
            add(b.get("text", _json_text(b)), "system", b.get("cache_control"))
    for m in req.get("messages") or []:
        role = m.get("role", "user")
        layer = "system" if role in ("system", "developer") else "messages"
        content = m.get("content")
        if isinstance(content, str):
            add(f"{role}: {content}", layer, m.get("cache_control"))
        elif isinstance(content, list):
            for k, b in enumerate(content):
                text = b.get("text") if isinstance(b, dict) and b.get("type") == "text" else None
                cc = b.get("cache_control") if isinstance(b, dict) else None
                if cc is None and k == len(content) - 1:
                    # a message-level marker (Anthropic's mid-conversation system messages)
                    cc = m.get("cache_control")
                add(f"{role}: {text}" if text is not None else _json_text(b), layer, cc)
        for call in m.get("tool_calls") or []:
            add(_json_text(call), layer)
    top = req.get("cache_control")  # Anthropic automatic caching: the last cacheable block
    if isinstance(top, dict) and segs:
        last = segs[-1]
        segs[-1] = Segment(last.tokens, last.hash, top.get("ttl", "5m"), last.boundary, last.layer)
    if not segs:
        raise ValueError("the request has no system, tools or messages")
    return segs


def trace_line(
    body: dict[str, Any], model: str | None, output_tokens: int, ts: float
) -> dict[str, Any]:
    """One **segments** trace line for a request ``body`` (Anthropic ``messages.create`` or
    OpenAI ``chat.completions.create`` keyword arguments, as sent): hashes and token
    counts only (:func:`segments_from_request`), no prompt text. Raises ``ValueError``
    for a body with nothing to cut into blocks."""
    segs = segments_from_request(body, model)
    row: dict[str, Any] = {"ts": ts, "model": model, "output_tokens": int(output_tokens)}
    if body.get("prompt_cache_key"):
        row["prompt_cache_key"] = body["prompt_cache_key"]
    if body.get("prompt_cache_retention"):
        row["retention"] = body["prompt_cache_retention"]
    row["segments"] = [
        {
            "tokens": sg.tokens,
            "hash": sg.hash,
            **({"cache": sg.cache} if sg.cache else {}),
            **({} if sg.boundary else {"boundary": False}),
            **({"layer": sg.layer} if sg.layer else {}),
        }
        for sg in segs
    ]
    return row


class TraceWriter:
    """Appends :func:`trace_line` rows to a JSONL file, one flushed line per request
    (thread-safe; the file is opened per write, so a crash loses at most the line being
    written). ``path``: the trace file (created with its directory if missing)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        self._lock = threading.Lock()

    def write(self, body: dict[str, Any], model: str | None, output_tokens: int, ts: float) -> None:
        """Append the line for one request; raises ``ValueError`` (nothing to cut into
        blocks) or ``OSError`` (the file cannot be written)."""
        text = json.dumps(trace_line(body, model, output_tokens, ts), ensure_ascii=False)
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(text + "\n")


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _sniff(path: str) -> None:
    """Raise :class:`TraceError` when ``path`` is plainly not a JSONL trace (an SQLite
    file such as a promptcache ledger, or binary data)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(_SQLITE_MAGIC):
        raise TraceError(
            f"{path} is an SQLite database (a promptcache ledger?), not a JSONL trace; "
            "record one with promptcache.wrap(client, trace='trace.jsonl') "
            "(format: promptcache simulate --help)"
        )
    if b"\x00" in head:
        raise TraceError(
            f"{path} is binary data, not a JSONL trace (format: promptcache simulate --help)"
        )


def load_trace(path_or_lines: str | Iterable[str], model: str | None = None) -> list[TraceRequest]:
    """Parse a JSONL trace (a path, or an iterable of lines). Raises :class:`TraceError`
    naming the line for malformed JSON, text that is not UTF-8, missing fields,
    non-increasing ``ts``, or a ``request`` payload that cannot be cut into blocks, and
    for a file that is an SQLite database or binary; ``OSError`` if unreadable."""
    if isinstance(path_or_lines, str):
        _sniff(path_or_lines)
    lines = (
        open(path_or_lines, encoding="utf-8") if isinstance(path_or_lines, str) else path_or_lines
    )
    out: list[TraceRequest] = []
    n = 0
    try:
        for n, text in enumerate(lines, 1):
            if not text.strip():
                continue
            try:
                d = json.loads(text)
            except ValueError as e:
                raise TraceError(f"line {n}: not JSON ({getattr(e, 'msg', e)})") from None
            if not isinstance(d, dict):
                raise TraceError(f"line {n}: expected a JSON object")
            ts = d.get("ts")
            if isinstance(ts, bool) or not isinstance(ts, (int, float)):
                raise TraceError(f"line {n}: 'ts' (Unix seconds) is required")
            if out and ts < out[-1].ts:
                raise TraceError(
                    f"line {n}: ts {ts} is before the previous line's "
                    f"{out[-1].ts}; sort the trace by time"
                )
            m = d.get("model") or (d.get("request") or {}).get("model") or model
            if "segments" in d:
                segs = _segments_from_json(d["segments"], n)
            elif isinstance(d.get("request"), dict):
                try:
                    segs = segments_from_request(d["request"], m)
                except (ValueError, TypeError, AttributeError) as e:
                    raise TraceError(f"line {n}: cannot read the request: {e}") from None
            else:
                raise TraceError(f"line {n}: needs 'segments' or a 'request' payload")
            req = d.get("request") or {}
            out.append(
                TraceRequest(
                    float(ts),
                    segs,
                    _int(d.get("output_tokens", 0), "output_tokens", n),
                    m,
                    d.get("prompt_cache_key", req.get("prompt_cache_key")),
                    d.get("retention", req.get("prompt_cache_retention")),
                    n,
                    req if isinstance(d.get("request"), dict) else None,
                )
            )
    except UnicodeDecodeError:
        raise TraceError(
            f"{path_or_lines if isinstance(path_or_lines, str) else 'the trace'} is not a "
            f"JSONL trace: line {n + 1} is not UTF-8 text (format: promptcache simulate --help)"
        ) from None
    finally:
        if isinstance(path_or_lines, str):
            lines.close()  # type: ignore[attr-defined]  # the file opened above
    if not out:
        raise TraceError("the trace has no requests")
    return out


# --- simulation ---------------------------------------------------------------------


def _layout(req: TraceRequest) -> Any:

    ends, bps, pos = [], [], 0
    for i, s in enumerate(req.segments):
        pos += s.tokens
        if s.boundary:
            ends.append(pos)
        if s.cache:
            bps.append(Breakpoint(pos, s.cache, f"segments[{i}].cache"))
    return PromptLayout(BlockPrefix([(s.tokens, s.hash) for s in req.segments]), ends, bps)


def _replay_one(
    state: Any,
    layout: Any,
    req: TraceRequest,
    provider: str,
    m: str | None,
    min_cacheable_tokens: int | None,
) -> Any:
    """One request's emulated cache usage under ``provider``'s rules (the same functions
    the local engine's server answers with); raises ``CacheRuleError`` for a request the
    provider would reject."""
    if provider in ("anthropic", "bedrock"):
        cr.check_anthropic_breakpoints(layout.breakpoints)
        mn = min_cacheable_tokens or cr.anthropic_min_cacheable_tokens(m)
        return cr.anthropic_usage(
            state, layout, min_cacheable_tokens=mn, partition=("anthropic", m)
        )
    if provider == "gemini":
        # implicit caching: the longest live prefix at a content boundary, from the model's
        # documented minimum (promptcache.limits, Gemini rows)
        mn = min_cacheable_tokens or cache_limits(m or "", "gemini").min_tokens
        return cr.gemini_implicit_usage(state, layout, min_tokens=mn, partition=("gemini", m))
    part = ("openai", m, req.prompt_cache_key)
    uses = cr.openai_uses_breakpoints(m)
    if uses is None:
        uses = bool(layout.breakpoints)
    if uses:
        # the implicit breakpoint: the end of the last content block
        end = layout.block_ends[-1] if layout.block_ends else layout.source().length
        return cr.openai_breakpoint_usage(state, layout, implicit_end=end, partition=part)
    return cr.openai_usage(state, layout, retention=req.retention or "in_memory", partition=part)


def simulate(
    requests: Sequence[TraceRequest],
    provider: str,
    model: str | None = None,
    *,
    min_cacheable_tokens: int | None = None,
    price: Any = None,
) -> SimulationResult:
    """Replay ``requests`` (in time order) on an empty cache under ``provider``'s rules.

    ``model``: overrides each request's model (rules such as Anthropic's minimum length and
    OpenAI's GPT-5.6 breakpoints depend on it; prices too). ``min_cacheable_tokens``:
    override Anthropic's (or Gemini's) minimum (default: the model's documented value).
    ``price``: a :class:`~promptcache.Price` for every request (default: the bundled row).
    Returns a :class:`SimulationResult`. Raises :class:`TraceError` for an unknown provider
    or a request the provider would reject (e.g. more than 4 breakpoints).
    """

    if provider not in PROVIDERS:
        raise TraceError(f"provider {provider!r}: simulate knows {', '.join(PROVIDERS)}")
    if not requests:
        raise TraceError("no requests to simulate")
    clock = cr.ManualClock(requests[0].ts)
    state = cr.CacheState(clock)
    usages: list[Usage] = []
    total_cost = total_base = Decimal(0)
    unpriced = 0
    for req in requests:
        if req.ts < clock.now():
            raise TraceError(f"line {req.line}: time goes backwards")
        clock.advance(req.ts - clock.now())
        m = model or req.model
        layout = _layout(req)
        try:
            cu = _replay_one(state, layout, req, provider, m, min_cacheable_tokens)
        except cr.CacheRuleError as e:
            raise TraceError(
                f"line {req.line}: the provider would reject this request: {e.message}"
            ) from None
        u = Usage(
            uncached_input_tokens=cu.uncached_tokens,
            cache_read_tokens=cu.cache_read_tokens,
            cache_write_tokens=cu.cache_write_total,
            cache_write_by_ttl=dict(cu.cache_write_tokens),
            output_tokens=req.output_tokens,
            provider=provider,
            model=m,
        )
        usages.append(u)
        try:
            c = cost(u, model=m, price=price)
            total_cost += c.total
            total_base += c.baseline
        except PromptCacheError:
            unpriced += 1
    total = usages[0]
    for u in usages[1:]:
        total = total + u
    priced = unpriced < len(usages)
    return SimulationResult(
        usages,
        total,
        total_cost if priced else None,
        total_base if priced else None,
        unpriced,
        list(requests),
    )


def relayout(
    requests: Sequence[TraceRequest],
    provider: str,
    model: str | None = None,
    *,
    min_cacheable_tokens: int | None = None,
) -> list[TraceRequest]:
    """The same requests laid out as ``promptcache.build`` lays them: segments stably
    sorted by layer (tools, system, documents, session, messages, dynamic; a segment
    without a layer counts as messages) and, for Anthropic/Bedrock, breakpoints placed by
    :func:`promptcache.prompt.breakpoints.plan` (frozen, session, history, lookback stepping
    stone); OpenAI models before GPT-5.6 take no markers."""

    out = []
    for req in requests:
        if req.request is not None:
            out.append(_relayout_payload(req, provider, model or req.model))
            continue
        segs = sorted(req.segments, key=lambda s: LAYER_ORDER.get(s.layer or "messages", 4))
        segs = [Segment(s.tokens, s.hash, None, True, s.layer) for s in segs]
        m = model or req.model
        if provider in ("anthropic", "bedrock"):
            mn = min_cacheable_tokens or cr.anthropic_min_cacheable_tokens(m)
            blocks = [
                LayoutBlock(
                    s.layer or "messages", i, s.tokens, (s.layer or "messages") != "dynamic"
                )
                for i, s in enumerate(segs)
            ]
            p = plan(blocks, min_tokens=mn, lookback=ANTHROPIC_LOOKBACK_BLOCKS)
            for bp in p.breakpoints:
                s = segs[bp.index]
                segs[bp.index] = Segment(s.tokens, s.hash, bp.ttl, True, s.layer)
        out.append(
            TraceRequest(
                req.ts,
                segs,
                req.output_tokens,
                req.model,
                req.prompt_cache_key,
                req.retention,
                req.line,
            )
        )
    return out


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def _relayout_payload(req: TraceRequest, provider: str, model: str | None) -> TraceRequest:
    """A request payload rebuilt with :func:`promptcache.build`: system text and tools as
    the frozen layers (tools in canonical JSON), the conversation as history, and every
    line of the system prompt holding a volatile value (clock, date, UUID, request id:
    what build warns about) moved to the ``dynamic`` layer, rendered last -- then
    rendered with ``Prompt.to_anthropic`` (breakpoints placed) or ``Prompt.to_openai``
    (``prompt_cache_key`` from the prefix hash)."""

    body = req.request or {}
    sys_texts = []
    if body.get("system"):
        sys_texts.append(_text_of(body["system"]))
    messages = []
    for m in body.get("messages") or []:
        if m.get("role") in ("system", "developer"):
            sys_texts.append(_text_of(m.get("content")))
        else:
            messages.append(m)
    stable: list[str] = []
    dynamic: list[str] = []
    for text in sys_texts:
        for ln in text.split("\n"):
            (dynamic if find_volatile(ln) else stable).append(ln)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prompt = build(
                system="\n".join(stable) or None,
                tools=body.get("tools") or None,
                messages=messages or None,
                dynamic="\n".join(dynamic) if dynamic else None,
            )
            m = model or body.get("model") or "model"
            if provider in ("anthropic", "bedrock"):
                payload = prompt.to_anthropic(m, max_tokens=int(body.get("max_tokens") or 1024))
            else:
                payload = prompt.to_openai(m)
    except (ValueError, TypeError) as e:
        raise TraceError(
            f"line {req.line}: promptcache.build could not lay out this request: {e}"
        ) from None
    return TraceRequest(
        req.ts,
        segments_from_request(payload, m),
        req.output_tokens,
        req.model,
        payload.get("prompt_cache_key", req.prompt_cache_key),
        req.retention,
        req.line,
        payload,
    )


# --- command line ---------------------------------------------------------------------


TRACE_HELP = """\
trace format: JSON Lines (one JSON object a line, in time order), each line either

  segments -- hashes and token counts, no prompt text (what wrap(..., trace=PATH) writes):
    {"ts": 1732870000.0, "model": "claude-sonnet-4-6", "output_tokens": 120,
     "prompt_cache_key": null,
     "segments": [{"tokens": 2100, "hash": "sys-v3", "layer": "system", "cache": "5m"},
                  {"tokens": 40, "hash": "q-17", "layer": "messages"}]}
    segments are the prompt's content blocks in cache order (tools, system, messages);
    equal "hash" = equal content; "cache" (5m|1h, OpenAI GPT-5.6+ 30m|12h) puts a
    breakpoint at the block's end; "boundary": false marks a span that does not end a
    content block; "layer" (tools, system, documents, session, messages, dynamic) is
    used by --compare;

  request -- a payload, cut into blocks and counted here (exact for OpenAI models):
    {"ts": 1732870000.0, "output_tokens": 120,
     "request": {"model": "gpt-5.4", "messages": [{"role": "system", "content": "..."}]}}
    with the keyword arguments of Anthropic messages.create or OpenAI
    chat.completions.create.

"ts" is Unix seconds (required, non-decreasing). Record a trace from live traffic with
promptcache.wrap(client, tracker, trace="trace.jsonl").

--from-ledger [--db PATH] [--since 7d] replays what promptcache.wrap already recorded in
the ledger, no trace needed: each record's segment digests, breakpoints and token counts
become one segments line (a segment's tokens are estimated from its share of the
record's characters). Records from before ledger schema v5 carry no digests and are
skipped. A segment is the unit: one edited at its end is replayed as a miss from its
start, so under OpenAI's rules (any 128-token-aligned prefix is read) the replay reads
less than the provider would.

--compare re-lays whole segments by their layer; it cannot split a segment, so a volatile
value inside the system text stays where it is (use build(dynamic=...) to move it out).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``promptcache simulate``."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = TRACE_HELP
    parser.add_argument(
        "trace",
        metavar="TRACE.jsonl",
        nargs="?",
        help="the trace (JSON Lines; format below); or pass --from-ledger instead",
    )
    parser.add_argument(
        "--from-ledger",
        action="store_true",
        help="replay the traffic recorded in the ledger (each record's digest chain and "
        "token counts, no prompt text; records need ledger schema v5+) instead of a trace",
    )
    parser.add_argument(
        "--db",
        metavar="PATH",
        help="with --from-ledger: ledger file or postgresql:// URL (default: "
        "$PROMPTCACHE_LEDGER or the user data directory)",
    )
    parser.add_argument(
        "--since",
        default=None,
        metavar="WHEN",
        help="with --from-ledger: only requests since WHEN: 30m, 24h, 7d, 2w or an ISO date",
    )
    parser.add_argument(
        "--provider", required=True, choices=PROVIDERS, help="whose cache rules to apply"
    )
    parser.add_argument(
        "--model",
        default=None,
        help="model id (rules and prices depend on it; default: per trace line)",
    )
    parser.add_argument(
        "--min-cacheable-tokens",
        type=int,
        default=None,
        metavar="N",
        help="override the Anthropic minimum cacheable length",
    )
    parser.add_argument("--prices", metavar="TOML", help="extra/override prices (TOML file)")
    parser.add_argument(
        "--compare", action="store_true", help="also replay the trace re-laid by promptcache.build"
    )
    parser.add_argument("--json", action="store_true", help="print JSON (with per-request rows)")


def _fmt(res: SimulationResult) -> dict[str, str]:
    t = res.total
    rate = "n/a" if res.hit_rate is None else f"{res.hit_rate:.1%}"

    def money(x: Decimal | None) -> str:
        return "n/a" if x is None else f"${x.quantize(Decimal('0.000001'))}"

    return {
        "requests": f"{len(res.usages):,}",
        "prompt tokens": f"{t.prompt_tokens:,}",
        "cache read": f"{t.cache_read_tokens:,}",
        "cache write": f"{t.cache_write_tokens:,}",
        "uncached": f"{t.uncached_input_tokens:,}",
        "hit rate": rate,
        "cost": money(res.cost),
        "no-cache cost": money(res.baseline),
        "saving": money(
            None if res.cost is None or res.baseline is None else res.baseline - res.cost
        ),
    }


def _from_ledger(args: argparse.Namespace) -> tuple[list[TraceRequest], str]:
    """The ledger's records as trace requests (``--from-ledger``); raises TraceError or
    PromptCacheError (missing or unreadable ledger) with the line to print."""
    from promptcache.ledger.tracker import Tracker, default_path, parse_since
    from promptcache.simulation.from_ledger import trace_rows_from_ledger

    parse_since(args.since)  # a bad --since fails before the ledger is opened
    db = args.db or default_path()
    if "://" not in db and not os.path.exists(db):
        raise TraceError(
            f"no ledger at {db}; record some calls with promptcache.wrap(client) first, "
            "or pass --db PATH"
        )
    with Tracker(db) as tracker:
        rows, skipped = trace_rows_from_ledger(tracker, since=args.since)
    if skipped:
        print(
            f"promptcache simulate: {skipped} record(s) without a digest chain (before "
            "ledger schema v5, or recorded without the request body) left out",
            file=sys.stderr,
        )
    # the same reader as a JSONL file: one path from trace line to simulation
    reqs = load_trace((json.dumps(r, sort_keys=True) for r in rows), model=args.model)
    return reqs, db


def run(args: argparse.Namespace) -> int:
    """Print the prediction; exit 0, or 2 with one line on a bad trace or argument."""

    source = args.trace
    try:
        if args.from_ledger == (args.trace is not None):
            raise TraceError("pass either a TRACE.jsonl file or --from-ledger (not both)")
        if not args.from_ledger and (args.db or args.since):
            raise TraceError("--db and --since go with --from-ledger")
        if args.prices:
            load_prices(args.prices)
        if args.from_ledger:
            reqs, source = _from_ledger(args)
        else:
            reqs = load_trace(args.trace, model=args.model)
        kw = {"min_cacheable_tokens": args.min_cacheable_tokens}
        res = simulate(reqs, args.provider, args.model, **kw)
        cmp = (
            simulate(
                relayout(reqs, args.provider, args.model, **kw), args.provider, args.model, **kw
            )
            if args.compare
            else None
        )
    except (TraceError, PromptCacheError) as e:
        print(f"promptcache simulate: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # a bad --since
        print(f"promptcache simulate: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"promptcache simulate: cannot read {source}: {e.strerror}", file=sys.stderr)
        return 2
    if args.json:
        doc = {"provider": args.provider, "model": args.model, "as_traced": res.to_dict()}
        if cmp is not None:
            doc["promptcache_build"] = cmp.to_dict()
        print(json.dumps(doc, indent=2))
        return 0
    a = _fmt(res)
    models = sorted({r.model or "?" for r in reqs}) if not args.model else [args.model]
    print(
        f"{args.provider} cache rules, model {', '.join(models)}, {len(reqs)} requests "
        f"over {reqs[-1].ts - reqs[0].ts:,.0f} s"
    )
    if cmp is None:
        for k, v in a.items():
            print(f"  {k:14} {v:>16}")
    else:
        b = _fmt(cmp)
        print(f"  {'':14} {'as traced':>16} {'promptcache.build':>18}")
        for k in a:
            print(f"  {k:14} {a[k]:>16} {b[k]:>18}")
        if res.cost and cmp.cost is not None:
            print(f"  cost ratio (build / traced): {cmp.cost / res.cost:.3f}")
    if res.unpriced:
        print(
            f"  {res.unpriced} request(s) have no known price for their model; pass "
            "--prices FILE or --model",
            file=sys.stderr,
        )
    return 0
