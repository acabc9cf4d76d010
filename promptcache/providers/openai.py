"""Request rendering for OpenAI: a :class:`promptcache.prompt.layers.PromptLayers` -> the keyword
arguments of the official client's call. Usage parsing is in :mod:`promptcache.providers.openai_usage`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from promptcache.limits import cache_limits
from promptcache.prompt.breakpoints import LayoutBlock, plan, text_tokens
from promptcache.prompt.canonical import dumps_sorted
from promptcache.prompt.layers import PromptLayers
from promptcache.providers import empty_request

_AUTO = "auto"


def prompt_cache_key(prompt: PromptLayers) -> str:
    """The default ``prompt_cache_key``: ``"pc-"`` + the first 32 hex digits of the prefix
    hash, so requests that share the frozen prefix are routed to the same cache."""
    return "pc-" + prompt.prefix_hash[:32]


def chat_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    if "native" in tool:
        return dict(tool["native"])
    fn: dict[str, Any] = {}
    if "description" in tool:
        fn["description"] = tool["description"]
    fn["name"] = tool["name"]
    fn["parameters"] = tool["input_schema"]
    if "strict" in tool:
        fn["strict"] = tool["strict"]
    return {"function": fn, "type": "function"}


def _tool_responses(tool: Mapping[str, Any]) -> dict[str, Any]:
    if "native" in tool:
        return dict(tool["native"])
    out: dict[str, Any] = {}
    if "description" in tool:
        out["description"] = tool["description"]
    out["name"] = tool["name"]
    out["parameters"] = tool["input_schema"]
    out["strict"] = tool.get("strict", False)  # the Responses API defaults to strict=true
    out["type"] = "function"
    return out


def _native(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    if block.get("provider") != "openai":
        raise ValueError(
            f"{where}: a {block['block'].get('type')!r} block from "
            f"{block.get('provider')} cannot be sent to OpenAI"
        )
    return dict(block["block"])


def _data_url(block: Mapping[str, Any]) -> str:
    if "url" in block:
        return str(block["url"])
    return f"data:{block['media_type']};base64,{block['data']}"


def _chat_parts(blocks: Sequence[Mapping[str, Any]], where: str) -> str | list[dict[str, Any]]:
    """Neutral text/image blocks -> a string (text only) or a list of chat content parts."""
    if all(b["type"] == "text" for b in blocks):
        return "\n\n".join(b["text"] for b in blocks) if len(blocks) != 1 else blocks[0]["text"]
    parts: list[dict[str, Any]] = []
    for j, b in enumerate(blocks):
        if b["type"] == "text":
            parts.append({"text": b["text"], "type": "text"})
        elif b["type"] == "image":
            parts.append({"image_url": {"url": _data_url(b)}, "type": "image_url"})
        elif b["type"] == "native":
            parts.append(_native(b, f"{where}[{j}]"))
        else:
            raise ValueError(f"{where}[{j}]: a {b['type']} block cannot go in this message")
    return parts


def _args(block: Mapping[str, Any]) -> str:
    raw = block.get("arguments_raw")
    return raw if raw is not None else dumps_sorted(block.get("arguments", {}))


def _result_text(block: Mapping[str, Any]) -> str | list[dict[str, Any]]:
    content = block.get("content") or []
    text = _chat_parts(content, "tool_result") if content else ""
    if block.get("is_error") and isinstance(text, str):
        text = "Error: " + text
    return text


def chat_messages(prompt: PromptLayers) -> list[dict[str, Any]]:
    """The Chat Completions ``messages``: one system message with the frozen text (system
    then documents), one with the session layer, the history, then ``dynamic`` as the last
    user message. Tool results become ``role: "tool"`` messages."""
    out: list[dict[str, Any]] = []
    frozen = prompt.frozen_texts()
    if frozen:
        out.append({"role": "system", "content": "\n\n".join(frozen)})
    if prompt.session:
        out.append({"role": "system", "content": "\n\n".join(prompt.session)})
    for i, msg in enumerate(prompt.messages):
        out.extend(_chat_message(msg, f"messages[{i}]"))
    if prompt.dynamic:
        out.append({"role": "user", "content": _chat_parts(list(prompt.dynamic), "dynamic")})
    return out


def _chat_message(msg: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    role = msg["role"]
    blocks = msg["content"]
    out: list[dict[str, Any]] = []
    if role == "assistant":
        text = [b for b in blocks if b["type"] == "text"]
        calls = [b for b in blocks if b["type"] == "tool_call"]
        other = [b for b in blocks if b["type"] not in ("text", "tool_call")]
        if other:
            kinds = sorted({b.get("block", {}).get("type", b["type"]) for b in other})
            raise ValueError(f"{where}: assistant blocks {kinds} have no Chat Completions form")
        entry: dict[str, Any] = {"role": "assistant"}
        if text:
            entry["content"] = (
                "".join(b["text"] for b in text) if len(text) > 1 else text[0]["text"]
            )
        if calls:
            entry["tool_calls"] = [
                {
                    "function": {"arguments": _args(c), "name": c["name"]},
                    "id": c["id"],
                    "type": "function",
                }
                for c in calls
            ]
        if "content" not in entry and "tool_calls" not in entry:
            entry["content"] = ""
        if "name" in msg:
            entry["name"] = msg["name"]
        return [entry]
    pending: list[dict[str, Any]] = []
    for b in blocks:
        if b["type"] == "tool_result":
            out.append({"content": _result_text(b), "role": "tool", "tool_call_id": b["id"]})
        elif b["type"] == "tool_call":
            raise ValueError(f"{where}: a tool call in a user message")
        else:
            pending.append(b)
    if pending or not out:
        entry = {"role": "user", "content": _chat_parts(pending, f"{where}.content")}
        if "name" in msg:
            entry["name"] = msg["name"]
        out.append(entry)
    return out


def _responses_input(prompt: PromptLayers) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    frozen = prompt.frozen_texts()
    if frozen:
        out.append(
            {"content": [{"text": "\n\n".join(frozen), "type": "input_text"}], "role": "system"}
        )
    if prompt.session:
        out.append(
            {
                "content": [{"text": "\n\n".join(prompt.session), "type": "input_text"}],
                "role": "system",
            }
        )
    for i, msg in enumerate(prompt.messages):
        out.extend(_responses_items(msg, f"messages[{i}]"))
    if prompt.dynamic:
        out.append(
            {"content": _responses_parts(list(prompt.dynamic), "dynamic", "user"), "role": "user"}
        )
    return out


def _responses_parts(
    blocks: Sequence[Mapping[str, Any]], where: str, role: str
) -> list[dict[str, Any]]:
    parts = []
    for j, b in enumerate(blocks):
        if b["type"] == "text":
            parts.append(
                {"text": b["text"], "type": "output_text" if role == "assistant" else "input_text"}
            )
        elif b["type"] == "image":
            parts.append({"detail": "auto", "image_url": _data_url(b), "type": "input_image"})
        elif b["type"] == "native":
            parts.append(_native(b, f"{where}[{j}]"))
        else:
            raise ValueError(f"{where}[{j}]: a {b['type']} block cannot go in this message")
    return parts


def _responses_items(msg: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    role = msg["role"]

    def flush() -> None:
        if pending:
            if role == "assistant":
                out.append(
                    {
                        "content": "".join(b["text"] for b in pending if b["type"] == "text"),
                        "role": "assistant",
                    }
                )
            else:
                out.append({"content": _responses_parts(list(pending), where, role), "role": role})
            pending.clear()

    for b in msg["content"]:
        if b["type"] == "tool_call":
            flush()
            out.append(
                {
                    "arguments": _args(b),
                    "call_id": b["id"],
                    "name": b["name"],
                    "type": "function_call",
                }
            )
        elif b["type"] == "tool_result":
            flush()
            res = _result_text(b)
            out.append(
                {
                    "call_id": b["id"],
                    "output": res if isinstance(res, str) else dumps_sorted(res),
                    "type": "function_call_output",
                }
            )
        else:
            pending.append(b)
    flush()
    return out


def _apply_breakpoints(
    prompt: PromptLayers,
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    api: str,
    rules: Any,
) -> Any:
    """Mark up to 3 content parts with ``prompt_cache_breakpoint`` (gpt-5.6+ in the default
    implicit mode: one implicit breakpoint plus the latest three explicit ones are written)
    by the rule of :mod:`promptcache.prompt.breakpoints`. Returns the plan."""
    blocks: list[LayoutBlock] = []
    if tools:
        blocks.append(LayoutBlock("tools", None, text_tokens(dumps_sorted(tools), model), False))
    n_frozen = 1 if prompt.frozen_texts() else 0
    n_session = 1 if prompt.session else 0
    n_dynamic = 1 if prompt.dynamic else 0
    for i, m in enumerate(messages):
        if i < n_frozen:
            layer = "system"
        elif i < n_frozen + n_session:
            layer = "session"
        elif i >= len(messages) - n_dynamic:
            layer = "dynamic"
        else:
            layer = "messages"
        text = (
            dumps_sorted(m.get("content", ""))
            if not isinstance(m.get("content"), str)
            else m["content"]
        )
        role = m.get("role") or m.get("type")
        markable = role in ("system", "user", "tool", "developer") and layer != "dynamic"
        blocks.append(
            LayoutBlock(layer, i, text_tokens(text, model) if layer != "dynamic" else 0, markable)
        )
    p = plan(
        blocks,
        min_tokens=rules.min_tokens,
        max_breakpoints=3,
        lookback=0,
        ttl="30m",
        history_ttl="30m",
    )
    for bp in p.breakpoints:
        m = messages[bp.locator]
        marker = {"mode": "explicit"}
        content = m.get("content")
        if isinstance(content, str):
            ptype = "input_text" if api == "responses" else "text"
            m["content"] = [{"prompt_cache_breakpoint": marker, "text": content, "type": ptype}]
        elif isinstance(content, list) and content:
            content[-1] = {**content[-1], "prompt_cache_breakpoint": marker}
        elif api == "responses" and m.get("type") == "function_call_output":
            pass  # no content parts to mark
    return p


def render(
    prompt: PromptLayers,
    model: str,
    *,
    api: str = "chat",
    cache_key: str | None = None,
    retention: Any = _AUTO,
    breakpoints: bool | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``OpenAI().chat.completions.create(**kw)`` (``api="chat"``) or
    ``OpenAI().responses.create(**kw)`` (``api="responses"``).

    Fields:
        ``model``; ``messages`` (chat) or ``input`` (responses): the frozen text as the first
        system message, the session layer as a second, the history, ``dynamic`` last;
        ``tools`` (keys sorted, order as built); ``prompt_cache_key``: ``cache_key`` or
        :func:`prompt_cache_key`; ``prompt_cache_retention``: ``retention`` when given, else
        ``"24h"`` for models that accept extended retention (gpt-4.1, gpt-5 to gpt-5.5; see
        :mod:`promptcache.limits`), omitted for others (``retention=False`` omits it).
        For models that take explicit breakpoints (gpt-5.6 and later), content parts are
        marked with ``prompt_cache_breakpoint`` by the rule of :mod:`promptcache.prompt.breakpoints`
        (``breakpoints=False`` turns this off, ``True`` forces it for an unknown model).

    A prompt with system text but no history and no ``dynamic`` renders a system-only
    request (OpenAI accepts it); one with nothing at all is refused.

    Raises:
        EmptyRequestError: (a ``ValueError``) no frozen or session text, no history and no
            ``dynamic``: ``messages``/``input`` would be empty.
        ValueError: an unknown ``api``; a retention value the model does not accept; content
            that has no OpenAI form (e.g. an Anthropic thinking block).
    """

    if api not in ("chat", "responses"):
        raise ValueError(f"api must be 'chat' or 'responses', got {api!r}")
    rules = cache_limits(model, "openai")
    kw: dict[str, Any] = {"model": model}
    if api == "chat":
        body = chat_messages(prompt)
        kw["messages"] = body
        tools = [chat_tool(t) for t in prompt.tools]
    else:
        body = _responses_input(prompt)
        kw["input"] = body
        tools = [_tool_responses(t) for t in prompt.tools]
    if not body:
        raise empty_request(
            "OpenAI " + ("Chat Completions" if api == "chat" else "Responses"),
            "a non-empty " + ("messages" if api == "chat" else "input") + " list",
        )
    if tools:
        kw["tools"] = tools
    kw["prompt_cache_key"] = cache_key if cache_key is not None else prompt_cache_key(prompt)
    if retention is None or retention == _AUTO:
        if rules.known and rules.retention and not rules.explicit_breakpoints:
            kw["prompt_cache_retention"] = "24h"
    elif retention is not False:
        if rules.known and retention not in rules.retention:
            allowed = list(rules.retention) or "none (omit it)"
            raise ValueError(
                f"prompt_cache_retention={retention!r} is not accepted by {model}; "
                f"accepted: {allowed}"
            )
        kw["prompt_cache_retention"] = retention
    use_bp = rules.explicit_breakpoints if breakpoints is None else bool(breakpoints)
    if use_bp:
        _apply_breakpoints(prompt, model, body, tools, api, rules)
    return kw
