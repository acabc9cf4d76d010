"""Anthropic rendering and breakpoint placement, checked against hand-worked positions.

Token counts come from the ``word_tokens`` fixture (one token per whitespace-separated word;
canonical JSON has no spaces, so one tool schema counts 1). The model is claude-sonnet-4-6:
minimum 1,024 tokens, at most 4 breakpoints, 20-block lookback (promptcache.limits)."""

import pytest

from promptcache import build

from ._clients import Recorder, anthropic_client

MODEL = "claude-sonnet-4-6"
TOOL = {
    "name": "weather",
    "description": "Weather.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
EPH = {"type": "ephemeral"}
EPH_1H = {"ttl": "1h", "type": "ephemeral"}


def W(n, word="w"):
    return " ".join([word] * n)


def send(kw):
    rec = Recorder()
    anthropic_client(rec).messages.create(**kw)
    return rec


def markers(body):
    """(location, cache_control) of every marker, in tools -> system -> messages order."""
    out = []
    for i, t in enumerate(body.get("tools", [])):
        if "cache_control" in t:
            out.append((f"tools[{i}]", t["cache_control"]))
    for j, b in enumerate(body.get("system", [])):
        if "cache_control" in b:
            out.append((f"system[{j}]", b["cache_control"]))
    for m, msg in enumerate(body["messages"]):
        for b, block in enumerate(msg["content"]):
            if "cache_control" in block:
                out.append((f"messages[{m}].content[{b}]", block["cache_control"]))
    return out


def test_full_request_sent_by_the_official_client():
    # under the minimum: no markers; this pins the whole body shape
    hist = [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "5C"}],
        },
    ]
    p = build(
        system="You are terse.",
        tools=[TOOL],
        documents=[{"text": "Doc.", "title": "T"}],
        session="User: Ann",
        messages=hist,
        dynamic="Thanks?",
    )
    rec = send(p.to_anthropic(MODEL, max_tokens=64))
    assert rec.requests[-1][0] == "https://api.anthropic.com/v1/messages"
    assert rec.json == {
        "model": MODEL,
        "max_tokens": 64,
        "tools": [
            {
                "description": "Weather.",
                "input_schema": {"properties": {"city": {"type": "string"}}, "type": "object"},
                "name": "weather",
            }
        ],
        "system": [
            {"text": "You are terse.", "type": "text"},
            {"text": '<document index="1" title="T">\nDoc.\n</document>', "type": "text"},
            {"text": "User: Ann", "type": "text"},
        ],
        "messages": [
            {"content": [{"text": "Hi", "type": "text"}], "role": "user"},
            {
                "content": [
                    {"text": "Checking.", "type": "text"},
                    {"id": "t1", "input": {"city": "Oslo"}, "name": "weather", "type": "tool_use"},
                ],
                "role": "assistant",
            },
            {
                "content": [
                    {
                        "content": [{"text": "5C", "type": "text"}],
                        "tool_use_id": "t1",
                        "type": "tool_result",
                    }
                ],
                "role": "user",
            },
            {"content": [{"text": "Thanks?", "type": "text"}], "role": "user"},
        ],
    }


def test_three_breakpoints_frozen_session_history(word_tokens):
    # blocks: tool 1 | system 600 (cum 601) | document 500+3 tag words (1104) | session 10
    # (1114) | user 5 (1119) | assistant 5 (1124) | dynamic 3.
    # frozen end = the document (1104 >= 1024), session end (1114), newest turn (1124).
    p = build(
        system=W(600),
        tools=[TOOL],
        documents=[W(500)],
        session=W(10),
        messages=[{"role": "user", "content": W(5)}, {"role": "assistant", "content": W(5)}],
        dynamic=W(3),
    )
    body = send(p.to_anthropic(MODEL)).json
    assert markers(body) == [
        ("system[1]", EPH),
        ("system[2]", EPH),
        ("messages[1].content[0]", EPH),
    ]


def test_frozen_breakpoint_skipped_under_the_minimum(word_tokens):
    # system 600 (cum 600 < 1024: skipped) | session 500 (1100) | user 5 (1105)
    p = build(
        system=W(600), session=W(500), messages=[{"role": "user", "content": W(5)}], dynamic="q"
    )
    body = send(p.to_anthropic(MODEL)).json
    assert markers(body) == [("system[1]", EPH), ("messages[0].content[0]", EPH)]


def test_lookback_stepping_stone(word_tokens):
    # system 1100 (global block 0, cum 1100) | 30 one-word history messages (blocks 1..30).
    # history breakpoint on block 30 is 30 > 20 blocks after the frozen one (block 0), so a
    # stepping stone goes 20 blocks back: block 10 = messages[9].
    hist = [{"role": "user" if i % 2 == 0 else "assistant", "content": "x"} for i in range(30)]
    p = build(system=W(1100), messages=hist, dynamic="q")
    body = send(p.to_anthropic(MODEL)).json
    assert markers(body) == [
        ("system[0]", EPH),
        ("messages[9].content[0]", EPH),
        ("messages[29].content[0]", EPH),
    ]


