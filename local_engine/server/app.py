"""The FastAPI application: routes, errors in each provider's shape, and one ASGI
middleware for request ids, authentication, the body limit, metrics and the per-request
log line (no prompt text unless ``log_prompts``)."""

from __future__ import annotations

import contextlib
import hmac
import logging
import secrets
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse

from . import openapi
from .emulation import CACHE_NOTE_HEADER, cache_mode_note
from .errors import APIError, error_body, error_headers, error_response, field_path, is_bedrock_path
from .routes_admin import router as admin_router
from .routes_anthropic import router as anthropic_router
from .routes_bedrock import router as bedrock_router
from .routes_gemini import router as gemini_router
from .routes_openai import router as openai_router
from .routes_responses import router as responses_router
from .state import ServerConfig, ServerState

logger = logging.getLogger("promptcache.server")

#: paths that answer without an API key
PUBLIC_PATHS = {"/health"}

#: the OpenAPI document and its pages (public too while they are served, as in vLLM)
DOCS_PATHS = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"}


def _endpoint(path: str) -> str:
    for known in (
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages/count_tokens",
        "/v1/messages",
        "/v1/models",
        "/health",
        "/metrics",
    ):
        if path == known or path.startswith(known + "/"):
            return known
    return "other"


def _auth_failure(path: str, headers: dict[str, str], api_key: str) -> str | None:
    """None when the request carries ``api_key`` (``Authorization: Bearer``, ``x-api-key``,
    Gemini's ``x-goog-api-key``; on Bedrock paths any SigV4 ``Authorization``, accepted and
    not checked), else the 401 message."""
    given = headers.get("x-api-key") or headers.get("x-goog-api-key")
    auth = headers.get("authorization", "")
    if not given and auth.lower().startswith("bearer "):
        given = auth[7:].strip()
    if is_bedrock_path(path) and auth.startswith("AWS4-HMAC-SHA256 "):
        return None
    if given and hmac.compare_digest(given.encode(), api_key.encode()):
        return None
    if given:
        return "Incorrect API key provided."
    return "Missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'."


class ServerMiddleware:
    """Pure ASGI (so streaming responses pass through untouched)."""

    def __init__(self, app, state: ServerState, public_paths: frozenset[str] = frozenset()):
        self.app = app
        self.st = state
        self.public_paths = PUBLIC_PATHS | public_paths

    async def _reject(
        self,
        scope,
        receive,
        send,
        status: int,
        message: str,
        code: str | None = None,
        headers: dict | None = None,
    ) -> None:
        body = error_body(
            scope["path"],
            status,
            message,
            code=code,
            request_id=scope.get("state", {}).get("request_id"),
        )
        headers = {**(headers or {}), **(error_headers(scope["path"], status) or {})}
        await JSONResponse(body, status_code=status, headers=headers)(scope, receive, send)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        st = self.st
        cfg: ServerConfig = st.config
        path = scope["path"]
        state = scope.setdefault("state", {})
        rid = "req_" + secrets.token_hex(12)
        state["request_id"] = rid
        state["arrival"] = time.monotonic()
        state["log"] = {}
        status_holder = {"status": 500}
        headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
        }

        note = cache_mode_note(
            path, getattr(st.emulator, "mode", "automatic"), headers.get("x-promptcache-cache-mode")
        )

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
                message.setdefault("headers", [])
                extra = [(b"x-request-id", rid.encode())]
                if note is not None:
                    extra.append((CACHE_NOTE_HEADER.encode(), note.encode("latin-1")))
                    if not getattr(st, "cache_note_logged", False):
                        st.cache_note_logged = True
                        logger.warning(
                            "%s (said once; every such response has %s)", note, CACHE_NOTE_HEADER
                        )
                message["headers"] = list(message["headers"]) + extra
            await send(message)

        try:
            if cfg.api_key and path not in self.public_paths:
                msg = _auth_failure(path, headers, cfg.api_key)
                if msg is not None:
                    status_holder["status"] = 401
                    return await self._reject(
                        scope, receive, send_wrapper, 401, msg, code="invalid_api_key"
                    )
            length = headers.get("content-length")
            if length is not None:
                try:
                    too_big = int(length) > cfg.max_body_bytes
                except ValueError:
                    too_big = False
                if too_big:
                    status_holder["status"] = 413
                    return await self._reject(
                        scope,
                        receive,
                        send_wrapper,
                        413,
                        f"Request body is {int(length)} bytes; the limit is {cfg.max_body_bytes} bytes.",
                        headers={"connection": "close"},
                    )
            seen = 0

            async def receive_wrapper():
                nonlocal seen
                message = await receive()
                if message["type"] == "http.request":
                    seen += len(message.get("body", b""))
                    if seen > cfg.max_body_bytes:
                        raise APIError(
                            413, f"Request body exceeds the limit of {cfg.max_body_bytes} bytes."
                        )
                return message

            await self.app(scope, receive_wrapper, send_wrapper)
        finally:
            duration = time.monotonic() - state["arrival"]
            status = status_holder["status"]
            endpoint = _endpoint(path)
            with contextlib.suppress(Exception):
                st.metrics.requests.labels(endpoint, str(status)).inc()
                if endpoint not in ("/metrics", "/health"):
                    st.metrics.duration.observe(duration)
            if endpoint not in ("/metrics", "/health") or status >= 400:
                info = state.get("log") or {}
                fields = " ".join(f"{k}={v}" for k, v in info.items())
                logger.info(
                    "%s %s %s %d %.1fms %s",
                    rid,
                    scope.get("method", ""),
                    path,
                    status,
                    duration * 1000,
                    fields,
                )


