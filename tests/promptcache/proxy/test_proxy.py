"""``promptcache proxy``: pass-through, recording and failure behaviour with the official
clients (openai; anthropic over httpx2) against a local fake upstream (fake_upstream.py)."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid

import anthropic
import httpx
import httpx2
import openai
import pytest

from promptcache import Tracker
from promptcache.proxy.server import ProxyServer
from promptcache.proxy.upstreams import resolve

SYSTEM = "You are terse. " * 400  # ~6 kB: a realistic cached head


def wait_queued(p: ProxyServer, n: int, timeout: float = 10.0) -> None:
    """Wait until ``n`` calls were handed to the ledger (a client may see the last byte of a
    response a moment before the proxy's recorder has queued its record)."""
    deadline = time.monotonic() + timeout
    while p.ledger.stats.queued < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert p.ledger.stats.queued == n
    assert p.ledger.flush(timeout)


def _usage(**u: int) -> dict[str, str]:
    return {"x-test-usage": json.dumps(u)}


def test_official_clients_pass_through_and_each_call_is_recorded_once(proxy, upstream):
    sent: list[bytes] = []
    oc = openai.OpenAI(
        base_url=proxy.url + "/v1",
        api_key="sk-test",
        http_client=httpx.Client(event_hooks={"request": [lambda r: sent.append(r.read())]}),
    )
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}]
    r = oc.chat.completions.create(
        model="gpt-4o", messages=msgs, extra_headers=_usage(prompt=2000, cached=1024)
    )
    assert r.choices[0].message.content == "ok" and r.usage.prompt_tokens == 2000
    stream = oc.chat.completions.create(
        model="gpt-4o",
        messages=msgs,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=_usage(prompt=2000, cached=1920),
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "ok!?"
    ac = anthropic.Anthropic(base_url=proxy.url, api_key="sk-ant-test", http_client=httpx2.Client())
    m = ac.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=10,
        system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "hi"}],
        extra_headers=_usage(prompt=3000, cached=0, write=2900),
    )
    assert m.usage.cache_creation_input_tokens == 2900 and m.usage.input_tokens == 100
    with ac.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=10,
        system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": "hi"}],
        extra_headers=_usage(prompt=3000, cached=2900, write=0),
    ) as st:
        assert "".join(st.text_stream) == "ok"
    proxy.stop()
    # the upstream got the client's bytes: same body, same auth header, its own Host
    chat = [s for s in upstream.app.seen[-4:] if s["path"] == "/v1/chat/completions"]
    assert [s["body"] for s in chat] == sent
    hdrs = dict(chat[0]["headers"])
    assert hdrs[b"authorization"] == b"Bearer sk-test"
    assert hdrs[b"host"] == upstream.url.split("//")[1].encode()
    recs = Tracker(proxy.db).records()
    assert [(r.api, r.usage.prompt_tokens, r.usage.cache_read_tokens, r.stream) for r in recs] == [
        ("chat.completions", 2000, 1024, False),
        ("chat.completions", 2000, 1920, True),
        ("messages", 3000, 0, False),
        ("messages", 3000, 2900, True),
    ]
    # anthropic: input 100 + write 2900 (the first), input 100 + read 2900 (the second)
    assert recs[2].usage.cache_write_tokens == 2900 and recs[2].usage.uncached_input_tokens == 100
    assert recs[3].ttft_ms is not None and recs[3].ttft_ms <= recs[3].latency_ms
    assert proxy.ledger.stats.written == 4 and proxy.ledger.stats.failed == 0


def test_headers_and_body_bytes_pass_unchanged(proxy, upstream):
    body = b'{"a": 1,   "b": "\\u00e9"}'  # odd spacing and escapes must survive
    r = httpx.post(
        proxy.url + "/echo?x=1&y=%20",
        content=body,
        headers={
            "content-type": "application/json",
            "x-client-thing": "1",
            "connection": "x-drop-me",
            "x-drop-me": "v",
        },
    )
    assert r.status_code == 200 and r.json() == {"len": len(body)}
    assert r.headers.get_list("x-upstream-thing") == ["a", "b"]  # duplicates kept, in order
    seen = upstream.app.seen[-1]
    assert seen["body"] == body and seen["path"] == "/echo?x=1&y=%20"
    names = [k for k, _ in seen["headers"]]
    assert b"x-client-thing" in names and b"x-drop-me" not in names  # named by Connection


