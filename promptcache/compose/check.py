"""``promptcache.check``: validate a request that was built elsewhere (by an app, a framework
or a proxy) against the provider's prompt-cache rules, and find where two consecutive
requests of one conversation stop sharing a prefix (drift).

Findings carry a JSON path (``$.messages[3].content[0].cache_control``) and, for text, a
character offset. Codes:

=========================== ======== =====================================================
code                        severity what
=========================== ======== =====================================================
``too-many-breakpoints``    error    more than the provider's limit (4) of breakpoints; the
                                     first one over the limit in tools -> system ->
                                     messages order is named
``ttl-order``               error    a longer-lived breakpoint (``1h``) after a shorter one
``below-minimum``           warning  a breakpoint whose prefix is under the model's minimum
                                     cacheable length (it caches nothing)
``segment-below-minimum``   warning  Bedrock: a checkpoint less than the minimum after the
                                     previous one
``volatile-in-prefix``      warning  a timestamp, date, UUID or id ahead of the last
                                     breakpoint (or, without markers, in tools / system)
``non-canonical-json``      warning  tool-call inputs or tool schemas whose keys are not
                                     sorted or whose separators are not canonical
``no-breakpoints``          info     an Anthropic/Bedrock request with no cache marker
``prefix-drift``            info     (with ``previous=``) the first differing path/offset
=========================== ======== =====================================================

Token counts behind ``below-minimum`` are estimates for non-OpenAI models
(:mod:`promptcache.prompt.tokens`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from promptcache.limits import (
    ANTHROPIC_TTLS,
    OPENAI_BREAKPOINT_TTLS,
    OPENAI_MAX_WRITTEN_BREAKPOINTS,
    CacheLimits,
    cache_limits,
)
from promptcache.prompt.breakpoints import TTL_ORDER, text_tokens
from promptcache.prompt.canonical import dumps_sorted
from promptcache.prompt.volatile import find_volatile

__all__ = ["Finding", "check", "diff_requests", "Drift", "PROVIDERS", "infer_provider"]

PROVIDERS = ("anthropic", "openai", "openai_compatible", "bedrock", "gemini")

# top-level fields only one provider's request body has (from each provider's API reference:
# Anthropic Messages, OpenAI Chat Completions / Responses, Gemini generateContent, Bedrock
# Converse; read 2026-12-03)
_ONLY = (
    ("bedrock", ("modelId", "toolConfig", "inferenceConfig")),
    ("gemini", ("contents", "systemInstruction", "generationConfig")),
    ("openai", ("prompt_cache_key", "input", "instructions", "previous_response_id")),
    # anthropic_version: Anthropic's Messages body as sent through Bedrock InvokeModel or
    # Vertex AI, checked under Anthropic's rules
    ("anthropic", ("system", "cache_control", "anthropic_version")),
)
_MODEL_PREFIXES = (
    ("anthropic", ("claude",)),
    ("openai", ("gpt", "o1", "o3", "o4", "chatgpt", "codex")),
    ("gemini", ("gemini",)),
)


def _model_name(payload: dict[str, Any]) -> str:
    return str(payload.get("model") or "").lower().rsplit("/", 1)[-1]


def infer_provider(payload: dict[str, Any]) -> str:
    """The provider whose API ``payload`` (one request body, a dict) was written for.

    Read from fields only one provider's body has (``modelId`` -> Bedrock Converse,
    ``contents`` -> Gemini, ``input``/``instructions``/``prompt_cache_key`` -> OpenAI, a
    top-level ``system``, ``cache_control`` or ``anthropic_version`` -> Anthropic), then the
    messages (a ``cachePoint`` -> Bedrock, a ``cache_control`` marker -> Anthropic, a
    ``system``/``developer`` role or ``tool_calls`` -> OpenAI), then the model name's family.

    Raises:
        ValueError: nothing in the body tells (pass ``provider=`` explicitly).
    """
    for provider, fields in _ONLY:
        if any(f in payload for f in fields):
            return provider
    messages = payload.get("messages")
    if isinstance(messages, list):
        text = json.dumps(messages)
        if "cachePoint" in text:
            return "bedrock"
        if "cache_control" in text:
            return "anthropic"
        if any(
            isinstance(m, dict) and m.get("role") in ("system", "developer") for m in messages
        ) and not _model_name(payload).startswith("claude"):
            # a Claude model's system role is Anthropic's mid-conversation system message
            # (https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages,
            # read 2026-12-03)
            return "openai"
        if any(isinstance(m, dict) and "tool_calls" in m for m in messages):
            return "openai"
    model = _model_name(payload)
    for provider, prefixes in _MODEL_PREFIXES:
        if model.startswith(prefixes):
            return provider
    raise ValueError(
        f"cannot tell which provider this request is for; pass provider= one of {list(PROVIDERS)}"
    )


@dataclass(frozen=True)
class Finding:
    """One problem: ``code`` (see the module table), ``severity`` (``"error"``,
    ``"warning"``, ``"info"``), the JSON ``path`` it concerns, a readable ``message`` and,
    for text findings, the character ``offset`` in the string at ``path``."""

    code: str
    severity: str
    path: str
    message: str
    offset: int | None = None

    def __str__(self) -> str:
        at = f" (offset {self.offset})" if self.offset is not None else ""
        return f"{self.severity}: {self.code} at {self.path}{at}: {self.message}"


@dataclass(frozen=True)
class Drift:
    """Where a request stops sharing its prefix with the previous one: the JSON ``path`` of
    the first differing value, the character ``offset`` in it (0 for a structural change),
    the prefix ``char_offset`` (characters of prefix content before the difference), and
    short excerpts of both sides."""

    path: str
    offset: int
    char_offset: int
    before: str
    after: str


@dataclass
class _PayloadBlock:
    path: str
    text: str
    marker: dict[str, Any] | None
    marker_path: str | None
    field: str


def _loads(payload: Any) -> Any:
    if isinstance(payload, (bytes, bytearray)):
        payload = payload.decode("utf-8")
    if isinstance(payload, str):
        try:
            return json.loads(payload)
        except ValueError as exc:
            raise ValueError(f"payload is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise TypeError(
            f"payload must be a JSON object (dict, str or bytes), got {type(payload).__name__}"
        )
    return payload


def _without(d: Any, *keys: str) -> Any:
    if isinstance(d, dict):
        return {k: v for k, v in d.items() if k not in keys}
    return d


def _text_of(value: Any) -> str:
    if isinstance(value, str):
        return value
    return dumps_sorted(_without(value, "cache_control", "prompt_cache_breakpoint", "cachePoint"))


# ---- walking a payload in cache order ---------------------------------------------------


def _anthropic_blocks(p: dict[str, Any]) -> Iterator[_PayloadBlock]:
    for i, tool in enumerate(p.get("tools") or []):
        yield _PayloadBlock(
            f"$.tools[{i}]",
            _text_of(tool),
            (tool or {}).get("cache_control"),
            f"$.tools[{i}].cache_control",
            "tools",
        )
    system = p.get("system")
    if isinstance(system, str):
        yield _PayloadBlock("$.system", system, None, None, "system")
    elif isinstance(system, list):
        for j, b in enumerate(system):
            text = b.get("text", "") if isinstance(b, dict) else str(b)
            yield _PayloadBlock(
                f"$.system[{j}].text" if isinstance(b, dict) else f"$.system[{j}]",
                text,
                b.get("cache_control") if isinstance(b, dict) else None,
                f"$.system[{j}].cache_control",
                "system",
            )
    for m, msg in enumerate(p.get("messages") or []):
        yield from _anthropic_message_blocks(msg, m)


def _anthropic_message_blocks(msg: Any, m: int) -> Iterator[_PayloadBlock]:
    """One message's blocks. A message-level ``cache_control`` (Anthropic's
    mid-conversation ``system`` messages have one, "same semantics as the top-level
    system": https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages,
    read 2026-12-03) marks its last block unless that block has its own."""
    content = msg.get("content") if isinstance(msg, dict) else None
    own = msg.get("cache_control") if isinstance(msg, dict) else None
    own_path = f"$.messages[{m}].cache_control"
    if isinstance(content, str):
        yield _PayloadBlock(
            f"$.messages[{m}].content", content, own, own_path if own else None, "messages"
        )
        return
    if not isinstance(content, list):
        return
    blocks = []
    for b, block in enumerate(content):
        if not isinstance(block, dict):
            continue
        path = f"$.messages[{m}].content[{b}]"
        text = block["text"] if isinstance(block.get("text"), str) else _text_of(block)
        blocks.append(
            _PayloadBlock(
                path + (".text" if isinstance(block.get("text"), str) else ""),
                text,
                block.get("cache_control"),
                path + ".cache_control",
                "messages",
            )
        )
    if own and blocks and blocks[-1].marker is None:
        last = blocks[-1]
        blocks[-1] = _PayloadBlock(last.path, last.text, own, own_path, last.field)
    yield from blocks


def _bedrock_blocks(p: dict[str, Any]) -> Iterator[_PayloadBlock]:
    def run(items: list[Any], base: str, field: str) -> Iterator[_PayloadBlock]:
        pending: _PayloadBlock | None = None
        for i, item in enumerate(items):
            if isinstance(item, dict) and "cachePoint" in item:
                if pending is not None:
                    pending.marker = item["cachePoint"]
                    pending.marker_path = f"{base}[{i}].cachePoint"
                else:  # a cache point with nothing before it in this list
                    yield _PayloadBlock(
                        f"{base}[{i}]", "", item["cachePoint"], f"{base}[{i}].cachePoint", field
                    )
                continue
            if pending is not None:
                yield pending
            text = (
                item["text"]
                if isinstance(item, dict) and isinstance(item.get("text"), str)
                else _text_of(item)
            )
            pending = _PayloadBlock(f"{base}[{i}]", text, None, None, field)
        if pending is not None:
            yield pending

    tools = (p.get("toolConfig") or {}).get("tools") or []
    yield from run(tools, "$.toolConfig.tools", "tools")
    yield from run(p.get("system") or [], "$.system", "system")
    for m, msg in enumerate(p.get("messages") or []):
        yield from run((msg or {}).get("content") or [], f"$.messages[{m}].content", "messages")


def _openai_blocks(p: dict[str, Any]) -> Iterator[_PayloadBlock]:
    for i, tool in enumerate(p.get("tools") or []):
        yield _PayloadBlock(f"$.tools[{i}]", _text_of(tool), None, None, "tools")
    if isinstance(p.get("instructions"), str):
        yield _PayloadBlock("$.instructions", p["instructions"], None, None, "system")
    key = "messages" if "messages" in p else "input"
    items = p.get(key)
    if isinstance(items, str):
        yield _PayloadBlock(f"$.{key}", items, None, None, "messages")
        return
    for m, msg in enumerate(items or []):
        if not isinstance(msg, dict):
            continue
        field = "system" if msg.get("role") in ("system", "developer") else "messages"
        content = msg.get("content")
        if isinstance(content, str):
            yield _PayloadBlock(f"$.{key}[{m}].content", content, None, None, field)
        elif isinstance(content, list):
            for b, part in enumerate(content):
                if not isinstance(part, dict):
                    continue
                path = f"$.{key}[{m}].content[{b}]"
                text = part["text"] if isinstance(part.get("text"), str) else _text_of(part)
                yield _PayloadBlock(
                    path + (".text" if isinstance(part.get("text"), str) else ""),
                    text,
                    part.get("prompt_cache_breakpoint"),
                    path + ".prompt_cache_breakpoint",
                    field,
                )
        for c, call in enumerate(msg.get("tool_calls") or []):
            yield _PayloadBlock(f"$.{key}[{m}].tool_calls[{c}]", _text_of(call), None, None, field)
        for k in ("arguments", "output"):
            if isinstance(msg.get(k), str):
                yield _PayloadBlock(f"$.{key}[{m}].{k}", msg[k], None, None, field)


def _gemini_blocks(p: dict[str, Any]) -> Iterator[_PayloadBlock]:
    config = p.get("config") or p.get("generation_config") or {}
    si = config.get("system_instruction") or p.get("system_instruction")
    base = (
        "$.config.system_instruction"
        if config.get("system_instruction")
        else "$.system_instruction"
    )
    if isinstance(si, str):
        yield _PayloadBlock(base, si, None, None, "system")
    elif isinstance(si, dict):
        for j, part in enumerate(si.get("parts") or []):
            yield _PayloadBlock(
                f"{base}.parts[{j}].text", (part or {}).get("text", ""), None, None, "system"
            )
    for i, tool in enumerate(config.get("tools") or []):
        yield _PayloadBlock(f"$.config.tools[{i}]", _text_of(tool), None, None, "tools")
    for m, c in enumerate(p.get("contents") or []):
        for j, part in enumerate((c or {}).get("parts") or []):
            text = part["text"] if isinstance(part.get("text"), str) else _text_of(part)
            yield _PayloadBlock(f"$.contents[{m}].parts[{j}]", text, None, None, "messages")


_WALKERS = {
    "anthropic": _anthropic_blocks,
    "bedrock": _bedrock_blocks,
    "openai": _openai_blocks,
    "openai_compatible": _openai_blocks,
    "gemini": _gemini_blocks,
}


def _ttl(provider: str, marker: dict[str, Any]) -> str:
    ttl = marker.get("ttl") if isinstance(marker, dict) else None
    if ttl is None:
        # the provider's default TTL: OpenAI breakpoints 30m, Anthropic/Bedrock 5m
        return (
            OPENAI_BREAKPOINT_TTLS[0]
            if provider in ("openai", "openai_compatible")
            else ANTHROPIC_TTLS[0]
        )
    return str(ttl)


# ---- checks -------------------------------------------------------------------------------


def _canonical_findings(p: dict[str, Any], provider: str) -> Iterator[Finding]:
    def unsorted_path(value: Any, path: str) -> str | None:
        if isinstance(value, dict):
            keys = list(value)
            if keys != sorted(keys):
                return path
            for k, v in value.items():
                found = unsorted_path(v, f"{path}.{k}")
                if found:
                    return found
        elif isinstance(value, list):
            for i, v in enumerate(value):
                found = unsorted_path(v, f"{path}[{i}]")
                if found:
                    return found
        return None

    def args_string(s: str, path: str) -> Iterator[Finding]:
        try:
            parsed = json.loads(s)
        except ValueError:
            return
        if s != dumps_sorted(parsed):
            yield Finding(
                "non-canonical-json",
                "warning",
                path,
                "tool-call arguments are not canonical JSON (keys sorted, separators "
                "',' ':'); if they are re-serialized per request the prefix changes: "
                f"use {dumps_sorted(parsed)[:60]!r}",
            )

    if provider in ("anthropic",):
        for m, msg in enumerate(p.get("messages") or []):
            for b, block in enumerate(
                (msg or {}).get("content") or []
                if isinstance((msg or {}).get("content"), list)
                else []
            ):
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    bad = unsorted_path(block.get("input"), f"$.messages[{m}].content[{b}].input")
                    if bad:
                        yield Finding(
                            "non-canonical-json",
                            "warning",
                            bad,
                            "tool_use input keys are not sorted: build them with sorted "
                            "keys so the history serializes identically every time",
                        )
        for i, tool in enumerate(p.get("tools") or []):
            bad = unsorted_path(
                _without(tool, "cache_control").get("input_schema")
                if isinstance(tool, dict)
                else None,
                f"$.tools[{i}].input_schema",
            )
            if bad:
                yield Finding(
                    "non-canonical-json",
                    "warning",
                    bad,
                    "tool schema keys are not sorted: if the schema is rebuilt per "
                    "request in another order the whole cache misses",
                )
    elif provider in ("openai", "openai_compatible"):
        key = "messages" if "messages" in p else "input"
        for m, msg in enumerate(p.get(key) or [] if isinstance(p.get(key), list) else []):
            if not isinstance(msg, dict):
                continue
            for c, call in enumerate(msg.get("tool_calls") or []):
                args = ((call or {}).get("function") or {}).get("arguments")
                if isinstance(args, str):
                    yield from args_string(args, f"$.{key}[{m}].tool_calls[{c}].function.arguments")
            if msg.get("type") == "function_call" and isinstance(msg.get("arguments"), str):
                yield from args_string(msg["arguments"], f"$.{key}[{m}].arguments")
        for i, tool in enumerate(p.get("tools") or []):
            schema = (
                ((tool or {}).get("function") or {}).get("parameters")
                if isinstance(tool, dict) and "function" in tool
                else (tool or {}).get("parameters")
            )
            bad = unsorted_path(schema, f"$.tools[{i}].parameters")
            if bad:
                yield Finding(
                    "non-canonical-json",
                    "warning",
                    bad,
                    "tool schema keys are not sorted: if the schema is rebuilt per "
                    "request in another order the whole cache misses",
                )


def check(
    payload: dict[str, Any] | str | bytes,
    provider: str | None = None,
    *,
    model: str | None = None,
    previous: Any = None,
) -> list[Finding]:
    """Check one request body against ``provider``'s prompt-cache rules.

    Args:
        payload: the request as sent: a dict (the keyword arguments or the JSON body) or the
            JSON text. ``model`` defaults to ``payload["model"]`` (``modelId`` for Bedrock).
        provider: ``"anthropic"``, ``"openai"``, ``"openai_compatible"``, ``"bedrock"`` or
            ``"gemini"``; None (the default) reads it from the body (:func:`infer_provider`).
        previous: the previous request of the same conversation; adds a ``prefix-drift``
            finding naming the first differing path and offset (see :func:`diff_requests`),
            and turns ``non-canonical-json`` warnings whose value has the same bytes in
            ``previous`` into ``info`` (unsorted but unchanged keys do not bust the cache).

    Returns:
        Findings, grouped by check (limits, TTL order, minimums, volatile values, JSON
        canonical form, markers, drift).

    Raises:
        ValueError: an unknown provider, a body whose provider cannot be told (with
            ``provider=None``), or a payload that is not JSON.
        TypeError: a payload that is not a JSON object.
    """
    p = _loads(payload)
    if provider is None:
        provider = infer_provider(p)
    if provider not in _WALKERS:
        raise ValueError(f"unknown provider {provider!r}; expected one of {list(PROVIDERS)}")
    model = model or p.get("model") or p.get("modelId") or ""
    blocks = list(_WALKERS[provider](p))
    markers = [b for b in blocks if b.marker is not None]
    automatic = provider == "anthropic" and p.get("cache_control") is not None
    rules = _rules_for(provider, str(model))
    findings: list[Finding] = []
    findings += _breakpoint_count(markers, rules)
    findings += _ttl_order(provider, markers)
    findings += _minimums(blocks, rules, str(model))
    findings += _volatile(blocks, markers, automatic)
    canonical = list(_canonical_findings(p, provider))
    if previous is not None:
        canonical = _against_previous(canonical, _loads(previous), p)
    findings.extend(canonical)
    if provider in ("anthropic", "bedrock") and not markers and not automatic:
        findings.append(
            Finding(
                "no-breakpoints",
                "info",
                "$",
                "no cache marker: this request reads and writes no prompt cache",
            )
        )
    if previous is not None:
        findings += _drift(previous, p, provider)
    return findings


def _rules_for(provider: str, model: str) -> CacheLimits:
    """The cache rules ``check`` holds a request to: OpenAI's for OpenAI models (also
    through an OpenAI-compatible endpoint), the local rules for other compatible servers."""
    if provider == "bedrock":
        table = "bedrock"
    elif provider in ("openai", "openai_compatible") and model.lower().startswith(
        ("gpt", "o1", "o3", "o4", "chatgpt")
    ):
        table = "openai"
    elif provider == "openai_compatible":
        table = "local"
    else:
        table = provider
    return cache_limits(model, table)


def _breakpoint_count(markers: list[Any], rules: CacheLimits) -> list[Finding]:
    # models that take no explicit markers (OpenAI before GPT-5.6, local) are held to the
    # GPT-5.6 limit when a request carries markers anyway
    limit = rules.max_breakpoints or OPENAI_MAX_WRITTEN_BREAKPOINTS
    if len(markers) <= limit:
        return []
    over = markers[limit]
    return [
        Finding(
            "too-many-breakpoints",
            "error",
            over.marker_path or over.path,
            f"{len(markers)} cache breakpoints; at most {limit} are allowed "
            f"(counted in tools -> system -> messages order, this is number "
            f"{limit + 1})",
        )
    ]


def _ttl_order(provider: str, markers: list[Any]) -> list[Finding]:
    """No breakpoint may outlive an earlier one; unknown TTLs are errors too."""
    findings = []
    shortest: tuple[int, str] | None = None
    for b in markers:
        t = _ttl(provider, b.marker)
        rank = TTL_ORDER.get(t)
        if rank is None:
            findings.append(
                Finding("ttl-order", "error", b.marker_path or b.path, f"unknown cache TTL {t!r}")
            )
            continue
        if shortest is not None and rank > shortest[0]:
            findings.append(
                Finding(
                    "ttl-order",
                    "error",
                    b.marker_path or b.path,
                    f"a {t} breakpoint after a {shortest[1]} one: longer-lived "
                    "breakpoints must come first (tools -> system -> messages)",
                )
            )
        if shortest is None or rank < shortest[0]:
            shortest = (rank, t)
    return findings


def _minimums(blocks: list[Any], rules: CacheLimits, model: str) -> list[Finding]:
    """Breakpoints whose prefix (or, on Bedrock, whose segment) is under the minimum
    cacheable length."""
    findings = []
    cum = prev_cum = 0
    for b in blocks:
        cum += text_tokens(b.text, model or None) if b.text else 0
        if b.marker is None:
            continue
        if rules.min_tokens and cum < rules.min_tokens:
            findings.append(
                Finding(
                    "below-minimum",
                    "warning",
                    b.marker_path or b.path,
                    f"the prefix up to this breakpoint is about {cum} tokens, under "
                    f"the minimum of {rules.min_tokens} for {model or 'this model'}"
                    " -- it caches nothing",
                )
            )
        elif rules.min_per_segment and cum - prev_cum < rules.min_tokens:
            findings.append(
                Finding(
                    "segment-below-minimum",
                    "warning",
                    b.marker_path or b.path,
                    f"only about {cum - prev_cum} tokens since the previous "
                    f"checkpoint; Bedrock needs {rules.min_tokens} per checkpoint",
                )
            )
        prev_cum = cum
    return findings


def _volatile(blocks: list[Any], markers: list[Any], automatic: bool) -> list[Finding]:
    """Volatile values ahead of the cached prefix's end (the last marker; without
    markers, the tools and system)."""
    if markers and not automatic:
        last = max(i for i, b in enumerate(blocks) if b.marker is not None)
        region = blocks[: last + 1]
    else:
        region = [b for b in blocks if b.field in ("tools", "system")]
    return [
        Finding(
            "volatile-in-prefix",
            "warning",
            b.path,
            f"{m.kind} {m.text!r} in the cached prefix changes it on every "
            "request; move it after the last breakpoint (the dynamic part)",
            offset=m.start,
        )
        for b in region
        for m in find_volatile(b.text)
    ]


def _drift(previous: Any, p: dict[str, Any], provider: str) -> list[Finding]:
    drift = diff_requests(previous, p, provider)
    if drift is None:
        return []
    return [
        Finding(
            "prefix-drift",
            "info",
            drift.path,
            f"the prefix differs from the previous request here "
            f"(after {drift.char_offset} shared characters): "
            f"{drift.before!r} -> {drift.after!r}",
            offset=drift.offset,
        )
    ]


def _at(payload: Any, path: str) -> tuple[bool, Any]:
    """(found, value) at a JSON path such as ``$.tools[0].input_schema.properties``."""
    from promptcache.misses.digest_chain import parse_path

    try:
        comps = parse_path(path)
    except ValueError:
        return False, None
    node = payload
    for c in comps:
        if isinstance(c, int) and isinstance(node, list) and 0 <= c < len(node):
            node = node[c]
        elif isinstance(c, str) and isinstance(node, dict) and c in node:
            node = node[c]
        else:
            return False, None
    return True, node


def _against_previous(found: list[Finding], previous: Any, current: Any) -> list[Finding]:
    """Unsorted keys busy the cache only when the bytes change between requests: a
    ``non-canonical-json`` value identical (same keys in the same order) in the previous
    request becomes an ``info``; one that changed stays a warning and says so."""
    out = []
    for f in found:
        ok_prev, before = _at(previous, f.path)
        ok_cur, after = _at(current, f.path)
        if ok_prev and ok_cur:
            same = json.dumps(before, ensure_ascii=False) == json.dumps(after, ensure_ascii=False)
            if same:
                f = Finding(
                    f.code,
                    "info",
                    f.path,
                    "keys are not sorted, but the bytes are the same as in the previous "
                    "request, so the cache is not affected; sort them if this value is ever "
                    "rebuilt per request",
                    f.offset,
                )
            else:
                f = Finding(
                    f.code,
                    f.severity,
                    f.path,
                    f.message + " -- and it changed since the previous request",
                    f.offset,
                )
        out.append(f)
    return out


# ---- drift between two requests -------------------------------------------------------------


def _prefix_leaves(p: dict[str, Any], provider: str) -> list[tuple[str, str]]:
    model = p.get("model") if "model" in p else p.get("modelId")
    leaves = [("$.model" if "model" in p else "$.modelId", str(model))]
    for b in _WALKERS[provider](p):
        leaves.append((b.path, b.text))
    return leaves


def diff_requests(previous: Any, current: Any, provider: str | None = None) -> Drift | None:
    """The first place where ``current`` stops sharing ``previous``'s prefix, walking both in
    the provider's cache order (model, tools, system, messages) and ignoring cache markers.
    Returns ``None`` when ``current`` only appends to ``previous`` (a clean continuation).
    ``provider`` None reads it from ``current`` (:func:`infer_provider`).

    Raises:
        ValueError: an unknown provider, one that cannot be told, or a payload that is not
            JSON.
    """
    prev, cur = _loads(previous), _loads(current)
    if provider is None:
        provider = infer_provider(cur)
    if provider not in _WALKERS:
        raise ValueError(f"unknown provider {provider!r}; expected one of {list(PROVIDERS)}")
    a = _prefix_leaves(prev, provider)
    b = _prefix_leaves(cur, provider)
    chars = 0
    for (pa, ta), (pb, tb) in zip(a, b):
        if pa != pb:
            return Drift(pb, 0, chars, f"{pa}", f"{pb}")
        if ta != tb:
            off = 0
            n = min(len(ta), len(tb))
            while off < n and ta[off] == tb[off]:
                off += 1
            return Drift(
                pb,
                off,
                chars + off,
                ta[max(0, off - 10) : off + 30],
                tb[max(0, off - 10) : off + 30],
            )
        chars += len(ta)
    if len(b) < len(a):
        pa, ta = a[len(b)]
        return Drift(pa, 0, chars, ta[:40], "")
    return None
