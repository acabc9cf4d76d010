"""Cache-mode glue: what usage the server reports for a request.

``--cache-mode automatic`` (default) reports what the engine physically did: the cached
tokens are the engine's ``num_cached_tokens`` (whole 16-token blocks reused from its
prefix cache, as vLLM reports them); no writes are reported.

``--cache-mode anthropic`` / ``openai`` report what that hosted provider would have
reported for the same request sequence, computed by :mod:`promptcache.simulation.emulation` on an
emulated cache state (entries, TTLs, a clock). The engine's physical prefix cache keeps
running underneath: it decides how fast a request is (TTFT), the emulation decides only
the usage numbers. The two usually agree on *whether* a prefix is reused but differ in
*how much* is counted: the engine reuses any whole block it still holds, while the
emulation counts only what the provider's rules allow (breakpoints, minimum lengths,
128-token steps, TTL expiry) — exactly the difference an application needs to see offline.

A request may choose another mode than the server's with the header
``X-Promptcache-Cache-Mode: automatic|anthropic|openai`` (one server can then serve a test
suite that checks both providers' rules; each mode keeps its own entries).

Partitions: entries never cross models or tenants (``cache_salt``), and for OpenAI
``prompt_cache_key`` is part of the key (it routes to a different cache machine).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from promptcache.simulation.emulation import (
    Breakpoint,
    CacheRuleError,
    CacheState,
    CacheUsage,
    PromptLayout,
    anthropic_min_cacheable_tokens,
    anthropic_usage,
    check_anthropic_breakpoints,
    openai_breakpoint_usage,
    openai_usage,
    openai_uses_breakpoints,
)

from .errors import APIError
from .rendering import RenderedPrompt

CACHE_MODES = ("automatic", "anthropic", "openai")


@dataclass
class CacheRequest:
    """What the emulation needs to know about one request.

    ``anthropic_breakpoints``: from ``cache_control`` markers (tools, system, messages
    order); ``openai_breakpoints``: explicit ``prompt_cache_breakpoint`` marks with their
    TTL resolved; ``implicit_end``: token offset of the end of the latest user/tool
    message (OpenAI GPT-5.6+ implicit breakpoint)."""

    model: str
    rendered: RenderedPrompt
    salt: str | None = None
    anthropic_breakpoints: list[Breakpoint] = field(default_factory=list)
    openai_breakpoints: list[Breakpoint] = field(default_factory=list)
    openai_mode: str | None = None  # prompt_cache_options.mode when given
    openai_ttl: str = "30m"
    implicit_end: int | None = None
    prompt_cache_key: str | None = None
    retention: str | None = None
    mode: str | None = None  # per-request override of the server's cache mode


def request_mode(headers) -> str | None:
    """The ``X-Promptcache-Cache-Mode`` override, or None. Raises :class:`APIError` 400 for
    an unknown mode."""
    mode = headers.get("x-promptcache-cache-mode")
    if mode is None:
        return None
    mode = mode.strip().lower()
    if mode not in CACHE_MODES:
        raise APIError(
            400, f"X-Promptcache-Cache-Mode must be one of {', '.join(CACHE_MODES)}; got {mode!r}"
        )
    return mode


#: OpenAI-API endpoints: no ``cache_control`` in the official OpenAI clients' requests
OPENAI_API_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
CACHE_NOTE_HEADER = "x-promptcache-cache-note"
ANTHROPIC_MODE_OPENAI_NOTE = (
    "cache-mode anthropic: usage follows Anthropic's rules, which cache only up to "
    "cache_control breakpoints; an OpenAI-API request without cache_control on its "
    "content parts reports 0 cached tokens"
)


def cache_mode_note(path: str, server_mode: str, header_mode: str | None) -> str | None:
    """The note a response to ``path`` carries in :data:`CACHE_NOTE_HEADER` (and the
    engine logs once), or None: set for an OpenAI-API endpoint served under Anthropic's
    rules (``server_mode``, or the request's ``X-Promptcache-Cache-Mode`` value
    ``header_mode`` when valid), where a client that sends no ``cache_control`` always
    sees 0 cached tokens."""
    mode = (header_mode or "").strip().lower()
    if mode not in CACHE_MODES:
        mode = server_mode
    if mode != "anthropic":
        return None
    if not any(path == p or path.startswith(p + "/") for p in OPENAI_API_PATHS):
        return None
    return ANTHROPIC_MODE_OPENAI_NOTE


def anthropic_breakpoints(rendered: RenderedPrompt) -> list[Breakpoint]:
    """Breakpoints of the blocks that carry ``cache_control``, in prompt order."""
    out = []
    for block, end in zip(rendered.blocks, rendered.block_ends):
        if block.cache_control is not None:
            ttl, path = block.cache_control
            out.append(Breakpoint(end, ttl, f"{path}.ttl"))
    return out


def openai_breakpoints(rendered: RenderedPrompt, default_ttl: str) -> list[Breakpoint]:
    """Explicit ``prompt_cache_breakpoint`` marks, TTL defaulting to the request's."""
    out = []
    for block, end in zip(rendered.blocks, rendered.block_ends):
        if block.openai_breakpoint is not None:
            ttl, path = block.openai_breakpoint
            out.append(Breakpoint(end, ttl or default_ttl, path))
    return out


