"""promptcache.wrap() for boto3's bedrock-runtime (converse, converse_stream, invoke_model)
and for google-genai, with the real clients: botocore answered through its ``before-send``
event with wire-format responses (JSON, and AWS event-stream frames with their CRCs for
ConverseStream), google-genai through an httpx2 MockTransport."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from promptcache import Tracker, wrap

boto3 = pytest.importorskip("boto3")
from botocore.awsrequest import AWSResponse  # noqa: E402

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
SYSTEM = "You answer questions about orders. " * 200


class Raw:
    """The raw body botocore reads: ``stream()`` chunks and ``read()``."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_: object):
        for i in range(0, len(self.data), 1024):
            yield self.data[i : i + 1024]

    def read(self, *_: object) -> bytes:
        data, self.data = self.data, b""
        return data


def frame(event_type: str, payload: dict) -> bytes:
    """One AWS event-stream message (prelude, string headers, payload, CRC32s)."""
    headers = b""
    for name, value in (
        (":event-type", event_type),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ):
        n, v = name.encode(), value.encode()
        headers += struct.pack(">B", len(n)) + n + b"\x07" + struct.pack(">H", len(v)) + v
    body = json.dumps(payload).encode()
    total = 12 + len(headers) + len(body) + 4
    prelude = struct.pack(">II", total, len(headers))
    prelude += struct.pack(">I", zlib.crc32(prelude))
    msg = prelude + headers + body
    return msg + struct.pack(">I", zlib.crc32(msg))


USAGE = {
    "inputTokens": 12,
    "outputTokens": 5,
    "totalTokens": 3017,
    "cacheReadInputTokens": 2000,
    "cacheWriteInputTokens": 1000,
}


def responder(request, **_):  # noqa: ANN001, ANN201 - botocore's before-send handler
    url = request.url
    if url.endswith("/converse"):
        body = {
            "output": {"message": {"role": "assistant", "content": [{"text": "Shipped."}]}},
            "stopReason": "end_turn",
            "usage": USAGE,
            "metrics": {"latencyMs": 321},
        }
        return AWSResponse(
            url, 200, {"content-type": "application/json"}, Raw(json.dumps(body).encode())
        )
    if url.endswith("/converse-stream"):
        data = b"".join(
            [
                frame("messageStart", {"role": "assistant"}),
                frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Ship"}}),
                frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "ped."}}),
                frame("messageStop", {"stopReason": "end_turn"}),
                frame("metadata", {"usage": USAGE, "metrics": {"latencyMs": 300}}),
            ]
        )
        return AWSResponse(
            url, 200, {"content-type": "application/vnd.amazon.eventstream"}, Raw(data)
        )
    if url.endswith("/invoke"):
        body = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": [{"type": "text", "text": "Shipped."}],
            "usage": {
                "input_tokens": 12,
                "output_tokens": 5,
                "cache_read_input_tokens": 2000,
                "cache_creation_input_tokens": 1000,
            },
        }
        return AWSResponse(
            url, 200, {"content-type": "application/json"}, Raw(json.dumps(body).encode())
        )
    raise AssertionError(url)


@pytest.fixture
def bedrock():
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
    )
    client.meta.events.register("before-send.bedrock-runtime.*", responder)
    return client


def converse_kwargs(question: str) -> dict:
    return {
        "modelId": MODEL,
        "system": [{"text": SYSTEM}, {"cachePoint": {"type": "default"}}],
        "messages": [{"role": "user", "content": [{"text": question}]}],
    }


def test_converse_converse_stream_and_invoke_model_are_recorded(bedrock, tmp_path) -> None:
    tracker = Tracker(tmp_path / "l.db")
    client = wrap(bedrock, tracker)
    assert wrap(client, tracker) is client  # twice is a no-op
    out = client.converse(**converse_kwargs("Where is order 1?"))
    assert out["output"]["message"]["content"][0]["text"] == "Shipped."
    stream = client.converse_stream(**converse_kwargs("Where is order 2?"))["stream"]
    texts = [ev["contentBlockDelta"]["delta"]["text"] for ev in stream if "contentBlockDelta" in ev]
    assert texts == ["Ship", "ped."]  # the caller sees every event
    body = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 16,
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "Where is order 3?"}],
    }
    resp = client.invoke_model(modelId=MODEL, body=json.dumps(body))
    assert json.loads(resp["body"].read())["content"][0]["text"] == "Shipped."  # intact
    recs = tracker.records()
    assert [r.api for r in recs] == ["converse", "converse_stream", "invoke_model"]
    for r in recs:
        # inputTokens 12 + read 2000 + write 1000, from the provider's fields
        assert (r.usage.uncached_input_tokens, r.usage.cache_read_tokens) == (12, 2000)
        assert r.usage.cache_write_tokens == 1000 and r.usage.output_tokens == 5
        assert r.provider == "bedrock" and r.model == MODEL
        assert r.latency_ms is not None and r.latency_ms > 0
    assert recs[1].stream and recs[1].ttft_ms is not None
    # attributed: the second converse shares the system prefix with the first
    assert recs[0].miss_cause == "hit" and recs[0].lineage is not None


