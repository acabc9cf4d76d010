"""Provider module: bedrock — renders requests for its official client and parses its usage.

Two sections, owned by different parts of the SDK: request rendering (used by
`promptcache.build`) and usage parsing (used by `promptcache.usage`).
"""

from __future__ import annotations

# --- request rendering ---------------------------------------------------------------
#
# Owned by promptcache.build (SDK-BUILD): ``render(prompt, model, ...)`` turns a
# ``promptcache.build`` Prompt into the keyword arguments of boto3's
# ``client("bedrock-runtime").converse(**kw)`` with ``cachePoint`` blocks placed by the rule of
# ``promptcache.breakpoints`` (a cachePoint block caches everything before it).
import base64 as _base64
from typing import TYPE_CHECKING, Any

from promptcache.limits import BEDROCK_TTLS, cache_limits
from promptcache.providers import empty_request

if TYPE_CHECKING:  # pragma: no cover
    from promptcache.build import Prompt

_IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}


def _content(block: dict[str, Any], where: str) -> dict[str, Any]:
    t = block["type"]
    if t == "text":
        return {"text": block["text"]}
    if t == "image":
        if "url" in block:
            raise ValueError(
                f"{where}: Bedrock Converse takes images as bytes or S3 locations, "
                f"not URLs ({block['url'][:60]})"
            )
        fmt = _IMAGE_FORMATS.get(str(block.get("media_type")).lower())
        if fmt is None:
            raise ValueError(
                f"{where}: image type {block.get('media_type')!r} is not one of "
                f"{sorted(_IMAGE_FORMATS)}"
            )
        return {"image": {"format": fmt, "source": {"bytes": _base64.b64decode(block["data"])}}}
    if t == "tool_call":
        if "arguments_raw" in block:
            raise ValueError(
                f"{where}: tool call {block['name']!r} has arguments that are not "
                "JSON; Bedrock needs an object as toolUse input"
            )
        return {
            "toolUse": {
                "input": block["arguments"],
                "name": block["name"],
                "toolUseId": block["id"],
            }
        }
    if t == "tool_result":
        content = [_content(b, f"{where}.content") for b in block.get("content", ())]
        out: dict[str, Any] = {"content": content or [{"text": ""}], "toolUseId": block["id"]}
        if block.get("is_error"):
            out["status"] = "error"
        return {"toolResult": out}
    raise ValueError(
        f"{where}: a {block.get('block', {}).get('type', t)!r} block has no Bedrock Converse form"
    )


def _cache_point(ttl: str | None) -> dict[str, Any]:
    return {"cachePoint": {"type": "default"} if ttl is None else {"ttl": ttl, "type": "default"}}


def layout(prompt: Prompt, model: str) -> tuple[dict[str, Any], list[Any]]:
    """The Converse body without cache points and its blocks in cache order (toolConfig ->
    system -> messages), with locators ``("tools", i)``, ``("system", j)``,
    ``("messages", m, b)``. Consecutive messages of one role are merged (Converse requires
    alternating roles); ``dynamic`` joins a trailing user message. ``messages`` is empty for
    a prompt with no history and no dynamic part (``explain`` plans such a prefix; ``render``
    refuses to send it)."""
    from promptcache.breakpoints import (
        LayoutBlock,
        block_tokens,
        frozen_text_tokens,
        session_text_tokens,
        tool_tokens,
    )

    body: dict[str, Any] = {}
    blocks: list[LayoutBlock] = []
    if prompt.tools:
        tools = []
        for i, (t, n) in enumerate(zip(prompt.tools, tool_tokens(prompt, model))):
            if "native" in t:
                raise ValueError(f"tools[{i}]: provider-native tools have no Bedrock form")
            spec: dict[str, Any] = {"inputSchema": {"json": t["input_schema"]}, "name": t["name"]}
            if "description" in t:
                spec["description"] = t["description"]
            if "strict" in t:
                spec["strict"] = t["strict"]
            tools.append({"toolSpec": spec})
            blocks.append(LayoutBlock("tools", ("tools", i), n))
        body["toolConfig"] = {"tools": tools}
    system: list[dict[str, Any]] = []
    n_sys = len(prompt.system)
    for j, (text, n) in enumerate(zip(prompt.frozen_texts(), frozen_text_tokens(prompt, model))):
        system.append({"text": text})
        blocks.append(LayoutBlock("system" if j < n_sys else "documents", ("system", j), n))
    for text, n in zip(prompt.session, session_text_tokens(prompt, model)):
        blocks.append(LayoutBlock("session", ("system", len(system)), n))
        system.append({"text": text})
    if system:
        body["system"] = system
    messages: list[dict[str, Any]] = []
    turns = [
        (msg["role"], msg["content"], "messages", f"messages[{i}]")
        for i, msg in enumerate(prompt.messages)
    ]
    if prompt.dynamic:
        turns.append(("user", list(prompt.dynamic), "dynamic", "dynamic"))
    for role, content, layer, where in turns:
        if not messages or messages[-1]["role"] != role:
            messages.append({"content": [], "role": role})
        m = len(messages) - 1
        for b, block in enumerate(content):
            rendered = _content(block, f"{where}[{b}]")
            messages[m]["content"].append(rendered)
            blocks.append(
                LayoutBlock(
                    layer,
                    ("messages", m, len(messages[m]["content"]) - 1),
                    block_tokens(block, model) if layer == "messages" else 0,
                    layer == "messages",
                )
            )
    body["messages"] = messages  # empty for a prefix-only prompt: render() refuses to send it
    return body, blocks


