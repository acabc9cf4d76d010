import json

import pytest

from promptcache import build
from promptcache.providers.openai import prompt_cache_key

from ._clients import Recorder, openai_client

TOOL = {
    "name": "weather",
    "description": "Weather.",
    "input_schema": {
        "type": "object",
        "required": ["city"],
        "properties": {"city": {"type": "string"}},
    },
}
HISTORY = [
    {"role": "user", "content": "Hi"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "5C"},
]
SCHEMA_SORTED = {"properties": {"city": {"type": "string"}}, "required": ["city"], "type": "object"}


def prompt():
    return build(
        system="You are terse.",
        tools=[TOOL],
        session="User: Ann",
        messages=HISTORY,
        dynamic="Now: 10:00",
    )


def expected_chat(p, model):
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "system", "content": "User: Ann"},
            {"role": "user", "content": "Hi"},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "function": {"arguments": '{"city":"Oslo"}', "name": "weather"},
                        "id": "c1",
                        "type": "function",
                    }
                ],
            },
            {"content": "5C", "role": "tool", "tool_call_id": "c1"},
            {"role": "user", "content": "Now: 10:00"},
        ],
        "tools": [
            {
                "function": {
                    "description": "Weather.",
                    "name": "weather",
                    "parameters": SCHEMA_SORTED,
                },
                "type": "function",
            }
        ],
        "prompt_cache_key": "pc-" + p.prefix_hash[:32],
    }


def test_chat_request_sent_by_the_official_client():
    rec = Recorder()
    p = prompt()
    openai_client(rec).chat.completions.create(**p.to_openai("gpt-4o"))
    assert rec.requests[-1][0] == "http://mock/v1/chat/completions"
    assert rec.json == expected_chat(p, "gpt-4o")


def test_frozen_bytes_identical_across_requests():
    rec = Recorder()
    client = openai_client(rec)
    tool2 = {
        "input_schema": {
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "type": "object",
        },
        "description": "Weather.",
        "name": "weather",
    }
    client.chat.completions.create(
        **build(system="You are terse.", tools=[TOOL], dynamic="q1").to_openai("gpt-4o")
    )
    client.chat.completions.create(
        **build(
            system="You are terse.\r\n", tools=[tool2], dynamic="a different question"
        ).to_openai("gpt-4o")
    )
    a, b = (json.loads(r[2]) for r in rec.requests)
    assert json.dumps(a["tools"]) == json.dumps(b["tools"])
    assert a["messages"][0] == b["messages"][0]
    assert a["prompt_cache_key"] == b["prompt_cache_key"]
    # and in the raw bytes: the body up to the dynamic message is a shared prefix
    raw_a, raw_b = rec.requests[0][2], rec.requests[1][2]
    cut = raw_a.index(b'"content":"q1"')
    assert raw_a[:cut] == raw_b[:cut]


def test_responses_request_sent_by_the_official_client():
    rec = Recorder()
    p = prompt()
    openai_client(rec).responses.create(**p.to_openai("gpt-4o", api="responses"))
    assert rec.requests[-1][0] == "http://mock/v1/responses"
    assert rec.json == {
        "model": "gpt-4o",
        "input": [
            {"content": [{"text": "You are terse.", "type": "input_text"}], "role": "system"},
            {"content": [{"text": "User: Ann", "type": "input_text"}], "role": "system"},
            {"content": [{"text": "Hi", "type": "input_text"}], "role": "user"},
            {
                "arguments": '{"city":"Oslo"}',
                "call_id": "c1",
                "name": "weather",
                "type": "function_call",
            },
            {"call_id": "c1", "output": "5C", "type": "function_call_output"},
            {"content": [{"text": "Now: 10:00", "type": "input_text"}], "role": "user"},
        ],
        "tools": [
            {
                "description": "Weather.",
                "name": "weather",
                "parameters": SCHEMA_SORTED,
                "strict": False,
                "type": "function",
            }
        ],
        "prompt_cache_key": "pc-" + p.prefix_hash[:32],
    }


