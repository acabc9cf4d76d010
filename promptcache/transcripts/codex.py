"""Codex CLI rollouts: ``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`` into API calls.

The shape read (as documented by the projects that parse these files; checked 2026-12-03:
ryoppippi/ccusage ``apps/codex/CLAUDE.md`` and ``apps/codex/src/data-loader.ts``;
zjsxply/coding-agent-kit ``docs/codex.md``)::

    {"timestamp": "...", "type": "session_meta", "payload": {"id": "<uuid>", ...}}
    {"timestamp": "...", "type": "turn_context", "payload": {"model": "gpt-5-codex", ...}}
    {"timestamp": "...", "type": "event_msg",
     "payload": {"type": "token_count",
                 "info": {"total_token_usage": {"input_tokens": 1200, "cached_input_tokens": 200,
                                                "output_tokens": 500,
                                                "reasoning_output_tokens": 0,
                                                "total_tokens": 1700},
                          "last_token_usage": {...same fields, this call only...}}}}

``input_tokens`` includes ``cached_input_tokens`` (OpenAI's convention). One ``token_count``
event per API call; ``last_token_usage`` is that call, and when it is missing the call is
the difference of two cumulative ``total_token_usage``. Codex repeats a ``token_count`` with
unchanged totals (rate-limit updates, ``info: null``): those are not calls. A call's model is
the latest ``turn_context`` model (unknown before one).
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

__all__ = ["read_codex", "DEFAULT_DIR"]

DEFAULT_DIR = "~/.codex/sessions"
_FIELDS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_output_tokens")
#: Line types read over silently. Codex 0.171.0 also writes ``world_state`` (the session's
#: settings) and, before each call's ``token_count`` event, a ``token_usage_record`` with the
#: same usage and the ``response_id``: the call is counted once, from ``token_count``.
_KNOWN = frozenset(
    {
        "session_meta",
        "turn_context",
        "event_msg",
        "response_item",
        "compacted",
        "world_state",
        "token_usage_record",
    }
)


def read_codex(root: Path, skipped: Skipped) -> Iterator[TranscriptCall]:
    """The API calls of every ``*.jsonl`` under ``root`` (or of ``root``, a file)."""
    files = [root] if root.is_file() else sorted(root.rglob("*.jsonl"))
    for path in files:
        try:
            yield from _file(path, skipped)
        except OSError as e:
            skipped.add(path, 0, f"cannot read: {e.strerror}")


def _counts(doc: Any) -> dict[str, int] | None:
    if not isinstance(doc, dict):
        return None
    try:
        return {k: int(doc.get(k) or 0) for k in _FIELDS}
    except (TypeError, ValueError):
        return None


def _file(path: Path, skipped: Skipped) -> Iterator[TranscriptCall]:
    session, model, provider = path.stem, None, "openai"
    prev_total: dict[str, int] | None = None
    for lineno, obj in read_jsonl(path, skipped):
        kind, payload = obj.get("type"), obj.get("payload")
        if kind not in _KNOWN:
            skipped.add(path, lineno, f"unknown line type {kind!r}")
            continue
        if not isinstance(payload, dict):
            continue
        if kind == "session_meta":
            session = str(payload.get("id") or session)
            provider = str(payload.get("model_provider") or provider)
        elif kind == "turn_context" and isinstance(payload.get("model"), str):
            model = payload["model"]
        elif kind == "event_msg" and payload.get("type") == "token_count":
            info = payload.get("info")
            if not isinstance(info, dict):
                continue
            total, last = (
                _counts(info.get("total_token_usage")),
                _counts(info.get("last_token_usage")),
            )
            if total is not None and total == prev_total:
                continue  # the same totals again: not a new call
            if last is None and total is not None:
                base = prev_total or dict.fromkeys(_FIELDS, 0)
                last = {k: max(0, total[k] - base[k]) for k in _FIELDS}
            if total is not None:
                prev_total = total
            ts = parse_ts(obj.get("timestamp"))
            if last is None or ts is None:
                skipped.add(path, lineno, "token_count without usage or timestamp")
                continue
            call = _call(path, lineno, session, model, provider, ts, last, total)
            if call is not None:
                yield call
            else:
                skipped.add(path, lineno, "unreadable token counts")


def _call(
    path: Path,
    lineno: int,
    session: str,
    model: str | None,
    provider: str,
    ts: float,
    last: dict[str, int],
    total: dict[str, int] | None,
) -> TranscriptCall | None:
    doc = {
        "input_tokens": last["input_tokens"],
        "input_tokens_details": {"cached_tokens": last["cached_input_tokens"]},
        "output_tokens": last["output_tokens"],
        "output_tokens_details": {"reasoning_tokens": last["reasoning_output_tokens"]},
        "total_tokens": last["input_tokens"] + last["output_tokens"],
    }
    try:
        usage = normalize_usage("openai", doc, model=model)
    except PromptCacheError:
        return None
    mark = f"{total['input_tokens']}.{total['output_tokens']}" if total is not None else str(lineno)
    return TranscriptCall(
        key=f"codex:{session}:{mark}",
        ts=ts,
        model=model,
        provider=provider,
        api="responses",
        lineage=f"codex:{session}",
        usage=usage.replace(provider=provider, model=model),
        source=f"{path}:{lineno}",
    )
