"""``/health``, ``/v1/models``, ``/metrics`` and the test clock."""

from __future__ import annotations

import datetime as _dt

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from .errors import APIError
from .metrics import CONTENT_TYPE
from .state import ServerState

router = APIRouter()


def _state(request: Request) -> ServerState:
    return request.app.state.server


@router.get("/health")
async def health(request: Request):
    """200 ``{"status": "ok", ...}`` while the engine runs; 503 once it died or drains."""
    st = _state(request)
    eng = st.engine
    ok = eng.is_running and getattr(eng, "_accepting", True)
    body = {
        "status": "ok" if ok else "unavailable",
        "model": st.model_name,
        "cache_mode": st.emulator.mode,
        "in_flight": eng.num_in_flight,
    }
    return JSONResponse(body, status_code=200 if ok else 503)


def _anthropic_style(request: Request) -> bool:
    return "anthropic-version" in request.headers


def _model_entry(st: ServerState, anthropic: bool) -> dict:
    if anthropic:
        created = (
            _dt.datetime.fromtimestamp(st.started, _dt.timezone.utc)
            .isoformat()
            .replace("+00:00", "Z")
        )
        return {
            "type": "model",
            "id": st.model_name,
            "display_name": st.model_name,
            "created_at": created,
        }
    return {
        "id": st.model_name,
        "object": "model",
        "created": int(st.started),
        "owned_by": "promptcache",
    }


@router.get("/v1/models")
async def list_models(request: Request):
    """OpenAI's list shape, or Anthropic's when an ``anthropic-version`` header is sent."""
    st = _state(request)
    if _anthropic_style(request):
        e = _model_entry(st, True)
        return JSONResponse(
            {"data": [e], "has_more": False, "first_id": e["id"], "last_id": e["id"]}
        )
    return JSONResponse({"object": "list", "data": [_model_entry(st, False)]})


@router.get("/v1/models/{model_id:path}")
async def get_model(model_id: str, request: Request):
    """``GET /v1/models/{id}``: the served model in OpenAI's shape (Anthropic's with an
    ``anthropic-version`` header); 404 for any other id."""
    st = _state(request)
    if model_id != st.model_name:
        raise APIError(
            404,
            f"The model '{model_id}' does not exist; this server serves '{st.model_name}'.",
            param="model",
            code="model_not_found",
        )
    return JSONResponse(_model_entry(st, _anthropic_style(request)))


@router.get("/metrics")
async def metrics(request: Request):
    """``GET /metrics``: Prometheus text exposition of the server and engine metrics."""
    st = _state(request)
    snapshot = None
    if st.engine.is_running:
        snapshot = await st.engine.call(lambda e: e.metrics)
    return Response(st.metrics.render(snapshot), media_type=CONTENT_TYPE)


@router.post("/v1/promptcache/clock/advance")
async def advance_clock(request: Request):
    """With ``--test-clock``: move the emulation clock forward, body ``{"seconds": s}``;
    returns the new clock reading. 404 otherwise."""
    st = _state(request)
    if st.clock is None:
        raise APIError(404, "The test clock is off; start the server with --test-clock.")
    try:
        body = await request.json()
        seconds = float(body["seconds"])
    except Exception:
        raise APIError(400, 'Send {"seconds": <number >= 0>}.', param="seconds") from None
    if not seconds >= 0:
        raise APIError(400, "seconds must be >= 0", param="seconds")
    return JSONResponse({"now": st.clock.advance(seconds)})
