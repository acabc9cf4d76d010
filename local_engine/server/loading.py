"""The ASGI app ``promptcache serve`` listens with while the model loads.

The socket is bound and served from the first moment (so no connection waits unanswered
in the kernel's backlog while the weights load): ``GET /health`` answers at once, 503 with
``{"status": "loading", ...}`` until the engine is ready, then the real app's 200; every
other path answers 503 in its provider's error shape meanwhile. The model loads in a worker
thread; when it is ready the real app's lifespan starts and requests go to it. A load that
fails calls ``on_error`` (the CLI prints its one line and exits with its code).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from starlette.responses import JSONResponse

from .errors import error_body, error_headers

logger = logging.getLogger("promptcache.server")


class LoadingApp:
    """Wraps the app ``build()`` returns (called in a worker thread at startup).

    ``build``: loads the engine and returns the FastAPI app (raises on failure);
    ``model``: a label for the loading answers; ``on_ready``: called once the app serves;
    ``on_error``: called with the exception when ``build`` fails."""

    def __init__(
        self,
        build: Callable[[], Any],
        model: str,
        on_ready: Callable[[Any], None] = lambda app: None,
        on_error: Callable[[BaseException], None] = lambda exc: None,
    ):
        self._build = build
        self.model = model
        self.app: Any = None
        self._on_ready = on_ready
        self._on_error = on_error
        self._lifespan: Any = None
        self._task: asyncio.Task | None = None

    async def _load(self) -> None:
        try:
            app = await asyncio.to_thread(self._build)
            ctx = app.router.lifespan_context(app)
            await ctx.__aenter__()
        except BaseException as exc:  # noqa: BLE001 -- reported by on_error
            self._on_error(exc)
            return
        self._lifespan = ctx
        self.app = app
        self._on_ready(app)

    async def _lifespan_events(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._task = asyncio.ensure_future(self._load())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._task is not None and not self._task.done():
                    self._task.cancel()
                    with contextlib.suppress(BaseException):
                        await self._task
                if self._lifespan is not None:
                    with contextlib.suppress(Exception):
                        await self._lifespan.__aexit__(None, None, None)
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            return await self._lifespan_events(receive, send)
        if self.app is not None:
            return await self.app(scope, receive, send)
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path == "/health":
            body = {"status": "loading", "model": self.model}
            response = JSONResponse(body, status_code=503, headers={"Retry-After": "1"})
        else:
            message = f"The model {self.model} is still loading; retry when GET /health is 200."
            headers = {"Retry-After": "1", **(error_headers(path, 503) or {})}
            response = JSONResponse(
                error_body(path, 503, message), status_code=503, headers=headers
            )
        await response(scope, receive, send)
