"""Claude Code transcripts: ``~/.claude/projects/<project>/<session>.jsonl`` into API calls.

The shape read (as documented by the projects that parse these files; checked 2026-12-03:
anthropics/claude-code issue #24348 -- ``assistant`` lines carry ``message.usage`` with
``input_tokens``, ``cache_creation_input_tokens``, ``cache_read_input_tokens``,
``output_tokens``; alicoding/claude-parser ``docs/JSONL-STRUCTURE.md`` -- ``type``,
``sessionId``, ``uuid``/``parentUuid``, ``timestamp``, ``isSidechain``, ``requestId``,
``message.id``/``model``/``usage``; alosec/claude-editor-hook ``memory-bank`` -- subagent
files named ``agent-*.jsonl``)::

    {"type": "assistant", "sessionId": "...", "timestamp": "2025-10-29T07:35:14.293Z",
     "isSidechain": false, "requestId": "req_...", "agentId": "...",
     "message": {"id": "msg_...", "model": "claude-sonnet-4-5-20250929",
                 "usage": {"input_tokens": 3, "cache_creation_input_tokens": 43538,
                           "cache_read_input_tokens": 0, "output_tokens": 2,
                           "cache_creation": {"ephemeral_5m_input_tokens": 43538,
                                              "ephemeral_1h_input_tokens": 0}}, ...}}

Traps handled: Claude Code writes one line per content block of a response, each with the
same ``message.id`` and usage (the output count may grow along them): a call is counted
once, with the largest output count seen. Sidechain lines (``isSidechain: true``: subagents)
are a lineage of their own per agent (``agentId``, else the file). Lines of known non-call
types are passed over silently; an unknown ``type`` is skipped with a warning, as are damaged
lines (:mod:`~.jsonl`). Synthetic assistant messages (model ``<synthetic>``: errors Claude
Code writes itself) are not API calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from promptcache.errors import PromptCacheError
from promptcache.providers.usage import normalize_usage
from promptcache.transcripts.calls import TranscriptCall
from promptcache.transcripts.jsonl import Skipped, read_jsonl
from promptcache.transcripts.timestamps import parse_ts

__all__ = ["read_claude_code", "DEFAULT_DIR", "KNOWN_TYPES"]

DEFAULT_DIR = "~/.claude/projects"

#: Line types Claude Code writes that are not API calls (read over silently).
KNOWN_TYPES = frozenset(
    {
        "user",
        "system",
        "summary",
        "file-history-snapshot",
        "queue-operation",
        "progress",
        "attachment",
        "custom-title",
        "last-prompt",  # Claude Code 2.1.197: the session's last prompt, per turn
        "mode",  # Claude Code 2.1.197: the permission mode in force
    }
)


def read_claude_code(root: Path, skipped: Skipped) -> Iterator[TranscriptCall]:
    """The API calls of every ``*.jsonl`` under ``root`` (or of ``root`` itself, a file),
    file by file in path order. Unreadable files and bad lines go to ``skipped``."""
    files = [root] if root.is_file() else sorted(root.rglob("*.jsonl"))
    for path in files:
        try:
            yield from _file(path, skipped)
        except OSError as e:
            skipped.add(path, 0, f"cannot read: {e.strerror}")


def _file(path: Path, skipped: Skipped) -> Iterator[TranscriptCall]:
    calls: dict[str, TranscriptCall] = {}
    for lineno, obj in read_jsonl(path, skipped):
        kind = obj.get("type")
        if kind != "assistant":
            if kind not in KNOWN_TYPES:
                skipped.add(path, lineno, f"unknown line type {kind!r}")
            continue
        call = _call(path, lineno, obj, skipped)
        if call is None:
            continue
        key = call.key
        prev = calls.get(key)
        if prev is None or call.usage.output_tokens > prev.usage.output_tokens:
            if prev is not None:  # keep the first line's time: when the call answered
                call.ts = min(call.ts, prev.ts)
            calls[key] = call
    yield from calls.values()


def _call(path: Path, lineno: int, obj: dict[str, Any], skipped: Skipped) -> TranscriptCall | None:
    msg = obj.get("message")
    if not isinstance(msg, dict):
        skipped.add(path, lineno, "assistant line without a message object")
        return None
    usage_doc, mid, model = msg.get("usage"), msg.get("id"), msg.get("model")
    if model == "<synthetic>" or not isinstance(usage_doc, dict):
        return None  # Claude Code's own messages (errors, interruptions): no API call
    ts = parse_ts(obj.get("timestamp"))
    if not isinstance(mid, str) or ts is None:
        skipped.add(path, lineno, "assistant line without message.id or timestamp")
        return None
    try:
        usage = normalize_usage("anthropic", usage_doc, model=model)
    except PromptCacheError as e:
        skipped.add(path, lineno, f"unreadable usage: {e}")
        return None
    session = obj.get("sessionId") if isinstance(obj.get("sessionId"), str) else path.stem
    lineage = f"claude-code:{session}"
    if obj.get("isSidechain"):
        agent = obj.get("agentId") if isinstance(obj.get("agentId"), str) else path.stem
        lineage += f":agent:{agent}"
    creation = usage_doc.get("cache_creation")
    ttl_1h = isinstance(creation, dict) and int(creation.get("ephemeral_1h_input_tokens") or 0) > 0
    rid = obj.get("requestId") if isinstance(obj.get("requestId"), str) else ""
    return TranscriptCall(
        key=f"claude-code:{mid}:{rid}",
        ts=ts,
        model=model if isinstance(model, str) else None,
        provider="anthropic",
        api="messages",
        lineage=lineage,
        usage=usage.replace(provider="anthropic", model=model),
        ttl_1h=ttl_1h,
        source=f"{path}:{lineno}",
    )