def render(
    prompt: Prompt,
    model: str,
    *,
    ttl: str | None = None,
    history_ttl: str | None = None,
    max_tokens: int | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``boto3.client("bedrock-runtime").converse(**kw)``.

    Fields: ``modelId``; ``toolConfig.tools`` (``toolSpec`` with ``inputSchema.json``);
    ``system`` text blocks (system texts, documents, session); ``messages`` with
    consecutive same-role turns merged and ``dynamic`` last; ``inferenceConfig.maxTokens``
    when ``max_tokens`` is given. ``cachePoint`` blocks are inserted after the blocks chosen
    by :mod:`promptcache.breakpoints` (at most 4; each checkpoint at least the model's minimum
    after the previous one; none in fields the model cannot cache, e.g. tools on Nova).
    ``ttl``/``history_ttl``: ``None`` (the default 5 minutes, no ``ttl`` field sent), ``"5m"``
    or ``"1h"`` where the model supports it.

    Raises:
        EmptyRequestError: (a ``ValueError``) no history and no ``dynamic``: no message to
            send.
        ValueError: a TTL the model does not take, content with no Converse form (image URLs,
            native tools).
    """
    from promptcache.breakpoints import plan

    if not prompt.messages and not prompt.dynamic:
        raise empty_request("Bedrock Converse", "at least one message")
    rules = cache_limits(model, "bedrock")
    for t in (ttl, history_ttl):
        if t is not None and rules.known and t not in rules.ttls:
            raise ValueError(
                f"cache TTL {t!r} is not available for {model} on Bedrock; "
                f"available: {list(rules.ttls)}"
            )
    body, blocks = layout(prompt, model)
    for b in blocks:
        if b.layer in ("system", "documents", "session"):
            field = "system"
        elif b.layer == "tools":
            field = "tools"
        else:
            field = "messages"
        if field not in rules.cacheable:
            b.markable = False
    eff_ttl = ttl or "5m"
    eff_hist = history_ttl or "5m"
    p = plan(
        blocks,
        min_tokens=rules.min_tokens,
        max_breakpoints=rules.max_breakpoints,
        lookback=rules.lookback_blocks,
        ttl=eff_ttl,
        history_ttl=eff_hist,
        min_per_segment=rules.min_per_segment,
    )
    # insert from the end so earlier positions stay valid
    for bp in sorted(p.breakpoints, key=lambda bp: bp.index, reverse=True):
        kind = bp.locator[0]
        send_ttl = ttl if bp.kind in ("frozen", "session") else history_ttl
        marker = _cache_point(send_ttl)
        if kind == "tools":
            body["toolConfig"]["tools"].insert(bp.locator[1] + 1, marker)
        elif kind == "system":
            body["system"].insert(bp.locator[1] + 1, marker)
        else:
            body["messages"][bp.locator[1]]["content"].insert(bp.locator[2] + 1, marker)
    kw: dict[str, Any] = {"modelId": model}
    kw.update(body)
    if max_tokens is not None:
        kw["inferenceConfig"] = {"maxTokens": int(max_tokens)}
    return kw


# --- usage parsing -------------------------------------------------------------------
#
# Amazon Bedrock (docs.aws.amazon.com/bedrock/latest/APIReference API_runtime_TokenUsage
# and API_runtime_CacheDetail, and the user guide "Prompt caching", checked 2026-11):
# - Converse / ConverseStream ``usage``: ``inputTokens`` EXCLUDES cache reads and writes
#   (like Anthropic), ``cacheReadInputTokens``, ``cacheWriteInputTokens``, and
#   ``cacheDetails`` = [{"ttl": "5m"|"1h", "inputTokens": n}] splitting the writes.
#   ConverseStream sends it in the final ``metadata`` event.
# - InvokeModel with an Anthropic model: the body is the Anthropic Messages format
#   (parsed by the Anthropic rules); the response headers
#   ``x-amzn-bedrock-input-token-count`` / ``-output-token-count`` /
#   ``-cache-read-input-token-count`` / ``-cache-write-input-token-count`` carry the same
#   counts for any model.

_HEADER_PREFIX = "x-amzn-bedrock-"


def _converse_usage(usage: dict, *, provider: str, model: str | None):
    from promptcache.usage import WRITE_TTL_ASSUMED, Usage, UsageError, read_count

    w = "usage"
    uncached = read_count(usage, "inputTokens", where=w, required=True)
    output = read_count(usage, "outputTokens", where=w) or 0
    read = read_count(usage, "cacheReadInputTokens", where=w) or 0
    write = read_count(usage, "cacheWriteInputTokens", where=w) or 0
    details = usage.get("cacheDetails")
    flags: tuple[str, ...] = ()
    if isinstance(details, list) and details:
        ttl: dict[str, int] = {}
        for i, d in enumerate(details):
            label = d.get("ttl") if isinstance(d, dict) else None
            if label not in BEDROCK_TTLS:
                allowed = " or ".join(repr(t) for t in BEDROCK_TTLS)
                raise UsageError(f"usage.cacheDetails[{i}].ttl must be {allowed}, got {label!r}")
            n = read_count(d, "inputTokens", where=f"usage.cacheDetails[{i}]", required=True)
            ttl[label] = ttl.get(label, 0) + n
        if sum(ttl.values()) != write:
            raise UsageError(
                f"inconsistent usage: cacheDetails sum to {sum(ttl.values())}, "
                f"but cacheWriteInputTokens={write}"
            )
    else:
        ttl = {"5m": write} if write else {}
        flags = (WRITE_TTL_ASSUMED,) if write else ()
    return Usage(
        uncached_input_tokens=uncached,
        cache_read_tokens=read,
        cache_write_tokens=write,
        cache_write_by_ttl=ttl,
        output_tokens=output,
        provider=provider,
        model=model,
        flags=flags,
    )


def _header_usage(headers: dict, *, provider: str, model: str | None):
    from promptcache.usage import read_count

    h = {str(k).lower(): v for k, v in headers.items()}

    def num(name: str) -> int | None:
        raw = h.get(_HEADER_PREFIX + name)
        if raw is None:
            return None
        try:
            return int(str(raw).strip())
        except ValueError:
            from promptcache.errors import UsageError

            raise UsageError(f"header {_HEADER_PREFIX + name} is not an integer: {raw!r}") from None

    usage = {
        "inputTokens": num("input-token-count"),
        "outputTokens": num("output-token-count"),
        "cacheReadInputTokens": num("cache-read-input-token-count"),
        "cacheWriteInputTokens": num("cache-write-input-token-count"),
    }
    read_count(usage, "inputTokens", where="InvokeModel headers", required=True)
    return _converse_usage(usage, provider=provider, model=model)


def parse_usage(data: dict, *, provider: str = "bedrock"):
    """Normalize a Bedrock Converse response / usage, a ConverseStream ``metadata`` event,
    an InvokeModel Anthropic body, or an InvokeModel response's HTTP headers."""
    from promptcache.providers.anthropic import parse_usage as anthropic_parse
    from promptcache.usage import UsageError, subpart

    if isinstance(data.get("metadata"), dict):  # ConverseStream metadata event
        data = data["metadata"]
    usage = subpart(data, "usage")
    model = data.get("modelId") if isinstance(data.get("modelId"), str) else None
    if usage is None and "inputTokens" in data:
        usage = data
    if usage is not None and "inputTokens" in usage:
        return _converse_usage(dict(usage), provider=provider, model=model)
    if (
        (usage is not None and "input_tokens" in usage)
        or "input_tokens" in data
        or data.get("type") == "message_start"
    ):
        return anthropic_parse(data, provider=provider)
    headers = subpart(subpart(data, "ResponseMetadata"), "HTTPHeaders") or (
        data if any(str(k).lower().startswith(_HEADER_PREFIX) for k in data) else None
    )
    if headers is not None:
        return _header_usage(dict(headers), provider=provider, model=model)
    raise UsageError(
        "no Bedrock usage found: expected a Converse response with usage "
        "(inputTokens...), an InvokeModel body with Anthropic usage, or the "
        "x-amzn-bedrock-*-token-count response headers"
    )


def parse_usage_stream(events: list, *, provider: str = "bedrock"):
    """Normalize a ConverseStream (the ``metadata`` event) or an InvokeModelWithResponseStream
    of Anthropic events (``message_start`` + ``message_delta``)."""
    from promptcache.providers.anthropic import parse_usage_stream as anthropic_stream
    from promptcache.usage import UsageError

    for ev in reversed(events):
        if (
            isinstance(ev, dict)
            and isinstance(ev.get("metadata"), dict)
            and isinstance(ev["metadata"].get("usage"), dict)
        ):
            return parse_usage(ev, provider=provider)
    if any(isinstance(ev, dict) and ev.get("type") == "message_start" for ev in events):
        return anthropic_stream(events, provider=provider)
    raise UsageError("no metadata event with usage in the Bedrock stream")
