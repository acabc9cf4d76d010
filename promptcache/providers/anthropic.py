"""Request rendering for Anthropic: a :class:`promptcache.prompt.layers.PromptLayers` -> the keyword
arguments of the official client's call. Usage parsing is in :mod:`promptcache.providers.anthropic_usage`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from promptcache.limits import ANTHROPIC_TTLS, cache_limits
from promptcache.memo import Memo
from promptcache.prompt.breakpoints import (
    LayoutBlock,
    Plan,
    block_tokens,
    frozen_text_tokens,
    plan,
    session_text_tokens,
    tool_tokens,
)
from promptcache.prompt.layers import PromptLayers
from promptcache.prompt.tokens import counter_generation
from promptcache.providers import empty_request

CACHE_DIAGNOSIS_BETA = "cache-diagnosis-2026-04-07"

# Anthropic content blocks that cannot carry cache_control themselves
_UNMARKABLE = {"thinking", "redacted_thinking"}


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    if "native" in tool:
        return dict(tool["native"])
    out: dict[str, Any] = {}
    if "description" in tool:
        out["description"] = tool["description"]
    out["input_schema"] = tool["input_schema"]
    out["name"] = tool["name"]
    if "strict" in tool:
        out["strict"] = tool["strict"]
    return out


def _image(block: Mapping[str, Any]) -> dict[str, Any]:
    if "url" in block:
        return {"source": {"type": "url", "url": block["url"]}, "type": "image"}
    return {
        "source": {"data": block["data"], "media_type": block["media_type"], "type": "base64"},
        "type": "image",
    }


def _where(where: Any) -> str:
    if isinstance(where, tuple):
        return f"{where[0]}[{where[1]}]" + "".join(f".content[{i}]" for i in where[2:])
    return str(where)


def content_block(block: Mapping[str, Any], *where: Any) -> dict[str, Any]:
    """One neutral block (see ``promptcache.build``) as an Anthropic content block; ``where``
    (layer name and indices) only names the block in error messages."""
    t = block["type"]
    if t == "text":
        return {"text": block["text"], "type": "text"}
    named = _where(where if len(where) != 1 else where[0])
    if t == "image":
        return _image(block)
    if t == "tool_call":
        if "arguments_raw" in block:
            raise ValueError(
                f"{named}: tool call {block['name']!r} has arguments that are not "
                "JSON; Anthropic needs an object as tool_use input"
            )
        return {
            "id": block["id"],
            "input": block["arguments"],
            "name": block["name"],
            "type": "tool_use",
        }
    if t == "tool_result":
        out: dict[str, Any] = {
            "content": [content_block(b, f"{named}.content") for b in block.get("content", ())],
            "tool_use_id": block["id"],
            "type": "tool_result",
        }
        if block.get("is_error"):
            out["is_error"] = True
        return out
    if t == "native":
        if block.get("provider") != "anthropic":
            raise ValueError(
                f"{named}: a {block['block'].get('type')!r} block from "
                f"{block.get('provider')} cannot be sent to Anthropic"
            )
        return dict(block["block"])
    raise ValueError(f"{named}: unknown block type {t!r}")


def _check_ttl(ttl: str) -> None:
    """Raise ``ValueError`` unless ``ttl`` is one of :data:`promptcache.limits.ANTHROPIC_TTLS`."""
    if ttl not in ANTHROPIC_TTLS:
        allowed = " and ".join(repr(t) for t in ANTHROPIC_TTLS)
        raise ValueError(f"Anthropic cache TTLs are {allowed}, got {ttl!r}")


def _cache_control(ttl: str) -> dict[str, Any]:
    return {"type": "ephemeral"} if ttl == "5m" else {"ttl": ttl, "type": "ephemeral"}


_FrozenLayout = tuple[list[dict[str, Any]], list[dict[str, Any]], list[LayoutBlock]]
_frozen_layouts: Memo[tuple[Any, ...], _FrozenLayout] = Memo(256)


def _frozen_layout(prompt: PromptLayers, model: str) -> _FrozenLayout:
    """Rendered tools, system blocks (frozen + session) and their Blocks, memoized by
    (prefix hash, session hash, model, counter generation). Shared: callers copy the lists
    and copy a dict before adding ``cache_control`` to it."""
    key = (prompt.prefix_hash, prompt.session_hash, model, counter_generation())
    return _frozen_layouts.get_or_make(key, lambda: _make_frozen_layout(prompt, model))


def _make_frozen_layout(prompt: PromptLayers, model: str) -> _FrozenLayout:
    tools: list[dict[str, Any]] = []
    blocks: list[LayoutBlock] = []
    for i, (t, n) in enumerate(zip(prompt.tools, tool_tokens(prompt, model))):
        tools.append(_tool(t))
        blocks.append(LayoutBlock("tools", ("tools", i), n))
    system: list[dict[str, Any]] = []
    n_sys = len(prompt.system)
    for j, (text, n) in enumerate(zip(prompt.frozen_texts(), frozen_text_tokens(prompt, model))):
        system.append({"text": text, "type": "text"})
        blocks.append(LayoutBlock("system" if j < n_sys else "documents", ("system", j), n))
    for text, n in zip(prompt.session, session_text_tokens(prompt, model)):
        blocks.append(LayoutBlock("session", ("system", len(system)), n))
        system.append({"text": text, "type": "text"})
    return tools, system, blocks


_message_memo: Memo[tuple[Any, ...], tuple[Any, ...]] = Memo(8192)


def _render_message(msg: Mapping[str, Any], m: int, model: str) -> tuple[list, list, list]:
    """Rendered content blocks of one neutral history message, their token counts and whether
    each may carry a marker. Memoized (LRU, 8,192 entries) by the texts of an all-text message,
    else by the message object's identity (the memo keeps a reference, so the id cannot be
    reused): an append-only history renders each past turn once."""
    blocks = msg["content"]
    if all(b["type"] == "text" for b in blocks):
        key: tuple = (model, counter_generation(), msg["role"], *(b["text"] for b in blocks))
        ident = None
    else:
        key = (model, counter_generation(), id(msg))
        ident = msg
    hit = _message_memo.lookup(key)
    if hit is not None and (ident is None or hit[0] is ident):
        return hit[1], hit[2], hit[3]
    content, tokens, markable = [], [], []
    for b, block in enumerate(blocks):
        rendered = content_block(block, "messages", m, b)
        content.append(rendered)
        tokens.append(block_tokens(block, model))
        rtype = rendered.get("type")
        markable.append(rtype not in _UNMARKABLE and not (rtype == "text" and not rendered["text"]))
    _message_memo.store(key, (ident, content, tokens, markable))
    return content, tokens, markable


def layout(prompt: PromptLayers, model: str) -> tuple[dict[str, Any], list[Any]]:
    """The request body without markers, and its blocks in cache order (tools -> system ->
    messages) as :class:`promptcache.prompt.breakpoints.LayoutBlock` with locators
    ``("tools", i)``, ``("system", j)``, ``("messages", m, b)``. The frozen part is rendered
    once per prefix and shared (see :func:`_frozen_layout`). ``messages`` is empty for a
    prompt with no history and no dynamic part (``explain`` plans such a prefix; ``render``
    refuses to send it)."""
    tools, system, frozen_blocks = _frozen_layout(prompt, model)
    body: dict[str, Any] = {}
    if tools:
        body["tools"] = list(tools)
    if system:
        body["system"] = list(system)
    blocks = list(frozen_blocks)
    messages: list[dict[str, Any]] = []
    for m, msg in enumerate(prompt.messages):
        content, tokens, markable = _render_message(msg, m, model)
        for b in range(len(content)):
            blocks.append(LayoutBlock("messages", ("messages", m, b), tokens[b], markable[b]))
        messages.append({"content": list(content), "role": msg["role"]})
    if prompt.dynamic:
        m = len(messages)
        content = []
        for b, block in enumerate(prompt.dynamic):
            content.append(content_block(block, "dynamic", b))
            # never marked and nothing after it is cached: its size does not matter here
            blocks.append(LayoutBlock("dynamic", ("messages", m, b), 0, False))
        messages.append({"content": content, "role": "user"})
    body["messages"] = messages  # empty for a prefix-only prompt: render() refuses to send it
    return body, blocks


def _mark(body: dict[str, Any], locator: tuple, cache_control: dict[str, Any]) -> None:
    """Add ``cache_control`` to the block at ``locator`` -- on a copy, since frozen blocks
    are shared between requests."""
    if locator[0] in ("tools", "system"):
        seq, i = body[locator[0]], locator[1]
    else:
        seq, i = body["messages"][locator[1]]["content"], locator[2]
    seq[i] = {**seq[i], "cache_control": cache_control}


def plan_for(
    prompt: PromptLayers, model: str, *, ttl: str = "5m", history_ttl: str = "5m"
) -> tuple[dict[str, Any], Plan]:
    """The unmarked body and the breakpoint :class:`~promptcache.prompt.breakpoints.Plan` for
    ``model`` (used by ``render`` and by ``PromptLayers.explain``)."""
    rules = cache_limits(model, "anthropic")
    _check_ttl(ttl)
    _check_ttl(history_ttl)
    body, blocks = layout(prompt, model)
    p = plan(
        blocks,
        min_tokens=rules.min_tokens,
        max_breakpoints=rules.max_breakpoints,
        lookback=rules.lookback_blocks,
        ttl=ttl,
        history_ttl=history_ttl,
    )
    return body, p


def render(
    prompt: PromptLayers,
    model: str,
    *,
    ttl: str = "5m",
    max_tokens: int = 1024,
    mode: str = "explicit",
    history_ttl: str = "5m",
    previous_message_id: str | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``Anthropic().messages.create(**kw)``.

    Layout: ``tools`` (Anthropic form, keys sorted, order as built); ``system`` as text
    blocks -- the system texts, the documents (``<document>``-wrapped), then the session
    texts; ``messages`` -- the history, then ``dynamic`` as a final user turn.

    Breakpoints (``mode="explicit"``): up to 4 ``cache_control`` markers by the rule of
    :mod:`promptcache.prompt.breakpoints` -- end of the frozen layers and end of the session layer
    (TTL ``ttl``), the newest history turn and, past the 20-block lookback, a stepping stone
    (TTL ``history_ttl``); none on a prefix under the model's minimum
    (:func:`promptcache.limits.cache_limits`). ``mode="automatic"`` sends no block markers
    and one top-level ``cache_control`` instead (Anthropic then marks the last cacheable
    block itself, which includes ``dynamic``).

    ``previous_message_id`` (the ``id`` of this conversation's previous response, or ``""``
    on the first turn) asks for cache diagnostics: ``diagnostics={"previous_message_id":
    ...}`` and the ``anthropic-beta: cache-diagnosis-2026-04-07`` header; the response's
    ``diagnostics.cache_miss_reason`` is read by
    :func:`promptcache.compose.monitor.cache_miss_reason`.

    Raises:
        EmptyRequestError: (a ``ValueError``) no history and no ``dynamic``: no message to
            send.
        ValueError: an unknown ``mode`` or TTL, ``history_ttl`` longer than ``ttl``, content
            with no Anthropic form.
    """
    if mode not in ("explicit", "automatic"):
        raise ValueError(f"mode must be 'explicit' or 'automatic', got {mode!r}")
    if not prompt.messages and not prompt.dynamic:
        # Anthropic answers 400 "messages: at least one message is required"
        raise empty_request("Anthropic Messages", "at least one message")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
    if mode == "explicit":
        body, p = plan_for(prompt, model, ttl=ttl, history_ttl=history_ttl)
        for bp in p.breakpoints:
            _mark(body, bp.locator, _cache_control(bp.ttl))
    else:
        _check_ttl(ttl)
        body, _ = layout(prompt, model)
    kw: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    if mode == "automatic":
        kw["cache_control"] = _cache_control(ttl)
    kw.update(body)
    if previous_message_id is not None:
        kw["diagnostics"] = {"previous_message_id": previous_message_id or None}
        kw["extra_headers"] = {"anthropic-beta": CACHE_DIAGNOSIS_BETA}
    return kw
