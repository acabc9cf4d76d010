"""``promptcache.build(...)``: assemble a request in cache-friendly layers.

Layers, most stable first (DESIGN.md):

========== ============ ==========================================================
layer      stability    typical content
========== ============ ==========================================================
system     frozen       instructions, policy, persona
tools      frozen       tool / function schemas (Anthropic or OpenAI form)
documents  frozen       reference documents, few-shot examples
session    semi-stable  user profile, task background (changes per user or task)
messages   append-only  the conversation history
dynamic    per request  the clock, retrieved snippets, the new question -- always last
========== ============ ==========================================================

Frozen content is put in a canonical form so that equal content gives equal bytes whatever
the dict order: text has normalized line endings and no trailing whitespace; dicts (tool
schemas, structured session data) have their keys sorted recursively; tool-call arguments in
the history are re-serialized with sorted keys and fixed separators. ``Prompt.prefix_hash`` is
the SHA-256 of the RFC 8785 canonical JSON of the frozen layers.

Volatile values (timestamps, dates, UUIDs, request ids, ...; see :mod:`promptcache.prompt.volatile`)
in the frozen and semi-stable layers raise :class:`~promptcache.errors.VolatilePrefixError`
under ``strict=True`` and warn with :class:`~promptcache.errors.PromptCacheWarning`
otherwise. The processing of frozen layers is memoized, so a program that passes the same
system prompt and tools on every request pays for canonicalization and scanning once.

Renderers (``to_openai``, ``to_anthropic``, ...) return the keyword arguments for the
official client's call; they live in :mod:`promptcache.providers`.
"""

from __future__ import annotations

import json
import marshal
import warnings
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Mapping as _AbcMapping
from dataclasses import dataclass
from typing import Any, cast

from promptcache.compose.explain import Explanation
from promptcache.compose.explain import explain as explain_prompt
from promptcache.errors import PromptCacheWarning, VolatilePrefixError
from promptcache.memo import Memo
from promptcache.prompt.canonical import (
    canonical_json,
    dumps_sorted,
    normalize_newlines,
    normalize_text,
    sha256_hex,
    sort_keys_deep,
)
from promptcache.prompt.layers import (
    ContentBlock,
    Document,
    Message,
    PromptLayers,
    Tool,
    VolatileFinding,
)
from promptcache.prompt.volatile import find_volatile
from promptcache.providers import anthropic, bedrock, gemini, openai, openai_compatible

__all__ = [
    "build",
    "assemble",
    "Prompt",
    "SessionLayer",
    "session_layer",
    "LAYERS",
    "FROZEN_LAYERS",
    "normalize_messages",
]

# isinstance against typing.Mapping is slow; plain dicts are checked first
_MAPPING = (dict, _AbcMapping)

LAYERS = ("system", "tools", "documents", "session", "messages", "dynamic")
FROZEN_LAYERS = ("system", "tools", "documents")
_CANONICAL_VERSION = "promptcache/1"


# --------------------------------------------------------------------------- layer parsing


def _text_of_block(block: Any, where: str) -> str:
    if isinstance(block, str):
        return block
    if isinstance(block, _MAPPING):
        btype = block.get("type", "text")
        if btype in ("text", "input_text", "output_text") and isinstance(block.get("text"), str):
            return str(block["text"])
    raise TypeError(
        f"{where}: expected a string or a text block {{'type': 'text', 'text': ...}}, "
        f"got {_short(block)}"
    )


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 80 else r[:77] + "..."


def _text_layer(value: Any, layer: str, *, structured_ok: bool) -> tuple[str, ...]:
    """str | list[str | text block] | (dict when ``structured_ok``) -> normalized texts."""
    if value is None:
        return ()
    if isinstance(value, str):
        items: list[Any] = [value]
    elif isinstance(value, _MAPPING) and value.get("type") in ("text", "input_text"):
        items = [value]
    elif isinstance(value, _MAPPING):
        if not structured_ok:
            raise TypeError(f"{layer}: expected a string or a list of text blocks, got a dict")
        return (dumps_sorted(sort_keys_deep(dict(value))),)
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise TypeError(
            f"{layer}: expected a string or a list of text blocks, got {type(value).__name__}"
        )
    out = []
    for i, item in enumerate(items):
        if structured_ok and isinstance(item, _MAPPING) and "text" not in item:
            text = dumps_sorted(sort_keys_deep(dict(item)))
        else:
            text = normalize_text(_text_of_block(item, f"{layer}[{i}]"))
        if text:
            out.append(text)
    return tuple(out)


