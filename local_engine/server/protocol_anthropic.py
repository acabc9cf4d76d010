"""Anthropic Messages API request models and their conversion to turns.

Reference: https://platform.claude.com/docs/en/api/messages (2026-11-29). Unknown fields
are ignored; ``metadata`` and ``thinking`` are accepted. ``tool_choice`` is enforced where
it can be (:func:`check_tool_choice`: ``auto`` offers the tools, ``none`` leaves them out,
``any``/``tool`` are refused since the engine cannot guarantee a tool call); the
hosted API's message order rules are checked by :func:`check_message_order`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from . import media
from .errors import APIError
from .rendering import Block, RenderError, Turn, canonical_json, strip_cache_markers


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CacheControl(_Model):
    """``cache_control``: ``{"type": "ephemeral", "ttl": "5m" | "1h"}`` (a breakpoint)."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class ContentBlock(_Model):
    """Any content block; fields are checked per ``type`` in :func:`messages_to_turns`."""

    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None
    cache_control: CacheControl | None = None


class TextBlock(_Model):
    """A ``system`` text block: ``{"type": "text", "text", "cache_control"?}``."""

    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None


class Message(_Model):
    """One entry of ``messages``: ``role`` user|assistant|system and ``content`` (a string
    or content blocks). ``cache_control`` is read on ``system`` messages only
    (mid-conversation system messages, :mod:`.system_messages`); other messages have no
    such field and it is ignored there, as every unknown field is."""

    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]
    cache_control: CacheControl | None = None


class Tool(_Model):
    """One entry of ``tools``: ``name``, ``description``, ``input_schema`` (other fields
    of server tools are kept and rendered as sent)."""

    model_config = ConfigDict(extra="allow")
    name: str
    description: str | None = None
    input_schema: dict | None = None
    cache_control: CacheControl | None = None


class ToolChoice(_Model):
    """``tool_choice``: ``{"type": "auto" | "any" | "none"}`` or ``{"type": "tool",
    "name": ...}``, with ``disable_parallel_tool_use`` (ignored: the model makes no calls
    the server parses)."""

    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _name(self):
        if self.type == "tool" and not self.name:
            raise ValueError(
                'a "tool" tool_choice names the tool: {"type": "tool", "name": "<tool name>"}'
            )
        return self


class Diagnostics(_Model):
    """This server's ``diagnostics``: ``previous_message_id`` asks for the cache-miss
    reason against that earlier response (Anthropic's cache diagnostics)."""

    previous_message_id: str | None = None


class CountTokensRequest(_Model):
    """The body of ``POST /v1/messages/count_tokens`` (Anthropic token counting): the
    prompt fields of a Messages request."""

    model: str
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    cache_control: CacheControl | None = None
    thinking: dict | None = None


class MessagesRequest(CountTokensRequest):
    """The body of ``POST /v1/messages`` (Anthropic Messages API), plus this server's
    ``diagnostics`` and ``cache_salt``."""

    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    stream: bool | None = False
    metadata: dict | None = None
    diagnostics: Diagnostics | None = None
    cache_salt: str | None = None


# ---------------------------------------------------------------------------- tool_choice


def check_tool_choice(req: CountTokensRequest, *, generating: bool = True) -> None:
    """Check ``tool_choice`` against ``tools``.

    Raises :class:`APIError` 400 when a ``{"type": "tool"}`` choice names a tool that
    ``tools`` does not declare (the hosted API refuses it too). ``any`` and ``tool`` are
    served by constrained decoding (:func:`forced_tools`); ``generating`` is kept for the
    callers (``count_tokens`` only counts)."""
    choice = req.tool_choice
    if choice is None:
        return
    declared = [t.name for t in req.tools or []]
    if choice.type == "tool" and choice.name not in declared:
        listing = ", ".join(repr(n) for n in declared) or "no tools are given"
        raise APIError(
            400,
            f"tool_choice.name: the tool {choice.name!r} is not in tools ({listing}). Name "
            'one of the tools, or send tool_choice {"type": "auto"}.',
        )


def forced_tools(req: CountTokensRequest) -> list[tuple[str, dict]] | None:
    """``(name, input_schema)`` of the tools one of which the output must call: all offered
    tools for ``{"type": "any"}``, the named one for ``{"type": "tool"}``; None otherwise."""
    choice = req.tool_choice
    if choice is None or choice.type not in ("any", "tool"):
        return None
    return [
        (t.name, t.input_schema or {})
        for t in offered_tools(req)
        if choice.type == "any" or t.name == choice.name
    ]