def test_four_breakpoints_with_session_and_lookback(word_tokens):
    # system 1100 (block 0) | session 2 (block 1) | history blocks 2..31; 31 - 1 = 30 > 20 ->
    # stepping stone at block 11 = messages[9]
    hist = [{"role": "user" if i % 2 == 0 else "assistant", "content": "x"} for i in range(30)]
    p = build(system=W(1100), session="s s", messages=hist, dynamic="q")
    body = send(p.to_anthropic(MODEL)).json
    assert markers(body) == [
        ("system[0]", EPH),
        ("system[1]", EPH),
        ("messages[9].content[0]", EPH),
        ("messages[29].content[0]", EPH),
    ]
    assert len(markers(body)) <= 4


def test_no_stepping_stone_within_the_lookback(word_tokens):
    hist = [{"role": "user" if i % 2 == 0 else "assistant", "content": "x"} for i in range(20)]
    p = build(system=W(1100), messages=hist, dynamic="q")
    body = send(p.to_anthropic(MODEL)).json
    assert markers(body) == [("system[0]", EPH), ("messages[19].content[0]", EPH)]


def test_one_hour_before_five_minutes(word_tokens):
    p = build(
        system=W(1100), session=W(5), messages=[{"role": "user", "content": "x"}], dynamic="q"
    )
    body = send(p.to_anthropic(MODEL, ttl="1h")).json
    assert markers(body) == [
        ("system[0]", EPH_1H),
        ("system[1]", EPH_1H),
        ("messages[0].content[0]", EPH),
    ]
    with pytest.raises(ValueError, match="history_ttl"):
        p.to_anthropic(MODEL, ttl="5m", history_ttl="1h")
    with pytest.raises(ValueError):
        p.to_anthropic(MODEL, ttl="24h")


def test_model_minimum_decides(word_tokens):
    # claude-haiku-4-5 needs 4,096: a 1,100-token prefix gets no breakpoint at all
    p = build(system=W(1100), messages=[{"role": "user", "content": "x"}], dynamic="q")
    assert markers(send(p.to_anthropic("claude-haiku-4-5")).json) == []
    assert markers(send(p.to_anthropic("claude-opus-4-1")).json) == [
        ("system[0]", EPH),
        ("messages[0].content[0]", EPH),
    ]


def test_tools_only_prefix_marks_the_last_tool(word_tokens):
    tools = [{**TOOL, "name": f"t{i}", "description": W(300)} for i in range(4)]
    # each tool's canonical JSON: 300 description words (first and last glued to JSON) -> 300
    p = build(tools=tools, dynamic="q")
    body = send(p.to_anthropic(MODEL)).json
    assert markers(body) == [("tools[3]", EPH)]


def test_thinking_blocks_are_not_marked(word_tokens):
    hist = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "answer"},
                {"type": "thinking", "thinking": "hm", "signature": "sig"},
            ],
        },
    ]
    p = build(system=W(1100), messages=hist, dynamic="q")
    body = send(p.to_anthropic(MODEL)).json
    assert markers(body) == [("system[0]", EPH), ("messages[1].content[0]", EPH)]
    assert body["messages"][1]["content"][1] == {
        "signature": "sig",
        "thinking": "hm",
        "type": "thinking",
    }


def test_automatic_mode_uses_one_top_level_cache_control(word_tokens):
    p = build(system=W(1100), messages=[{"role": "user", "content": "x"}], dynamic="q")
    body = send(p.to_anthropic(MODEL, mode="automatic", ttl="1h")).json
    assert body["cache_control"] == EPH_1H
    assert markers(body) == []
    with pytest.raises(ValueError):
        p.to_anthropic(MODEL, mode="sometimes")


def test_cache_diagnostics_requested_and_read():
    from promptcache.compose.monitor import cache_miss_reason

    reply = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
        "diagnostics": {
            "cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": 1500}
        },
    }
    rec = Recorder()
    p = build(system="S", dynamic="q")
    msg = anthropic_client(rec, reply).messages.create(
        **p.to_anthropic(MODEL, previous_message_id="msg_1")
    )
    assert rec.json["diagnostics"] == {"previous_message_id": "msg_1"}
    assert rec.headers["anthropic-beta"] == "cache-diagnosis-2026-04-07"
    miss = cache_miss_reason(msg)
    assert (miss.reason, miss.missed_tokens) == ("tools_changed", 1500)
    assert "tools differ" in str(miss)
    first = p.to_anthropic(MODEL, previous_message_id="")
    assert first["diagnostics"] == {"previous_message_id": None}


def test_nothing_to_send():
    with pytest.raises(ValueError, match="at least one message"):
        build(system="S").to_anthropic(MODEL)
