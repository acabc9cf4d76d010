"""The OpenAI Responses API through the official ``openai`` client: ``responses.create``,
``responses.stream``, ``store`` / ``previous_response_id`` / ``retrieve`` / ``delete``,
structured outputs and forced tool calls, and the SDK's ``to_openai(api="responses")`` output
sent as is.

Expected token counts are worked out here: the conversation rendered with the model's chat
template and tokenized as one text (``chat_ids``); cached tokens in automatic mode are the
whole 16-token blocks of a repeated prompt; in ``openai`` mode, OpenAI's documented rule
(1,024 tokens, then steps of 128, https://developers.openai.com/api/docs/guides/prompt-caching,
read 2026-11-29) applied by hand.
"""

from __future__ import annotations

import json
import uuid

import httpx
import jsonschema
import openai
import pytest

import promptcache
from local_engine.server.response_store import ResponseStore, StoredResponse

BLOCK = 16


@pytest.fixture(scope="module")
def server(server_factory):
    return server_factory()


@pytest.fixture(scope="module")
def client(server):
    return server.openai_client(max_retries=0, timeout=120)


def _instructions(tag: str) -> str:
    return (
        f"[{tag}] You are the support assistant of Example Ltd. Answer in one short sentence. "
        "Our shop sells kettles, toasters and coffee machines; opening hours are nine to five."
    )


def test_create_plain_usage_and_cached_on_repeat(client, chat_ids):
    instructions = _instructions(uuid.uuid4().hex[:8])
    question = "What are your opening hours?"
    kw = dict(model="local", instructions=instructions, input=question, max_output_tokens=4)
    r = client.responses.create(**kw, temperature=0)
    n = len(
        chat_ids(
            [{"role": "system", "content": instructions}, {"role": "user", "content": question}]
        )
    )
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.status in ("completed", "incomplete")
    assert r.output[0].type == "message" and r.output[0].role == "assistant"
    assert isinstance(r.output_text, str)
    assert r.usage.input_tokens == n
    assert r.usage.input_tokens_details.cached_tokens == 0  # unique first block
    assert 1 <= r.usage.output_tokens <= 4
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    assert r.usage.total_tokens == n + r.usage.output_tokens
    again = client.responses.create(**kw, temperature=0)
    # the last prompt token is always computed again (its logits start the reply): whole blocks
    # of the first n - 1 tokens are reused
    assert again.usage.input_tokens_details.cached_tokens == (n - 1) // BLOCK * BLOCK
    assert again.output_text == r.output_text  # greedy


def test_stream_events_rebuild_the_final_response(client, chat_ids):
    instructions = _instructions(uuid.uuid4().hex[:8])
    kinds, deltas = [], []
    with client.responses.stream(
        model="local", instructions=instructions, input="Hi!", max_output_tokens=6, temperature=0
    ) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert "".join(deltas) == final.output_text
    n = len(
        chat_ids([{"role": "system", "content": instructions}, {"role": "user", "content": "Hi!"}])
    )
    assert final.usage.input_tokens == n
    assert final.usage.total_tokens == n + final.usage.output_tokens


def test_store_previous_response_id_retrieve_and_delete(client, chat_ids):
    first_q = f"[{uuid.uuid4().hex[:8]}] Name a kitchen appliance."
    r1 = client.responses.create(model="local", input=first_q, max_output_tokens=5, temperature=0)
    r2 = client.responses.create(
        model="local",
        previous_response_id=r1.id,
        input="And another one?",
        max_output_tokens=3,
        temperature=0,
    )
    convo = [
        {"role": "user", "content": first_q},
        {"role": "assistant", "content": r1.output_text},
        {"role": "user", "content": "And another one?"},
    ]
    assert r2.previous_response_id == r1.id
    assert r2.usage.input_tokens == len(chat_ids(convo))
    got = client.responses.retrieve(r1.id)
    assert got.id == r1.id and got.output_text == r1.output_text
    client.responses.delete(r1.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r1.id)
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="local", previous_response_id=r1.id, input="x")
    assert e.value.body["param"] == "previous_response_id"


def test_store_false_is_not_retrievable(client):
    r = client.responses.create(model="local", input="Hello", max_output_tokens=1, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r.id)


def test_response_store_is_bounded_least_recently_used_first():
    store = ResponseStore(max_entries=2)
    for k in "abc":
        store.put(k, StoredResponse({"id": k}, []))
    assert store.get("a") is None and len(store) == 2
    store.get("b")  # b is now the most recent
    store.put("d", StoredResponse({"id": "d"}, []))
    assert store.get("c") is None and store.get("b") is not None


