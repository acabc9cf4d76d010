"""The Anthropic Messages API with the official ``anthropic`` client (sync, async,
streaming) against ``promptcache serve`` in automatic cache mode."""

from __future__ import annotations

import asyncio
import json
import uuid

import anthropic
import httpx
import pytest

BLOCK = 16


@pytest.fixture(scope="module")
def server(server_factory):
    return server_factory()


@pytest.fixture(scope="module")
def client(server):
    return server.anthropic_client(max_retries=0, timeout=120)


def system_text(tag: str) -> str:
    return (
        f"[{tag}] You are a librarian. Recommend one classic novel per question, title only. "
        "Prefer nineteenth-century European fiction; never recommend the same book twice."
    )


def total_input(usage) -> int:
    return usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens


def test_plain_message_and_usage(client):
    system = system_text(uuid.uuid4().hex[:8])
    r = client.messages.create(
        model="claude-test",
        max_tokens=5,
        extra_body={"temperature": 0},
        system=system,
        messages=[{"role": "user", "content": "A book about a whale?"}],
    )
    assert r.type == "message" and r.role == "assistant" and r.id.startswith("msg_")
    assert r.model == "claude-test"
    assert r.content[0].type == "text" and isinstance(r.content[0].text, str)
    assert r.stop_reason in ("end_turn", "max_tokens")
    u = r.usage
    assert u.cache_read_input_tokens == 0 and u.cache_creation_input_tokens == 0
    assert (
        u.cache_creation.ephemeral_5m_input_tokens == 0
        and u.cache_creation.ephemeral_1h_input_tokens == 0
    )
    assert 1 <= u.output_tokens <= 5
    counted = client.messages.count_tokens(
        model="claude-test",
        system=system,
        messages=[{"role": "user", "content": "A book about a whale?"}],
    )
    assert counted.input_tokens == total_input(u)


def test_cache_read_after_shared_prefix(client, chat_ids, common_prefix):
    system = system_text(uuid.uuid4().hex[:8])
    a = [{"role": "user", "content": "Something about revenge?"}]
    b = [{"role": "user", "content": "A novel set in Russia, please."}]
    client.messages.create(model="m", max_tokens=1, system=system, messages=a)
    r = client.messages.create(model="m", max_tokens=1, system=system, messages=b)
    ids_a = chat_ids([{"role": "system", "content": system}, *a])
    ids_b = chat_ids([{"role": "system", "content": system}, *b])
    expected = common_prefix(ids_a, ids_b) // BLOCK * BLOCK
    assert r.usage.cache_read_input_tokens == expected > 0
    # input_tokens counts only the uncached input
    assert r.usage.input_tokens == len(ids_b) - expected


def test_streaming_event_sequence_and_text(server, client):
    body = {
        "model": "m",
        "max_tokens": 6,
        "temperature": 0,
        "stream": True,
        "messages": [{"role": "user", "content": "Name a Dickens novel."}],
    }
    events = []
    with httpx.stream(
        "POST",
        server.base_url + "/v1/messages",
        json=body,
        headers={"anthropic-version": "2023-06-01", "x-api-key": "k"},
        timeout=120,
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in resp.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[6:])))
    names = [n for n, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) <= {"content_block_delta"}
    assert all(n == d["type"] for n, d in events)
    start = events[0][1]["message"]
    assert start["usage"]["input_tokens"] > 0 and "cache_read_input_tokens" in start["usage"]
    delta = events[-2][1]
    assert delta["delta"]["stop_reason"] in ("end_turn", "max_tokens")
    streamed = "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta")
    assert 1 <= delta["usage"]["output_tokens"] <= 6

    plain = client.messages.create(
        model="m",
        max_tokens=6,
        extra_body={"temperature": 0},
        messages=[{"role": "user", "content": "Name a Dickens novel."}],
    )
    assert streamed == plain.content[0].text
    # the SDK's stream helper agrees
    with client.messages.stream(
        model="m",
        max_tokens=6,
        extra_body={"temperature": 0},
        messages=[{"role": "user", "content": "Name a Dickens novel."}],
    ) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == plain.content[0].text == final.content[0].text
    assert final.usage.output_tokens == plain.usage.output_tokens


