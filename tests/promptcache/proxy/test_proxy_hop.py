"""What the fast path must keep: the upstream gets the client's headers and nothing of the
proxy's HTTP client (no automatic User-Agent/Accept/Accept-Encoding/Content-Type, no cookie jar),
a compressed body passes compressed, the ledger's times are the ones measured on the live
exchange (not when the recorder process replays it), and a recorder that is gone costs records,
never calls."""

from __future__ import annotations

import gzip
import time

import httpx
import openai

from promptcache import Tracker
from promptcache.proxy.server import ProxyServer
from promptcache.proxy.upstreams import resolve

RESET_BY_THE_HOP = {b"host", b"content-length", b"connection"}


def _names_values(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(k.lower(), v) for k, v in raw if k.lower() not in RESET_BY_THE_HOP]


def test_upstream_gets_exactly_the_clients_headers(proxy, upstream):
    sent: list[list[tuple[bytes, bytes]]] = []
    with httpx.Client(event_hooks={"request": [lambda r: sent.append(list(r.headers.raw))]}) as c:
        c.post(
            proxy.url + "/echo",
            content=b"{}",
            headers={"x-a": "1", "content-type": "application/json", "authorization": "Bearer k"},
        )
    seen = upstream.app.seen[-1]["headers"]
    # httpx's own Accept, Accept-Encoding and User-Agent, then the three given, in order
    assert _names_values(seen) == _names_values(sent[0])
    assert [k for k, _ in _names_values(seen)] == [
        b"accept",
        b"accept-encoding",
        b"user-agent",
        b"x-a",
        b"content-type",
        b"authorization",
    ]
    host = dict(seen)[b"host"]
    assert host == upstream.url.split("//")[1].encode()  # its own Host: the upstream's
    assert dict(seen)[b"content-length"] == b"2"


def test_a_compressed_body_passes_compressed(proxy, upstream):
    def raw(url: str) -> tuple[str | None, bytes]:
        with httpx.stream("POST", url + "/echo", content=b"{}", headers={"x-fault": "gzip"}) as r:
            return r.headers.get("content-encoding"), b"".join(r.iter_raw())

    direct, via = raw(upstream.url), raw(proxy.url)
    assert via == direct
    assert via[0] == "gzip" and gzip.decompress(via[1]) == b'{"len": 2}'


def test_a_cookie_set_upstream_never_goes_out_with_later_calls(proxy, upstream):
    first = httpx.post(proxy.url + "/echo", content=b"{}", headers={"x-fault": "set-cookie"})
    assert first.headers["set-cookie"] == "s=1; Path=/"  # passed on to the client that got it
    httpx.post(proxy.url + "/echo", content=b"{}")
    assert b"cookie" not in [k for k, _ in upstream.app.seen[-1]["headers"]]


def test_recorded_times_are_those_of_the_live_exchange(proxy):
    # "slow": 4 content events, the usage event and [DONE], 50 ms apart; the first content
    # event is sent at once. Measured live: latency >= 5 x 50 ms, first token well before the
    # second event. (A replay's own clock would put the first token after the end.)
    with httpx.stream(
        "POST",
        proxy.url + "/v1/chat/completions",
        json={"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        headers={"x-fault": "slow"},
    ) as r:
        for _ in r.iter_raw():
            pass
    deadline = time.monotonic() + 10
    while proxy.ledger.stats.queued < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.ledger.flush(10)
    proxy.stop()
    (rec,) = Tracker(proxy.db).records()
    assert rec.stream and rec.latency_ms >= 250.0
    assert rec.ttft_ms is not None and rec.ttft_ms < 50.0


def test_a_dead_recorder_costs_records_never_calls(upstream, tmp_path):
    with ProxyServer(resolve(upstream.url), str(tmp_path / "l.db"), port=0) as p:
        p.ledger.process.kill()
        p.ledger.process.join(10)
        oc = openai.OpenAI(base_url=p.url + "/v1", api_key="k", max_retries=0)
        for _ in range(3):
            r = oc.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "x"}]
            )
            assert r.choices[0].message.content == "ok"
        deadline = time.monotonic() + 10
        while p.ledger.stats.dropped < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert p.ledger.stats.dropped == 3 and p.ledger.stats.written == 0
        assert p.ledger.flush(1)


def test_only_tracked_api_calls_are_handed_to_the_recorder():
    from promptcache.integrations.clients import tracked_api

    # the paths the official SDKs post completions to (their API references)
    assert tracked_api("POST", "/v1/chat/completions") == "chat.completions"
    assert tracked_api("POST", "/v1/completions") == "completions"
    assert tracked_api("POST", "/v1/responses") == "responses"
    assert tracked_api("POST", "/v1/messages") == "messages"
    assert tracked_api("POST", "/v1beta/models/gemini-2.5-flash:streamGenerateContent") == "gemini"
    # listing models, counting tokens, anything downloaded: never held for the recorder
    assert tracked_api("GET", "/v1/models") is None
    assert tracked_api("POST", "/v1/messages/count_tokens") is None
    assert tracked_api("GET", "/v1/files/file-1/content") is None
