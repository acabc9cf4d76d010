"""Anthropic Messages API request models and their conversion to turns.

Reference: https://platform.claude.com/docs/en/api/messages (2026-11-29). Unknown fields
are ignored; ``tool_choice``, ``metadata`` and ``thinking`` are accepted (the local model
has no tool-use training to steer, so ``tool_choice`` does not constrain the output).
"""

from __future__ import annotations

from typing import Any, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from .rendering import Block, RenderError, Turn, canonical_json, strip_cache_markers


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CacheControl(_Model):
    type: Literal["ephemeral"]
    ttl: Optional[Literal["5m", "1h"]] = None


class ContentBlock(_Model):
    """Any content block; fields are checked per ``type`` in :func:`messages_to_turns`."""

    model_config = ConfigDict(extra="allow")
    type: str
    text: Optional[str] = None
    cache_control: Optional[CacheControl] = None


class TextBlock(_Model):
    type: Literal["text"]
    text: str
    cache_control: Optional[CacheControl] = None


class Message(_Model):
    role: Literal["user", "assistant"]
    content: Union[str, List[ContentBlock]]


class Tool(_Model):
    model_config = ConfigDict(extra="allow")
    name: str
    description: Optional[str] = None
    input_schema: Optional[dict] = None
    cache_control: Optional[CacheControl] = None


class Diagnostics(_Model):
    previous_message_id: Optional[str] = None


class CountTokensRequest(_Model):
    model: str
    messages: List[Message] = Field(min_length=1)
    system: Union[str, List[TextBlock], None] = None
    tools: Optional[List[Tool]] = None
    tool_choice: Optional[dict] = None
    cache_control: Optional[CacheControl] = None
    thinking: Optional[dict] = None


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: Optional[List[str]] = None
    temperature: Optional[float] = Field(default=None, ge=0.0, le=1.0)
    top_p: Optional[float] = Field(default=None, gt=0.0, le=1.0)
    top_k: Optional[int] = Field(default=None, ge=0)
    stream: Optional[bool] = False
    metadata: Optional[dict] = None
    diagnostics: Optional[Diagnostics] = None
    cache_salt: Optional[str] = None


def _cc(block_cc: Optional[CacheControl], path: str) -> Optional[tuple[str, str]]:
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
            raise RenderError("tool_result content other than text is not supported by this server's model")
    return "\n".join(parts)


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
            text = canonical_json({"type": "tool_use", "id": extra["id"], "name": extra["name"],
                                   "input": extra["input"]})
        elif cb.type == "tool_result":
            if "tool_use_id" not in extra:
                raise RenderError(f"{path}.tool_use_id: Field required")
            body = {"type": "tool_result", "tool_use_id": extra["tool_use_id"],
                    "content": _tool_result_text(extra.get("content"))}
            if extra.get("is_error"):
                body["is_error"] = True
            text = canonical_json(body)
        elif cb.type in ("thinking", "redacted_thinking"):
            continue  # not part of the prompt the model sees
        else:
            raise RenderError(
                f"{path}.type: content of type {cb.type!r} is not supported; this server's model reads text only"
            )
        out.append(Block(text, "messages", i, cache_control=_cc(cb.cache_control, path)))
    return out


def messages_to_turns(req: CountTokensRequest) -> tuple[list[Block], list[Block], list[Turn], bool]:
    """(tool blocks, system blocks, turns, continue_final) of a Messages request.

    ``continue_final`` is True when the last message is from the assistant (a prefill the
    model continues). A top-level ``cache_control`` (automatic caching) is placed on the
    last block of the last message that has one, unless that block carries its own.
    """
    tools = []
    for k, t in enumerate(req.tools or []):
        d = t.model_dump(exclude_none=True)
        tools.append(Block(canonical_json(strip_cache_markers(d)), "tools",
                           cache_control=_cc(t.cache_control, f"tools.{k}")))
    system: list[Block] = []
    if isinstance(req.system, str):
        system = [Block(req.system, "system")]
    elif req.system:
        system = [Block(b.text, "system", cache_control=_cc(b.cache_control, f"system.{k}"))
                  for k, b in enumerate(req.system)]
    turns = [Turn(m.role, _content_blocks(m, i), i) for i, m in enumerate(req.messages)]
    if req.cache_control is not None:
        last = next((t.blocks[-1] for t in reversed(turns) if t.blocks), None)
        if last is None:
            last = (system or tools or [None])[-1]
        if last is not None and last.cache_control is None:
            last.cache_control = (req.cache_control.ttl or "5m", "cache_control")
    continue_final = req.messages[-1].role == "assistant"
    return tools, system, turns, continue_final
