"""Gemini explicit caches (``cachedContents``): create, get, list, patch (TTL only), delete,
expiring on the emulation clock.

Rules (https://ai.google.dev/gemini-api/docs/caching and https://ai.google.dev/api/caching,
read 2026-12-03): a cached content holds ``contents``, ``systemInstruction``, ``tools`` and
``toolConfig`` for one ``model``; it must hold at least the model's minimum input tokens
(:func:`~.emulation_rules.gemini_min_tokens`); ``ttl`` (``"300s"``) or ``expireTime`` sets
its lifetime, 1 hour by default; only ``ttl`` / ``expireTime`` may be updated; once expired
it is gone (404). Names are ``cachedContents/<id>``.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from promptcache.limits import GEMINI_DEFAULT_TTL_SECONDS

from .errors import APIError

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")


def parse_ttl(ttl: str) -> float:
    """Seconds of a protobuf ``Duration`` string (``"300s"``, ``"1.5s"``). Raises
    :class:`APIError` 400 otherwise."""
    m = _DURATION.match(ttl.strip())
    if not m:
        raise APIError(400, f"ttl: invalid duration {ttl!r}; expected seconds like '300s'")
    return float(m.group(1))


def rfc3339(unix: float) -> str:
    """``2026-12-03T08:00:00.000000Z`` of a Unix time."""
    return datetime.fromtimestamp(unix, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str) -> float:
    """Unix time of an RFC 3339 timestamp. Raises :class:`APIError` 400 when malformed."""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise APIError(400, f"expireTime: invalid timestamp {text!r}") from None


@dataclass
class CachedContent:
    """One explicit cache. ``fields``: the prompt fields as sent (camelCase); ``tokens``:
    its token count; ``expires_at``: on the emulation clock (seconds)."""

    name: str
    model: str
    display_name: str | None
    fields: dict
    tokens: int
    created: float  # Unix time
    updated: float
    expires_at: float


class CachedContentStore:
    """The server's explicit caches; ``clock``: the emulation clock (seconds)."""

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self._items: dict[str, CachedContent] = {}
        self._lock = threading.Lock()

    def _lifetime(self, ttl: str | None, expire_time: str | None) -> float:
        """Seconds from now: ``ttl``, else until ``expireTime``, else the default hour."""
        if ttl is not None and expire_time is not None:
            raise APIError(400, "Set either ttl or expireTime, not both.")
        if ttl is not None:
            return parse_ttl(ttl)
        if expire_time is not None:
            return parse_rfc3339(expire_time) - time.time()
        return GEMINI_DEFAULT_TTL_SECONDS

    def create(
        self,
        model: str,
        fields: dict,
        tokens: int,
        *,
        ttl: str | None,
        expire_time: str | None,
        display_name: str | None,
    ) -> CachedContent:
        life = self._lifetime(ttl, expire_time)
        if life <= 0:
            raise APIError(400, "The cached content would expire in the past: raise ttl.")
        now = time.time()
        item = CachedContent(
            "cachedContents/" + secrets.token_hex(8),
            model,
            display_name,
            fields,
            tokens,
            now,
            now,
            self.clock() + life,
        )
        with self._lock:
            self._items[item.name] = item
        return item

    def get(self, name: str) -> CachedContent:
        """The live cache ``name`` (``cachedContents/<id>`` or ``<id>``). Raises
        :class:`APIError` 404 when unknown, deleted or expired."""
        if not name.startswith("cachedContents/"):
            name = "cachedContents/" + name
        with self._lock:
            item = self._items.get(name)
            if item is not None and item.expires_at <= self.clock():
                del self._items[name]
                item = None
        if item is None:
            raise APIError(404, f"CachedContent not found (or permission denied): {name}")
        return item

    def list(self) -> list[CachedContent]:
        with self._lock:
            names = list(self._items)
        out = []
        for n in names:
            try:
                out.append(self.get(n))
            except APIError:
                continue
        return out

    def update(self, name: str, ttl: str | None, expire_time: str | None) -> CachedContent:
        item = self.get(name)
        life = self._lifetime(ttl, expire_time)
        item.expires_at = self.clock() + life
        item.updated = time.time()
        return item

    def delete(self, name: str) -> None:
        item = self.get(name)
        with self._lock:
            self._items.pop(item.name, None)

    def body(self, item: CachedContent) -> dict:
        """The ``CachedContent`` resource as the API returns it (without the contents)."""
        left = item.expires_at - self.clock()
        out = {
            "name": item.name,
            "model": "models/" + item.model,
            "createTime": rfc3339(item.created),
            "updateTime": rfc3339(item.updated),
            "expireTime": rfc3339(time.time() + left),
            "usageMetadata": {"totalTokenCount": item.tokens},
        }
        if item.display_name:
            out["displayName"] = item.display_name
        return out
