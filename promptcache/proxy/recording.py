"""The ledger side of the proxy: the recorder ``wrap()`` uses, writing off the request path.

:func:`make_recorder` builds the same :class:`promptcache.integrations.clients._Recorder` that
``promptcache.wrap(client)`` attaches to an SDK's HTTP client; the proxy hands it each upstream
exchange (``on_request`` with the httpx request, ``on_response`` which wraps the response
stream so every chunk is seen as it passes). Usage, cost, the digest chain and the miss cause
are therefore computed by one code path for wrapped and proxied traffic.

The recorder's tracker is a :class:`LedgerQueue`: ``record()`` only enqueues (a dict append
and a ``Queue.put_nowait``), and one writer thread opens the ledger, resolves lineages
(:class:`~promptcache.proxy.lineage.LineageIndex`) and writes batches. A ledger that cannot be
opened or written (read-only file system, disk full, locked past its busy timeout) never fails
or delays a call: the batch is logged (one line, the error's type and message; no request
data, no headers) and counted in :class:`LedgerStats`.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from promptcache.integrations.clients import _Recorder
from promptcache.ledger.pricing import Price
from promptcache.ledger.tracker import Tracker
from promptcache.misses.attribution import api_of_request
from promptcache.misses.cause import Observation
from promptcache.misses.digest_chain import APIS, DigestChain
from promptcache.providers.usage_record import Usage
from promptcache.proxy.lineage import LineageIndex
from promptcache.proxy.upstreams import Upstream

__all__ = ["LedgerQueue", "LedgerStats", "make_recorder"]

log = logging.getLogger("promptcache.proxy")

_STOP = object()
#: While the same ledger error repeats, it is logged at most once per this many seconds.
LOG_EVERY_S = 10.0


@dataclass
class LedgerStats:
    """Counters of the proxy's ledger writes (read by the live view and the exit line).

    Attributes:
        queued: calls handed to the ledger.
        written: calls committed to the ledger.
        failed: calls whose write failed (ledger unwritable, locked, damaged).
        dropped: calls not queued because the queue was full (the writer fell behind).
        last_error: the last write error, one line (type and message), or None.
    """

    queued: int = 0
    written: int = 0
    failed: int = 0
    dropped: int = 0
    last_error: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready counters."""
        return {
            "queued": self.queued,
            "written": self.written,
            "failed": self.failed,
            "dropped": self.dropped,
            "last_error": self.last_error,
        }