def test_a_bedrock_miss_is_attributed_with_its_path(bedrock, tmp_path) -> None:
    tracker = Tracker(tmp_path / "l.db")
    client = wrap(bedrock, tracker, session="s1")

    def miss(request, **_):  # noqa: ANN001, ANN201
        body = {
            "output": {"message": {"role": "assistant", "content": [{"text": "ok"}]}},
            "stopReason": "end_turn",
            "usage": {
                "inputTokens": 12,
                "outputTokens": 1,
                "totalTokens": 3013,
                "cacheReadInputTokens": 0,
                "cacheWriteInputTokens": 3000,
            },
            "metrics": {"latencyMs": 1},
        }
        return AWSResponse(request.url, 200, {}, Raw(json.dumps(body).encode()))

    bedrock.meta.events.unregister("before-send.bedrock-runtime.*", responder)
    bedrock.meta.events.register("before-send.bedrock-runtime.*", miss)
    client.converse(**converse_kwargs("q"))
    changed = converse_kwargs("q")
    changed["system"][0]["text"] = "Today is 2026-12-01. " + SYSTEM
    client.converse(**changed)
    first, second = tracker.records()
    assert first.miss_cause == "cold"
    assert (second.miss_cause, second.miss_path) == ("prefix_changed", "$.system[0].text")


def test_wrap_refuses_other_boto3_services() -> None:
    s3 = boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b"
    )
    with pytest.raises(TypeError, match="bedrock-runtime"):
        wrap(s3)


# ---- google-genai -------------------------------------------------------------------------

genai = pytest.importorskip("google.genai")
httpx2 = pytest.importorskip("httpx2")

GEMINI_USAGE = {
    "promptTokenCount": 9000,
    "cachedContentTokenCount": 8192,
    "candidatesTokenCount": 7,
    "totalTokenCount": 9007,
}


def gemini_handler(request):  # noqa: ANN001, ANN201
    path = request.url.path
    answer = {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "Hello"}]}, "finishReason": "STOP"}
        ],
        "usageMetadata": GEMINI_USAGE,
        "modelVersion": "gemini-2.5-flash",
    }
    if path.endswith(":streamGenerateContent"):
        first = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}]}
        data = f"data: {json.dumps(first)}\r\n\r\ndata: {json.dumps(answer)}\r\n\r\n"
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=data)
    return httpx2.Response(200, json=answer)


def test_google_genai_generate_content_and_stream(tmp_path) -> None:
    from google.genai import types

    tracker = Tracker(tmp_path / "l.db")
    http = httpx2.Client(transport=httpx2.MockTransport(gemini_handler))
    client = genai.Client(api_key="k", http_options=types.HttpOptions(httpx_client=http))
    wrap(client, tracker)
    cfg = types.GenerateContentConfig(system_instruction=SYSTEM)
    r = client.models.generate_content(model="gemini-2.5-flash", contents="Hi", config=cfg)
    assert r.text == "Hello"
    chunks = list(
        client.models.generate_content_stream(model="gemini-2.5-flash", contents="Hi", config=cfg)
    )
    assert "".join(c.text or "" for c in chunks) == "HelHello"
    recs = tracker.records()
    assert [(r.api, r.stream) for r in recs] == [("gemini", False), ("gemini", True)]
    for rec in recs:
        assert (rec.usage.cache_read_tokens, rec.usage.uncached_input_tokens) == (8192, 808)
        assert rec.provider == "gemini" and rec.model == "gemini-2.5-flash"
    assert recs[1].miss_cause == "hit"
