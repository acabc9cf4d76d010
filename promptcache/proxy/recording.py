"""The recorder process's side: replay each proxied exchange through the recorder ``wrap()``
uses, then attribute and write it.

:func:`make_recorder` builds the same :class:`promptcache.integrations.clients._Recorder` that
``promptcache.wrap(client)`` attaches to an SDK's HTTP client; :func:`replay` hands it one raw
exchange (:class:`~promptcache.proxy.app.Exchange`, taken off the proxy's request path by
:mod:`~.tap`) as httpx objects: ``on_request`` with the request, ``on_response`` with a response
whose stream yields the same chunks, the call's times set to those measured on the request
path. Usage, cost, the digest chain and the miss cause are therefore computed by one code path
for wrapped and proxied traffic.

The recorder's tracker is a :class:`LedgerSink`: ``record()`` collects, ``write()`` resolves
lineages (:class:`~promptcache.proxy.lineage.LineageIndex`) and writes the batch in one
transaction. A ledger that cannot be opened or written (read-only file system, disk full,
locked past its busy timeout) never reaches a client (this runs in another process): the
batch is logged (one line, the error's type and message; no request data, no headers) and
counted in :class:`LedgerStats`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from promptcache.integrations.clients import SESSION_HEADER, _Recorder
from promptcache.ledger.pricing import Price
from promptcache.ledger.queries import PREDECESSOR_WINDOW_S
from promptcache.ledger.tracker import Tracker
from promptcache.misses.attribution import api_of_request
from promptcache.misses.cause import Observation
from promptcache.misses.digest_chain import APIS, DigestChain
from promptcache.providers.usage_record import Usage
from promptcache.proxy.app import Exchange
from promptcache.proxy.lineage import LineageIndex
from promptcache.proxy.upstreams import Upstream

__all__ = ["LedgerSink", "LedgerStats", "make_recorder", "replay"]

log = logging.getLogger("promptcache.proxy")

#: While the same ledger error repeats, it is logged at most once per this many seconds.
LOG_EVERY_S = 10.0


@dataclass
class LedgerStats:
    """Counters of the proxy's ledger writes (read by the live view and the exit line).

    Attributes:
        queued: calls handed to the ledger.
        written: calls committed to the ledger.
        failed: calls whose write failed (ledger unwritable, locked, damaged).
        dropped: calls not recorded because the recorder fell behind (its queue was full)
            or was gone.
        last_error: the last write error, one line (type and message), or None.
    """

    queued: int = 0
    written: int = 0
    failed: int = 0
    dropped: int = 0
    last_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready counters."""
        return {
            "queued": self.queued,
            "written": self.written,
            "failed": self.failed,
            "dropped": self.dropped,
            "last_error": self.last_error,
        }


class LedgerSink:
    """A Tracker stand-in for the recorder: ``record()`` collects, ``write()`` writes.

    Args:
        open_tracker: returns the :class:`~promptcache.ledger.Tracker` to write to; called on
            the first write, again after a failure (so a ledger that comes back is used).
        store_prompts: keep request text (``Tracker(store_prompts=True)``); off by default.
    """

    def __init__(self, open_tracker: Callable[[], Tracker], *, store_prompts: bool = False) -> None:
        self.open_tracker = open_tracker
        self.store_prompts = store_prompts
        self.stats = LedgerStats()
        self.lineages = LineageIndex()
        self._pending: list[tuple[Usage, dict[str, Any]]] = []
        self._tracker: Tracker | None = None
        self._seeded = False
        self._last_log = -LOG_EVERY_S

    # the recorder attributes misses when its tracker has ``attribute`` (a ledger Tracker)
    def attribute(self, *args: Any, **kwargs: Any) -> Any:
        """Not used by the proxy (attribution happens in :meth:`write`); present so the
        recorder passes the request body and lineage with each record."""
        raise NotImplementedError("LedgerSink attributes in write()")

    def record(self, usage: Usage, **fields: Any) -> str:
        """Collect one call for the next :meth:`write`; returns its ``record_id``."""
        rid = fields.setdefault("record_id", os.urandom(16).hex())
        fields.setdefault("ts", time.time())
        self._pending.append((usage, fields))
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

    def write(self) -> None:
        """Attribute and write the collected calls in one transaction (or count them failed)."""
        items, self._pending = self._pending, []
        if not items:
            return
        try:
            if self._tracker is None:
                self._tracker = self.open_tracker()
            if not self._seeded:
                self._seeded = True
                seed_lineages(self.lineages, self._tracker)
            for usage, fields in items:
                self._attribute(self._tracker, usage, fields)
            self._tracker.record_many(items)
        except Exception as e:  # the ledger failing never reaches a client
            message = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
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
        self.stats.written += len(items)

    def close(self) -> None:
        """Write what is collected and close the ledger."""
        self.write()
        if self._tracker is not None:
            try:
                self._tracker.close()
            except Exception:
                pass
            self._tracker = None