class LedgerQueue:
    """A Tracker stand-in for the recorder: ``record()`` enqueues, a thread writes.

    Args:
        open_tracker: returns the :class:`~promptcache.ledger.Tracker` to write to; called in
            the writer thread, again after a failure (so a ledger that comes back is used).
        store_prompts: keep request text (``Tracker(store_prompts=True)``); off by default.
        maxsize: calls the queue holds before new ones are dropped (and counted).
        batch: most calls written in one transaction.
    """

    def __init__(
        self,
        open_tracker: Callable[[], Tracker],
        *,
        store_prompts: bool = False,
        maxsize: int = 50_000,
        batch: int = 256,
    ) -> None:
        self.open_tracker = open_tracker
        self.store_prompts = store_prompts
        self.stats = LedgerStats()
        self.lineages = LineageIndex()
        self.batch = batch
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=maxsize)
        self._tracker: Tracker | None = None
        self._last_log = -LOG_EVERY_S
        self._thread = threading.Thread(target=self._run, name="promptcache-ledger", daemon=True)
        self._thread.start()

    # the recorder attributes misses when its tracker has ``attribute`` (a ledger Tracker)
    def attribute(self, *args: Any, **kwargs: Any) -> Any:
        """Not used by the proxy (attribution happens in the writer); present so the
        recorder passes the request body and lineage with each record."""
        raise NotImplementedError("LedgerQueue attributes in its writer thread")

    def record(self, usage: Usage, **fields: Any) -> str:
        """Queue one call; returns its ``record_id`` (the ledger may not have it yet)."""
        rid = fields.setdefault("record_id", os.urandom(16).hex())
        fields.setdefault("ts", time.time())
        try:
            self._queue.put_nowait((usage, fields))
        except queue.Full:
            with self.stats.lock:
                self.stats.dropped += 1
            log.warning("promptcache proxy: ledger queue full, one call not recorded")
            return str(rid)
        with self.stats.lock:
            self.stats.queued += 1
        return str(rid)

    def _attribute(self, tracker: Tracker, usage: Usage, fields: dict[str, Any]) -> None:
        """Resolve the call's lineage and attribute it (``fields["attributed"]``) the way
        :meth:`Tracker.attribute` does, with one difference: a new lineage's predecessor is
        first looked for in memory (the nearest lineage's latest request, another
        conversation with the same head) and only then among the ledger's recent records."""
        request = fields.get("request")
        if not isinstance(request, dict):
            return
        model = fields.get("model") or usage.model
        api = str(fields.get("api") or "")
        lineage, nearest = fields.get("lineage"), None
        if not (isinstance(lineage, str) and lineage.startswith("session:")):
            lineage, nearest = self.lineages.assign_nearest(request, api, model)
        fields["lineage"] = lineage
        ts = float(fields["ts"])

        def fallback(chain: DigestChain) -> tuple[Observation, bool] | None:
            if nearest is not None:
                obs = tracker.attributor.last(nearest)
                if obs is not None:
                    return obs, False
            return tracker.predecessor(chain, model=model, before=ts, lineage=lineage)

        fields["attributed"] = tracker.attributor.attribute(
            request,
            api if api in APIS else api_of_request(request),
            usage,
            ts,
            lineage=lineage,
            rules=fields.get("rules"),
            fallback=fallback,
        )

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            items = [item]
            stop = False
            while len(items) < self.batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    stop = True
                    break
                items.append(more)
            self._write(items)
            if stop:
                return

    def _write(self, items: list[tuple[Usage, dict[str, Any]]]) -> None:
        try:
            if self._tracker is None:
                self._tracker = self.open_tracker()
            for usage, fields in items:
                self._attribute(self._tracker, usage, fields)
            self._tracker.record_many(items)
        except Exception as e:  # the ledger failing never reaches a client
            message = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            with self.stats.lock:
                self.stats.failed += len(items)
                repeat = message == self.stats.last_error
                self.stats.last_error = message
                failed = self.stats.failed
            now = time.monotonic()
            if not repeat or now - self._last_log >= LOG_EVERY_S:  # one line per error kind
                self._last_log = now  # and at most one per LOG_EVERY_S while it lasts
                log.warning(
                    "promptcache proxy: %d call(s) not recorded (%d so far): %s",
                    len(items),
                    failed,
                    message,
                )
            tracker, self._tracker = self._tracker, None
            if tracker is not None:
                try:
                    tracker.close()
                except Exception:
                    pass
            return
        with self.stats.lock:
            self.stats.written += len(items)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every queued call is written or has failed; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.stats.lock:
                s = self.stats
                if s.written + s.failed >= s.queued:
                    return True
            time.sleep(0.01)
        return False

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, stop the writer and close the ledger."""
        self.flush(timeout)
        try:
            self._queue.put(_STOP, timeout=timeout)
        except queue.Full:
            pass
        self._thread.join(timeout)
        if self._tracker is not None:
            self._tracker.close()
            self._tracker = None


def make_recorder(
    upstream: Upstream,
    ledger: LedgerQueue,
    *,
    price: Price | None = None,
    metadata: dict[str, Any] | None = None,
) -> _Recorder:
    """The recorder ``wrap()`` uses, labelled for ``upstream`` and writing to ``ledger``."""
    return _Recorder(
        upstream.sdk,
        upstream.host,
        ledger,
        upstream.provider,
        price,
        (),
        metadata,
    )
