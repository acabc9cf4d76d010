"""Run the proxy: uvicorn on a loopback port, optionally around a child command.

:class:`ProxyServer` builds the app (:class:`~promptcache.proxy.app.ProxyApp` with the
recorder process of :mod:`~promptcache.proxy.tap` and the live view of
:mod:`promptcache.reports.live`) and runs uvicorn in a background thread (``start``/``stop``)
or in the foreground (``serve_forever``). :func:`run_child` runs ``proxy -- CMD ...``: the
command with its base-URL variables pointed at the proxy (:func:`~.upstreams.child_env`), the
proxy stopped when it exits, the command's exit code returned.

uvicorn settings that keep the pass-through exact: no ``Server``/``Date`` headers of its own
(the upstream's pass through), no access log (a request line may carry Gemini's ``key=``), no
limit on a request head below 1 MiB (the providers accept large headers; the proxy must not
answer 431 where the upstream would not: httptools has none, h11's is raised to 1 MiB).
uvicorn's ``auto`` picks httptools and uvloop when installed (the ``[proxy]`` extra installs
them: 0.07 against 0.19 ms of server CPU per request measured with h11, ``bench/proxy.py``),
else h11 and asyncio.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

import uvicorn

from promptcache.ledger.tracker import Tracker
from promptcache.proxy.app import LIVE_PREFIX, ProxyApp
from promptcache.proxy.tap import RecorderProcess
from promptcache.proxy.upstreams import Upstream, child_env

__all__ = ["ProxyServer", "run_child", "free_port"]

log = logging.getLogger("promptcache.proxy")

#: Largest request head (request line + headers) uvicorn's h11 accepts, bytes (httptools,
#: used when installed, has no limit of its own).
MAX_HEAD_BYTES = 1 << 20


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class ProxyServer:
    """The proxy on ``host:port`` in front of ``upstream``, recording to ``db``.

    Recording runs in a process of its own (:class:`~promptcache.proxy.tap.RecorderProcess`,
    started with ``multiprocessing``'s spawn method): a script that builds a ProxyServer at
    import time needs the usual ``if __name__ == "__main__":`` guard, else the recorder cannot
    start -- the proxy then serves all the same and counts its calls as not recorded.

    Args:
        upstream: where requests go.
        db: ledger path or ``postgresql://`` URL (None: the default ledger). Opened by the
            recorder process; a ledger that cannot be opened leaves the proxy serving (calls
            are counted as not recorded).
        host, port: where to listen (port 0: a free port).
        store_prompts: keep request text in the ledger (off by default).
        live: serve the live view at ``/_promptcache``.
        busy_timeout_s: the ledger's busy timeout (a locked ledger fails a write after it).
    """

    def __init__(
        self,
        upstream: Upstream,
        db: str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 8788,
        store_prompts: bool = False,
        live: bool = True,
        busy_timeout_s: float = 5.0,
    ) -> None:
        self.upstream = upstream
        self.host = host
        self.port = port or free_port(host)
        self.db = db
        self.ledger = RecorderProcess(
            upstream, db, store_prompts=store_prompts, busy_timeout_s=busy_timeout_s
        )
        self.app = ProxyApp(upstream, self.ledger)
        if live:
            self.app.live = self._live_app(db, busy_timeout_s)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def _live_app(self, db: str | None, busy_timeout_s: float) -> Any:
        from promptcache.reports.live import build_app

        def counters() -> dict[str, Any]:
            return {**self.app.stats.to_dict(), "ledger": self.ledger.stats.to_dict()}

        try:
            reader = Tracker(db, busy_timeout_s=busy_timeout_s)
        except Exception as e:  # the ledger is unusable: the proxy still serves calls
            log.warning("promptcache proxy: no live view (%s)", type(e).__name__)
            return None
        return build_app(reader, extra=counters)

    @property
    def url(self) -> str:
        """``http://host:port`` of the running proxy."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def live_url(self) -> str:
        """The live view's URL."""
        return self.url + LIVE_PREFIX + "/"

    def _config(self) -> uvicorn.Config:
        return uvicorn.Config(
            self.app,
            host=self.host,
            port=self.port,
            http="auto",
            loop="auto",
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
            lifespan="on",
            access_log=False,
            server_header=False,
            date_header=False,
            log_level="warning",
            timeout_keep_alive=75,
        )

    def start(self, timeout: float = 10.0) -> ProxyServer:
        """Serve in a background thread; returns once the port accepts connections.
        Raises ``RuntimeError`` when the server did not start (port in use)."""
        self._server = uvicorn.Server(self._config())
        # uvicorn installs signal handlers only in the main thread: none here
        self._thread = threading.Thread(target=self._server.run, name="promptcache-proxy")
        self._thread.daemon = True
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the proxy did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop serving, then write what is queued and close the ledger."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self.ledger.close(timeout)

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C or SIGTERM), then flush the ledger.
        SIGTERM ends it as Ctrl-C does, raising :class:`KeyboardInterrupt` once uvicorn has
        shut down (uvicorn re-raises the signal it stopped on; SIGTERM's default action would
        kill the process before the ledger is flushed and its recorder process stopped).
        (The process is the proxy's own: what it allocated to start is frozen out of the
        cyclic garbage collector, whose full passes would otherwise walk it in the middle of
        requests.)"""
        gc.collect()
        gc.freeze()
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, _terminated)
        try:
            uvicorn.Server(self._config()).run()
        finally:
            self.ledger.close()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _terminated(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run_child(server: ProxyServer, command: Sequence[str]) -> int:
    """Run ``command`` with its clients pointed at the running ``server``; returns its exit
    code (127 when it cannot be started: the shell's convention)."""
    env = dict(os.environ)
    env.update(child_env(server.upstream, server.url))
    try:
        proc = subprocess.Popen(list(command), env=env)
    except OSError as e:
        log.error("promptcache proxy: cannot run %s: %s", command[0], e.strerror)
        return 127
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.wait()
        return 130