class CacheEmulator:
    """Holds the emulated cache state for one server.

    ``mode``: one of :data:`CACHE_MODES`; ``clock``: seconds callable (a
    :class:`~promptcache.simulation.emulation.ManualClock` under ``--test-clock``);
    ``anthropic_min_tokens``: minimum cacheable length for models not in the documented
    table (None: 1,024)."""

    def __init__(
        self,
        mode: str = "automatic",
        clock: Callable[[], float] | None = None,
        anthropic_min_tokens: int | None = None,
    ):
        if mode not in CACHE_MODES:
            raise ValueError(f"cache mode must be one of {CACHE_MODES}, got {mode!r}")
        self.mode = mode
        self.state = CacheState(clock)
        self.anthropic_min_tokens = anthropic_min_tokens
        self._lock = threading.Lock()

    # -- validation before the request runs ---------------------------------------------
    def validate(self, req: CacheRequest, *, api: str) -> None:
        """Reject what the emulated provider rejects (HTTP 400).

        Anthropic's breakpoint rules (at most 4, no 1h after 5m) apply on ``/v1/messages``
        in every mode, as the hosted Messages API enforces them. In ``openai`` mode,
        ``prompt_cache_breakpoint``/``prompt_cache_options`` sent for a model older than
        GPT-5.6 is a 400, as OpenAI answers it."""
        mode = req.mode or self.mode
        try:
            if api == "anthropic" or (mode == "anthropic" and req.anthropic_breakpoints):
                check_anthropic_breakpoints(req.anthropic_breakpoints)
        except CacheRuleError as exc:
            raise APIError(400, exc.message, param=exc.param) from None
        if mode == "openai" and api == "openai":
            uses = openai_uses_breakpoints(req.model)
            if uses is False and (req.openai_breakpoints or req.openai_mode):
                raise APIError(
                    400,
                    f"prompt_cache_breakpoint and prompt_cache_options are not supported with "
                    f"model {req.model!r}; they require gpt-5.6 or later.",
                    param="prompt_cache_options"
                    if req.openai_mode
                    else req.openai_breakpoints[0].param,
                )

    # -- usage -------------------------------------------------------------------------
    def usage(self, req: CacheRequest, engine_cached_tokens: int) -> CacheUsage:
        """The usage to report; updates the emulated state (call once per request, when
        the engine has admitted it). Raises :class:`APIError` 400 on a rule violation."""
        n = req.rendered.num_tokens
        mode = req.mode or self.mode
        if mode == "automatic":
            cached = min(engine_cached_tokens, n)
            return CacheUsage(n, cached, {}, n - cached, writes_reported=False)
        layout_blocks = req.rendered.block_ends
        try:
            with self._lock:
                if mode == "anthropic":
                    min_tokens = anthropic_min_cacheable_tokens(
                        req.model, default=self.anthropic_min_tokens or 1024
                    )
                    layout = PromptLayout(
                        req.rendered.token_ids, layout_blocks, req.anthropic_breakpoints
                    )
                    return anthropic_usage(
                        self.state,
                        layout,
                        min_cacheable_tokens=min_tokens,
                        partition=("anthropic", req.model, req.salt),
                    )
                partition = ("openai", req.model, req.salt, req.prompt_cache_key)
                uses = openai_uses_breakpoints(req.model)
                if uses is None:
                    uses = bool(req.openai_breakpoints or req.openai_mode)
                if uses:
                    layout = PromptLayout(
                        req.rendered.token_ids, layout_blocks, req.openai_breakpoints
                    )
                    return openai_breakpoint_usage(
                        self.state,
                        layout,
                        implicit_end=req.implicit_end if req.implicit_end else n,
                        mode=req.openai_mode or "implicit",
                        ttl=req.openai_ttl,
                        partition=partition,
                    )
                return openai_usage(
                    self.state,
                    PromptLayout(req.rendered.token_ids),
                    retention=req.retention or "in_memory",
                    partition=partition,
                )
        except CacheRuleError as exc:
            raise APIError(400, exc.message, param=exc.param) from None


