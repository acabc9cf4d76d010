"""Structured outputs through the Chat Completions and Messages APIs with their official
clients, and bad schemas as one 400 in each provider's error shape (OpenAI, Anthropic;
Gemini, Bedrock and Responses are in their own modules). Outputs are validated with
``jsonschema``, independently of the grammar engine."""

from __future__ import annotations

import json

import anthropic
import jsonschema
import openai
import pytest

SCHEMA = {
    "type": "object",
    "properties": {
        "colour": {"enum": ["red", "green", "blue"]},
        "sizes": {"type": "array", "items": {"type": "integer", "maximum": 50}, "maxItems": 3},
    },
    "required": ["colour", "sizes"],
    "additionalProperties": False,
}
USER = {"role": "user", "content": "Pick a colour and some sizes."}


@pytest.fixture(scope="module")
def server(server_factory):
    return server_factory()


@pytest.fixture(scope="module")
def oai(server):
    return server.openai_client(max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def claude(server):
    return server.anthropic_client(max_retries=0, timeout=120)


def test_chat_json_schema_strict_and_json_object(oai):
    fmt = {"type": "json_schema", "json_schema": {"name": "pick", "schema": SCHEMA, "strict": True}}
    for seed in range(3):
        r = oai.chat.completions.create(
            model="m", messages=[USER], max_tokens=40, seed=seed, response_format=fmt
        )
        jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)
    r = oai.chat.completions.create(
        model="m", messages=[USER], max_tokens=60, response_format={"type": "json_object"}
    )
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_chat_stream_forced_tool_call(oai):
    tool = {"type": "function", "function": {"name": "pick", "parameters": SCHEMA}}
    chunks = list(
        oai.chat.completions.create(
            model="m",
            messages=[USER],
            max_tokens=40,
            tools=[tool],
            tool_choice="required",
            stream=True,
        )
    )
    calls = [tc for c in chunks for ch in c.choices for tc in (ch.delta.tool_calls or [])]
    assert calls[0].function.name == "pick"
    # the arguments arrive in pieces (tests/local_engine/server/test_tool_call_stream.py)
    jsonschema.validate(json.loads("".join(tc.function.arguments for tc in calls)), SCHEMA)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(
    "schema, words",
    [({"type": "strin"}, "strin"), ({"type": "object", "if": {}, "then": {}}, '"if"')],
    ids=["invalid", "unsupported-keyword"],
)
def test_chat_bad_schema_is_one_400(oai, schema, words):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(
            model="m",
            messages=[USER],
            max_tokens=2,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
        )
    body = e.value.body
    assert body["type"] == "invalid_request_error" and words in body["message"]
    assert body["code"] == "invalid_json_schema"


def test_anthropic_bad_tool_schema_is_one_400_in_anthropic_shape(claude):
    tool = {"name": "pick", "input_schema": {"type": "object", "not": {"required": ["a"]}}}
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(
            model="m", max_tokens=5, messages=[USER], tools=[tool], tool_choice={"type": "any"}
        )
    err = e.value.body["error"]
    assert err["type"] == "invalid_request_error" and '"not"' in err["message"]


def test_anthropic_stream_forced_tool_use(claude):
    tool = {"name": "pick", "input_schema": SCHEMA}
    with claude.messages.stream(
        model="m",
        max_tokens=40,
        messages=[USER],
        tools=[tool],
        tool_choice={"type": "tool", "name": "pick"},
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    (block,) = final.content
    assert block.type == "tool_use" and block.name == "pick"
    jsonschema.validate(block.input, SCHEMA)