def test_openai_mode_prompt_cache_key_and_128_token_steps(server, policy, tokenizer):
    c = server.openai_client(
        max_retries=0, timeout=120, default_headers={"X-Promptcache-Cache-Mode": "openai"}
    )
    doc = policy(uuid.uuid4().hex[:8])
    kw = dict(model="gpt-4o", instructions=doc, input="Summarise.", max_output_tokens=1)
    a = c.responses.create(**kw, prompt_cache_key="tenant-a")
    b = c.responses.create(**kw, prompt_cache_key="tenant-a")
    other = c.responses.create(**kw, prompt_cache_key="tenant-b")
    n = a.usage.input_tokens
    assert n > 1024
    expected = 1024 + (n - 1024) // 128 * 128  # OpenAI's documented steps, by hand
    assert a.usage.input_tokens_details.cached_tokens == 0
    assert b.usage.input_tokens_details.cached_tokens == expected
    assert other.usage.input_tokens_details.cached_tokens == 0  # another cache key


def test_sdk_renderer_output_is_sent_as_is(client):
    prompt = promptcache.build(
        system=_instructions(uuid.uuid4().hex[:8]),
        tools=[
            {
                "name": "get_weather",
                "description": "Weather of a city",
                "input_schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            }
        ],
        messages=[{"role": "user", "content": "hi"}],
        dynamic="What time is it?",
    )
    kw = prompt.to_openai("gpt-4o", api="responses")
    r = client.responses.create(**kw, max_output_tokens=3)
    assert r.status in ("completed", "incomplete") and r.usage.input_tokens > 0
    again = client.responses.create(**kw, max_output_tokens=3)
    assert again.usage.input_tokens_details.cached_tokens == r.usage.input_tokens // BLOCK * BLOCK


SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 20},
        "rating": {"type": "integer", "minimum": 1, "maximum": 5},
    },
    "required": ["city", "rating"],
    "additionalProperties": False,
}


def test_text_format_json_schema_strict_validates(client):
    r = client.responses.create(
        model="local",
        input="Rate a city.",
        max_output_tokens=40,
        text={
            "format": {"type": "json_schema", "name": "rating", "schema": SCHEMA, "strict": True}
        },
    )
    jsonschema.validate(json.loads(r.output_text), SCHEMA)


def test_tool_choice_required_returns_a_function_call(client):
    tools = [
        {"type": "function", "name": "get_weather", "parameters": SCHEMA, "strict": True},
        {
            "type": "function",
            "name": "get_time",
            "parameters": {
                "type": "object",
                "properties": {"tz": {"enum": ["UTC", "CET"]}},
                "required": ["tz"],
                "additionalProperties": False,
            },
        },
    ]
    r = client.responses.create(
        model="local", input="Weather?", tools=tools, tool_choice="required", max_output_tokens=40
    )
    call = r.output[0]
    assert call.type == "function_call" and call.name in ("get_weather", "get_time")
    schema = tools[0]["parameters"] if call.name == "get_weather" else tools[1]["parameters"]
    jsonschema.validate(json.loads(call.arguments), schema)
    named = client.responses.create(
        model="local",
        input="Time?",
        tools=tools,
        tool_choice={"type": "function", "name": "get_time"},
        max_output_tokens=40,
    )
    assert named.output[0].name == "get_time"
    with client.responses.stream(
        model="local", input="Time?", tools=tools, tool_choice="required", max_output_tokens=40
    ) as stream:
        final = stream.get_final_response()
    assert final.output[0].type == "function_call"


@pytest.mark.parametrize(
    "fmt, words",
    [
        ({"type": "json_schema", "name": "x", "schema": {"type": "strin"}}, "strin"),
        ({"type": "json_schema", "name": "x", "schema": {"type": "object", "not": {}}}, '"not"'),
        (
            {
                "type": "json_schema",
                "name": "x",
                "strict": True,
                "schema": {"type": "object", "properties": {"a": {"type": "string"}}},
            },
            "additionalProperties",
        ),
    ],
    ids=["invalid-type", "unsupported-keyword", "strict-rules"],
)
def test_bad_schema_is_one_400_in_openai_shape(client, fmt, words):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model="local", input="x", text={"format": fmt}, max_output_tokens=2)
    body = e.value.body
    assert body["type"] == "invalid_request_error" and words in body["message"]


def test_unknown_tool_in_tool_choice_is_400(client):
    tools = [{"type": "function", "name": "a", "parameters": {"type": "object"}}]
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(
            model="local", input="x", tools=tools, tool_choice={"type": "function", "name": "b"}
        )
    assert e.value.body["param"] == "tool_choice" and "'b'" in e.value.body["message"]


def test_unknown_response_is_404_in_openai_shape(server):
    r = httpx.get(server.base_url + "/v1/responses/resp_nope")
    assert r.status_code == 404 and r.json()["error"]["param"] == "response_id"