#: How far back, and over how many of the latest records, a new proxy looks for the
#: lineages already in its ledger (the window the ledger's own predecessor search uses).
SEED_WINDOW_S = PREDECESSOR_WINDOW_S
SEED_RECORDS = 2000


def seed_lineages(index: LineageIndex, tracker: Tracker) -> int:
    """Seed ``index`` with the latest request of each lineage among the ledger's latest
    :data:`SEED_RECORDS` records of the last :data:`SEED_WINDOW_S` seconds (at most
    ``index.max_lineages`` lineages, the most recent; oldest seeded first). Records without
    a stored chain are passed over. Returns the number of lineages seeded."""
    latest: dict[str, Any] = {}
    for rec in tracker.records(since=time.time() - SEED_WINDOW_S, limit=SEED_RECORDS):
        if rec.lineage:  # oldest first: a later record of the lineage replaces it
            latest.pop(rec.lineage, None)
            latest[rec.lineage] = rec
    seeded = 0
    for key, rec in list(latest.items())[-index.max_lineages :]:
        chain = tracker.chain(rec.record_id)
        if chain is not None and index.seed(key, rec.model, chain):
            seeded += 1
    return seeded


class _Replayed(httpx.SyncByteStream):
    """A response body that yields the chunks the proxy passed on, then raises
    :class:`_Cut` when the body did not complete (as the live stream raised)."""

    def __init__(self, chunks: list[bytes], complete: bool) -> None:
        self.chunks, self.complete = chunks, complete

    def __iter__(self) -> Any:
        yield from self.chunks
        if not self.complete:
            raise _Cut


class _Cut(Exception):
    pass


#: Parsed upstream URLs by (base URL, path): a client calls the same few paths.
_URLS: dict[tuple[str, bytes], httpx.URL] = {}


def _url(upstream: Upstream, raw_path: bytes) -> httpx.URL:
    key = (upstream.base_url, raw_path)
    url = _URLS.get(key)
    if url is None:
        if len(_URLS) >= 1024:
            _URLS.clear()
        url = _URLS[key] = httpx.URL(upstream.url_for(raw_path, b""))
    return url


def replay(recorder: _Recorder, upstream: Upstream, ex: Exchange) -> None:
    """Hand one exchange to ``recorder`` as ``wrap()``'s hooks would have seen it live: the
    request (``on_request``), the response (``on_response``), its chunks one by one, then the
    end (complete: ``finish``; cut or abandoned: the stream's ``close``, which keeps what a
    stream showed). The call's start, first output event and end are the times measured on
    the request path; its timestamp is the exchange's end. Raises nothing."""
    try:
        request = httpx.Request(
            ex.method,
            _url(upstream, ex.raw_path),
            headers=[(SESSION_HEADER, ex.session)] if ex.session is not None else None,
            content=ex.body,
        )
        recorder.on_request(request)
        call = recorder.calls.get(request)
        if call is None:  # not a tracked API call
            return
        call.t0 = ex.t0
        call.t_end = ex.t_end
        recorder.clock = lambda: ex.ts
        response = httpx.Response(
            ex.status, headers=ex.headers, stream=_Replayed(ex.chunks, ex.complete), request=request
        )
        recorder.on_response(response)
        stream = response.stream
        timed = False
        try:
            for i, _chunk in enumerate(stream):  # type: ignore[arg-type]
                # the chunk just fed completed the first output event: its arrival time
                if not timed and call.t_first is not None and i < len(ex.times):
                    call.t_first, timed = ex.times[i], True
        except _Cut:
            pass
        finally:
            stream.close()  # type: ignore[union-attr]
    except Exception:  # a call that cannot be replayed is logged, never raised
        log.exception("promptcache proxy: could not record a call")


def make_recorder(
    upstream: Upstream,
    ledger: LedgerSink,
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
