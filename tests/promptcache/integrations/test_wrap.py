"""promptcache.wrap() with the real openai/anthropic clients over httpx.MockTransport.

The mock servers answer with the providers' documented JSON and SSE shapes. Each test
checks (1) the caller gets exactly what an unwrapped client returns for the same
exchange, and (2) the ledger holds the right normalized counts, cost and timings.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import time
from decimal import Decimal as D

import anthropic
import httpx
import httpx2
import openai
import pytest

import promptcache
from promptcache import Tracker

CHAT_USAGE = {
    "prompt_tokens": 2006,
    "completion_tokens": 3,
    "total_tokens": 2009,
    "prompt_tokens_details": {"cached_tokens": 1920},
}
# gpt-4o: 86*2.5 + 1920*1.25 + 3*10 = 215 + 2400 + 30 = 2645 micro-$
CHAT_COST = D("0.002645")

ANTH_USAGE = {
    "input_tokens": 12,
    "cache_read_input_tokens": 4096,
    "cache_creation_input_tokens": 512,
    "cache_creation": {"ephemeral_5m_input_tokens": 512, "ephemeral_1h_input_tokens": 0},
    "output_tokens": 7,
}
# claude-sonnet-4-5: 12*3 + 4096*0.3 + 512*3.75 + 7*15 = 36 + 1228.8 + 1920 + 105
#                    = 3289.8 micro-$
ANTH_COST = D("0.0032898")


def chat_json(model="gpt-4o-2024-08-06", usage=CHAT_USAGE):
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello there!"},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": usage,
        "system_fingerprint": "fp_1",
    }


def chat_sse_events(model="gpt-4o-2024-08-06"):
    base = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "system_fingerprint": "fp_1",
    }
    return [
        {
            **base,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            ],
            "usage": None,
        },
        {
            **base,
            "choices": [{"index": 0, "delta": {"content": "Hello"}, "finish_reason": None}],
            "usage": None,
        },
        {
            **base,
            "choices": [{"index": 0, "delta": {"content": " there!"}, "finish_reason": None}],
            "usage": None,
        },
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": None},
        {**base, "choices": [], "usage": CHAT_USAGE},
    ]


def responses_json():
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1700000000,
        "status": "completed",
        "model": "gpt-4.1-2025-04-14",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hi", "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 12033,
            "input_tokens_details": {"cached_tokens": 11904},
            "output_tokens": 44,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 12077,
        },
    }


def anth_message_json():
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "Hello!"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": ANTH_USAGE,
    }


def anth_sse_events():
    start = {
        **anth_message_json(),
        "content": [],
        "stop_reason": None,
        "usage": {**ANTH_USAGE, "output_tokens": 1},
    }
    return [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        ("ping", {"type": "ping"}),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hello!"},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 7},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


def sse_bytes(events, named=False):
    out = []
    for ev in events:
        if named:
            name, data = ev
            out.append(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        else:
            out.append(f"data: {json.dumps(ev)}\n\n".encode())
    if not named:
        out.append(b"data: [DONE]\n\n")
    return out


class Server:
    """A MockTransport handler that answers like the provider, streaming real chunks
    (an iterator body, so the client reads it incrementally), optionally gzip'd or with
    pauses between SSE events."""

    def __init__(self, pause_s: float = 0.0, gzip_json: bool = False, status: int = 200, lib=httpx):
        self.pause_s, self.gzip_json, self.status = pause_s, gzip_json, status
        self.lib = lib  # httpx (openai accepts it) or httpx2 (what both SDKs use natively)
        self.requests: list[dict] = []

    def _body(self, request):
        body = json.loads(request.content)
        self.requests.append(body)
        path = request.url.path
        if self.status != 200:
            return None, {"error": {"type": "invalid_request_error", "message": "bad"}}
        if path.endswith("/messages"):
            return (
                sse_bytes(anth_sse_events(), named=True) if body.get("stream") else None,
                anth_message_json(),
            )
        if path.endswith("/responses"):
            if body.get("stream"):
                r = responses_json()
                evs = [
                    {
                        "type": "response.created",
                        "sequence_number": 0,
                        "response": {**r, "status": "in_progress", "usage": None},
                    },
                    {
                        "type": "response.output_text.delta",
                        "sequence_number": 1,
                        "item_id": "msg_1",
                        "output_index": 0,
                        "content_index": 0,
                        "delta": "Hi",
                        "logprobs": [],
                    },
                    {"type": "response.completed", "sequence_number": 2, "response": r},
                ]
                return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in evs], r
            return None, responses_json()
        if body.get("stream"):
            return sse_bytes(chat_sse_events()), None
        return None, chat_json()

    def _chunks(self, request):
        sse, js = self._body(request)
        if sse is not None:
            return sse, {"content-type": "text/event-stream"}
        raw = json.dumps(js).encode()
        headers = {"content-type": "application/json"}
        if self.gzip_json:
            raw = gzip.compress(raw)
            headers["content-encoding"] = "gzip"
        return [raw[: len(raw) // 2], raw[len(raw) // 2 :]], headers

    def __call__(self, request):
        chunks, headers = self._chunks(request)
        pause = self.pause_s

        def gen():
            for c in chunks:
                if pause:
                    time.sleep(pause)
                yield c

        return self.lib.Response(self.status, headers=headers, content=gen())

    def async_handler(self):
        async def handler(request):
            chunks, headers = self._chunks(request)

            async def agen():
                for c in chunks:
                    if self.pause_s:
                        await asyncio.sleep(self.pause_s)
                    yield c

            return self.lib.Response(self.status, headers=headers, content=agen())

        return handler


def _http(server):
    return server.lib.Client(transport=server.lib.MockTransport(server))


def openai_pair(server, base_url=None):
    kw = {"api_key": "sk-test", "max_retries": 0}
    if base_url:
        kw["base_url"] = base_url
    return openai.OpenAI(http_client=_http(server), **kw), openai.OpenAI(
        http_client=_http(server), **kw
    )


def anthropic_pair(server):
    kw = {"api_key": "sk-ant-test", "max_retries": 0}
    return (
        anthropic.Anthropic(http_client=_http(server), **kw),
        anthropic.Anthropic(http_client=_http(server), **kw),
    )


MSGS = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}]


@pytest.fixture
def tracker(tmp_path):
    t = Tracker(tmp_path / "ledger.db")
    yield t
    t.close()


@pytest.mark.parametrize("lib", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_openai_plain_stream_raw_and_streaming_response(tracker, lib):
    server = Server(lib=lib)
    plain, client = openai_pair(server)
    assert promptcache.wrap(client, tracker) is client
    # plain call: same parsed object as the unwrapped client
    a = plain.chat.completions.create(model="gpt-4o", messages=MSGS)
    b = client.chat.completions.create(model="gpt-4o", messages=MSGS)
    assert type(a) is type(b) and a.model_dump() == b.model_dump()
    # stream with include_usage: same chunks
    kw = dict(model="gpt-4o", messages=MSGS, stream=True, stream_options={"include_usage": True})
    chunks_a = [c.model_dump() for c in plain.chat.completions.create(**kw)]
    stream = client.chat.completions.create(**kw)
    assert type(stream) is openai.Stream
    chunks_b = [c.model_dump() for c in stream]
    assert chunks_a == chunks_b and chunks_b[-1]["usage"]["prompt_tokens"] == 2006
    # with_raw_response: the legacy raw response, parse() works as usual
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=MSGS)
    assert raw.http_request.url.path == "/v1/chat/completions"
    assert raw.parse().model_dump() == a.model_dump()
    # with_streaming_response
    with client.chat.completions.with_streaming_response.create(
        model="gpt-4o", messages=MSGS
    ) as resp:
        assert resp.parse().usage.prompt_tokens == 2006

    recs = tracker.records()
    assert [r.stream for r in recs] == [False, True, False, False]
    for r in recs:
        assert r.provider == "openai" and r.api == "chat.completions"
        assert (
            r.usage.uncached_input_tokens,
            r.usage.cache_read_tokens,
            r.usage.output_tokens,
        ) == (86, 1920, 3)
        assert r.cost == CHAT_COST
        assert r.latency_ms is not None and r.latency_ms >= 0
        # prefix hash: SHA-256 of the canonical system head, equal across calls
        assert r.prefix_hash == recs[0].prefix_hash and len(r.prefix_hash) == 64
    assert recs[1].ttft_ms is not None and recs[0].ttft_ms is None
    (s,) = tracker.summary(by="model")
    assert s.requests == 4 and s.cost == 4 * CHAT_COST
    assert s.hit_rate == pytest.approx(1920 / 2006)


def test_openai_responses_api_plain_and_stream(tracker):
    server = Server()
    _, client = openai_pair(server)
    promptcache.wrap(client, tracker)
    r = client.responses.create(
        model="gpt-4.1", input="Hi", instructions="Be terse", prompt_cache_key="pfx-123"
    )
    assert r.output_text == "Hi"
    events = list(client.responses.create(model="gpt-4.1", input="Hi", stream=True))
    assert events[-1].type == "response.completed"
    recs = tracker.records()
    assert [x.api for x in recs] == ["responses", "responses"]
    # prompt_cache_key is used as the prefix hash when the request has one
    assert recs[0].prefix_hash == "pfx-123"
    # gpt-4.1: 129*2 + 11904*0.5 + 44*8 = 258 + 5952 + 352 = 6562 micro-$
    assert recs[0].cost == recs[1].cost == D("0.006562")
    assert recs[1].ttft_ms is not None


def test_ttft_and_latency_are_measured_on_streams(tracker):
    server = Server(pause_s=0.05)  # 50 ms before each SSE event
    _, client = openai_pair(server)
    promptcache.wrap(client, tracker)
    list(
        client.chat.completions.create(
            model="gpt-4o", messages=MSGS, stream=True, stream_options={"include_usage": True}
        )
    )
    (r,) = tracker.records()
    # first event (role, empty content) is not output; the 2nd ("Hello") is: >= 2 pauses
    assert r.ttft_ms >= 2 * 50 * 0.9
    # the whole body: 6 pauses (5 events + [DONE])
    assert r.latency_ms >= 6 * 50 * 0.9 and r.ttft_ms < r.latency_ms


def test_gzip_json_and_loopback_provider(tracker):
    server = Server(gzip_json=True)
    _, client = openai_pair(server, base_url="http://127.0.0.1:8123/v1")
    promptcache.wrap(client, tracker)
    out = client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=MSGS)
    assert out.choices[0].message.content == "Hello there!"
    (r,) = tracker.records()
    assert r.provider == "local" and r.usage.cache_read_tokens == 1920
    assert r.model == "gpt-4o-2024-08-06"  # the model the server says it ran


def test_local_server_without_cached_field_is_recorded_as_unknown(tracker):
    class NoCache(Server):
        def _body(self, request):
            sse, js = super()._body(request)
            js["usage"] = {"prompt_tokens": 1200, "completion_tokens": 3, "total_tokens": 1203}
            return sse, js

    _, client = openai_pair(NoCache(), base_url="http://localhost:9/v1")
    promptcache.wrap(client, tracker, price=promptcache.Price(input="2.5", output="10"))
    client.chat.completions.create(model="m", messages=MSGS)
    (s,) = tracker.summary(by=None)
    assert s.unreported_requests == 1 and s.hit_rate is None
    # priced as all uncached: 1200*2.5 + 3*10 = 3030 micro-$
    assert s.cost == D("0.00303")


def test_anthropic_plain_stream_helper_and_raw(tracker):
    server = Server(lib=httpx2)  # the anthropic SDK accepts only httpx2 clients
    plain, client = anthropic_pair(server)
    promptcache.wrap(client, tracker)
    kw = dict(
        model="claude-opus-4-6",
        max_tokens=64,
        system="You are terse.",
        messages=[{"role": "user", "content": "Hi"}],
    )
    a = plain.messages.create(**kw)
    b = client.messages.create(**kw)
    assert a.model_dump() == b.model_dump()
    ev_a = [e.model_dump() for e in plain.messages.create(**kw, stream=True)]
    ev_b = [e.model_dump() for e in client.messages.create(**kw, stream=True)]
    assert ev_a == ev_b
    with client.messages.stream(**kw) as s:
        final = s.get_final_message()
    assert final.usage.output_tokens == 7
    raw = client.messages.with_raw_response.create(**kw)
    assert raw.parse().usage.cache_read_input_tokens == 4096
    recs = tracker.records()
    assert [r.stream for r in recs] == [False, True, True, False]
    for r in recs:
        assert r.provider == "anthropic" and r.api == "messages"
        u = r.usage
        # input_tokens excludes cached: prompt = 12 + 4096 + 512 = 4620
        assert (
            u.uncached_input_tokens,
            u.cache_read_tokens,
            u.cache_write_5m_tokens,
            u.output_tokens,
        ) == (12, 4096, 512, 7)
        assert r.cost == ANTH_COST
    assert recs[1].ttft_ms is not None


def test_async_clients(tracker):
    server = Server(lib=httpx2)

    async def main():
        oa = openai.AsyncOpenAI(
            api_key="k",
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(server.async_handler())),
        )
        an = anthropic.AsyncAnthropic(
            api_key="k",
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(server.async_handler())),
        )
        promptcache.wrap(oa, tracker)
        promptcache.wrap(an, tracker)
        r = await oa.chat.completions.create(model="gpt-4o", messages=MSGS)
        assert r.usage.prompt_tokens == 2006
        s = await oa.chat.completions.create(
            model="gpt-4o", messages=MSGS, stream=True, stream_options={"include_usage": True}
        )
        assert len([c async for c in s]) == 5
        m = await an.messages.create(
            model="claude-opus-4-6", max_tokens=8, messages=[{"role": "user", "content": "Hi"}]
        )
        assert m.usage.input_tokens == 12
        st = await an.messages.create(
            model="claude-opus-4-6",
            max_tokens=8,
            stream=True,
            messages=[{"role": "user", "content": "Hi"}],
        )
        assert len([e async for e in st]) == 6  # the SDK drops "ping"
        raw = await oa.chat.completions.with_raw_response.create(model="gpt-4o", messages=MSGS)
        assert raw.parse().usage.completion_tokens == 3

    asyncio.run(main())
    recs = tracker.records()
    assert sorted(r.cost for r in recs) == sorted([CHAT_COST] * 3 + [ANTH_COST] * 2)
    assert sum(r.stream for r in recs) == 2


def test_tracking_failures_are_logged_never_raised(tmp_path, caplog):
    class Broken:
        store_prompts = False

        def record(self, *a, **k):
            raise RuntimeError("disk on fire")

    _, client = openai_pair(Server())
    promptcache.wrap(client, Broken())
    with caplog.at_level(logging.ERROR, logger="promptcache.integrations.clients"):
        out = client.chat.completions.create(model="gpt-4o", messages=MSGS)
        chunks = list(
            client.chat.completions.create(
                model="gpt-4o", messages=MSGS, stream=True, stream_options={"include_usage": True}
            )
        )
    assert out.choices[0].message.content == "Hello there!" and len(chunks) == 5
    assert "disk on fire" in caplog.text


def test_http_errors_pass_through_and_record_nothing(tracker):
    _, client = openai_pair(Server(status=400))
    promptcache.wrap(client, tracker)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="gpt-4o", messages=MSGS)
    assert tracker.count() == 0


def test_wrap_twice_records_once_and_rejects_non_clients(tracker):
    _, client = openai_pair(Server())
    promptcache.wrap(client, tracker)
    promptcache.wrap(client, tracker)
    client.chat.completions.create(model="gpt-4o", messages=MSGS)
    assert tracker.count() == 1
    with pytest.raises(TypeError, match="openai or anthropic client"):
        promptcache.wrap(object())


def test_prompts_stored_only_when_the_tracker_asks(tmp_path):
    t = Tracker(tmp_path / "p.db", store_prompts=True)
    _, client = openai_pair(Server())
    promptcache.wrap(client, t)
    client.chat.completions.create(model="gpt-4o", messages=MSGS)
    assert "You are terse." in t.records()[0].prompt_text
