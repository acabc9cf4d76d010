"""In ``--cache-mode anthropic`` an OpenAI-API call without ``cache_control`` always reports
0 cached tokens (Anthropic caches only at breakpoints): the response says so in the
``x-promptcache-cache-note`` header, and the engine log says so once (issue 17)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from local_engine.server.app import ServerMiddleware
from local_engine.server.emulation import CACHE_NOTE_HEADER

MODE = {"X-Promptcache-Cache-Mode": "anthropic"}


def _app(mode: str) -> tuple[Starlette, SimpleNamespace]:
    async def ok(request):
        return JSONResponse({"ok": True})

    paths = ["/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/models"]
    inner = Starlette(routes=[Route(p, ok, methods=["GET", "POST"]) for p in paths])
    st = SimpleNamespace(
        config=SimpleNamespace(api_key=None, max_body_bytes=1 << 20),
        emulator=SimpleNamespace(mode=mode),
        metrics=None,
    )
    return ServerMiddleware(inner, st), st


def test_note_header_on_openai_api_under_anthropic_rules_and_logged_once(caplog):
    app, _ = _app("anthropic")
    c = TestClient(app)
    with caplog.at_level(logging.WARNING, logger="promptcache.server"):
        for path in ("/v1/chat/completions", "/v1/completions", "/v1/chat/completions"):
            r = c.post(path, json={})
            assert r.status_code == 200
            note = r.headers[CACHE_NOTE_HEADER]
            assert "0 cached tokens" in note and "cache_control" in note
        # the Anthropic API and non-completion paths carry no note
        assert CACHE_NOTE_HEADER not in c.post("/v1/messages", json={}).headers
        assert CACHE_NOTE_HEADER not in c.get("/v1/models").headers
    said = [r for r in caplog.records if "0 cached tokens" in r.getMessage()]
    assert len(said) == 1


def test_no_note_in_other_modes_unless_the_request_asks_for_anthropic_rules():
    app, _ = _app("automatic")
    c = TestClient(app)
    assert CACHE_NOTE_HEADER not in c.post("/v1/chat/completions", json={}).headers
    r = c.post("/v1/chat/completions", json={}, headers=MODE)
    assert "0 cached tokens" in r.headers[CACHE_NOTE_HEADER]
    app, _ = _app("anthropic")
    r = TestClient(app).post(
        "/v1/chat/completions", json={}, headers={"X-Promptcache-Cache-Mode": "openai"}
    )
    assert CACHE_NOTE_HEADER not in r.headers


def test_real_server_openai_client_sees_the_note(server_factory):
    srv = server_factory()
    oa = srv.openai_client(max_retries=0, timeout=300, default_headers=MODE)
    for _ in range(2):
        raw = oa.chat.completions.with_raw_response.create(
            model="m", max_tokens=1, messages=[{"role": "user", "content": "Hi"}]
        )
        assert raw.parse().usage.prompt_tokens_details.cached_tokens == 0
        assert "0 cached tokens" in raw.headers[CACHE_NOTE_HEADER]
    assert srv.log_text().count("reports 0 cached tokens (said once") == 1
