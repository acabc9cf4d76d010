"""``/health`` answers at once: 503 with a JSON body while the model loads, 200 when ready;
other paths answer 503 in their provider's error shape meanwhile; the socket never holds a
connection unanswered (checked on a real ``promptcache serve`` process)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import httpx
import pytest
from fastapi import FastAPI
from starlette.testclient import TestClient

from local_engine.server.loading import LoadingApp


def _app_after(gate: threading.Event) -> LoadingApp:
    def build():
        gate.wait(30)
        app = FastAPI()

        @app.get("/health")
        def health():
            return {"status": "ok"}

        return app

    return LoadingApp(build, "test-model")


def test_loading_answers_503_in_each_shape_then_200():
    gate = threading.Event()
    with TestClient(_app_after(gate)) as client:
        r = client.get("/health")
        assert r.status_code == 503 and r.json() == {"status": "loading", "model": "test-model"}
        assert r.headers["retry-after"] == "1"
        assert client.post("/v1/chat/completions").json()["error"]["type"] == "server_error"
        assert client.post("/v1/messages").json()["error"]["type"] == "overloaded_error"
        gem = client.post("/v1beta/models/m:generateContent").json()["error"]
        assert gem["code"] == 503 and gem["status"] == "UNAVAILABLE"
        bed = client.post("/model/m/converse")
        assert bed.headers["x-amzn-errortype"] == "ServiceUnavailableException"
        gate.set()
        deadline = time.monotonic() + 10
        while client.get("/health").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert client.get("/health").json() == {"status": "ok"}


def test_load_failure_is_reported():
    seen: list[BaseException] = []

    def build():
        raise ValueError("bad weights")

    with TestClient(LoadingApp(build, "m", on_error=seen.append)) as client:
        deadline = time.monotonic() + 10
        while not seen:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert client.get("/health").status_code == 503
    assert isinstance(seen[0], ValueError)


@pytest.mark.slow
def test_serve_answers_health_while_loading_then_ready(tmp_path):
    log = open(tmp_path / "serve.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "promptcache", "serve", "--port", "0", "--num-kv-blocks", "64"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = None
        deadline = time.monotonic() + 120
        while url is None:
            assert time.monotonic() < deadline and proc.poll() is None
            text = (tmp_path / "serve.log").read_text()
            if "Uvicorn running on" in text or "loading " in text:
                for line in text.splitlines():
                    if "GET /health answers 503" in line:
                        url = line.rsplit("(", 1)[1].rstrip(")")
            time.sleep(0.05)
        statuses = []
        while True:
            t0 = time.monotonic()
            r = httpx.get(url + "/health", timeout=5)
            assert time.monotonic() - t0 < 2.0  # answered at once, loading or not
            statuses.append(r.status_code)
            if r.status_code == 200:
                break
            assert r.json()["status"] == "loading"
            assert time.monotonic() < deadline + 300
            time.sleep(0.1)
        assert statuses[-1] == 200 and set(statuses) <= {503, 200}
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()