def _norm_strings(value: Any) -> Any:
    """Sorted-key copy of a JSON value with normalized newlines in every string."""
    if isinstance(value, _MAPPING):
        return {k: _norm_strings(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [_norm_strings(v) for v in value]
    if isinstance(value, str):
        return normalize_newlines(value)
    return value


def _tool(tool: Any, i: int) -> dict[str, Any]:
    """One tool schema in any supported form -> the neutral form
    ``{"name", "description"?, "input_schema", "strict"?}`` or ``{"native": {...}}``."""
    where = f"tools[{i}]"
    if not isinstance(tool, _MAPPING):
        raise TypeError(f"{where}: expected a tool schema dict, got {type(tool).__name__}")
    ttype = tool.get("type")
    if ttype == "function" and isinstance(tool.get("function"), _MAPPING):  # OpenAI chat
        fn = tool["function"]
        name, desc, params, strict = (
            fn.get("name"),
            fn.get("description"),
            fn.get("parameters"),
            fn.get("strict"),
        )
    elif ttype == "function" and "name" in tool:  # OpenAI Responses
        name, desc, params, strict = (
            tool.get("name"),
            tool.get("description"),
            tool.get("parameters"),
            tool.get("strict"),
        )
    elif "input_schema" in tool and ttype in (None, "custom"):  # Anthropic client tool
        name, desc, params, strict = (
            tool.get("name"),
            tool.get("description"),
            tool.get("input_schema"),
            tool.get("strict"),
        )
    elif ttype is not None:
        # provider-native tool (Anthropic server tools, OpenAI built-ins): passed through as is
        native = {k: v for k, v in tool.items() if k != "cache_control"}
        return {"native": _norm_strings(native)}
    else:
        raise ValueError(
            f"{where}: unrecognized tool schema with keys {sorted(tool)}; expected "
            "Anthropic {name, description, input_schema}, OpenAI chat "
            "{type: 'function', function: {name, description, parameters}} or "
            "OpenAI Responses {type: 'function', name, description, parameters}"
        )
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: a tool needs a non-empty string 'name'")
    if params is None:
        params = {"type": "object", "properties": {}}
    if not isinstance(params, _MAPPING):
        raise TypeError(
            f"{where}.parameters: expected a JSON Schema object, got {type(params).__name__}"
        )
    out: dict[str, Any] = {"name": name}
    if desc is not None:
        if not isinstance(desc, str):
            raise TypeError(f"{where}.description: expected str, got {type(desc).__name__}")
        out["description"] = normalize_text(desc)
    out["input_schema"] = _norm_strings(params)
    if strict is not None:
        out["strict"] = bool(strict)
    return out


def _tools_layer(tools: Any, sort_tools: bool) -> tuple[Tool, ...]:
    if tools is None:
        return ()
    if isinstance(tools, _MAPPING):
        raise TypeError("tools: expected a list of tool schemas, got a single dict")
    if isinstance(tools, (str, bytes)):
        raise TypeError(f"tools: expected a list of tool schemas, got {type(tools).__name__}")
    out = [_tool(t, i) for i, t in enumerate(tools)]
    names = [t["name"] for t in out if "name" in t]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"tools: duplicate tool names {dup}")
    if sort_tools:
        out.sort(key=lambda t: t.get("name") or t["native"].get("name") or "")
    # the neutral shapes of promptcache.prompt.layers, built as plain dicts above
    return cast("tuple[Tool, ...]", tuple(out))


def _documents_layer(documents: Any) -> tuple[Document, ...]:
    if documents is None:
        return ()
    if isinstance(documents, (str, dict, _AbcMapping)):
        documents = [documents]
    out = []
    for i, d in enumerate(documents):
        if isinstance(d, str):
            out.append(Document(normalize_text(d)))
        elif isinstance(d, _MAPPING):
            text = d.get("text", d.get("content"))
            if not isinstance(text, str):
                raise TypeError(
                    f"documents[{i}]: expected {{'text': str, 'title': str}} "
                    f"(or a string), got keys {sorted(d)}"
                )
            title = d.get("title")
            if title is not None and not isinstance(title, str):
                raise TypeError(f"documents[{i}].title: expected str")
            out.append(Document(normalize_text(text), normalize_text(title) if title else None))
        else:
            raise TypeError(f"documents[{i}]: expected a string or a dict, got {type(d).__name__}")
    return tuple(out)


# ---- content blocks and messages (the neutral form: promptcache.prompt.layers) ----------------


def _parse_data_url(url: str) -> tuple[str, str] | None:
    if not url.startswith("data:"):
        return None
    head, _, data = url[5:].partition(",")
    if not head.endswith(";base64"):
        return None
    return head[: -len(";base64")], data


def _image_from_openai(part: Mapping[str, Any], where: str) -> dict[str, Any]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, _MAPPING) else image
    if not isinstance(url, str):
        raise TypeError(f"{where}.image_url: expected {{'url': str}}")
    parsed = _parse_data_url(url)
    if parsed:
        return {"type": "image", "media_type": parsed[0], "data": parsed[1]}
    return {"type": "image", "url": url}


