"""OpenAI Responses API request model and its conversion to a Chat Completions request.

Reference: https://platform.openai.com/docs/api-reference/responses/create and the
``openai`` 3.57 client's ``openai/types/responses`` (read 2026-12-03). ``input`` is a string
or a list of items: messages (``{"role", "content"}`` with a string or ``input_text`` /
``output_text`` parts, optionally ``"type": "message"``), ``function_call`` and
``function_call_output`` items. ``instructions`` is the leading system message. Tools are
flat (``{"type": "function", "name", "description", "parameters", "strict"}``).

The request is converted to the Chat Completions shape (:func:`to_chat`), so a Responses
request renders to exactly the tokens of the equivalent Chat request (same cache behaviour,
same prompt); ``previous_response_id`` prepends the stored conversation.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from .errors import APIError
from .protocol_openai import ChatCompletionRequest, PromptCacheOptions


class ResponsesRequest(BaseModel):
    """The body of ``POST /v1/responses``."""

    model_config = ConfigDict(extra="ignore")
    model: str
    input: str | list[dict] | None = None
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    tools: list[dict] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    text: dict | None = None
    stream: bool | None = False
    store: bool | None = True
    previous_response_id: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    metadata: dict | None = None
    user: str | None = None
    cache_salt: str | None = None
    #: the equivalent Chat request and the stored history it starts with (set by the route)
    _chat: Any = PrivateAttr(default=None)
    _history: list = PrivateAttr(default_factory=list)

    @property
    def text_format(self) -> dict | None:
        """``text.format`` or None."""
        fmt = (self.text or {}).get("format")
        return fmt if isinstance(fmt, dict) else None


def _content(item: dict, where: str) -> Any:
    content = item.get("content")
    if isinstance(content, str) or content is None:
        return content or ""
    if not isinstance(content, list):
        raise APIError(400, f"{where}.content: expected a string or a list of parts", param=where)
    parts: list[dict] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "input_image":  # rendered by the Chat path (media.py)
            image = {k: part[k] for k in ("file_id", "detail") if part.get(k) is not None}
            if part.get("image_url") is not None:
                image["url"] = part["image_url"]
            parts.append({"type": "image_url", "image_url": image})
            continue
        if kind == "input_file":
            fields = ("file_data", "file_id", "file_url", "filename")
            parts.append({"type": "file", "file": {k: part[k] for k in fields if k in part}})
            continue
        if kind not in ("input_text", "output_text", "text"):
            raise APIError(
                400,
                f"{where}.content.{j}.type: content of type {kind!r} is not supported; this "
                "server's model reads text, images and files",
                param=f"{where}.content.{j}.type",
            )
        p = {"type": "text", "text": part.get("text")}
        if part.get("prompt_cache_breakpoint") is not None:
            p["prompt_cache_breakpoint"] = part["prompt_cache_breakpoint"]
        parts.append(p)
    return parts


def input_messages(items: str | list[dict] | None) -> list[dict]:
    """Chat ``messages`` of a Responses ``input`` (function calls become an assistant
    message's ``tool_calls``, their outputs ``tool`` messages). Raises :class:`APIError`
    400 for an item type or content part this server does not read."""
    if items is None:
        return []
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[dict] = []
    for i, item in enumerate(items):
        where = f"input.{i}"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise APIError(400, f"{where}.role: invalid role {role!r}", param=f"{where}.role")
            out.append({"role": role, "content": _content(item, where)})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments", "")},
            }
            if out and out[-1]["role"] == "assistant" and out[-1].get("tool_calls"):
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": output if isinstance(output, str) else str(output),
                }
            )
        else:
            raise APIError(
                400,
                f"{where}.type: input items of type {kind!r} are not supported (message, "
                "function_call and function_call_output are)",
                param=f"{where}.type",
            )
    return out


def chat_tools(tools: list[dict] | None) -> list[dict] | None:
    """Chat-shaped ``tools`` of flat Responses function tools. Raises :class:`APIError` 400
    for a hosted tool (web search, file search, ...), which the local model cannot run."""
    if tools is None:
        return None
    out = []
    for i, t in enumerate(tools):
        if t.get("type") != "function":
            raise APIError(
                400,
                f"tools.{i}.type: {t.get('type')!r} tools are not supported by this server "
                "(function tools are)",
                param=f"tools.{i}.type",
            )
        fn = {k: t[k] for k in ("name", "description", "parameters", "strict") if k in t}
        out.append({"type": "function", "function": fn})
    return out


def chat_tool_choice(choice: Any) -> Any:
    """The Chat ``tool_choice`` of a Responses one (``{"type": "function", "name"}`` ->
    ``{"type": "function", "function": {"name"}}``)."""
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def to_chat(req: ResponsesRequest, history: list[dict]) -> ChatCompletionRequest:
    """The Chat Completions request with the same prompt: ``instructions`` as the leading
    system message, then ``history`` (the stored conversation of ``previous_response_id``),
    then ``input``. Raises :class:`APIError` 400 for an empty conversation."""
    messages: list[dict] = []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
    messages.extend(history)
    messages.extend(input_messages(req.input))
    if not [m for m in messages if m["role"] != "system"]:
        raise APIError(400, "input: send at least one input item", param="input")
    body: dict[str, Any] = {
        "model": req.model,
        "messages": messages,
        "tools": chat_tools(req.tools),
        "tool_choice": chat_tool_choice(req.tool_choice),
        "prompt_cache_key": req.prompt_cache_key,
        "prompt_cache_retention": req.prompt_cache_retention,
        "prompt_cache_options": req.prompt_cache_options,
        "cache_salt": req.cache_salt,
    }
    try:
        return ChatCompletionRequest.model_validate(body)
    except Exception as exc:  # pydantic.ValidationError: a malformed item
        raise APIError(400, f"input: {exc}".splitlines()[0], param="input") from None
