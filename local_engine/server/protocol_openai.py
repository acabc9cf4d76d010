"""OpenAI request models (Chat Completions, Completions) and their conversion to turns.

Pydantic models validate types and ranges the way the hosted API does; unknown fields are
ignored (``extra="ignore"``), as the hosted APIs ignore them. Sampling fields the local
model cannot honour (``response_format``, ``frequency_penalty`` ...) are accepted and
ignored. ``tool_choice`` is enforced where it can be (:func:`check_tool_choice`); the
message order rules of the hosted API are checked by :func:`check_message_order`.
Reference: https://platform.openai.com/docs/api-reference/chat/create (2026-11-29).
"""

from __future__ import annotations

import json
import mimetypes
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from . import media
from .errors import APIError
from .rendering import Block, RenderError, Turn, canonical_json, strip_cache_markers


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class PromptCacheBreakpoint(_Model):
    """``prompt_cache_breakpoint`` on a content part (GPT-5.6+): ends a reusable prefix."""

    mode: Literal["explicit"]
    ttl: Literal["30m", "12h"] | None = None


class PromptCacheOptions(_Model):
    """``prompt_cache_options`` (GPT-5.6+): ``mode`` implicit|explicit, request ``ttl``."""

    mode: Literal["implicit", "explicit"] = "implicit"
    ttl: Literal["30m"] | None = None


class CacheControl(_Model):
    """An Anthropic-style ``cache_control`` accepted on content parts in
    ``--cache-mode anthropic`` (as OpenAI-compatible gateways to Claude accept it)."""

    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class ContentPart(_Model):
    """A part of ``messages[].content``: ``{"type": "text", "text"}``, ``{"type":
    "image_url", "image_url": {"url", "detail"?}}`` or ``{"type": "file", "file":
    {"file_data" | "file_id", "filename"?}}`` (rendered as :mod:`.media` says); other
    types (audio) are refused with a 400 when rendered."""

    type: str
    text: str | None = None
    image_url: dict | None = None
    file: dict | None = None
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None
    cache_control: CacheControl | None = None


class ToolCall(_Model):
    """One entry of an assistant message's ``tool_calls``: ``{"id", "type": "function",
    "function": {"name", "arguments"}}``. Fields are kept as sent (they are rendered into
    the prompt); ``id`` is required (a ``tool`` message answers it)."""

    model_config = ConfigDict(extra="allow")
    id: str
    type: str | None = None
    function: dict | None = None


class ChatMessage(_Model):
    """One entry of ``POST /v1/chat/completions`` ``messages``: ``role``, ``content`` (a
    string or text parts), and for tool use ``tool_calls`` (assistant) or
    ``tool_call_id`` (tool)."""

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class StreamOptions(_Model):
    """``stream_options``: ``include_usage`` adds a last chunk with the usage."""

    include_usage: bool = False


_TOOL_CHOICE_SHAPES = (
    '"none", "auto", "required", {"type": "function", "function": {"name": ...}}, '
    '{"type": "custom", "custom": {"name": ...}} or {"type": "allowed_tools", '
    '"allowed_tools": {"mode": "auto"|"required", "tools": [...]}}'
)


def _named(choice: dict, kind: str) -> str:
    inner = choice.get(kind)
    name = inner.get("name") if isinstance(inner, dict) else None
    if not isinstance(name, str) or not name:
        raise ValueError(
            f'a {kind!r} tool_choice needs {{"type": {json.dumps(kind)}, '
            f'{json.dumps(kind)}: {{"name": "<tool name>"}}}}'
        )
    return name