#: Name of the usage extension field giving the engine's prefix-cache hits per tier, in tokens:
#: ``{"gpu": n, "cpu": m}`` ("gpu": the device pool; "cpu": the CPU tier,
#: ``--cpu-cache-memory``), plus ``"disk"`` with a disk tier (``--disk-cache-dir``). The providers' own fields are unchanged; in ``automatic`` mode
#: the tiers sum to ``prompt_tokens_details.cached_tokens`` (OpenAI) and
#: ``cache_read_input_tokens`` (Anthropic); in the emulated modes those report the emulated
#: provider's rules while this field stays what the engine physically reused.
CACHE_TIERS_FIELD = "promptcache_cache_tiers"


def openai_usage_body(
    usage: CacheUsage, completion_tokens: int, *, report_writes: bool, tiers: dict | None = None
) -> dict:
    """OpenAI ``usage``: ``prompt_tokens`` (cached included),
    ``prompt_tokens_details.cached_tokens`` and, where writes are reported,
    ``cache_write_tokens``; plus :data:`CACHE_TIERS_FIELD` when ``tiers`` is given."""
    details = {"cached_tokens": usage.cache_read_tokens, "audio_tokens": 0}
    if report_writes and usage.writes_reported:
        details["cache_write_tokens"] = usage.cache_write_total
    body = {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": usage.prompt_tokens + completion_tokens,
        "prompt_tokens_details": details,
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    if tiers is not None:
        body[CACHE_TIERS_FIELD] = dict(tiers)
    return body


def anthropic_usage_body(usage: CacheUsage, output_tokens: int, tiers: dict | None = None) -> dict:
    """Anthropic ``usage``: ``input_tokens`` counts only uncached input; plus
    :data:`CACHE_TIERS_FIELD` when ``tiers`` is given."""
    w = usage.cache_write_tokens
    one_hour = w.get("1h", 0) + w.get("12h", 0)
    five_min = usage.cache_write_total - one_hour
    body = {
        "input_tokens": usage.uncached_tokens,
        "cache_creation_input_tokens": usage.cache_write_total,
        "cache_read_input_tokens": usage.cache_read_tokens,
        "cache_creation": {
            "ephemeral_5m_input_tokens": five_min,
            "ephemeral_1h_input_tokens": one_hour,
        },
        "output_tokens": output_tokens,
        "service_tier": "standard",
    }
    if tiers is not None:
        body[CACHE_TIERS_FIELD] = dict(tiers)
    return body