def _image_from_anthropic(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    src = block.get("source")
    if isinstance(src, _MAPPING) and src.get("type") == "base64":
        return {"type": "image", "media_type": src.get("media_type"), "data": src.get("data")}
    if isinstance(src, _MAPPING) and src.get("type") == "url":
        return {"type": "image", "url": src.get("url")}
    return {"type": "native", "provider": "anthropic", "block": _strip_cc(block)}


def _strip_cc(block: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in block.items() if k not in ("cache_control", "prompt_cache_breakpoint")}


def _tool_call(call_id: Any, name: Any, arguments: Any, where: str) -> dict[str, Any]:
    if not isinstance(name, str):
        raise TypeError(f"{where}: a tool call needs a string name")
    out: dict[str, Any] = {"type": "tool_call", "id": str(call_id or ""), "name": name}
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            out["arguments_raw"] = arguments
            return out
        arguments = parsed
    out["arguments"] = sort_keys_deep(arguments if arguments is not None else {})
    return out


def _result_content(content: Any, where: str) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, _MAPPING):
        content = [content]
    out = []
    for j, part in enumerate(content):
        out.extend(_blocks([part], f"{where}[{j}]"))
    return out


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    """Message content (str or a list of OpenAI parts / Anthropic blocks) -> neutral blocks."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": normalize_newlines(content)}]
    if isinstance(content, _MAPPING):
        content = [content]
    if not isinstance(content, (list, tuple)):
        raise TypeError(
            f"{where}: expected a string or a list of content blocks, got {type(content).__name__}"
        )
    out: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        w = f"{where}[{j}]"
        if isinstance(part, str):
            out.append({"type": "text", "text": normalize_newlines(part)})
            continue
        if not isinstance(part, _MAPPING):
            raise TypeError(f"{w}: expected a content block dict, got {type(part).__name__}")
        ptype = part.get("type")
        if ptype in ("text", "input_text", "output_text"):
            if not isinstance(part.get("text"), str):
                raise TypeError(f"{w}: a text block needs a string 'text'")
            out.append({"type": "text", "text": normalize_newlines(part["text"])})
        elif ptype == "image_url":
            out.append(_image_from_openai(part, w))
        elif ptype == "input_image":
            url = part.get("image_url")
            parsed = _parse_data_url(url) if isinstance(url, str) else None
            out.append(
                {"type": "image", "media_type": parsed[0], "data": parsed[1]}
                if parsed
                else {"type": "image", "url": url}
                if isinstance(url, str)
                else {"type": "native", "provider": "openai", "block": _strip_cc(part)}
            )
        elif ptype == "image":
            out.append(_image_from_anthropic(part, w))
        elif ptype == "tool_use":
            out.append(_tool_call(part.get("id"), part.get("name"), part.get("input"), w))
        elif ptype == "tool_result":
            out.append(
                {
                    "type": "tool_result",
                    "id": str(part.get("tool_use_id", "")),
                    "content": _result_content(part.get("content"), f"{w}.content"),
                    "is_error": bool(part.get("is_error", False)),
                }
            )
        elif ptype in ("refusal",):
            out.append({"type": "text", "text": part.get("refusal", "")})
        elif ptype in (
            "thinking",
            "redacted_thinking",
            "document",
            "search_result",
            "server_tool_use",
            "web_search_tool_result",
            "container_upload",
        ):
            out.append({"type": "native", "provider": "anthropic", "block": _strip_cc(part)})
        elif ptype in ("input_audio", "file", "input_file"):
            out.append({"type": "native", "provider": "openai", "block": _strip_cc(part)})
        else:
            raise ValueError(f"{w}: unsupported content block type {ptype!r}")
    return out


def _messages_layer(messages: Any) -> tuple[Message, ...]:
    if messages is None:
        return ()
    if isinstance(messages, (str, dict, _AbcMapping)):
        raise TypeError("messages: expected a list of messages")
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(messages):
        # fast path: the common {"role": "user"|"assistant", "content": "text"}
        if (
            type(msg) is dict
            and len(msg) == 2
            and type(msg.get("content")) is str
            and msg.get("role") in ("user", "assistant")
        ):
            text = msg["content"]
            if "\r" in text:
                text = normalize_newlines(text)
            out.append({"role": msg["role"], "content": [{"type": "text", "text": text}]})
            continue
        w = f"messages[{i}]"
        if not isinstance(msg, _MAPPING):
            raise TypeError(f"{w}: expected a message dict, got {type(msg).__name__}")
        mtype = msg.get("type")
        role = msg.get("role")
        if mtype == "function_call":  # OpenAI Responses item
            block = _tool_call(msg.get("call_id"), msg.get("name"), msg.get("arguments"), w)
            _append(out, "assistant", [block])
            continue
        if mtype == "function_call_output":  # OpenAI Responses item
            out_val = msg.get("output")
            _append(
                out,
                "user",
                [
                    {
                        "type": "tool_result",
                        "id": str(msg.get("call_id", "")),
                        "content": _result_content(out_val, f"{w}.output"),
                        "is_error": False,
                    }
                ],
            )
            continue
        if role in ("system", "developer"):
            raise ValueError(
                f"{w}: a {role!r} message belongs in build(system=...) (frozen) or "
                "build(session=...) (semi-stable), not in the history"
            )
        if role == "tool":  # OpenAI chat tool result
            _append(
                out,
                "user",
                [
                    {
                        "type": "tool_result",
                        "id": str(msg.get("tool_call_id", "")),
                        "content": _result_content(msg.get("content"), f"{w}.content"),
                        "is_error": False,
                    }
                ],
            )
            continue
        if role not in ("user", "assistant"):
            raise ValueError(f"{w}: role must be 'user', 'assistant' or 'tool', got {role!r}")
        blocks = _blocks(msg.get("content"), f"{w}.content")
        for j, call in enumerate(msg.get("tool_calls") or ()):
            fn = call.get("function") if isinstance(call, _MAPPING) else None
            if not isinstance(fn, _MAPPING):
                raise TypeError(
                    f"{w}.tool_calls[{j}]: expected {{'id', 'type': 'function', "
                    "'function': {'name', 'arguments'}}"
                )
            blocks.append(
                _tool_call(
                    call.get("id"), fn.get("name"), fn.get("arguments"), f"{w}.tool_calls[{j}]"
                )
            )
        if msg.get("refusal") and not blocks:
            blocks.append({"type": "text", "text": str(msg["refusal"])})
        entry: dict[str, Any] = {"role": role, "content": blocks}
        if isinstance(msg.get("name"), str):
            entry["name"] = msg["name"]
        out.append(entry)
    return cast("tuple[Message, ...]", tuple(out))


def _append(out: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    """Append blocks, merging consecutive tool results / tool calls into one message."""
    if out and out[-1]["role"] == role and "name" not in out[-1]:
        last = out[-1]["content"]
        kinds = {"tool_result"} if role == "user" else {"tool_call", "text"}
        if (
            last
            and all(b["type"] in kinds for b in last)
            and all(b["type"] in kinds for b in blocks)
        ):
            last.extend(blocks)
            return
    out.append({"role": role, "content": list(blocks)})


def _dynamic_layer(dynamic: Any) -> tuple[ContentBlock, ...]:
    if dynamic is None:
        return ()
    if isinstance(dynamic, _MAPPING) and "type" not in dynamic:
        return ({"type": "text", "text": dumps_sorted(sort_keys_deep(dict(dynamic)))},)
    blocks = [b for b in _blocks(dynamic, "dynamic") if b.get("type") != "text" or b["text"]]
    return cast("tuple[ContentBlock, ...]", tuple(blocks))


# --------------------------------------------------------------------------- volatile scan


def _scan_strings(value: Any, path: str) -> Iterable[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, _MAPPING):
        for k, v in value.items():
            yield from _scan_strings(v, f"{path}.{k}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _scan_strings(v, f"{path}[{i}]")


def _findings(layer: str, strings: Iterable[tuple[str, str]]) -> list[VolatileFinding]:
    out = []
    for path, text in strings:
        for m in find_volatile(text):
            out.append(VolatileFinding(layer, path, m.start, m.kind, m.text))
    return out


def _report(findings: Sequence[VolatileFinding], strict: bool) -> None:
    if not findings:
        return
    if strict:
        lines = [f.message() for f in findings[:5]]
        more = f" (and {len(findings) - 5} more)" if len(findings) > 5 else ""
        exc = VolatilePrefixError("; ".join(lines) + more)
        exc.findings = list(findings)  # type: ignore[attr-defined]
        raise exc
    for f in findings:
        warnings.warn(f.message(), PromptCacheWarning, stacklevel=4)


# --------------------------------------------------------------------------- memo of frozen


@dataclass(frozen=True)
class _Frozen:
    system: tuple[str, ...]
    tools: tuple[Tool, ...]
    documents: tuple[Document, ...]
    prefix_hash: str
    canonical: bytes
    findings: tuple[VolatileFinding, ...]


@dataclass(frozen=True)
class SessionLayer:
    """The processed session layer: normalized ``texts``, ``session_hash`` (64 hex) and
    the volatile ``findings`` in it."""

    texts: tuple[str, ...]
    session_hash: str
    findings: tuple[VolatileFinding, ...]


_MEMO_MAX = 256
_frozen_memo: Memo[Any, _Frozen] = Memo(_MEMO_MAX)
_session_memo: Memo[Any, SessionLayer] = Memo(_MEMO_MAX)


_NO_KEY = object()


def _key(value: Any) -> Any:
    """A hashable memo key for a layer's raw input: the string itself, else its ``marshal``
    bytes (``repr`` for what marshal cannot write). Dict order is part of the key: a reordered
    dict is a memo miss, not an error."""
    if value is None or isinstance(value, str):
        return value
    try:
        return marshal.dumps(value)
    except ValueError:
        pass
    try:
        return (type(value).__name__, repr(value))
    except Exception:  # pragma: no cover - exotic reprs
        return _NO_KEY


def _memo_key_ok(key: Any) -> bool:
    return not (key is _NO_KEY or (isinstance(key, tuple) and _NO_KEY in key))


def _frozen(system: Any, tools: Any, documents: Any, sort_tools: bool) -> _Frozen:
    key = (_key(system), _key(tools), _key(documents), sort_tools)
    if not _memo_key_ok(key):
        return _make_frozen(system, tools, documents, sort_tools)
    return _frozen_memo.get_or_make(key, lambda: _make_frozen(system, tools, documents, sort_tools))


def _make_frozen(system: Any, tools: Any, documents: Any, sort_tools: bool) -> _Frozen:
    sys_t = _text_layer(system, "system", structured_ok=False)
    tools_t = _tools_layer(tools, sort_tools)
    docs_t = _documents_layer(documents)
    canonical = canonical_json(
        {
            "v": _CANONICAL_VERSION,
            "system": list(sys_t),
            "tools": list(tools_t),
            "documents": [{"text": d.text, "title": d.title} for d in docs_t],
        }
    )
    findings = _findings("system", ((f"system[{i}]", t) for i, t in enumerate(sys_t)))
    findings += _findings("tools", _scan_strings(list(tools_t), "tools"))
    findings += _findings(
        "documents",
        (
            s
            for i, d in enumerate(docs_t)
            for s in (
                (f"documents[{i}].text", d.text),
                *(((f"documents[{i}].title", d.title),) if d.title else ()),
            )
        ),
    )
    return _Frozen(sys_t, tools_t, docs_t, sha256_hex(canonical), canonical, tuple(findings))


def session_layer(session: Any) -> SessionLayer:
    """The session layer's normalized texts, hash and volatile findings (memoized); the
    argument and errors are those of ``build(session=...)``."""
    key = _key(session)
    if not _memo_key_ok(key):
        return _make_session(session)
    return _session_memo.get_or_make(key, lambda: _make_session(session))


def _make_session(session: Any) -> SessionLayer:
    texts = _text_layer(session, "session", structured_ok=True)
    findings = _findings("session", ((f"session[{i}]", t) for i, t in enumerate(texts)))
    return SessionLayer(texts, sha256_hex(canonical_json(list(texts))), tuple(findings))


# --------------------------------------------------------------------------- Prompt


class Prompt(PromptLayers):
    """A request assembled in layers; immutable. Create it with :func:`build`.

    The layers and their views are those of :class:`promptcache.prompt.layers.PromptLayers`
    (``system``, ``tools``, ``documents``, ``session``, ``messages``, ``dynamic``,
    ``prefix_hash``, ``session_hash``, ``findings``, ``warnings``); this class adds one
    renderer per provider and :meth:`explain`.
    """

    __slots__ = ()

    # ---- renderers ----------------------------------------------------------------------

    def to_openai(
        self,
        model: str,
        *,
        api: str = "chat",
        cache_key: str | None = None,
        retention: Any = None,
        breakpoints: bool | None = None,
    ) -> dict[str, Any]:
        """Keyword arguments for ``OpenAI().chat.completions.create(**kw)`` (``api="chat"``)
        or ``OpenAI().responses.create(**kw)`` (``api="responses"``). ``retention``: ``None``
        (``"24h"`` where the model accepts it), ``"in_memory"``, ``"24h"`` or ``False`` (omit).

        See :func:`promptcache.providers.openai.render` for the fields and the rules.
        """
        return openai.render(
            self, model, api=api, cache_key=cache_key, retention=retention, breakpoints=breakpoints
        )

    def to_openai_compatible(
        self, model: str, *, cache_salt: str | None = None, api: str = "chat"
    ) -> dict[str, Any]:
        """Keyword arguments for the ``openai`` client pointed at vLLM, SGLang or the local
        engine: plain chat messages, ``extra_body={"cache_salt": ...}`` when given.
        See :func:`promptcache.providers.openai_compatible.render`."""
        return openai_compatible.render(self, model, cache_salt=cache_salt, api=api)

    def to_anthropic(
        self,
        model: str,
        *,
        ttl: str = "5m",
        max_tokens: int = 1024,
        mode: str = "explicit",
        history_ttl: str = "5m",
        previous_message_id: str | None = None,
    ) -> dict[str, Any]:
        """Keyword arguments for ``Anthropic().messages.create(**kw)`` with cache breakpoints
        placed. See :func:`promptcache.providers.anthropic.render`."""
        return anthropic.render(
            self,
            model,
            ttl=ttl,
            max_tokens=max_tokens,
            mode=mode,
            history_ttl=history_ttl,
            previous_message_id=previous_message_id,
        )

    def to_gemini(self, model: str, *, cached_content: str | None = None) -> dict[str, Any]:
        """Keyword arguments for ``genai.Client().models.generate_content(**kw)``.
        See :func:`promptcache.providers.gemini.render`."""
        return gemini.render(self, model, cached_content=cached_content)

    def to_bedrock(self, model: str, *, ttl: str | None = None) -> dict[str, Any]:
        """Keyword arguments for boto3 ``bedrock-runtime`` ``converse(**kw)`` with
        ``cachePoint`` blocks. See :func:`promptcache.providers.bedrock.render`."""
        return bedrock.render(self, model, ttl=ttl)

    def explain(
        self,
        model: str = "claude-sonnet-4-6",
        *,
        provider: str | None = None,
        file: Any = None,
        **render_kwargs: Any,
    ) -> Explanation:
        """Layers with token counts, where breakpoints went and why, what will be cached, and
        every warning, returned as an :class:`promptcache.compose.explain.Explanation` whose
        ``str()`` is the report (``print(prompt.explain(model))``). Prints nothing unless
        ``file`` is given."""
        return explain_prompt(self, model, provider=provider, file=file, **render_kwargs)


def build(
    *,
    system: Any = None,
    tools: Any = None,
    documents: Any = None,
    session: Any = None,
    messages: Any = None,
    dynamic: Any = None,
    strict: bool = False,
    sort_tools: bool = False,
) -> Prompt:
    """Assemble a request in cache-friendly layers (most stable first) and return a
    :class:`Prompt` to render for a provider.

    Args:
        system: frozen instructions: a string, or a list of strings / ``{"type": "text",
            "text": ...}`` blocks (their ``cache_control`` markers are dropped: the renderer
            places its own).
        tools: frozen tool schemas, each in Anthropic form ``{name, description,
            input_schema}``, OpenAI chat form ``{type: "function", function: {...}}`` or OpenAI
            Responses form; other typed tools (server tools) pass through unchanged.
        documents: frozen reference documents: strings or ``{"text", "title"}`` dicts.
        session: semi-stable context (user profile, task): a string, text blocks or a dict
            (rendered as canonical JSON).
        messages: the append-only history, OpenAI chat, OpenAI Responses or Anthropic form.
        dynamic: this request's content (the clock, retrieved snippets, the new question),
            rendered last as a user turn: a string, content blocks or a dict.
        strict: raise :class:`VolatilePrefixError` on a volatile value in a frozen or
            session layer instead of warning with :class:`PromptCacheWarning`.
        sort_tools: sort tools by name (default: the order given, which is kept as is).

    Returns:
        A :class:`Prompt`.

    Raises:
        VolatilePrefixError: under ``strict=True``, naming the layer, path, offset and text.
        TypeError, ValueError: a layer has a shape this function does not accept (the message
            names the layer and index).
    """
    return assemble(
        system=system,
        tools=tools,
        documents=documents,
        session=session,
        history=_messages_layer(messages),
        dynamic=dynamic,
        strict=strict,
        sort_tools=sort_tools,
    )


def normalize_messages(messages: Any) -> tuple[Message, ...]:
    """History messages (OpenAI chat, OpenAI Responses or Anthropic form) in the neutral form
    that ``Prompt.messages`` holds; used by :class:`promptcache.Conversation` to normalize
    each turn once, when it is appended."""
    return _messages_layer(messages)


def assemble(
    *,
    system: Any,
    tools: Any,
    documents: Any,
    session: Any,
    history: tuple[Message, ...],
    dynamic: Any,
    strict: bool,
    sort_tools: bool,
) -> Prompt:
    """:func:`build` for a history already in the neutral form (``history``, as
    :func:`normalize_messages` returns it): :class:`promptcache.Conversation` normalizes each
    turn once, when it is appended, and assembles every request from them. The other
    arguments and the errors are those of :func:`build`."""
    frozen = _frozen(system, tools, documents, bool(sort_tools))
    sess = session_layer(session)
    _report(frozen.findings + sess.findings, strict)
    hist = history
    dyn = _dynamic_layer(dynamic)
    notes = []
    if isinstance(system, (list, tuple)) and any(
        isinstance(b, _MAPPING) and "cache_control" in b for b in system
    ):
        notes.append(
            "cache_control markers in `system` were dropped; the renderer places "
            "breakpoints by its own rule"
        )
    return Prompt(
        system=frozen.system,
        tools=frozen.tools,
        documents=frozen.documents,
        session=sess.texts,
        messages=hist,
        dynamic=dyn,
        prefix_hash=frozen.prefix_hash,
        session_hash=sess.session_hash,
        canonical=frozen.canonical,
        findings=frozen.findings + sess.findings,
        strict=strict,
        notes=notes,
    )
