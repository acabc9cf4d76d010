"""No API key or auth header is ever written by the proxy: not to the ledger (any of its
files), not to a log line, not to an error body -- whatever path the call takes."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import anthropic
import httpx
import httpx2
import openai

from promptcache.proxy.server import ProxyServer, free_port
from promptcache.proxy.upstreams import resolve


def test_grep_every_file_and_log_for_the_api_key(upstream, tmp_path, caplog, capfd):
    key = f"sk-test-{uuid.uuid4().hex}"
    caplog.set_level(logging.DEBUG)
    db = tmp_path / "ledger" / "ledger.db"
    with ProxyServer(resolve(upstream.url), str(db), port=0, store_prompts=True) as p:
        oc = openai.OpenAI(base_url=p.url + "/v1", api_key=key, max_retries=0)
        oc.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        for _chunk in oc.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            pass
        ac = anthropic.Anthropic(
            base_url=p.url, api_key=key, max_retries=0, http_client=httpx2.Client()
        )
        ac.messages.create(
            model="claude-sonnet-4-5", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )
        for fault in ("529", "reset"):
            try:
                httpx.post(
                    p.url + "/v1/chat/completions",
                    headers={"x-fault": fault, "authorization": f"Bearer {key}"},
                    json={"model": "gpt-4o", "stream": True, "messages": []},
                )
            except httpx.HTTPError:
                pass
        httpx.post(
            p.url + f"/v1beta/models/gemini-2.5-flash:generateContent?key={key}",
            json={"contents": []},
        )
        httpx.post(
            p.url + "/v1/chat/completions",
            headers={"authorization": f"Bearer {key}"},
            content=b"{bad json",
        )
        assert p.ledger.flush(10)
        live = httpx.get(p.live_url + "api/state").text
        assert key not in live
    dead = f"http://127.0.0.1:{free_port()}"
    with ProxyServer(resolve(dead), str(db), port=0) as p:
        r = httpx.post(
            p.url + f"/v1beta/models/g:generateContent?key={key}", headers={"x-goog-api-key": key}
        )
        assert r.status_code == 502 and key not in r.text
    files = [f for f in tmp_path.rglob("*") if f.is_file()]
    assert any(f.name == "ledger.db" for f in files)
    for f in files:
        assert key.encode() not in f.read_bytes(), f
    out, err = capfd.readouterr()
    assert key not in out and key not in err
    assert key not in caplog.text
    assert "upstream 127.0.0.1 unreachable" in caplog.text  # the logs did capture the proxy
    # the prompt text was kept (store_prompts=True), so the grep looked at real content
    assert b'"hi"' in Path(db).read_bytes() or any(b'"hi"' in f.read_bytes() for f in files)