def test_async_client(server):
    async def main():
        c = server.async_anthropic_client(max_retries=0, timeout=120)
        r = await c.messages.create(
            model="m",
            max_tokens=3,
            extra_body={"temperature": 0},
            messages=[{"role": "user", "content": "Hi"}],
        )
        chunks = []
        async with c.messages.stream(
            model="m",
            max_tokens=3,
            extra_body={"temperature": 0},
            messages=[{"role": "user", "content": "Hi"}],
        ) as s:
            async for t in s.text_stream:
                chunks.append(t)
        await c.close()
        return r, "".join(chunks)

    r, streamed = asyncio.run(main())
    assert streamed == r.content[0].text


def test_stop_sequences(client):
    msgs = [{"role": "user", "content": "List three colours separated by commas."}]
    full = (
        client.messages.create(
            model="m", max_tokens=12, extra_body={"temperature": 0}, messages=msgs
        )
        .content[0]
        .text
    )
    words = [w.strip(",.") for w in full.split() if len(w.strip(",.")) >= 3]
    assert words, f"nothing to stop on in {full!r}"
    stop = words[0]
    r = client.messages.create(
        model="m",
        max_tokens=12,
        extra_body={"temperature": 0},
        messages=msgs,
        stop_sequences=[stop],
    )
    assert r.stop_reason == "stop_sequence" and r.stop_sequence == stop
    assert r.content[0].text == full[: full.index(stop)]


def test_system_blocks_tools_and_tool_choice_accepted(client):
    r = client.messages.create(
        model="m",
        max_tokens=2,
        system=[
            {"type": "text", "text": "You are terse."},
            {"type": "text", "text": "Use tools when needed."},
        ],
        tools=[
            {
                "name": "lookup",
                "description": "Look a book up",
                "input_schema": {"type": "object", "properties": {"title": {"type": "string"}}},
            }
        ],
        tool_choice={"type": "auto"},
        messages=[{"role": "user", "content": [{"type": "text", "text": "Find Emma."}]}],
    )
    assert r.usage.output_tokens >= 1
    counted = client.messages.count_tokens(
        model="m",
        system=[
            {"type": "text", "text": "You are terse."},
            {"type": "text", "text": "Use tools when needed."},
        ],
        tools=[
            {
                "name": "lookup",
                "description": "Look a book up",
                "input_schema": {"type": "object", "properties": {"title": {"type": "string"}}},
            }
        ],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Find Emma."}]}],
    )
    assert counted.input_tokens == total_input(r.usage)


def test_models_list_in_anthropic_shape(client):
    page = client.models.list()
    assert [m.id for m in page.data] == ["SmolLM2-135M-Instruct"]


# ---------------------------------------------------------------------------- diagnostics


def test_cache_diagnostics(client):
    system = system_text(uuid.uuid4().hex[:8])
    tools = [{"name": "lookup", "input_schema": {"type": "object"}}]
    turn1 = [{"role": "user", "content": "A French novel?"}]
    kw = dict(model="claude-test", max_tokens=1, system=system, tools=tools)
    r1 = client.messages.create(**kw, messages=turn1, diagnostics={"previous_message_id": None})
    assert r1.diagnostics is None  # first turn: nothing to compare
    total1 = total_input(r1.usage)

    turn2 = turn1 + [
        {"role": "assistant", "content": "Madame Bovary"},
        {"role": "user", "content": "Another?"},
    ]
    r2 = client.messages.create(**kw, messages=turn2, diagnostics={"previous_message_id": r1.id})
    assert r2.diagnostics is None  # only appended: no divergence

    r3 = client.messages.create(
        **{**kw, "system": system + " Be concise."},
        messages=turn2,
        diagnostics={"previous_message_id": r2.id},
    )
    reason = r3.diagnostics.cache_miss_reason
    assert reason.type == "system_changed"
    tools_only = client.messages.count_tokens(
        model="m", tools=tools, messages=[{"role": "user", "content": "x"}]
    )
    assert 0 < reason.cache_missed_input_tokens < total_input(r2.usage)

    r4 = client.messages.create(
        **{**kw, "tools": tools + [{"name": "two", "input_schema": {"type": "object"}}]},
        messages=turn2,
        diagnostics={"previous_message_id": r2.id},
    )
    assert r4.diagnostics.cache_miss_reason.type == "tools_changed"
    assert r4.diagnostics.cache_miss_reason.cache_missed_input_tokens == total_input(r2.usage)

    r5 = client.messages.create(
        **{**kw, "model": "claude-test-2"},
        messages=turn2,
        diagnostics={"previous_message_id": r2.id},
    )
    assert r5.diagnostics.cache_miss_reason.type == "model_changed"

    edited = [{"role": "user", "content": "A Russian novel?"}] + turn2[1:]
    r6 = client.messages.create(**kw, messages=edited, diagnostics={"previous_message_id": r2.id})
    assert r6.diagnostics.cache_miss_reason.type == "messages_changed"
    assert 0 < r6.diagnostics.cache_miss_reason.cache_missed_input_tokens < total_input(r2.usage)

    r7 = client.messages.create(
        **kw, messages=turn1, diagnostics={"previous_message_id": "msg_unknown"}
    )
    assert r7.diagnostics.cache_miss_reason.type == "previous_message_not_found"
    assert total1 > 0 and tools_only.input_tokens > 0


