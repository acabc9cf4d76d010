"""Bedrock Runtime through the official ``boto3`` client (``endpoint_url``, SigV4 signed with
dummy credentials): converse (plain, cached on repeat with ``cachePoint``), converse_stream
(event-stream frames decoded by botocore), invoke_model and invoke_model_with_response_stream
with an Anthropic body (boto3, and the ``anthropic`` SDK's ``AnthropicBedrock`` client), forced tool
use, the SDK's ``to_bedrock`` output sent as is, and the event-stream encoder checked by
botocore's own parser.

Bedrock's usage (https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html,
read 2026-12-03): ``inputTokens`` are the uncached input tokens, ``totalTokens`` = input +
output + cache read + cache write. Expected counts are worked out here from the chat
template tokenized as one text; the checkpoint minimum is ``promptcache.limits``' figure
for the model.
"""

from __future__ import annotations

import json
import uuid

import boto3
import botocore.config
import botocore.exceptions
import jsonschema
import pytest
from botocore.eventstream import EventStreamBuffer

import promptcache
from local_engine.server.eventstream import encode_event, encode_message
from promptcache.limits import cache_limits

MODEL = "anthropic.claude-sonnet-4-5-20250929-v1:0"


@pytest.fixture(scope="module")
def server(server_factory):
    return server_factory()


def _client(server, mode=None):
    c = boto3.client(
        "bedrock-runtime",
        endpoint_url=server.base_url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=botocore.config.Config(retries={"max_attempts": 0}, read_timeout=120),
    )
    if mode:
        c.meta.events.register(
            "before-send.bedrock-runtime.*",
            lambda request, **kw: request.headers.__setitem__("X-Promptcache-Cache-Mode", mode),
        )
    return c


@pytest.fixture(scope="module")
def client(server):
    return _client(server, mode="bedrock")


def _upto(tokenizer, messages, text: str) -> int:
    full = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return len(tokenizer.encode(full[: full.rindex(text) + len(text)]))


def test_event_stream_frames_decode_with_botocore():
    buf = EventStreamBuffer()
    buf.add_data(
        encode_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hé"}})
    )
    buf.add_data(encode_message({":message-type": "event", ":event-type": "x"}, b""))
    first, second = list(buf)
    assert first.headers == {
        ":event-type": "contentBlockDelta",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    assert json.loads(first.payload) == {"contentBlockIndex": 0, "delta": {"text": "hé"}}
    assert second.payload == b"" and second.headers[":event-type"] == "x"


def test_converse_plain_and_cache_point_usage(client, policy, tokenizer, chat_ids):
    doc = policy(uuid.uuid4().hex[:8], n=60)
    kw = dict(
        modelId=MODEL,
        system=[{"text": doc}, {"cachePoint": {"type": "default"}}],
        messages=[{"role": "user", "content": [{"text": "Summarise."}]}],
        inferenceConfig={"maxTokens": 3, "temperature": 0},
    )
    msgs = [{"role": "system", "content": doc}, {"role": "user", "content": "Summarise."}]
    n = len(chat_ids(msgs))
    cached = _upto(tokenizer, msgs, doc)  # the checkpoint ends after the system text
    assert cached >= cache_limits(MODEL, "bedrock").min_tokens
    first = client.converse(**kw)
    u = first["usage"]
    assert u["cacheReadInputTokens"] == 0 and u["cacheWriteInputTokens"] == cached
    assert u["inputTokens"] == n - cached
    assert u["totalTokens"] == n + u["outputTokens"]
    assert first["stopReason"] in ("end_turn", "max_tokens")
    assert first["output"]["message"]["role"] == "assistant"
    again = client.converse(**kw)["usage"]
    assert again["cacheReadInputTokens"] == cached and again["cacheWriteInputTokens"] == 0
    assert again["inputTokens"] == n - cached


def test_cache_point_below_the_minimum_writes_nothing(client, chat_ids):
    kw = dict(
        modelId=MODEL,
        system=[{"text": f"[{uuid.uuid4().hex[:6]}] Short."}, {"cachePoint": {"type": "default"}}],
        messages=[{"role": "user", "content": [{"text": "Hi"}]}],
        inferenceConfig={"maxTokens": 1},
    )
    client.converse(**kw)
    u = client.converse(**kw)["usage"]
    assert u["cacheReadInputTokens"] == 0 and u["cacheWriteInputTokens"] == 0


def test_converse_stream_events(client, chat_ids):
    kw = dict(
        modelId=MODEL,
        messages=[{"role": "user", "content": [{"text": "Say hi."}]}],
        inferenceConfig={"maxTokens": 5, "temperature": 0},
    )
    whole = client.converse(**kw)
    events = list(client.converse_stream(**kw)["stream"])
    kinds = [next(iter(e)) for e in events]
    assert kinds[0] == "messageStart" and kinds[-2:] == ["messageStop", "metadata"]
    text = "".join(
        e["contentBlockDelta"]["delta"]["text"] for e in events if "contentBlockDelta" in e
    )
    assert text == whole["output"]["message"]["content"][0]["text"]
    usage = events[-1]["metadata"]["usage"]
    assert usage["inputTokens"] == len(chat_ids([{"role": "user", "content": "Say hi."}]))


TOOL_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}},
    "required": ["city"],
    "additionalProperties": False,
}