def create_app(
    engine: Any, config: ServerConfig | None = None, *, enable_docs: bool = True
) -> FastAPI:
    """The app for an :class:`~local_engine.async_engine.AsyncEngine` (started here and
    shut down with the app's lifespan, draining for ``config.drain_timeout`` seconds).

    With ``enable_docs`` (the default) the app serves its OpenAPI document at
    ``/openapi.json`` (the routes with their request models) and the Swagger UI and ReDoc
    pages at ``/docs`` and ``/redoc``, without an API key; ``promptcache serve
    --disable-docs`` turns all three off (404)."""
    config = config or ServerConfig()
    state = ServerState.build(engine, config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        engine.start()
        yield
        await engine.shutdown(drain_timeout=config.drain_timeout)

    app = FastAPI(
        title="promptcache local engine",
        description="OpenAI- and Anthropic-compatible APIs over the promptcache local engine, "
        "with emulated provider cache usage.",
        lifespan=lifespan,
        docs_url="/docs" if enable_docs else None,
        redoc_url="/redoc" if enable_docs else None,
        openapi_url="/openapi.json" if enable_docs else None,
    )
    app.state.server = state

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return error_response(request, exc)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        message = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 404:
            message = f"Unknown path {request.url.path!r}."
        elif exc.status_code == 405:
            message = f"Method {request.method} is not allowed on {request.url.path!r}."
        return error_response(request, APIError(exc.status_code, message))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        # FastAPI's own parameter validation (the routes parse bodies with parse_body):
        # the same one-line message and field path, without the leading "body"/"query"
        parts, param = [], None
        for err in exc.errors():
            path = field_path(None, tuple(err.get("loc", ()))[1:])
            param = param or path or None
            parts.append(
                f"{path}: {err.get('msg', 'invalid value')}" if path else str(err.get("msg"))
            )
        return error_response(
            request, APIError(400, "; ".join(parts[:3]) or "Invalid request.", param=param)
        )

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        logger.exception("internal error on %s", request.url.path)
        return error_response(
            request, APIError(500, f"Internal server error: {type(exc).__name__}")
        )

    app.include_router(openai_router)
    app.include_router(responses_router)
    app.include_router(gemini_router)
    app.include_router(bedrock_router)
    app.include_router(anthropic_router)
    app.include_router(admin_router)
    if enable_docs:
        openapi.install(app)
    app.add_middleware(
        ServerMiddleware,
        state=state,
        public_paths=frozenset(DOCS_PATHS if enable_docs else ()),
    )
    return app
