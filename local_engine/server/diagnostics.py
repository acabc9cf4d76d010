"""Anthropic cache diagnostics: ``diagnostics.previous_message_id`` -> ``cache_miss_reason``.

As documented (https://platform.claude.com/docs/en/build-with-claude/cache-diagnostics,
2026-11-29): for each request that includes the ``diagnostics`` object a fingerprint
(hashes and token counts only, never prompt text) is stored under the response's ``id``.
A later request naming that id is compared with it and the response's ``diagnostics``
carries the first divergence, in prompt order: ``model_changed``, ``tools_changed``,
``system_changed``, ``messages_changed`` (an earlier message differs instead of entries
only being appended), ``previous_message_not_found``, or ``unavailable`` (model, system
and tools match but another prompt-affecting parameter such as ``tool_choice`` differs).
``diagnostics`` is null when nothing diverged. ``cache_missed_input_tokens`` estimates the
tokens the previous request had after the divergence point.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from .rendering import RenderedPrompt, canonical_json, strip_cache_markers

#: fingerprints kept (oldest dropped first)
MAX_FINGERPRINTS = 10_000


def _h(value: Any) -> str:
    return hashlib.sha256(canonical_json(strip_cache_markers(value)).encode()).hexdigest()


@dataclass(frozen=True)
class Fingerprint:
    model: str
    tools: str
    system: str
    tool_choice: str
    messages: tuple[str, ...]
    prompt_tokens: int
    tools_end: int
    system_end: int
    message_ends: tuple[int, ...]

    @classmethod
    def of(cls, body: dict, rendered: RenderedPrompt) -> Fingerprint:
        """Fingerprint a raw Messages request body and its rendered prompt."""
        system = body.get("system")
        if isinstance(system, str):
            system = [{"type": "text", "text": system}]
        messages = []
        for m in body.get("messages") or []:
            content = m.get("content")
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            messages.append(_h({"role": m.get("role"), "content": content}))
        return cls(
            model=str(body.get("model")),
            tools=_h(body.get("tools") or []),
            system=_h(system or []),
            tool_choice=_h(body.get("tool_choice")),
            messages=tuple(messages),
            prompt_tokens=rendered.num_tokens,
            tools_end=rendered.tools_end,
            system_end=rendered.system_end,
            message_ends=tuple(rendered.message_ends),
        )


def compare(prev: Fingerprint | None, cur: Fingerprint) -> dict | None:
    """The ``cache_miss_reason`` object for ``cur`` against ``prev``, or None."""
    if prev is None:
        return {"type": "previous_message_not_found"}
    if prev.model != cur.model:
        return {"type": "model_changed", "cache_missed_input_tokens": prev.prompt_tokens}
    if prev.tools != cur.tools:
        return {"type": "tools_changed", "cache_missed_input_tokens": prev.prompt_tokens}
    if prev.system != cur.system:
        return {
            "type": "system_changed",
            "cache_missed_input_tokens": prev.prompt_tokens - prev.tools_end,
        }
    for k, h in enumerate(prev.messages):
        if k >= len(cur.messages) or cur.messages[k] != h:
            start = (
                prev.message_ends[k - 1]
                if k > 0 and k - 1 < len(prev.message_ends)
                else prev.system_end
            )
            return {
                "type": "messages_changed",
                "cache_missed_input_tokens": max(0, prev.prompt_tokens - start),
            }
    if prev.tool_choice != cur.tool_choice:
        return {"type": "unavailable"}
    return None


class DiagnosticsStore:
    """Fingerprints by message id, bounded LRU, thread-safe."""

    def __init__(self, capacity: int = MAX_FINGERPRINTS):
        self.capacity = capacity
        self._items: OrderedDict[str, Fingerprint] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, message_id: str, fp: Fingerprint) -> None:
        with self._lock:
            self._items[message_id] = fp
            self._items.move_to_end(message_id)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def get(self, message_id: str) -> Fingerprint | None:
        with self._lock:
            return self._items.get(message_id)

    def diagnose(self, previous_message_id: str | None, fp: Fingerprint) -> dict | None:
        """The response's ``diagnostics`` value: None (no divergence, or first turn) or
        ``{"cache_miss_reason": {...}}``."""
        if previous_message_id is None:
            return None
        reason = compare(self.get(previous_message_id), fp)
        return None if reason is None else {"cache_miss_reason": reason}
