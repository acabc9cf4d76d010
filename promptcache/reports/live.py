"""The live view's web app: one page that follows the ledger as calls arrive.

``build_app(tracker, extra=None)`` returns a Starlette ASGI app (the ``[proxy]`` extra) with

- ``GET /``: the page (``promptcache/data/live_view.html``: inline CSS, inline script, no
  network beyond this app; it polls ``api/state`` every second, relative to its own URL, so it
  works at ``/`` and under the proxy's ``/_promptcache/``);
- ``GET /api/state``: :meth:`promptcache.reports.live_state.LiveState.snapshot` as JSON;
- ``GET /api/call/{record_id}``: one call's drill-down
  (:func:`promptcache.reports.live_state.call_detail`), 404 ``{"error": ...}`` when unknown.

``promptcache report --serve [--port 8789]`` runs it with uvicorn on 127.0.0.1
(:func:`serve`); the proxy mounts the same app under ``/_promptcache``.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from typing import Any

from promptcache.ledger.tracker import Tracker
from promptcache.reports.live_state import LiveState, call_detail

__all__ = ["build_app", "page_html", "serve", "NEEDS"]

#: The one line printed (exit 2) when the live view's dependencies are missing.
NEEDS = "the live view needs the proxy extra: pip install 'promptcache[proxy]'"


def page_html() -> str:
    """The page's HTML (read from the package data)."""
    return resources.files("promptcache").joinpath("data/live_view.html").read_text("utf-8")


def build_app(tracker: Tracker, extra: Callable[[], dict[str, Any]] | None = None) -> Any:
    """The live view as an ASGI app over ``tracker`` (``extra``: more snapshot fields).
    Raises ``ImportError`` without starlette (:data:`NEEDS` says what to install)."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    state = LiveState(tracker, extra)
    page = page_html()

    async def index(request: Request) -> Response:
        return HTMLResponse(page, headers={"cache-control": "no-store"})

    async def api_state(request: Request) -> Response:
        snap = await run_in_threadpool(state.snapshot)
        return JSONResponse(snap, headers={"cache-control": "no-store"})

    async def api_call(request: Request) -> Response:
        rid = str(request.path_params["record_id"])
        record = await run_in_threadpool(state.record, rid)
        if record is None:
            return JSONResponse({"error": f"no call {rid} in the ledger"}, status_code=404)
        return JSONResponse(call_detail(record), headers={"cache-control": "no-store"})

    return Starlette(
        routes=[
            Route("/", index),
            Route("/api/state", api_state),
            Route("/api/call/{record_id}", api_call),
        ]
    )


def serve(tracker: Tracker, host: str = "127.0.0.1", port: int = 8789) -> None:
    """Serve the live view until interrupted (uvicorn; ``ImportError`` without it)."""
    import uvicorn

    config = uvicorn.Config(
        build_app(tracker), host=host, port=port, log_level="warning", access_log=False
    )
    uvicorn.Server(config).run()
