"""Provider module: gemini — renders requests for its official client and parses its usage.

Two sections, owned by different parts of the SDK: request rendering (used by
`promptcache.build`) and usage parsing (used by `promptcache.usage`).
"""

from __future__ import annotations

# --- request rendering ---------------------------------------------------------------
#
# Owned by promptcache.build (SDK-BUILD): ``render(prompt, model, ...)`` turns a
# ``promptcache.build`` Prompt into the keyword arguments of google-genai's
# ``genai.Client().models.generate_content(**kw)``; ``cached_content_config`` and
# ``create_cached_content`` make an explicit cache of the frozen prefix.
import base64 as _base64
import mimetypes as _mimetypes
from typing import TYPE_CHECKING, Any

from promptcache.limits import cache_limits
from promptcache.providers import empty_request

if TYPE_CHECKING:  # pragma: no cover
    from promptcache.build import Prompt


def _tools(prompt: Prompt) -> list[dict[str, Any]]:
    decls = []
    native = []
    for t in prompt.tools:
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


def _part(block: dict[str, Any], names: dict[str, str], where: str) -> dict[str, Any]:
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


def _contents(prompt: Prompt, extra_first: tuple[str, ...] = ()) -> list[dict[str, Any]]:
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


def render(prompt: Prompt, model: str, *, cached_content: str | None = None) -> dict[str, Any]:
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
    prompt: Prompt, model: str, *, ttl: str = "3600s", display_name: str | None = None
) -> dict[str, Any]:
    """Keyword arguments for ``client.caches.create(**kw)`` caching the frozen prefix (system
    texts, documents, tools) of ``prompt``.

    Raises:
        ValueError: the frozen prefix is under Gemini's minimum for ``model``
            (:func:`promptcache.limits.cache_limits`; the count is an estimate unless a
            counter is registered), or there is no frozen content.
    """
    from promptcache.breakpoints import frozen_text_tokens, tool_tokens

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
    client: Any, prompt: Prompt, model: str, *, ttl: str = "3600s", display_name: str | None = None
) -> Any:
    """Create an explicit Gemini cache of ``prompt``'s frozen prefix with ``client``
    (a ``google.genai.Client``) and return the ``CachedContent``; pass its ``.name`` to
    ``Prompt.to_gemini(model, cached_content=...)``. Raises like
    :func:`cached_content_config`."""
    return client.caches.create(
        **cached_content_config(prompt, model, ttl=ttl, display_name=display_name)
    )


# --- usage parsing -------------------------------------------------------------------
#
# Gemini ``usageMetadata`` (ai.google.dev API reference "GenerateContentResponse" >
# UsageMetadata, and "Context caching", checked 2026-11): ``promptTokenCount`` INCLUDES
# ``cachedContentTokenCount`` ("when cached_content is set, this is still the total
# effective prompt size"); implicit and explicit cache hits both land in
# ``cachedContentTokenCount``. ``toolUsePromptTokenCount`` (tool-use prompts) is separate
# and billed as input; ``thoughtsTokenCount`` is billed as output, so output =
# candidates + thoughts. Gemini has no per-request cache write: explicit caches are
# created with ``caches.create`` and billed by storage time (see pricing). The REST API
# uses camelCase, the ``google-genai`` SDK snake_case; both are read. In a stream every
# chunk carries the running ``usageMetadata``; the last one is the total.


def _metadata(data: dict) -> tuple[dict, str | None]:
    from promptcache.usage import UsageError, subpart

    for key in ("usageMetadata", "usage_metadata"):
        meta = subpart(data, key)
        if meta is not None:
            return dict(meta), data.get("modelVersion") or data.get("model_version")
    if any(k in data for k in ("promptTokenCount", "prompt_token_count")):
        return dict(data), None
    raise UsageError(
        "no Gemini usage found: expected a GenerateContentResponse with "
        "usageMetadata / usage_metadata, or the usage metadata itself"
    )


def parse_usage(data: dict, *, provider: str = "gemini"):
    """Normalize a Gemini GenerateContentResponse / usage metadata (dict) to ``Usage``."""
    from promptcache.usage import Usage, check_part, read_count

    meta, model = _metadata(data)
    w = "usageMetadata"
    prompt = read_count(meta, "promptTokenCount", "prompt_token_count", where=w) or 0
    cached = read_count(meta, "cachedContentTokenCount", "cached_content_token_count", where=w) or 0
    tool = read_count(meta, "toolUsePromptTokenCount", "tool_use_prompt_token_count", where=w) or 0
    cand = read_count(meta, "candidatesTokenCount", "candidates_token_count", where=w) or 0
    thoughts = read_count(meta, "thoughtsTokenCount", "thoughts_token_count", where=w)
    check_part(cached, prompt, "cachedContentTokenCount", "promptTokenCount")
    return Usage(
        uncached_input_tokens=prompt - cached + tool,
        cache_read_tokens=cached,
        output_tokens=cand + (thoughts or 0),
        reasoning_tokens=thoughts,
        provider=provider,
        model=model,
    )


def parse_usage_stream(events: list, *, provider: str = "gemini"):
    """Normalize a streamed generateContent: the last chunk with usage metadata wins."""
    from promptcache.usage import UsageError

    for ev in reversed(events):
        if isinstance(ev, dict) and any(
            isinstance(ev.get(k), dict) for k in ("usageMetadata", "usage_metadata")
        ):
            return parse_usage(ev, provider=provider)
    raise UsageError("no chunk in the Gemini stream carries usageMetadata")