# ---------------------------------------------------------------------------- bad input


def _post(server, body, path="/v1/messages"):
    return httpx.post(
        server.base_url + path, json=body, headers={"anthropic-version": "2023-06-01"}, timeout=60
    )


def test_five_breakpoints_is_anthropics_400(server, client):
    cc = {"type": "ephemeral"}
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(
            model="m",
            max_tokens=1,
            system=[{"type": "text", "text": f"s{i}", "cache_control": cc} for i in range(3)],
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "a", "cache_control": cc},
                        {"type": "text", "text": "b", "cache_control": cc},
                    ],
                }
            ],
        )
    assert e.value.status_code == 400
    body = e.value.body
    assert body["type"] == "error"
    assert body["error"] == {
        "type": "invalid_request_error",
        "message": "A maximum of 4 blocks with cache_control may be provided. Found 5.",
    }


def test_1h_after_5m_is_400(client):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(
            model="m",
            max_tokens=1,
            system=[{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "text",
                            "text": "a",
                            "cache_control": {"type": "ephemeral", "ttl": "1h"},
                        }
                    ],
                }
            ],
        )
    msg = e.value.body["error"]["message"]
    assert msg.startswith(
        "messages.0.content.0.cache_control.ttl: a ttl='1h' cache_control block must not come after"
    )


def test_errors_in_anthropic_shape(server):
    cases = [
        ({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "max_tokens"),
        (
            {"model": "m", "max_tokens": "ten", "messages": [{"role": "user", "content": "hi"}]},
            "max_tokens",
        ),
        ({"model": "m", "max_tokens": 5, "messages": [{"role": "robot", "content": "hi"}]}, "role"),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "temperature": 1.5,
                "messages": [{"role": "user", "content": "hi"}],
            },
            "temperature",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}],
            },
            "image",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "text",
                                "text": "x",
                                "cache_control": {"type": "ephemeral", "ttl": "10m"},
                            }
                        ],
                    }
                ],
            },
            "ttl",
        ),
    ]
    for body, word in cases:
        r = _post(server, body)
        assert r.status_code == 400, (body, r.text)
        j = r.json()
        assert j["type"] == "error" and j["error"]["type"] == "invalid_request_error", j
        assert word in j["error"]["message"], j
    r = httpx.post(
        server.base_url + "/v1/messages",
        content=b"{oops",
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400 and r.json()["type"] == "error"
    r = httpx.get(server.base_url + "/v1/messages/nope")
    assert r.status_code in (404, 405) and r.json()["type"] == "error"


def test_too_long_prompt_is_400_naming_both_lengths(client):
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(
            model="m", max_tokens=1, messages=[{"role": "user", "content": "hello " * 9000}]
        )
    msg = e.value.body["error"]["message"]
    assert "8192" in msg and any(
        tok.isdigit() and int(tok) > 8192 for tok in msg.replace(";", " ").split()
    )
