"""Request rendering for Amazon Bedrock: a :class:`promptcache.prompt.layers.PromptLayers` -> the keyword
arguments of the official client's call. Usage parsing is in :mod:`promptcache.providers.bedrock_usage`.
"""

from __future__ import annotations

import base64 as _base64
from collections.abc import Mapping
from typing import Any

from promptcache.limits import cache_limits
from promptcache.prompt.breakpoints import (
    LayoutBlock,
    block_tokens,
    frozen_text_tokens,
    plan,
    session_text_tokens,
    tool_tokens,
)
from promptcache.prompt.layers import PromptLayers
from promptcache.providers import empty_request

_IMAGE_FORMATS = {
    "image/png": "png",
    "image/jpeg": "jpeg",
    "image/jpg": "jpeg",
    "image/gif": "gif",
    "image/webp": "webp",
}


def _content(block: Mapping[str, Any], where: str) -> dict[str, Any]:
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


def layout(prompt: PromptLayers, model: str) -> tuple[dict[str, Any], list[Any]]:
    """The Converse body without cache points and its blocks in cache order (toolConfig ->
    system -> messages), with locators ``("tools", i)``, ``("system", j)``,
    ``("messages", m, b)``. Consecutive messages of one role are merged (Converse requires
    alternating roles); ``dynamic`` joins a trailing user message. ``messages`` is empty for
    a prompt with no history and no dynamic part (``explain`` plans such a prefix; ``render``
    refuses to send it)."""
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
    prompt: PromptLayers,
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
    by :mod:`promptcache.prompt.breakpoints` (at most 4; each checkpoint at least the model's minimum
    after the previous one; none in fields the model cannot cache, e.g. tools on Nova).
    ``ttl``/``history_ttl``: ``None`` (the default 5 minutes, no ``ttl`` field sent), ``"5m"``
    or ``"1h"`` where the model supports it.

    Raises:
        EmptyRequestError: (a ``ValueError``) no history and no ``dynamic``: no message to
            send.
        ValueError: a TTL the model does not take, content with no Converse form (image URLs,
            native tools).
    """
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
