"""One bounded memo for the SDK's caches whose key is not the function's arguments.

``functools.lru_cache`` covers a pure function of hashable arguments (and the SDK uses it
there: ``limits.cache_limits``, ``pricing.price_for``, ``ledger``'s day strings). The caches
here are keyed by something *derived* from the inputs -- a content hash of a canonical text
(``tokens.count_tokens_memo``), the ``marshal`` bytes of a raw layer (``build``), the
identity of an object that is not hashable (a :class:`~promptcache.ledger.pricing.Price`, one
history message) -- so they share this class instead of each keeping its own dict and its
own eviction rule.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Generic, TypeVar

__all__ = ["Memo", "IdentityMemo"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
O = TypeVar("O")  # noqa: E741


class Memo(Mapping[K, V], Generic[K, V]):
    """A least-recently-used map of at most ``maxsize`` entries, safe to share between
    threads (a lock guards every read and write; ``make`` runs outside it, so two threads
    may both compute a missing value, and the later one is kept).

    Read-only :class:`~collections.abc.Mapping` views (``len``, ``in``, iteration) do not
    count as uses.

    Raises:
        ValueError: ``maxsize`` < 1.
    """

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.maxsize = maxsize
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._data))

    def __len__(self) -> int:
        return len(self._data)

    def lookup(self, key: K) -> V | None:
        """The value for ``key`` (marked most recently used), or None (so a None value is
        never remembered)."""
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def store(self, key: K, value: V) -> V:
        """Keep ``value`` under ``key``, dropping the least recently used entry when full;
        returns ``value``."""
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            if len(self._data) > self.maxsize:
                self._data.popitem(last=False)
        return value

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        """The value for ``key``, computed by ``make()`` and stored on a miss."""
        hit = self.lookup(key)
        return hit if hit is not None else self.store(key, make())

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


class IdentityMemo(Generic[O, V]):
    """A :class:`Memo` keyed by an object's identity, for objects that are not hashable (or
    costly to hash). Each entry keeps a reference to its object, so its ``id`` cannot be
    reused by another object while the entry lives."""

    def __init__(self, maxsize: int) -> None:
        self._memo: Memo[int, tuple[O, V]] = Memo(maxsize)

    def get_or_make(self, obj: O, make: Callable[[], V]) -> V:
        """The value for ``obj``, computed by ``make()`` and stored on a miss."""
        hit = self._memo.lookup(id(obj))
        if hit is not None and hit[0] is obj:
            return hit[1]
        value = make()
        self._memo.store(id(obj), (obj, value))
        return value

    def clear(self) -> None:
        self._memo.clear()
