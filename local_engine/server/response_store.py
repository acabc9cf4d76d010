"""The bounded in-memory store behind ``store``, ``previous_response_id`` and ``GET`` /
``DELETE /v1/responses/{id}``.

OpenAI keeps stored responses for 30 days (https://platform.openai.com/docs/api-reference/
responses/create, ``store``, read 2026-12-03); a local test server keeps the latest
``max_entries`` instead (least recently used dropped first), so memory stays bounded.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class StoredResponse:
    """A stored response: its JSON ``body`` (what ``GET`` returns) and ``conversation``, the
    Chat-shaped messages a follow-up with ``previous_response_id`` continues (its input, then
    its output, without ``instructions``: those are not carried over, as OpenAI documents)."""

    body: dict
    conversation: list[dict]


class ResponseStore:
    """Thread-safe LRU map of response id -> :class:`StoredResponse` (``max_entries`` >= 1)."""

    def __init__(self, max_entries: int = 1024):
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, rid: str, item: StoredResponse) -> None:
        with self._lock:
            self._items[rid] = item
            self._items.move_to_end(rid)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def get(self, rid: str) -> StoredResponse | None:
        with self._lock:
            item = self._items.get(rid)
            if item is not None:
                self._items.move_to_end(rid)
            return item

    def delete(self, rid: str) -> bool:
        with self._lock:
            return self._items.pop(rid, None) is not None

    def __len__(self) -> int:
        return len(self._items)
