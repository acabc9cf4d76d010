"""Recording off the request path: the proxy hands each raw exchange to a recorder process.

:class:`RecorderProcess` is the app's :class:`~promptcache.proxy.app.Tap`. ``put()`` -- the
only recording work a request does -- is a length check and a ``SimpleQueue.put`` of the
:class:`~promptcache.proxy.app.Exchange` (references to bytes already read; nothing parsed or
copied). A sender thread batches the queue (every :data:`BATCH_WAIT_S`) and writes each batch,
pickled, into a pipe; one recorder process (``multiprocessing`` spawn) replays the exchanges
through the recorder ``wrap()`` uses and writes the ledger (:func:`recorder_main`,
:mod:`~.recording`). Parsing, the digest chain, attribution and SQLite thus never hold the
proxy's interpreter lock: they run on another core when one is free.

One writer keeps "every call in the ledger once": the recorder is the ledger's only writer,
and it sees the exchanges in the order the proxy finished them. A recorder that falls behind
by :data:`MAX_QUEUED` exchanges or :data:`MAX_QUEUED_BYTES`, or is gone, costs calls their records (counted as
``dropped``, logged once), never the calls themselves. The recorder's counters and its log
lines (already free of request data) come back on a second pipe and are re-emitted on the
proxy's own loggers.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import queue
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from promptcache.proxy.app import Exchange
from promptcache.proxy.recording import LedgerSink, LedgerStats, make_recorder, replay
from promptcache.proxy.upstreams import Upstream

__all__ = ["RecorderProcess", "recorder_main", "MAX_QUEUED", "MAX_QUEUED_BYTES", "BATCH_WAIT_S"]

log = logging.getLogger("promptcache.proxy")

#: Exchanges waiting for the recorder before new ones are dropped (and counted) ...
MAX_QUEUED = 50_000
#: ... and the bytes of their bodies (an agent's request can be hundreds of kB).
MAX_QUEUED_BYTES = 256 << 20
#: Seconds the sender waits after the first exchange of a batch for more to join it (one
#: pipe write and one recorder transaction per batch under load).
BATCH_WAIT_S = 0.002
#: Most exchanges in one batch.
MAX_BATCH = 256
#: The recorder process's niceness increment (Linux CFS weight 110 against the proxy's 1024).
NICE = 10

_STOP: Any = None


class RecorderProcess:
    """The proxy's tap: a recorder process fed through a pipe.

    Args:
        upstream: the proxy's upstream (labels and usage format of the records).
        db: the ledger (a path or ``postgresql://`` URL; None: the default ledger), opened by
            the recorder process on its first write.
        store_prompts: keep request text in the ledger.
        busy_timeout_s: the ledger's busy timeout (a locked ledger fails a write after it).

    Attributes:
        stats: the ledger counters (:class:`~promptcache.proxy.recording.LedgerStats`) as the
            recorder last reported them, plus the calls dropped on this side.
    """

    def __init__(
        self,
        upstream: Upstream,
        db: str | None,
        *,
        store_prompts: bool = False,
        busy_timeout_s: float = 5.0,
    ) -> None:
        self.stats = LedgerStats()
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._bytes = 0  # body bytes of the exchanges in the queue
        self._sent = 0  # exchanges put (and not dropped)
        self._processed = 0  # ... the recorder reported done
        self._lost = 0  # ... that could not be sent (the recorder was gone)
        self._dropped = 0
        self._child_dropped = 0
        self._closing = False
        self._gone = False
        ctx = multiprocessing.get_context("spawn")  # no fork of a threaded server
        rx, self._tx = ctx.Pipe(duplex=False)
        self._reports, tx_reports = ctx.Pipe(duplex=False)
        self.process = ctx.Process(
            target=recorder_main,
            args=(rx, tx_reports, upstream, db, store_prompts, busy_timeout_s),
            name="promptcache-recorder",
            daemon=True,
        )
        self.process.start()
        rx.close()
        tx_reports.close()
        self._sender = threading.Thread(target=self._send_loop, name="promptcache-tap", daemon=True)
        self._receiver = threading.Thread(
            target=self._report_loop, name="promptcache-tap-reports", daemon=True
        )
        self._sender.start()
        self._receiver.start()

    # -- the request path ---------------------------------------------------------------

    def put(self, exchange: Exchange) -> None:
        """Hand ``exchange`` to the recorder; returns at once and never raises."""
        size = _size(exchange)
        if (
            self._gone
            or self._closing
            or self._queue.qsize() >= MAX_QUEUED
            or self._bytes + size > MAX_QUEUED_BYTES
        ):
            self._drop(1)
            return
        with self._lock:
            self._bytes += size
        self._sent += 1
        self._queue.put(exchange)

    # -- threads ------------------------------------------------------------------------

    def _drop(self, n: int) -> None:
        with self._lock:
            first = self._dropped == 0
            self._dropped += n
            self.stats.dropped = self._dropped + self._child_dropped
        if first:
            why = "is gone" if self._gone else "fell behind"
            log.warning("promptcache proxy: the recorder %s; calls are not being recorded", why)

    def _send_loop(self) -> None:
        stop = False
        while not stop:
            batch = [self._queue.get()]
            if batch[0] is not _STOP:
                time.sleep(BATCH_WAIT_S)
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if _STOP in batch:
                stop = True
                batch = [b for b in batch if b is not _STOP]
            if not batch:
                continue
            with self._lock:
                self._bytes -= sum(_size(b) for b in batch)
            try:
                self._tx.send_bytes(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL))
            except (OSError, ValueError):  # the recorder is gone
                self._gone = True
                with self._lock:
                    self._lost += len(batch)
                self._drop(len(batch))
        self._tx.close()

    def _report_loop(self) -> None:
        while True:
            try:
                processed, stats, lines = self._reports.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                self._processed = processed
                self._child_dropped = stats["dropped"]
                self.stats.queued = stats["queued"]
                self.stats.written = stats["written"]
                self.stats.failed = stats["failed"]
                self.stats.last_error = stats["last_error"]
                self.stats.dropped = self._dropped + self._child_dropped
            for name, level, message in lines:
                logging.getLogger(name).log(level, "%s", message)
        self._gone = True  # nothing more will be processed
        if not self._closing:
            log.warning("promptcache proxy: the recorder process exited; calls are not recorded")

    # -- control ------------------------------------------------------------------------

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every exchange put so far is recorded, failed or dropped; False on
        timeout."""
        deadline = time.monotonic() + timeout
        target = self._sent
        while time.monotonic() < deadline:
            with self._lock:
                if self._processed + self._lost >= target or self._gone:
                    return True
            time.sleep(0.005)
        return False

    def close(self, timeout: float = 30.0) -> None:
        """Record what is queued, stop the recorder process and wait for it (killed after
        ``timeout`` seconds)."""
        if self._closing:
            return
        self.flush(timeout)
        self._closing = True
        self._queue.put(_STOP)
        self._sender.join(timeout)
        self.process.join(timeout)
        if self.process.is_alive():
            log.warning("promptcache proxy: the recorder did not stop in %.0f s", timeout)
            self.process.terminate()
            self.process.join(5)
        self._receiver.join(timeout)


def _size(exchange: Exchange) -> int:
    return len(exchange.body) + sum(len(c) for c in exchange.chunks)


class _Lines(logging.Handler):
    """Collects the recorder's log lines (message and traceback) to send to the proxy."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            self.lines.append((record.name, record.levelno, text))
        except Exception:
            pass

    def take(self) -> list[tuple[str, int, str]]:
        """The lines captured since the last call, as ``(logger, level, text)``; clears them."""
        lines, self.lines = self.lines, []
        return lines


def recorder_main(
    exchanges: Connection,
    reports: Connection,
    upstream: Upstream,
    db: str | None,
    store_prompts: bool,
    busy_timeout_s: float,
) -> None:
    """The recorder process: replay each batch of exchanges, write it, report the counters;
    until the proxy closes the pipe (then the last batch is written and the ledger closed).
    Ignores SIGINT: a Ctrl-C stops the proxy, which then closes the pipe. Runs at a lower
    scheduling priority (:data:`NICE`): where cores are scarce, passing calls on goes first."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.nice(NICE)
    except (AttributeError, OSError):  # not on this platform: same priority
        pass
    from promptcache.ledger.tracker import Tracker

    lines = _Lines()
    top = logging.getLogger("promptcache")
    top.addHandler(lines)
    top.setLevel(logging.INFO)
    top.propagate = False
    sink = LedgerSink(
        lambda: Tracker(db, store_prompts=store_prompts, busy_timeout_s=busy_timeout_s),
        store_prompts=store_prompts,
    )
    recorder = make_recorder(upstream, sink)
    processed = 0
    ended = False
    while not ended:
        batch: list[Exchange] = []
        try:
            batch += pickle.loads(exchanges.recv_bytes())
            while len(batch) < MAX_BATCH and exchanges.poll(0):
                batch += pickle.loads(exchanges.recv_bytes())
        except (EOFError, OSError):  # the proxy closed the pipe: write what came, stop
            ended = True
        for ex in batch:
            replay(recorder, upstream, ex)
        if ended:
            sink.close()
        else:
            sink.write()
        processed += len(batch)
        try:
            reports.send((processed, sink.stats.to_dict(), lines.take()))
        except OSError:  # the proxy is gone (killed): nobody to report to; what came is written
            if not ended:
                sink.close()
            return
    reports.close()