def test_sse_is_streamed_chunk_by_chunk(proxy):
    # the upstream sends 5 chat chunks + [DONE] 50 ms apart: the first arrives long before
    # the last (no buffering), and each arrives as its own chunk
    arrivals = []
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        json={"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        headers={"x-fault": "slow"},
    ) as r:
        for chunk in r.iter_raw():
            arrivals.append((time.perf_counter(), chunk))
    assert len(arrivals) == 6
    assert all(c.startswith(b"data: ") and c.endswith(b"\n\n") for _, c in arrivals)
    assert arrivals[-1][0] - arrivals[0][0] > 0.2  # 5 gaps of 50 ms


def _read_until_error(url: str, body: dict, headers: dict) -> tuple[int, bytes, str]:
    got = b""
    try:
        with httpx.stream("POST", url, json=body, headers=headers) as r:
            for chunk in r.iter_raw():
                got += chunk
            return r.status_code, got, "complete"
    except httpx.HTTPError as e:
        return r.status_code, got, type(e).__name__


def test_upstream_reset_mid_stream_reaches_the_client_as_a_reset(proxy, upstream):
    body = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    direct = _read_until_error(upstream.url + "/v1/chat/completions", body, {"x-fault": "reset"})
    via = _read_until_error(proxy.url + "/v1/chat/completions", body, {"x-fault": "reset"})
    assert direct[2] == "RemoteProtocolError"  # the cut, as seen without the proxy
    assert via == direct
    assert proxy.app.stats.upstream_resets == 1


def test_529_overloaded_passes_through_exactly(proxy, upstream):
    body = {"model": "claude-sonnet-4-5", "max_tokens": 5, "messages": []}
    direct = httpx.post(upstream.url + "/v1/messages", json=body, headers={"x-fault": "529"})
    via = httpx.post(proxy.url + "/v1/messages", json=body, headers={"x-fault": "529"})
    assert (
        (via.status_code, via.content)
        == (direct.status_code, direct.content)
        == (
            529,
            b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}',
        )
    )
    ac = anthropic.Anthropic(
        base_url=proxy.url, api_key="k", max_retries=0, http_client=httpx2.Client()
    )
    with pytest.raises(anthropic.APIStatusError) as e:
        ac.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=5,
            messages=[{"role": "user", "content": "x"}],
            extra_headers={"x-fault": "529"},
        )
    assert e.value.status_code == 529
    proxy.stop()
    assert Tracker(proxy.db).count() == 0  # errors carry no usage: nothing recorded


def test_client_timeout_cancels_the_hanging_upstream_call(proxy, upstream):
    before = upstream.app.cancelled
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            proxy.url + "/v1/chat/completions",
            json={"model": "m", "messages": []},
            headers={"x-fault": "hang"},
            timeout=0.5,
        )
    deadline = time.monotonic() + 5
    while upstream.app.cancelled == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert upstream.app.cancelled == before + 1  # the proxy dropped its upstream call
    assert proxy.app.stats.client_disconnects == 1


@pytest.mark.parametrize(
    "path, shape",
    [
        ("/v1/messages", "anthropic"),
        ("/v1/chat/completions", "openai"),
        ("/v1beta/models/gemini-2.5-flash:generateContent", "gemini"),
    ],
)
def test_unreachable_upstream_gets_the_apis_error_shape(tmp_path, path, shape):
    from promptcache.proxy.server import free_port

    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with ProxyServer(resolve(dead), str(tmp_path / "l.db"), port=0) as p:
        r = httpx.post(p.url + path, json={"model": "m"})
    assert r.status_code == 502 and r.headers["x-promptcache-proxy-error"] == "1"
    doc = r.json()
    if shape == "anthropic":
        assert doc["type"] == "error" and doc["error"]["type"] == "api_error"
    elif shape == "gemini":
        assert doc["error"]["code"] == 502 and doc["error"]["status"] == "UNAVAILABLE"
    else:
        assert set(doc["error"]) == {"message", "type", "param", "code"}
    assert "127.0.0.1" in doc["error"]["message"]