@pytest.mark.parametrize(
    "model,expected",
    [
        ("gpt-4o", None),
        ("gpt-4.1", "24h"),
        ("gpt-5.1", "24h"),
        ("gpt-5.5", "24h"),
        ("gpt-5.6", None),  # deprecated there: explicit breakpoints instead
        ("SmolLM2-135M-Instruct", None),
    ],
)
def test_retention_where_the_model_supports_it(model, expected):
    kw = prompt().to_openai(model)
    assert kw.get("prompt_cache_retention") == expected


def test_retention_validated_and_overridable():
    assert (
        prompt().to_openai("gpt-5.1", retention="in_memory")["prompt_cache_retention"]
        == "in_memory"
    )
    assert "prompt_cache_retention" not in prompt().to_openai("gpt-5.1", retention=False)
    with pytest.raises(ValueError, match="in_memory"):
        prompt().to_openai("gpt-5.5", retention="in_memory")
    assert prompt().to_openai("gpt-4o", cache_key="tenant-7")["prompt_cache_key"] == "tenant-7"
    with pytest.raises(ValueError):
        prompt().to_openai("gpt-4o", api="completions")


def test_explicit_breakpoints_for_gpt_5_6(word_tokens):
    # words as tokens: system 1100 words -> the frozen prefix reaches 1,024 on its own.
    system = " ".join(["policy"] * 1100)
    p = build(system=system, tools=[TOOL], session="User: Ann", messages=HISTORY, dynamic="q")
    rec = Recorder()
    openai_client(rec).chat.completions.create(**p.to_openai("gpt-5.6"))
    msgs = rec.json["messages"]
    marker = {"mode": "explicit"}
    assert msgs[0]["content"] == [
        {"prompt_cache_breakpoint": marker, "text": system, "type": "text"}
    ]
    assert msgs[1]["content"] == [
        {"prompt_cache_breakpoint": marker, "text": "User: Ann", "type": "text"}
    ]
    # newest stable history turn: the tool message (assistant parts cannot carry one)
    assert msgs[4]["content"] == [{"prompt_cache_breakpoint": marker, "text": "5C", "type": "text"}]
    assert msgs[5]["content"] == "q"  # dynamic: never marked
    assert "prompt_cache_retention" not in rec.json


def test_no_breakpoint_under_the_minimum(word_tokens):
    p = build(system="short", messages=HISTORY, dynamic="q")
    kw = p.to_openai("gpt-5.6")
    assert all(isinstance(m.get("content"), (str, type(None))) for m in kw["messages"])


def test_prompt_cache_key_is_the_prefix_hash():
    p = prompt()
    assert prompt_cache_key(p) == "pc-" + p.prefix_hash[:32]


def test_openai_compatible_for_the_local_engine():
    rec = Recorder()
    p = prompt()
    kw = p.to_openai_compatible("SmolLM2-135M-Instruct", cache_salt="tenant-a")
    openai_client(rec).chat.completions.create(**kw)
    sent = rec.json
    expected = expected_chat(p, "SmolLM2-135M-Instruct")
    del expected["prompt_cache_key"]
    assert sent == {**expected, "cache_salt": "tenant-a"}
    with pytest.raises(ValueError):
        p.to_openai_compatible("m", cache_salt="")


def test_images_and_anthropic_only_blocks():
    img = {
        "role": "user",
        "content": [
            {"type": "text", "text": "see"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
            },
        ],
    }
    kw = build(messages=[img]).to_openai("gpt-4o")
    assert kw["messages"][0]["content"] == [
        {"text": "see", "type": "text"},
        {"image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}, "type": "image_url"},
    ]
    thinking = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}],
    }
    with pytest.raises(ValueError, match="thinking"):
        build(messages=[thinking]).to_openai("gpt-4o")