def offered_tools(req: CountTokensRequest) -> list[Tool]:
    """The tools the model is shown: none for ``tool_choice: {"type": "none"}``."""
    if req.tool_choice is not None and req.tool_choice.type == "none":
        return []
    return [
        t
        for t in req.tools or []
        if not str(getattr(t, "type", "") or "").startswith(SERVER_TOOL_PREFIXES)
    ]


# ---------------------------------------------------------------------------- message order


def _blocks_of(msg: Message, kind: str) -> list[tuple[int, dict]]:
    if isinstance(msg.content, str):
        return []
    return [(j, cb.model_extra or {}) for j, cb in enumerate(msg.content) if cb.type == kind]


def check_message_order(req: CountTokensRequest) -> None:
    """The hosted API's message order rules.

    A ``tool_result`` block must answer a
    ``tool_use`` block of the message right before it (an assistant message); each
    ``tool_use`` block of an assistant message that has a next message must be answered by
    a ``tool_result`` block there. (An empty ``messages`` is refused by the model's
    ``min_length``.) An assistant message first is accepted: the API refused it in 2024
    ('messages: first message must use the "user" role', quoted in
    https://github.com/lobehub/lobehub/issues/1601, 2024-03-16) but accepts it since
    (anthropic-sdk-typescript#622, 2024-12; only Bedrock still refuses it). The messages are
    Anthropic's own, as its API returns them: "unexpected `tool_use_id`
    found in `tool_result` blocks" (https://github.com/anthropics/claude-code/issues/13460,
    2025-12-09) and "`tool_use` ids were found without `tool_result` blocks immediately
    after" (https://github.com/anthropics/claude-code/issues/5060, 2025-08-03), with what
    to change added.

    Raises:
        APIError: 400 naming the message (and block) path.
    """
    msgs = req.messages
    for i, msg in enumerate(msgs):  # the ids the rules below compare
        for kind, field in (("tool_use", "id"), ("tool_result", "tool_use_id")):
            for j, block in _blocks_of(msg, kind):
                if not isinstance(block.get(field), str):
                    raise APIError(
                        400, f"messages.{i}.content.{j}.{field}: Field required (a string)"
                    )
    for i, msg in enumerate(msgs):
        results = _blocks_of(msg, "tool_result")
        if not results:
            continue
        prev = msgs[i - 1] if i > 0 else None
        uses = (
            [b.get("id") for _, b in _blocks_of(prev, "tool_use")]
            if prev and prev.role == "assistant"
            else []
        )
        for j, block in results:
            rid = block.get("tool_use_id")
            if rid in uses:
                continue
            if prev is None:
                where = "no message comes before it"
            elif not uses:
                where = f"messages.{i - 1} ({'an' if prev.role == 'assistant' else 'a'} {prev.role} message) has no tool_use block"
            else:
                where = f"messages.{i - 1} has tool_use ids {', '.join(map(str, uses))}"
            raise APIError(
                400,
                f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` "
                f"blocks: {rid}. Each `tool_result` block must have a corresponding "
                f"`tool_use` block in the previous message. ({where}; a tool_result answers "
                "a tool_use of the assistant message right before it.)",
            )
    for i, msg in enumerate(msgs[:-1]):
        if msg.role != "assistant":
            continue
        uses = [b.get("id") for _, b in _blocks_of(msg, "tool_use")]
        answered = {b.get("tool_use_id") for _, b in _blocks_of(msgs[i + 1], "tool_result")}
        missing = [str(u) for u in uses if u not in answered]
        if missing:
            raise APIError(
                400,
                f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message. (Add a tool_result "
                f"block for each to messages.{i + 1}.)",
            )


# ---------------------------------------------------------------------------- rendering


def _cc(block_cc: CacheControl | None, path: str) -> tuple[str, str] | None:
    if block_cc is None:
        return None
    return (block_cc.ttl or "5m", f"{path}.cache_control")


def _tool_result_text(content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for c in content:
        if isinstance(c, dict) and c.get("type") == "text":
            parts.append(str(c.get("text", "")))
        else:
            raise RenderError(
                "tool_result content other than text is not supported by this server's model"
            )
    return "\n".join(parts)


def image_text(source: Any, where: str) -> str:
    """The text an Anthropic image ``source`` becomes (:mod:`.media`): ``base64`` with a
    documented ``media_type`` and ``data``, ``url`` or ``file``. Raises :class:`RenderError`
    naming the field otherwise."""
    kind = source.get("type") if isinstance(source, dict) else None
    try:
        if kind == "base64":
            mt = source.get("media_type")
            if mt not in media.IMAGE_MEDIA_TYPES:
                allowed = ", ".join(repr(t) for t in media.IMAGE_MEDIA_TYPES)
                raise RenderError(f"{where}.base64.media_type: Input should be {allowed}")
            data = media.decode_base64(source.get("data"), f"{where}.base64.data")
            return media.placeholder("image", mt, data=data)
        if kind in ("url", "file"):
            field = "url" if kind == "url" else "file_id"
            ref = source.get(field)
            if not isinstance(ref, str) or not ref:
                raise RenderError(f"{where}.{kind}.{field}: Field required")
            return media.placeholder("image", None, ref=ref)
    except media.MediaError as exc:
        raise RenderError(str(exc)) from None
    raise RenderError(
        f"{where}: Input tag {kind!r} found using 'type' does not match any of the expected "
        "tags: 'base64', 'url', 'file'"
    )


def document_text(block: dict, where: str) -> str:
    """The text an Anthropic ``document`` block becomes (:mod:`.media`): ``text`` and
    ``content`` sources as their text, ``base64`` PDFs, ``url`` and ``file`` as
    placeholders; ``title`` names it. Raises :class:`RenderError` naming the field."""
    raw = block.get("source")
    source: dict = raw if isinstance(raw, dict) else {}
    kind = source.get("type")
    title = block.get("title") if isinstance(block.get("title"), str) else None
    where = f"{where}.source"
    try:
        if kind == "text":
            if source.get("media_type", "text/plain") != "text/plain":
                raise RenderError(f"{where}.text.media_type: Input should be 'text/plain'")
            if not isinstance(source.get("data"), str):
                raise RenderError(f"{where}.text.data: Field required")
            return media.text_document(source["data"], name=title, media_type="text/plain")
        if kind == "content":
            content = source.get("content")
            if isinstance(content, str):
                return media.text_document(content, name=title)
            if not isinstance(content, list):
                raise RenderError(f"{where}.content.content: Field required")
            parts = []
            for k, c in enumerate(content):
                ctype = c.get("type") if isinstance(c, dict) else None
                if ctype == "text" and isinstance(c.get("text"), str):
                    parts.append(c["text"])
                elif ctype == "image":
                    parts.append(
                        image_text(c.get("source"), f"{where}.content.content.{k}.image.source")
                    )
                else:
                    raise RenderError(
                        f"{where}.content.content.{k}: expected a text or image block"
                    )
            return media.text_document("\n".join(parts), name=title)
        if kind == "base64":
            if source.get("media_type") != "application/pdf":
                raise RenderError(f"{where}.base64.media_type: Input should be 'application/pdf'")
            data = media.decode_base64(source.get("data"), f"{where}.base64.data")
            return media.placeholder("document", "application/pdf", data=data, name=title)
        if kind in ("url", "file"):
            field = "url" if kind == "url" else "file_id"
            ref = source.get(field)
            if not isinstance(ref, str) or not ref:
                raise RenderError(f"{where}.{kind}.{field}: Field required")
            return media.placeholder("document", None, ref=ref, name=title)
    except media.MediaError as exc:
        raise RenderError(str(exc)) from None
    raise RenderError(
        f"{where}: Input tag {kind!r} found using 'type' does not match any of the expected "
        "tags: 'base64', 'text', 'content', 'url', 'file'"
    )


def has_images(req: CountTokensRequest) -> bool:
    """Whether any message holds an image block (or a document holding one)."""
    for msg in req.messages:
        if isinstance(msg.content, list):
            for cb in msg.content:
                if cb.type == "image":
                    return True
                src = (cb.model_extra or {}).get("source")
                if cb.type == "document" and isinstance(src, dict):
                    content = src.get("content")
                    if isinstance(content, list) and any(
                        isinstance(c, dict) and c.get("type") == "image" for c in content
                    ):
                        return True
    return False


def _content_blocks(msg: Message, i: int) -> list[Block]:
    if isinstance(msg.content, str):
        return [Block(msg.content, "messages", i)]
    out: list[Block] = []
    for j, cb in enumerate(msg.content):
        path = f"messages.{i}.content.{j}"
        extra = cb.model_extra or {}
        if cb.type == "text":
            if cb.text is None:
                raise RenderError(f"{path}.text: Field required")
            text = cb.text
        elif cb.type == "tool_use":
            for f in ("id", "name", "input"):
                if f not in extra:
                    raise RenderError(f"{path}.{f}: Field required")
            text = canonical_json(
                {
                    "type": "tool_use",
                    "id": extra["id"],
                    "name": extra["name"],
                    "input": extra["input"],
                }
            )
        elif cb.type == "tool_result":
            if "tool_use_id" not in extra:
                raise RenderError(f"{path}.tool_use_id: Field required")
            body = {
                "type": "tool_result",
                "tool_use_id": extra["tool_use_id"],
                "content": _tool_result_text(extra.get("content")),
            }
            if extra.get("is_error"):
                body["is_error"] = True
            text = canonical_json(body)
        elif cb.type in ("thinking", "redacted_thinking"):
            continue  # not part of the prompt the model sees
        elif cb.type == "image":  # paths as Anthropic names them: messages.0.content.0.image...
            text = image_text(extra.get("source"), f"{path}.image.source")
        elif cb.type == "document":
            text = document_text(extra, f"{path}.document")
        else:
            raise RenderError(
                f"{path}.type: content of type {cb.type!r} is not supported; this server's model reads text only"
            )
        out.append(Block(text, "messages", i, cache_control=_cc(cb.cache_control, path)))
    return out


def _message_blocks(msg: Message, i: int) -> list[Block]:
    """A message's blocks; a ``system`` message's own ``cache_control`` marks its last
    block (a breakpoint like the top-level ``system``'s, counted with the others)."""
    blocks = _content_blocks(msg, i)
    if msg.role == "system" and msg.cache_control is not None and blocks:
        if blocks[-1].cache_control is None:
            blocks[-1].cache_control = _cc(msg.cache_control, f"messages.{i}")
    return blocks


def messages_to_turns(req: CountTokensRequest) -> tuple[list[Block], list[Block], list[Turn], bool]:
    """(tool blocks, system blocks, turns, continue_final) of a Messages request.

    ``continue_final`` is True when the last message is from the assistant (a prefill the
    model continues). The tools are those :func:`offered_tools` keeps. A top-level ``cache_control`` (automatic caching) is placed on the
    last block of the last message that has one, unless that block carries its own.
    """
    tools = []
    for k, t in enumerate(offered_tools(req)):
        d = t.model_dump(exclude_none=True)
        tools.append(
            Block(
                canonical_json(strip_cache_markers(d)),
                "tools",
                cache_control=_cc(t.cache_control, f"tools.{k}"),
            )
        )
    system: list[Block] = []
    if isinstance(req.system, str):
        system = [Block(req.system, "system")]
    elif req.system:
        system = [
            Block(b.text, "system", cache_control=_cc(b.cache_control, f"system.{k}"))
            for k, b in enumerate(req.system)
        ]
    turns = [Turn(m.role, _message_blocks(m, i), i) for i, m in enumerate(req.messages)]
    if req.cache_control is not None:
        last = next((t.blocks[-1] for t in reversed(turns) if t.blocks), None)
        if last is None and (system or tools):
            last = (system or tools)[-1]
        if last is not None and last.cache_control is None:
            last.cache_control = (req.cache_control.ttl or "5m", "cache_control")
    continue_final = req.messages[-1].role == "assistant"
    return tools, system, turns, continue_final


#: server tools the model cannot run; kept out of the rendered tools (their toggle is a
#: system-level setting in Anthropic's invalidation table, not a tool definition)
SERVER_TOOL_PREFIXES = ("web_search_",)


def invalidating_settings(req: CountTokensRequest) -> dict:
    """The request's settings outside the prompt text that Anthropic's cache is keyed on
    (:data:`promptcache.limits.INVALIDATION_RULES`): ``tool_choice``, ``thinking``,
    whether web search is on and whether the messages hold images; only those present are
    listed."""
    out: dict = {}
    if req.tool_choice is not None:
        out["tool_choice"] = req.tool_choice.model_dump(exclude_none=True)
    if req.thinking is not None:
        out["thinking"] = req.thinking
    if any(
        str(getattr(t, "type", "") or "").startswith(SERVER_TOOL_PREFIXES) for t in req.tools or []
    ):
        out["web_search"] = True
    if has_images(req):
        out["images"] = True
    return out
