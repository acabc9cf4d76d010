"""Render OpenAI / Anthropic conversations into prompt token ids with block boundaries.

The model's own chat template (``tokenizer.apply_chat_template``) lays out the turns.
Tools are rendered deterministically into the system turn, before the system text (the
order Anthropic caches in: tools -> system -> messages), one canonical JSON line per tool
(keys sorted recursively, ``(",", ":")`` separators, ``cache_control`` removed).

Boundaries: every content block (a tool, a system text block, one message content block)
ends at a known token offset, which the cache emulation needs for breakpoints and the
20-block lookback. To find them, the conversation is rendered with an invisible marker
after each block and each turn, the rendered text is cut at the markers and each piece is
tokenized on its own; the pieces' token ids concatenated are the prompt. Cutting at block
ends means a block's tokens never depend on what follows it, so two requests that share
their first k blocks share exactly the tokens up to block k's end (the property prefix
caching needs); the price is that a merge across a block end (rare: a whitespace run that
straddles it) is not made.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

BLOCK_MARK = "\U0010fffd"
TURN_MARK = "\U0010fffc"
_MARKS = re.compile(f"[{BLOCK_MARK}{TURN_MARK}]")

TOOLS_HEADER = "# Tools\nYou can call these functions (JSON schema, one per line):\n"
BLOCK_JOINER = "\n\n"


def canonical_json(value: Any) -> str:
    """JSON with keys sorted recursively and no insignificant whitespace (one line)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def strip_cache_markers(value: Any) -> Any:
    """A copy of a tool/block dict without ``cache_control`` / ``prompt_cache_breakpoint``
    (they mark the cache, they are not prompt content)."""
    if isinstance(value, dict):
        return {
            k: strip_cache_markers(v)
            for k, v in value.items()
            if k not in ("cache_control", "prompt_cache_breakpoint")
        }
    if isinstance(value, list):
        return [strip_cache_markers(v) for v in value]
    return value


@dataclass
class Block:
    """One content block in prompt order.

    ``section``: "tools" | "system" | "messages"; ``message_index``: index into the
    request's ``messages`` (None for tools/system). A block may end a cache breakpoint:
    ``cache_control`` = (ttl, request path of the marker) for an Anthropic-style
    ``cache_control``; ``openai_breakpoint`` = (ttl or None for the request's default,
    path) for an OpenAI ``prompt_cache_breakpoint``."""

    text: str
    section: str
    message_index: int | None = None
    cache_control: tuple[str, str] | None = None
    openai_breakpoint: tuple[str | None, str] | None = None


@dataclass
class Turn:
    """One chat turn: a ChatML role and its blocks (joined by a blank line)."""

    role: str
    blocks: list[Block]
    message_index: int | None = None


@dataclass
class RenderedPrompt:
    """The prompt as the engine sees it.

    ``token_ids``: the prompt; ``blocks`` and ``block_ends`` (token offsets, same order,
    non-decreasing); ``tools_end`` / ``system_end``: token offsets where the tools and the
    system turn end (0 when absent); ``message_ends``: per request message, the token
    offset where its turn's content ends."""

    token_ids: list[int]
    blocks: list[Block] = field(default_factory=list)
    block_ends: list[int] = field(default_factory=list)
    tools_end: int = 0
    system_end: int = 0
    message_ends: list[int] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


class RenderError(ValueError):
    """The conversation cannot be rendered (bad roles for the template, unsupported
    content). The message says what to change."""


def _clean(text: str) -> str:
    return text.replace(BLOCK_MARK, "\ufffd").replace(TURN_MARK, "\ufffd")


def _encode_pieces(tokenizer, pieces: Sequence[str]) -> list[list[int]]:
    batch = getattr(tokenizer, "encode_batch", None)
    if batch is not None:
        return [list(ids) for ids in batch(list(pieces))]
    return [tokenizer.encode(p, add_special_tokens=False) for p in pieces]


def render_chat(
    tokenizer,
    *,
    tools: Sequence[Block] = (),
    system: Sequence[Block] = (),
    turns: Sequence[Turn] = (),
    continue_final: bool = False,
) -> RenderedPrompt:
    """Render tools + system + turns with the tokenizer's chat template.

    ``continue_final``: the last turn is an assistant turn to continue (Anthropic prefill):
    no generation prompt is added and the prompt ends right after its content.

    Raises:
        RenderError: the template rejected the conversation.
    """
    blocks: list[Block] = []
    messages: list[dict] = []
    turn_kinds: list[
        tuple[str, int | None]
    ] = []  # per turn mark: ("system", None) / ("message", i)

    if tools or system:
        parts = []
        if tools:
            parts.append(TOOLS_HEADER + "\n".join(_clean(b.text) + BLOCK_MARK for b in tools))
            blocks.extend(tools)
        if system:
            parts.append(BLOCK_JOINER.join(_clean(b.text) + BLOCK_MARK for b in system))
            blocks.extend(system)
        messages.append({"role": "system", "content": BLOCK_JOINER.join(parts) + TURN_MARK})
        turn_kinds.append(("system", None))
    for t in turns:
        content = BLOCK_JOINER.join(_clean(b.text) + BLOCK_MARK for b in t.blocks) + TURN_MARK
        messages.append({"role": t.role, "content": content})
        blocks.extend(t.blocks)
        turn_kinds.append(("message", t.message_index))

    try:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=not continue_final)
    except Exception as exc:  # the engine raises EngineError (a ValueError) on template errors
        raise RenderError(str(exc)) from exc
    if continue_final:
        cut = text.rfind(TURN_MARK)
        text = text[: cut + 1] if cut >= 0 else text

    marks = _MARKS.findall(text)
    expected = len(blocks) + len(turn_kinds)
    if len(marks) != expected:
        # the template transformed the content; fall back to whole-text tokenization with
        # every boundary at the end (emulated breakpoints then cover the whole prompt)
        whole = tokenizer.encode(_MARKS.sub("", text), add_special_tokens=False)
        n = len(whole)
        return RenderedPrompt(
            whole,
            blocks,
            [n] * len(blocks),
            n if tools else 0,
            n if (tools or system) else 0,
            [n for k, i in turn_kinds if k == "message"],
        )

    pieces = _MARKS.split(text)
    encoded = _encode_pieces(tokenizer, pieces)
    ids: list[int] = []
    offsets: list[int] = []
    for i, piece_ids in enumerate(encoded):
        ids.extend(piece_ids)
        if i < len(marks):
            offsets.append(len(ids))
    block_ends: list[int] = []
    turn_ends: list[int] = []
    for mark, off in zip(marks, offsets):
        (block_ends if mark == BLOCK_MARK else turn_ends).append(off)

    tools_end = block_ends[len(tools) - 1] if tools else 0
    system_end = 0
    message_ends: list[int] = []
    for (kind, _), end in zip(turn_kinds, turn_ends):
        if kind == "system":
            system_end = end
        else:
            message_ends.append(end)
    return RenderedPrompt(ids, blocks, block_ends, tools_end, system_end, message_ends)


def render_text(tokenizer, text: str) -> RenderedPrompt:
    """A raw completion prompt (no template): one block covering the whole text."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    return RenderedPrompt(ids, [Block(text, "messages", 0)], [len(ids)], 0, 0, [len(ids)])


def render_token_ids(ids: Iterable[int]) -> RenderedPrompt:
    """A prompt given as token ids: one block covering it."""
    ids = list(ids)
    return RenderedPrompt(ids, [Block("", "messages", 0)], [len(ids)], 0, 0, [len(ids)])