class ChatCompletionRequest(_Model):
    """The body of ``POST /v1/chat/completions`` (OpenAI Chat Completions), plus this
    server's ``cache_salt`` (a tenant's cache isolation key)."""

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: int = Field(default=1, ge=1, le=128)
    stop: str | list[str] | None = None
    seed: int | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    logprobs: bool | None = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    user: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    tools: list[dict] | None = None
    tool_choice: Any = None
    response_format: dict | None = None
    cache_salt: str | None = None

    @field_validator("stop")
    @classmethod
    def _stop(cls, v):
        if isinstance(v, list) and len(v) > 4:
            raise ValueError(f"at most 4 stop sequences, got {len(v)}")
        return v

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, v):
        """The shape of ``tool_choice`` (whether it fits ``tools`` is checked in
        :func:`check_tool_choice`)."""
        if v is None or v in ("none", "auto", "required"):
            return v
        if not isinstance(v, dict):
            raise ValueError(f"expected {_TOOL_CHOICE_SHAPES}")
        kind = v.get("type")
        if kind in ("function", "custom"):
            _named(v, kind)
        elif kind == "allowed_tools":
            allowed = v.get("allowed_tools")
            if (
                not isinstance(allowed, dict)
                or allowed.get("mode") not in ("auto", "required")
                or not isinstance(allowed.get("tools"), list)
            ):
                raise ValueError(
                    'an "allowed_tools" tool_choice needs {"type": "allowed_tools", '
                    '"allowed_tools": {"mode": "auto" or "required", "tools": [...]}}'
                )
            for t in allowed["tools"]:
                if not isinstance(t, dict) or t.get("type") not in ("function", "custom"):
                    raise ValueError(
                        'allowed_tools.tools entries are {"type": "function", '
                        '"function": {"name": ...}} or {"type": "custom", "custom": {"name": ...}}'
                    )
                _named(t, t["type"])
        else:
            raise ValueError(f"unknown tool_choice type {kind!r}; expected {_TOOL_CHOICE_SHAPES}")
        return v

    @property
    def output_limit(self) -> int | None:
        """``max_completion_tokens`` (current name) or else ``max_tokens`` (deprecated), or None."""
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Model):
    """The body of ``POST /v1/completions`` (OpenAI legacy Completions): ``prompt`` as a
    string, strings, token ids or lists of token ids; plus ``cache_salt``."""

    model: str
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=1)
    n: int = Field(default=1, ge=1, le=128)
    stop: str | list[str] | None = None
    seed: int | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool | None = False
    user: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    cache_salt: str | None = None

    @field_validator("stop")
    @classmethod
    def _stop(cls, v):
        if isinstance(v, list) and len(v) > 4:
            raise ValueError(f"at most 4 stop sequences, got {len(v)}")
        return v

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, v):
        if isinstance(v, list) and len(v) == 0:
            raise ValueError("prompt must not be empty")
        return v

    def prompts(self) -> list[str | list[int]]:
        """The prompt as a list of single prompts (text or token ids)."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if all(isinstance(x, int) for x in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- tool_choice


def _tool_key(tool: dict) -> tuple[str, str | None]:
    """(type, name) of a ``tools`` entry: ``{"type": "function", "function": {"name"}}`` or
    ``{"type": "custom", "custom": {"name"}}``."""
    kind = tool.get("type") or "function"
    inner = tool.get(kind)
    name = inner.get("name") if isinstance(inner, dict) else None
    return str(kind), name if isinstance(name, str) else None


def _chosen(choice: dict) -> list[tuple[str, str]]:
    """The (type, name) pairs a dict ``tool_choice`` names (validated shape)."""
    if choice["type"] == "allowed_tools":
        return [(t["type"], t[t["type"]]["name"]) for t in choice["allowed_tools"]["tools"]]
    return [(choice["type"], choice[choice["type"]]["name"])]


def check_tool_choice(req: ChatCompletionRequest) -> None:
    """Check ``tool_choice`` against ``tools`` as the hosted API does.

    Raises :class:`APIError` 400 (``param="tool_choice"``) when ``tool_choice`` is sent
    without ``tools`` (OpenAI's wording, as reported in
    https://github.com/dapr/dapr-agents/issues/248: "Invalid value for 'tool_choice':
    'tool_choice' is only allowed when 'tools' are specified."); when it names a function
    (or an ``allowed_tools`` entry) that ``tools`` does not declare; and, when
    ``generating``, when it requires a tool call (``"required"``, a named function or
    custom tool, ``allowed_tools`` with ``mode: "required"``): the engine has no
    constrained decoding, so it could not keep that promise. ``"auto"`` and ``"none"``
    (and ``allowed_tools`` with ``mode: "auto"``) are served: see :func:`offered_tools`.
    """
    choice = req.tool_choice
    if choice is None:
        return
    if not req.tools:
        raise APIError(
            400,
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
            "are specified. Send 'tools' too, or leave 'tool_choice' out.",
            param="tool_choice",
        )
    declared = [_tool_key(t) for t in req.tools]
    if isinstance(choice, dict):
        for kind, name in _chosen(choice):
            if (kind, name) not in declared:
                listing = ", ".join(f"{k} {n!r}" for k, n in declared if n) or "none with a name"
                raise APIError(
                    400,
                    f"Invalid value for 'tool_choice': it names the {kind} tool {name!r}, "
                    f"which 'tools' does not declare (declared: {listing}). Name a "
                    f'declared tool, or send tool_choice "auto".',
                    param="tool_choice",
                )


def forced_tools(req: ChatCompletionRequest) -> list[tuple[str, dict]] | None:
    """The ``(name, parameters schema)`` of the function tools one of which the output must
    call, or None when no call is required: ``"required"`` (any offered function),
    a named function, ``allowed_tools`` with ``mode: "required"`` (those tools)."""
    choice = req.tool_choice
    required = choice == "required" or (
        isinstance(choice, dict)
        and (choice["type"] != "allowed_tools" or choice["allowed_tools"]["mode"] == "required")
    )
    if not required:
        return None
    out = []
    for t in (
        offered_tools(req)
        if choice == "required" or choice["type"] == "allowed_tools"
        else [t for t in req.tools or [] if _tool_key(t) == _chosen(choice)[0]]
    ):
        kind, name = _tool_key(t)
        if kind == "function" and name:
            out.append((name, (t.get("function") or {}).get("parameters") or {}))
    return out


def offered_tools(req: ChatCompletionRequest) -> list[dict]:
    """The ``tools`` entries the model is shown: none for ``tool_choice: "none"``, the
    allowed ones for ``allowed_tools`` (``mode: "auto"``), else all of them."""
    tools = req.tools or []
    choice = req.tool_choice
    if choice == "none":
        return []
    if isinstance(choice, dict) and choice.get("type") == "allowed_tools":
        allowed = set(_chosen(choice))
        return [t for t in tools if _tool_key(t) in allowed]
    return tools


# ---------------------------------------------------------------------------- message order


def check_message_order(req: ChatCompletionRequest) -> None:
    """The hosted API's tool-message rules.

    A ``tool`` message needs a ``tool_call_id`` and must follow (directly, or after other
    tool messages) an assistant message whose ``tool_calls`` include that id; an assistant
    message with ``tool_calls`` must be followed by a tool message for each call. The
    leading sentences are OpenAI's own, as its API returns them (quoted in
    https://github.com/miurla/morphic/issues/136, 2024-05-11, with ``param``
    ``messages.[3].role``, and https://github.com/microsoft/promptflow/pull/3130,
    2024-05-08); what follows says which message and id.

    Raises:
        APIError: 400 with ``param`` the offending message's field.
    """
    msgs = req.messages
    for i, msg in enumerate(msgs):
        if msg.role != "tool":
            continue
        if not msg.tool_call_id:
            raise APIError(
                400,
                f"Missing required parameter: 'messages.{i}.tool_call_id'. A tool message "
                "answers one call of the preceding assistant message's tool_calls: set "
                "tool_call_id to that call's id.",
                param=f"messages.{i}.tool_call_id",
            )
        j = i - 1
        while j >= 0 and msgs[j].role == "tool":
            j -= 1
        prev = msgs[j] if j >= 0 else None
        ids = (
            [tc.id for tc in (prev.tool_calls or [])]
            if prev is not None and prev.role == "assistant"
            else []
        )
        if msg.tool_call_id in ids:
            continue
        if prev is None:
            where = "it is the first message"
        elif not ids:
            where = f"it follows messages.{j}, a {prev.role} message without tool_calls"
        else:
            where = (
                f"its tool_call_id {msg.tool_call_id!r} is not one of the tool_calls ids of "
                f"messages.{j} ({', '.join(repr(x) for x in ids)})"
            )
        raise APIError(
            400,
            "Invalid parameter: messages with role 'tool' must be a response to a "
            f"preceeding message with 'tool_calls'. messages.{i}: {where}; put each tool "
            "message after the assistant message whose tool_calls include its "
            "tool_call_id.",
            param=f"messages.{i}.role",
        )
    for j, msg in enumerate(msgs):
        if msg.role != "assistant" or not msg.tool_calls:
            continue
        answered = set()
        k = j + 1
        while k < len(msgs) and msgs[k].role == "tool":
            answered.add(msgs[k].tool_call_id)
            k += 1
        missing = [tc.id for tc in msg.tool_calls if tc.id not in answered]
        if missing:
            raise APIError(
                400,
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(missing)} (messages.{j}); add a tool message "
                "with each id right after it.",
                param=f"messages.{j}.tool_calls",
            )


# ---------------------------------------------------------------------------- rendering


def _image_url_text(image: dict | None, where: str) -> str:
    """An ``image_url`` part as text (:mod:`.media`): a ``data:`` URL of a documented image
    type, an ``http(s)`` URL, or (from a Responses ``input_image``) a ``file_id``."""
    try:
        if not isinstance(image, dict):
            raise RenderError(f"{where}: Field required")
        url = image.get("url")
        if isinstance(url, str) and url:
            parsed = media.parse_data_url(url, f"{where}.url")
            if parsed is not None:
                mt, data = parsed
                if mt not in media.IMAGE_MEDIA_TYPES:
                    raise RenderError(
                        f"{where}.url: Invalid image media type {mt!r}; expected one of "
                        + ", ".join(media.IMAGE_MEDIA_TYPES)
                    )
                return media.placeholder("image", mt, data=data)
            if url.startswith(("http://", "https://")):
                return media.placeholder("image", None, ref=url)
            raise RenderError(f"{where}.url: expected an http(s) URL or a base64 data URL")
        if isinstance(image.get("file_id"), str):
            return media.placeholder("image", None, ref=image["file_id"])
        raise RenderError(f"{where}.url: Field required")
    except media.MediaError as exc:
        raise RenderError(str(exc)) from None


def _file_text(file: dict | None, where: str) -> str:
    """A ``file`` part as text (:mod:`.media`): ``file_data`` (a base64 data URL, or bare
    base64 whose type ``filename``'s extension tells), ``file_id`` or (from a Responses
    ``input_file``) ``file_url``."""
    if not isinstance(file, dict):
        raise RenderError(f"{where}: Field required")
    name = file.get("filename") if isinstance(file.get("filename"), str) else None
    try:
        data = file.get("file_data")
        if isinstance(data, str) and data:
            parsed = media.parse_data_url(data, f"{where}.file_data")
            if parsed is None:
                guessed = mimetypes.guess_type(name or "")[0] or "application/octet-stream"
                parsed = guessed, media.decode_base64(data, f"{where}.file_data")
            return media.bytes_document(parsed[1], parsed[0], name=name)
    except media.MediaError as exc:
        raise RenderError(str(exc)) from None
    for field in ("file_id", "file_url"):
        if isinstance(file.get(field), str) and file[field]:
            return media.placeholder("document", None, ref=file[field], name=name)
    raise RenderError(f"{where}: one of file_data or file_id is required")


def _part_blocks(msg: ChatMessage, i: int) -> list[Block]:
    role_section = "messages"
    if msg.content is None:
        return []
    if isinstance(msg.content, str):
        return [Block(msg.content, role_section, i)]
    out: list[Block] = []
    for j, part in enumerate(msg.content):
        where = f"messages.{i}.content.{j}"
        if part.type == "image_url":
            text = _image_url_text(part.image_url, f"{where}.image_url")
        elif part.type == "file":
            text = _file_text(part.file, f"{where}.file")
        elif part.type not in ("text", "input_text"):
            raise RenderError(
                f"{where}.type: content of type {part.type!r} is not supported; "
                "this server's model reads text, images and files (as media.py renders them)"
            )
        elif part.text is None:
            raise RenderError(f"{where}.text: Field required")
        else:
            text = part.text
        b = Block(text, role_section, i)
        if part.prompt_cache_breakpoint is not None:
            b.openai_breakpoint = (
                part.prompt_cache_breakpoint.ttl,
                f"messages.{i}.content.{j}.prompt_cache_breakpoint",
            )
        if part.cache_control is not None:
            b.cache_control = (
                part.cache_control.ttl or "5m",
                f"messages.{i}.content.{j}.cache_control",
            )
        out.append(b)
    return out


def chat_to_turns(req: ChatCompletionRequest) -> tuple[list[Block], list[Block], list[Turn]]:
    """(tool blocks, leading system blocks, the other turns) of a chat request.

    A leading ``system``/``developer`` message becomes the system blocks (tools are rendered
    before it in the same turn); later system messages stay turns of their own. The tools
    are those :func:`offered_tools` keeps (none for ``tool_choice: "none"``).

    Raises:
        RenderError: unsupported content (audio), a malformed image or file part, or a
            user message without content.
    """
    tools = [Block(canonical_json(strip_cache_markers(t)), "tools") for t in offered_tools(req)]
    system: list[Block] = []
    turns: list[Turn] = []
    for i, msg in enumerate(req.messages):
        role = "system" if msg.role == "developer" else msg.role
        if role == "function":
            role = "tool"
        blocks = _part_blocks(msg, i)
        for b in blocks:
            b.message_index = i
        if i == 0 and role == "system":
            for b in blocks:
                b.section = "system"
            system = blocks
            continue
        if role == "assistant" and msg.tool_calls:
            calls = [tc.model_dump(exclude_unset=True) for tc in msg.tool_calls]  # as sent
            blocks.append(Block(canonical_json({"tool_calls": calls}), "messages", i))
        if not blocks and role in ("user", "tool", "system"):
            raise RenderError(f"messages.{i}.content: a {msg.role} message needs content")
        turns.append(Turn(role, blocks, i))
    return tools, system, turns