def test_read_only_ledger_never_fails_or_delays_a_call(upstream):
    # /proc is a read-only file system for a new directory, even for root
    ro = f"/proc/promptcache-{uuid.uuid4().hex}/ledger.db"
    with ProxyServer(resolve(upstream.url), ro, port=0) as p:
        oc = openai.OpenAI(base_url=p.url + "/v1", api_key="k", max_retries=0)
        for _ in range(5):
            r = oc.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "x"}]
            )
            assert r.choices[0].message.content == "ok"
        wait_queued(p, 5)
        assert p.ledger.stats.failed == 5 and p.ledger.stats.written == 0
        assert "LedgerError" in p.ledger.stats.last_error


def test_locked_ledger_does_not_delay_calls(upstream, tmp_path):
    db = str(tmp_path / "l.db")
    Tracker(db).close()
    lock = sqlite3.connect(db, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    try:
        with ProxyServer(resolve(upstream.url), db, port=0, busy_timeout_s=2.0) as p:
            oc = openai.OpenAI(base_url=p.url + "/v1", api_key="k", max_retries=0)
            oc.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
            t0 = time.perf_counter()
            for _ in range(5):  # the writer is stuck waiting on the lock meanwhile
                oc.chat.completions.create(
                    model="gpt-4o", messages=[{"role": "user", "content": "x"}]
                )
            per_call = (time.perf_counter() - t0) / 5
            assert per_call < 0.2, per_call  # not the 2 s busy timeout
            lock.execute("ROLLBACK")
            wait_queued(p, 6, 15)
            s = p.ledger.stats
            assert s.written + s.failed == 6
    finally:
        lock.close()


def _malformed(i: int) -> tuple[dict[str, str], bytes]:
    good = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": f"q{i}"}]})
    if i < 80:  # bad JSON: truncated at a different place each time, or garbage
        return {"content-type": "application/json"}, (good[: 1 + i % (len(good) - 1)]).encode()
    if i < 140:  # wrong content type for a valid body
        ctype = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data")[i % 3]
        return {"content-type": ctype}, good.encode()
    # huge headers: 20-200 kB in one header (over h11's 16 kB default head limit)
    return {
        "content-type": "application/json",
        "x-big": "b" * (20_000 + 3_000 * (i - 140)),
    }, good.encode()


def test_200_malformed_requests_get_the_upstreams_own_error(proxy, upstream):
    with httpx.Client() as c:
        for i in range(200):
            headers, body = _malformed(i)
            direct = c.post(upstream.url + "/v1/chat/completions", content=body, headers=headers)
            via = c.post(proxy.url + "/v1/chat/completions", content=body, headers=headers)
            assert (via.status_code, via.content) == (direct.status_code, direct.content), i
            assert via.status_code in (400, 415, 200), i
    proxy.stop()
    # the valid bodies with huge headers are calls like any other (60 recorded)
    assert Tracker(proxy.db).count() == 60


def test_lineages_by_session_header_and_by_content(proxy):
    oc = openai.OpenAI(base_url=proxy.url + "/v1", api_key="k")
    head = [{"role": "system", "content": SYSTEM}]
    conv = {
        "a": head + [{"role": "user", "content": "first question about apples"}],
        "b": head + [{"role": "user", "content": "first question about bananas"}],
    }
    for turn in range(3):  # two conversations interleaved, no session header
        for name in ("a", "b"):
            oc.chat.completions.create(
                model="gpt-4o",
                messages=conv[name],
                extra_headers=_usage(prompt=1500 + 100 * turn, cached=1024),
            )
            conv[name] = conv[name] + [
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": f"{name} follow-up {turn}"},
            ]
    oc.chat.completions.create(
        model="gpt-4o",
        messages=conv["a"],
        extra_headers={"X-Promptcache-Session": "s1", **_usage(prompt=1800, cached=1024)},
    )
    proxy.stop()
    recs = Tracker(proxy.db).records()
    lineages = [r.lineage for r in recs]
    assert lineages[0:6:2] == [lineages[0]] * 3 and lineages[1:6:2] == [lineages[1]] * 3
    assert lineages[0] != lineages[1] and lineages[6] == "session:s1"


def test_client_leaving_mid_stream_cancels_the_relay(proxy):
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        json={"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        headers={"x-fault": "slow"},
    ) as r:
        first = next(r.iter_raw())
        assert first.startswith(b"data: ")
    # the client closed its connection after one of six events (50 ms apart)
    deadline = time.monotonic() + 5
    while proxy.app.stats.client_disconnects == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proxy.app.stats.client_disconnects == 1
