"""Request rendering for Gemini: a :class:`promptcache.prompt.layers.PromptLayers` -> the keyword
arguments of the official client's call. Usage parsing is in :mod:`promptcache.providers.gemini_usage`.
"""

from __future__ import annotations

import base64 as _base64
import mimetypes as _mimetypes
from collections.abc import Mapping
from typing import Any

from promptcache.limits import cache_limits
from promptcache.prompt.breakpoints import frozen_text_tokens, tool_tokens
from promptcache.prompt.layers import PromptLayers
from promptcache.providers import empty_request


def _tools(prompt: PromptLayers) -> list[dict[str, Any]]:
    decls = []
    native = []
    tools: tuple[Mapping[str, Any], ...] = prompt.tools
    for t in tools:
        if "native" in t:
            native.append(dict(t["native"]))
            continue
        d: dict[str, Any] = {"name": t["name"], "parameters_json_schema": t["input_schema"]}
        if "description" in t:
            d["description"] = t["description"]
        decls.append(d)
    out: list[dict[str, Any]] = [{"function_declarations": decls}] if decls else []
    return out + native


def _system_instruction(texts: tuple[str, ...]) -> dict[str, Any] | None:
    if not texts:
        return None
    return {"parts": [{"text": t} for t in texts], "role": "user"}


def _part(block: Mapping[str, Any], names: dict[str, str], where: str) -> dict[str, Any]:
    t = block["type"]
    if t == "text":
        return {"text": block["text"]}
    if t == "image":
        if "url" in block:
            mime = _mimetypes.guess_type(block["url"])[0] or "image/jpeg"
            return {"file_data": {"file_uri": block["url"], "mime_type": mime}}
        return {
            "inline_data": {
                "data": _base64.b64decode(block["data"]),
                "mime_type": block["media_type"],
            }
        }
    if t == "tool_call":
        if "arguments_raw" in block:
            raise ValueError(
                f"{where}: tool call {block['name']!r} has arguments that are not "
                "JSON; Gemini needs an object as function_call args"
            )
        call: dict[str, Any] = {"args": block["arguments"], "name": block["name"]}
        if block.get("id"):
            call["id"] = block["id"]
        return {"function_call": call}
    if t == "tool_result":
        name = names.get(block["id"])
        if name is None:
            raise ValueError(
                f"{where}: tool result {block['id']!r} answers no earlier tool call "
                "(Gemini needs the function name)"
            )
        text = "\n\n".join(
            b.get("text", "") for b in block.get("content", ()) if b["type"] == "text"
        )
        resp: dict[str, Any] = {
            "name": name,
            "response": {"error": text} if block.get("is_error") else {"output": text},
        }
        if block["id"]:
            resp["id"] = block["id"]
        return {"function_response": resp}
    raise ValueError(
        f"{where}: a {block.get('block', {}).get('type', t)!r} block has no Gemini form"
    )


def _contents(prompt: PromptLayers, extra_first: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    if extra_first:
        out.append({"parts": [{"text": t} for t in extra_first], "role": "user"})
    for i, msg in enumerate(prompt.messages):
        for b in msg["content"]:
            if b["type"] == "tool_call":
                names[b["id"]] = b["name"]
        parts = [
            _part(b, names, f"messages[{i}].content[{j}]") for j, b in enumerate(msg["content"])
        ]
        out.append({"parts": parts, "role": "model" if msg["role"] == "assistant" else "user"})
    if prompt.dynamic:
        out.append(
            {
                "parts": [_part(b, names, f"dynamic[{j}]") for j, b in enumerate(prompt.dynamic)],
                "role": "user",
            }
        )
    if not out:
        raise empty_request("Gemini generateContent", "at least one content turn")
    return out


def render(
    prompt: PromptLayers, model: str, *, cached_content: str | None = None
) -> dict[str, Any]:
    """Keyword arguments for ``genai.Client().models.generate_content(**kw)``.

    Implicit caching (the default): ``config.system_instruction`` holds the frozen texts
    (system, then documents) and the session texts, ``config.tools`` the function
    declarations (``parameters_json_schema``: the JSON Schema as built), ``contents`` the
    history (``assistant`` -> ``model``) then ``dynamic``: the stable part comes first, as
    Gemini's implicit cache needs.

    With ``cached_content`` (the name returned by :func:`create_cached_content`), the frozen
    system instruction and tools live in the cache, so they are left out of the request (Gemini
    rejects them next to a cache); the session texts then open ``contents`` as a user turn.

    Raises:
        EmptyRequestError: (a ``ValueError``) no history and no ``dynamic`` (nor, with
            ``cached_content``, a session layer): no content to send.
        ValueError: content with no Gemini form, a tool result without its call.
    """
    config: dict[str, Any] = {}
    if cached_content:
        config["cached_content"] = cached_content
        contents = _contents(prompt, extra_first=prompt.session)
    else:
        si = _system_instruction(prompt.frozen_texts() + prompt.session)
        if si:
            config["system_instruction"] = si
        tools = _tools(prompt)
        if tools:
            config["tools"] = tools
        contents = _contents(prompt)
    kw: dict[str, Any] = {"model": model, "contents": contents}
    if config:
        kw["config"] = config
    return kw


def cached_content_config(
    prompt: PromptLayers, model: str, *, ttl: str = "3600s", display_name: str | None = None
) -> dict[str, Any]:
    """Keyword arguments for ``client.caches.create(**kw)`` caching the frozen prefix (system
    texts, documents, tools) of ``prompt``.

    Raises:
        ValueError: the frozen prefix is under Gemini's minimum for ``model``
            (:func:`promptcache.limits.cache_limits`; the count is an estimate unless a
            counter is registered), or there is no frozen content.
    """
    rules = cache_limits(model, "gemini")
    if not prompt.frozen_texts() and not prompt.tools:
        raise ValueError("no frozen content to cache (system, documents and tools are empty)")
    tokens = sum(frozen_text_tokens(prompt, model)) + sum(tool_tokens(prompt, model))
    if tokens < rules.min_tokens:
        raise ValueError(
            f"the frozen prefix is about {tokens} tokens, under Gemini's minimum of "
            f"{rules.min_tokens} for {model} ({rules.source}); rely on implicit "
            "caching or add content"
        )
    config: dict[str, Any] = {
        "display_name": display_name or f"pc-{prompt.prefix_hash[:16]}",
        "ttl": ttl,
    }
    si = _system_instruction(prompt.frozen_texts())
    if si:
        config["system_instruction"] = si
    tools = _tools(prompt)
    if tools:
        config["tools"] = tools
    return {"model": model, "config": config}


def create_cached_content(
    client: Any,
    prompt: PromptLayers,
    model: str,
    *,
    ttl: str = "3600s",
    display_name: str | None = None,
) -> Any:
    """Create an explicit Gemini cache of ``prompt``'s frozen prefix with ``client``
    (a ``google.genai.Client``) and return the ``CachedContent``; pass its ``.name`` to
    ``PromptLayers.to_gemini(model, cached_content=...)``. Raises like
    :func:`cached_content_config`."""
    return client.caches.create(
        **cached_content_config(prompt, model, ttl=ttl, display_name=display_name)
    )
