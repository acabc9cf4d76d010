"""OpenAI request models (Chat Completions, Completions) and their conversion to turns.

Pydantic models validate types and ranges the way the hosted API does; unknown fields are
ignored (``extra="ignore"``), as the hosted APIs ignore them. Fields the local model
cannot honour (``response_format``, ``frequency_penalty`` ...) are accepted and ignored.
Reference: https://platform.openai.com/docs/api-reference/chat/create (2026-11-29).
"""

from __future__ import annotations

from typing import Any, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .rendering import Block, RenderError, Turn, canonical_json, strip_cache_markers


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class PromptCacheBreakpoint(_Model):
    """``prompt_cache_breakpoint`` on a content part (GPT-5.6+): ends a reusable prefix."""

    mode: Literal["explicit"]
    ttl: Optional[Literal["30m", "12h"]] = None


class PromptCacheOptions(_Model):
    """``prompt_cache_options`` (GPT-5.6+): ``mode`` implicit|explicit, request ``ttl``."""

    mode: Literal["implicit", "explicit"] = "implicit"
    ttl: Optional[Literal["30m"]] = None


class CacheControl(_Model):
    """An Anthropic-style ``cache_control`` accepted on content parts in
    ``--cache-mode anthropic`` (as OpenAI-compatible gateways to Claude accept it)."""

    type: Literal["ephemeral"]
    ttl: Optional[Literal["5m", "1h"]] = None


class ContentPart(_Model):
    type: str
    text: Optional[str] = None
    prompt_cache_breakpoint: Optional[PromptCacheBreakpoint] = None
    cache_control: Optional[CacheControl] = None


class ChatMessage(_Model):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: Union[str, List[ContentPart], None] = None
    name: Optional[str] = None
    tool_calls: Optional[List[dict]] = None
    tool_call_id: Optional[str] = None


class StreamOptions(_Model):
    include_usage: bool = False


class ChatCompletionRequest(_Model):
    model: str
    messages: List[ChatMessage] = Field(min_length=1)
    max_tokens: Optional[int] = Field(default=None, ge=1)
    max_completion_tokens: Optional[int] = Field(default=None, ge=1)
    n: int = Field(default=1, ge=1, le=128)
    stop: Union[str, List[str], None] = None
    seed: Optional[int] = None
    temperature: Optional[float] = Field(default=None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(default=None, gt=0.0, le=1.0)
    logprobs: Optional[bool] = False
    top_logprobs: Optional[int] = Field(default=None, ge=0, le=20)
    user: Optional[str] = None
    prompt_cache_key: Optional[str] = None
    prompt_cache_retention: Optional[Literal["in_memory", "24h"]] = None
    prompt_cache_options: Optional[PromptCacheOptions] = None
    stream: Optional[bool] = False
    stream_options: Optional[StreamOptions] = None
    tools: Optional[List[dict]] = None
    tool_choice: Any = None
    cache_salt: Optional[str] = None

    @field_validator("stop")
    @classmethod
    def _stop(cls, v):
        if isinstance(v, list) and len(v) > 4:
            raise ValueError("at most 4 stop sequences")
        return v

    @property
    def output_limit(self) -> Optional[int]:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Model):
    model: str
    prompt: Union[str, List[str], List[int], List[List[int]]]
    max_tokens: Optional[int] = Field(default=16, ge=1)
    n: int = Field(default=1, ge=1, le=128)
    stop: Union[str, List[str], None] = None
    seed: Optional[int] = None
    temperature: Optional[float] = Field(default=None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(default=None, gt=0.0, le=1.0)
    logprobs: Optional[int] = Field(default=None, ge=0, le=5)
    echo: Optional[bool] = False
    user: Optional[str] = None
    prompt_cache_key: Optional[str] = None
    prompt_cache_retention: Optional[Literal["in_memory", "24h"]] = None
    stream: Optional[bool] = False
    stream_options: Optional[StreamOptions] = None
    cache_salt: Optional[str] = None

    @field_validator("stop")
    @classmethod
    def _stop(cls, v):
        if isinstance(v, list) and len(v) > 4:
            raise ValueError("at most 4 stop sequences")
        return v

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, v):
        if isinstance(v, list) and len(v) == 0:
            raise ValueError("prompt must not be empty")
        return v

    def prompts(self) -> list[Union[str, list[int]]]:
        """The prompt as a list of single prompts (text or token ids)."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if all(isinstance(x, int) for x in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]


def _part_blocks(msg: ChatMessage, i: int) -> list[Block]:
    role_section = "messages"
    if msg.content is None:
        return []
    if isinstance(msg.content, str):
        return [Block(msg.content, role_section, i)]
    out: list[Block] = []
    for j, part in enumerate(msg.content):
        if part.type not in ("text", "input_text"):
            raise RenderError(
                f"messages.{i}.content.{j}.type: content of type {part.type!r} is not supported; "
                "this server's model reads text only"
            )
        if part.text is None:
            raise RenderError(f"messages.{i}.content.{j}.text: Field required")
        b = Block(part.text, role_section, i)
        if part.prompt_cache_breakpoint is not None:
            b.openai_breakpoint = (part.prompt_cache_breakpoint.ttl,
                                   f"messages.{i}.content.{j}.prompt_cache_breakpoint")
        if part.cache_control is not None:
            b.cache_control = (part.cache_control.ttl or "5m", f"messages.{i}.content.{j}.cache_control")
        out.append(b)
    return out


def chat_to_turns(req: ChatCompletionRequest) -> tuple[list[Block], list[Block], list[Turn]]:
    """(tool blocks, leading system blocks, the other turns) of a chat request.

    A leading ``system``/``developer`` message becomes the system blocks (tools are rendered
    before it in the same turn); later system messages stay turns of their own.

    Raises:
        RenderError: unsupported content (images, audio, files) or a user message without
            content.
    """
    tools = [
        Block(canonical_json(strip_cache_markers(t)), "tools")
        for t in (req.tools or [])
    ]
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
            blocks.append(Block(canonical_json({"tool_calls": msg.tool_calls}), "messages", i))
        if not blocks and role in ("user", "tool", "system"):
            raise RenderError(f"messages.{i}.content: a {msg.role} message needs content")
        turns.append(Turn(role, blocks, i))
    return tools, system, turns
