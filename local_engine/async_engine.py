"""AsyncEngine: the synchronous :class:`~local_engine.engine.LLMEngine` driven from one
background thread, with per-request asyncio queues for the server.

All engine calls (``add_request``, ``abort_request``, ``step``, metrics snapshots) happen
on the engine thread, so the engine needs no locks. The asyncio side sends commands
through a thread-safe queue and receives each request's :class:`RequestOutput` s through
its own ``asyncio.Queue`` (delivered with ``loop.call_soon_threadsafe``).

Lifecycle: :meth:`start` -> :meth:`generate` (any number, concurrently) ->
:meth:`shutdown` (optionally draining in-flight requests first). A request whose consumer
goes away (client disconnect, cancelled task) is aborted and its KV blocks are freed at the
engine's next loop iteration.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("local_engine.async_engine")

#: seconds the idle engine thread sleeps between checks for new commands
IDLE_WAIT_S = 0.05


class EngineDeadError(RuntimeError):
    """The engine thread stopped after an unexpected error; the server answers 503."""


class EngineStoppedError(RuntimeError):
    """A request arrived after :meth:`AsyncEngine.shutdown` began."""


class RequestAbortedError(RuntimeError):
    """The request was aborted (by :meth:`AsyncEngine.abort` or at shutdown)."""


@dataclass
class _Stream:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue
    finished: bool = False


class AsyncEngine:
    """Drive ``engine`` (an ``LLMEngine``) from a background thread.

    Attributes:
        engine: the wrapped engine (read ``tokenizer``, ``model_name``, ``max_model_len``
            freely; call nothing else on it from other threads).
        error: the exception that killed the engine thread, or None.
    """

    def __init__(self, engine: Any):
        self.engine = engine
        self.error: BaseException | None = None
        self._cmds: queue.SimpleQueue[tuple] = queue.SimpleQueue()
        self._wakeup = threading.Event()
        self._streams: dict[str, _Stream] = {}
        self._streams_lock = threading.Lock()
        self._stop = threading.Event()
        self._accepting = True
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self.steps = 0

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> AsyncEngine:
        """Start the background step-loop thread (idempotent); returns ``self``."""
        if not self._thread.is_alive():
            self._thread.start()
        return self

    @property
    def is_running(self) -> bool:
        return self._thread.is_alive() and self.error is None

    @property
    def num_in_flight(self) -> int:
        with self._streams_lock:
            return len(self._streams)

    async def shutdown(self, drain_timeout: float = 0.0) -> None:
        """Stop accepting requests; wait up to ``drain_timeout`` seconds for in-flight
        ones to finish, abort the rest, then stop the engine thread."""
        self._accepting = False
        deadline = time.monotonic() + max(0.0, drain_timeout)
        while self.num_in_flight and time.monotonic() < deadline and self.is_running:
            await asyncio.sleep(0.05)
        with self._streams_lock:
            left = list(self._streams)
        for rid in left:
            self.abort(rid)
        self._stop.set()
        self._wakeup.set()
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 10.0)

    # ---- requests -------------------------------------------------------------------------
    async def generate(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: Any,
        cache_salt: str | None = None,
    ) -> AsyncIterator[Any]:
        """Queue a request and yield its ``RequestOutput`` after every step that advanced
        it, the last one with ``finished=True``.

        Raises (at the first iteration): the engine's ``RequestTooLongError`` /
        ``EngineError`` for a request it refuses, :class:`EngineDeadError`,
        :class:`EngineStoppedError`. Closing the iterator early aborts the request.
        """
        if not self._accepting:
            raise EngineStoppedError("the server is shutting down")
        if not self.is_running:
            raise EngineDeadError(f"the engine stopped: {self.error!r}")
        loop = asyncio.get_running_loop()
        stream = _Stream(loop, asyncio.Queue())
        with self._streams_lock:
            if request_id in self._streams:
                raise ValueError(f"request id {request_id!r} is already in use")
            self._streams[request_id] = stream
        added: concurrent.futures.Future = concurrent.futures.Future()
        self._cmds.put(("add", request_id, list(prompt_token_ids), params, cache_salt, added))
        self._wakeup.set()
        try:
            await asyncio.wrap_future(added)
            while True:
                item = await stream.queue.get()
                if isinstance(item, BaseException):
                    raise item
                if item.finished:
                    stream.finished = True
                yield item
                if stream.finished:
                    return
        finally:
            with self._streams_lock:
                self._streams.pop(request_id, None)
            if not stream.finished:
                self._cmds.put(("abort", request_id))
                self._wakeup.set()

    def abort(self, request_id: str) -> None:
        """Abort a request (thread-safe, idempotent); its stream ends with an error."""
        with self._streams_lock:
            stream = self._streams.get(request_id)
        self._cmds.put(("abort", request_id))
        self._wakeup.set()
        if stream is not None and not stream.finished:
            stream.loop.call_soon_threadsafe(
                stream.queue.put_nowait, RequestAbortedError(f"request {request_id} was aborted")
            )

    async def call(self, fn: Callable[[Any], Any]) -> Any:
        """Run ``fn(engine)`` on the engine thread between steps and return its result
        (used for metrics snapshots and KV-pool counts)."""
        if not self.is_running:
            raise EngineDeadError(f"the engine stopped: {self.error!r}")
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._cmds.put(("call", fn, fut))
        self._wakeup.set()
        return await asyncio.wrap_future(fut)

    # ---- the engine thread ----------------------------------------------------------------
    def _deliver(self, request_id: str, item: Any) -> None:
        with self._streams_lock:
            stream = self._streams.get(request_id)
        if stream is None:
            return
        try:
            stream.loop.call_soon_threadsafe(stream.queue.put_nowait, item)
        except RuntimeError:  # the event loop is closed
            pass

    def _drain_commands(self) -> None:
        eng = self.engine
        while True:
            try:
                cmd = self._cmds.get_nowait()
            except queue.Empty:
                return
            kind = cmd[0]
            if kind == "add":
                _, rid, ids, params, salt, fut = cmd
                with self._streams_lock:
                    gone = rid not in self._streams
                if gone:  # the client left before we got to it
                    fut.cancel()
                    continue
                try:
                    eng.add_request(rid, ids, params, cache_salt=salt)
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    fut.set_exception(exc)
                else:
                    fut.set_result(None)
            elif kind == "abort":
                eng.abort_request(cmd[1])
            elif kind == "call":
                _, fn, fut = cmd
                try:
                    fut.set_result(fn(eng))
                except BaseException as exc:  # noqa: BLE001
                    fut.set_exception(exc)

    def _run(self) -> None:
        eng = self.engine
        try:
            while not self._stop.is_set():
                self._wakeup.clear()
                self._drain_commands()
                if eng.has_unfinished_requests():
                    outputs = eng.step()
                    self.steps += 1
                    for out in outputs:
                        self._deliver(out.request_id, out)
                else:
                    self._wakeup.wait(IDLE_WAIT_S)
            self._drain_commands()
            close = getattr(eng, "close", None)
            if close is not None:  # the disk tier writes back what is cached
                close()
        except BaseException as exc:  # noqa: BLE001 - reported to every waiting request
            logger.exception("engine loop died")
            self.error = exc
            dead = EngineDeadError(f"the engine stopped: {exc!r}")
            with self._streams_lock:
                rids = list(self._streams)
            for rid in rids:
                self._deliver(rid, dead)
            while True:  # fail anything still queued
                try:
                    cmd = self._cmds.get_nowait()
                except queue.Empty:
                    break
                fut = cmd[-1] if cmd[0] in ("add", "call") else None
                if fut is not None and not fut.done():
                    fut.set_exception(dead)
