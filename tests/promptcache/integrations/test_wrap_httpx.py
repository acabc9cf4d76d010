"""``promptcache.wrap`` on a bare httpx client, calls without usage, the engine's cache note
and wrapping a client already tracked for another tracker -- over httpx.MockTransport.

The mock answers with Chat Completions / Messages shapes (OpenAI API reference, "Create chat
completion" and its streaming chunks; Anthropic "Messages"): a stream without
``stream_options.include_usage`` carries no ``usage`` chunk.
"""

from __future__ import annotations

import json
import warnings

import httpx
import openai
import pytest

import promptcache
from promptcache import PromptCacheWarning, Tracker
from promptcache.integrations.clients import CACHE_NOTE_HEADER
from promptcache.integrations.httpx_hooks import WrapConflictError

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}
    ],
    "usage": {
        "prompt_tokens": 1300,
        "completion_tokens": 2,
        "total_tokens": 1302,
        "prompt_tokens_details": {"cached_tokens": 0},
    },
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "Hi"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 12,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
        "output_tokens": 2,
    },
}


def stream_without_usage() -> bytes:
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def handler(note: str | None = None):
    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            return httpx.Response(200, json={"object": "list", "data": []})
        body = json.loads(request.content)
        headers = {CACHE_NOTE_HEADER: note} if note else {}
        if request.url.path.endswith("/messages"):
            return httpx.Response(200, json=MESSAGE, headers=headers)
        if body.get("stream"):
            headers["content-type"] = "text/event-stream"
            return httpx.Response(200, content=stream_without_usage(), headers=headers)
        return httpx.Response(200, json=CHAT, headers=headers)

    return answer


def messages(n: int = 1) -> list[dict]:
    return [{"role": "system", "content": "You plan trips. " * 300}] + [
        {"role": "user", "content": f"q{i}"} for i in range(n)
    ]


def test_bare_httpx_client_labels_each_request_by_its_host(tmp_path) -> None:
    tracker = Tracker(tmp_path / "l.db")
    http = promptcache.wrap(httpx.Client(transport=httpx.MockTransport(handler())), tracker)
    http.post(
        "https://api.openai.com/v1/chat/completions",
        json={"model": "gpt-4o", "messages": messages()},
    )
    http.post(
        "https://api.anthropic.com/v1/messages",
        json={"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": messages()[1:]},
    )
    http.get("https://api.openai.com/v1/models")  # not a completion: not recorded
    recs = tracker.records()
    assert [(r.provider, r.api) for r in recs] == [
        ("openai", "chat.completions"),
        ("anthropic", "messages"),
    ]
    assert recs[0].usage.prompt_tokens == 1300 and recs[1].usage.prompt_tokens == 12


def test_wrap_again_same_tracker_noop_other_tracker_raises(tmp_path) -> None:
    tracker = Tracker(tmp_path / "a.db")
    http = httpx.Client(transport=httpx.MockTransport(handler()))
    client = openai.OpenAI(api_key="k", http_client=http)
    promptcache.wrap(client, tracker)
    assert promptcache.wrap(http, tracker) is http  # the same httpx client, same tracker
    assert promptcache.wrap(client) is client  # tracker=None accepts the existing one
    assert len(http.event_hooks["request"]) == 1
    with pytest.raises(WrapConflictError, match="already tracked for Tracker"):
        promptcache.wrap(http, Tracker(tmp_path / "b.db"))


def test_stream_without_usage_is_recorded_and_warned_once(tmp_path) -> None:
    tracker = Tracker(tmp_path / "l.db")
    client = promptcache.wrap(
        openai.OpenAI(
            api_key="k", http_client=httpx.Client(transport=httpx.MockTransport(handler()))
        ),
        tracker,
    )
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for n in (1, 2):
            for _ in client.chat.completions.create(
                model="gpt-4o", messages=messages(n), stream=True
            ):
                pass
    advice = [w for w in seen if issubclass(w.category, PromptCacheWarning)]
    assert len(advice) == 1 and "include_usage" in str(advice[0].message)
    recs = tracker.records()
    assert len(recs) == 2
    assert all("usage_unknown" in r.usage.flags and r.cost is None for r in recs)
    assert all(r.miss_cause is None and r.stream for r in recs)
    assert tracker.usage_coverage() == (2, 2, 0)


def test_engine_cache_note_makes_a_zero_read_no_breakpoint(tmp_path) -> None:
    note = "cache-mode anthropic: usage follows Anthropic's rules"
    tracker = Tracker(tmp_path / "l.db")
    transport = httpx.MockTransport(handler(note))
    client = promptcache.wrap(
        openai.OpenAI(
            base_url="http://127.0.0.1:9/v1",
            api_key="k",
            http_client=httpx.Client(transport=transport),
        ),
        tracker,
    )
    for n in (1, 2):
        client.chat.completions.create(model="gpt-4o", messages=messages(n))
    recs = tracker.records()
    assert [r.miss_cause for r in recs] == ["no_breakpoint", "no_breakpoint"]
    assert note in recs[1].miss_detail
    # without the note the same exchange is not blamed on markers
    plain = Tracker(tmp_path / "p.db")
    client = promptcache.wrap(
        openai.OpenAI(
            base_url="http://127.0.0.1:9/v1",
            api_key="k",
            http_client=httpx.Client(transport=httpx.MockTransport(handler())),
        ),
        plain,
    )
    for n in (1, 2):
        client.chat.completions.create(model="gpt-4o", messages=messages(n))
    assert [r.miss_cause for r in plain.records()] == ["cold", "provider_unknown"]