def test_forced_tool_use(client):
    tools = {
        "tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": TOOL_SCHEMA}}}],
        "toolChoice": {"any": {}},
    }
    r = client.converse(
        modelId=MODEL,
        messages=[{"role": "user", "content": [{"text": "Weather in Oslo?"}]}],
        toolConfig=tools,
        inferenceConfig={"maxTokens": 40},
    )
    assert r["stopReason"] == "tool_use"
    use = r["output"]["message"]["content"][0]["toolUse"]
    assert use["name"] == "get_weather"
    jsonschema.validate(use["input"], TOOL_SCHEMA)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        client.converse(
            modelId=MODEL,
            messages=[{"role": "user", "content": [{"text": "x"}]}],
            toolConfig={**tools, "toolChoice": {"tool": {"name": "nope"}}},
        )
    assert e.value.response["Error"]["Code"] == "ValidationException"
    assert "nope" in e.value.response["Error"]["Message"]


def test_converse_stream_forced_tool_use_streams_the_input_in_pieces(client):
    kw = dict(
        modelId=MODEL,
        messages=[{"role": "user", "content": [{"text": "Weather in Oslo?"}]}],
        toolConfig={
            "tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": TOOL_SCHEMA}}}],
            "toolChoice": {"tool": {"name": "get_weather"}},
        },
        inferenceConfig={"maxTokens": 40, "temperature": 0},
    )
    plain = client.converse(**kw)["output"]["message"]["content"][0]["toolUse"]
    events = list(client.converse_stream(**kw)["stream"])  # frames decoded by botocore
    (start,) = [
        e["contentBlockStart"]["start"]["toolUse"] for e in events if "contentBlockStart" in e
    ]
    assert start["name"] == "get_weather" and start["toolUseId"].startswith("tooluse_")
    pieces = [
        e["contentBlockDelta"]["delta"]["toolUse"]["input"]
        for e in events
        if "contentBlockDelta" in e
    ]
    assert (
        len(pieces) > 1 and json.loads("".join(pieces)) == plain["input"]
    )  # greedy: the same call
    jsonschema.validate(plain["input"], TOOL_SCHEMA)
    (stop,) = [e["messageStop"] for e in events if "messageStop" in e]
    assert stop["stopReason"] == "tool_use"


def test_invoke_model_with_an_anthropic_body(client, chat_ids):
    body = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 3,
        "messages": [{"role": "user", "content": "Hello"}],
    }
    r = client.invoke_model(modelId=MODEL, body=json.dumps(body))
    msg = json.loads(r["body"].read())
    assert msg["type"] == "message" and msg["role"] == "assistant"
    assert msg["usage"]["input_tokens"] == len(chat_ids([{"role": "user", "content": "Hello"}]))


def test_sdk_renderer_output_is_sent_as_is(client):
    prompt = promptcache.build(
        system=f"[{uuid.uuid4().hex[:8]}] You are terse.",
        messages=[{"role": "user", "content": "hi"}],
        dynamic="What time is it?",
    )
    kw = prompt.to_bedrock(MODEL)
    kw["inferenceConfig"] = {"maxTokens": 2}
    r = client.converse(**kw)
    assert r["usage"]["inputTokens"] > 0 and r["output"]["message"]["content"]


def test_unsupported_block_is_a_validation_exception(client):
    with pytest.raises(botocore.exceptions.ClientError) as e:
        client.converse(
            modelId=MODEL,
            messages=[
                {
                    "role": "user",
                    "content": [{"guardContent": {"text": {"text": "x"}}}],
                }
            ],
        )
    assert e.value.response["Error"]["Code"] == "ValidationException"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_invoke_model_with_response_stream_decodes_with_botocore(client, chat_ids):
    user = [{"role": "user", "content": "Hello"}]
    body = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 4,
        "temperature": 0,
        "messages": user,
    }
    plain = json.loads(client.invoke_model(modelId=MODEL, body=json.dumps(body))["body"].read())
    r = client.invoke_model_with_response_stream(modelId=MODEL, body=json.dumps(body))
    assert r["contentType"] == "application/json"
    events = [json.loads(e["chunk"]["bytes"]) for e in r["body"]]  # botocore decoded the frames
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.index("content_block_start") < kinds.index("content_block_stop")
    start = events[0]["message"]
    assert start["role"] == "assistant"
    assert start["usage"]["input_tokens"] == len(chat_ids(user))
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert text == plain["content"][0]["text"]  # greedy: the same text as invoke_model
    (delta,) = [e for e in events if e["type"] == "message_delta"]
    assert delta["usage"]["output_tokens"] == 4 and delta["delta"]["stop_reason"] == "max_tokens"


def test_anthropic_bedrock_client_streams_through_invoke_with_response_stream(server):
    anthropic = pytest.importorskip("anthropic")
    claude = anthropic.AnthropicBedrock(
        base_url=server.base_url,
        aws_access_key="test",
        aws_secret_key="test",
        aws_region="us-east-1",
        max_retries=0,
    )
    with claude.messages.stream(
        model=MODEL,
        max_tokens=5,
        messages=[{"role": "user", "content": "Hello"}],
        extra_body={"temperature": 0},
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    plain = claude.messages.create(
        model=MODEL,
        max_tokens=5,
        messages=[{"role": "user", "content": "Hello"}],
        extra_body={"temperature": 0},
    )
    assert final.content[0].text == streamed == plain.content[0].text  # greedy: the same text
    assert final.usage.output_tokens == 5 and final.stop_reason == "max_tokens"
