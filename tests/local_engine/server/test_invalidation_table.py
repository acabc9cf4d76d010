"""The providers' "what invalidates the cache" tables, one test per row of
:data:`promptcache.limits.INVALIDATION_RULES`, on the server's cache emulator.

Each test caches a request (tools, system, messages; a breakpoint at the end of each
segment for the breakpoint providers), sends it again with one row's change, and checks
how much still reads. The expected segment per row is written here from the providers'
pages (quoted in ``promptcache.limits``, read 2026-12-03), not taken from the table:

- Anthropic: tool definitions -> nothing reads; web search / citations toggles -> the tools
  still read; tool_choice, images, thinking -> tools and system still read.
- OpenAI: one exact prefix; the read is the shared prefix rounded down to 1,024 + 128k.
- Gemini (implicit): the longest shared prefix ending at a content boundary, at least the
  model's minimum.

Plus an end-to-end check of the tool_choice row through ``/v1/messages``.
"""

from __future__ import annotations

import uuid

import pytest

from local_engine.server.emulation import CacheEmulator, CacheRequest, anthropic_breakpoints
from local_engine.server.rendering import Block, Turn, render_chat
from promptcache.limits import INVALIDATION_RULES, cache_limits
from promptcache.simulation.emulation import ManualClock

#: the segment end that still reads after each row's change (from the providers' pages)
EXPECTED_READ = {
    ("anthropic", "tool_definitions"): "nothing",
    ("anthropic", "web_search"): "tools",
    ("anthropic", "citations"): "tools",
    ("anthropic", "tool_choice"): "system",
    ("anthropic", "images"): "system",
    ("anthropic", "thinking"): "system",
    ("openai", "tool_definitions"): "nothing",
    ("openai", "system"): "tools",
    ("gemini", "tool_definitions"): "nothing",
    ("gemini", "system"): "tools",
}
MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-4o", "gemini": "gemini-2.5-flash"}
#: the value a setting row changes to (the base request does not set it)
SETTING = {
    "web_search": True,
    "citations": True,
    "tool_choice": {"type": "any"},
    "images": True,
    "thinking": {"type": "enabled", "budget_tokens": 1024},
}


def test_every_row_has_an_expectation():
    assert {(r.provider, r.change) for r in INVALIDATION_RULES} == set(EXPECTED_READ)


def _text(tag: str, n: int) -> str:
    return " ".join(f"{tag} clause {i}: returns within {10 + i % 20} days." for i in range(n))


def _render(tokenizer, tools_text: str, system_text: str, marks: bool):
    cc = ("5m", "x") if marks else None
    tools = [Block(tools_text, "tools", cache_control=cc)]
    system = [Block(system_text, "system", cache_control=cc)]
    turns = [Turn("user", [Block("What is the policy?", "messages", 0, cache_control=cc)], 0)]
    return render_chat(tokenizer, tools=tools, system=system, turns=turns)


@pytest.mark.parametrize(
    "rule", INVALIDATION_RULES, ids=[f"{r.provider}-{r.change}" for r in INVALIDATION_RULES]
)
def test_invalidation_row(rule, tokenizer):
    provider, change = rule.provider, rule.change
    tag = uuid.uuid4().hex[:6]
    tools_text, system_text = _text(f"T{tag}", 160), _text(f"S{tag}", 160)
    marks = provider == "anthropic"
    base = _render(tokenizer, tools_text, system_text, marks)
    changed_tools = tools_text + " Extra." if change == "tool_definitions" else tools_text
    changed_system = system_text + " Extra." if change == "system" else system_text
    other = _render(tokenizer, changed_tools, changed_system, marks)
    changes = {change: SETTING[change]} if change in SETTING else {}
    model = MODELS[provider]
    emulator = CacheEmulator("provider", clock=ManualClock())

    def req(rendered, ch):
        return CacheRequest(
            model=model,
            rendered=rendered,
            anthropic_breakpoints=anthropic_breakpoints(rendered),
            provider=provider,
            changes=ch,
        )

    emulator.usage(req(base, {}), 0)
    read = emulator.usage(req(other, changes), 0).cache_read_tokens
    ends = {"nothing": 0, "tools": base.tools_end, "system": base.system_end}
    segment_end = ends[EXPECTED_READ[(provider, change)]]
    common = next(
        (i for i, (a, b) in enumerate(zip(base.token_ids, other.token_ids)) if a != b),
        min(len(base.token_ids), len(other.token_ids)),
    )
    if provider == "anthropic":
        assert read == segment_end  # the breakpoint at that segment's end
    elif provider == "openai":
        # the shared prefix (up to the segment end when a setting differs) in 128-token steps
        shared = min(common, segment_end) if changes else common
        assert shared >= 1024 or segment_end == 0
        assert read == (1024 + (shared - 1024) // 128 * 128 if shared >= 1024 else 0)
    else:
        minimum = cache_limits(model, "gemini").min_tokens
        assert base.tools_end >= minimum
        assert read == (segment_end if segment_end >= minimum else 0)


def test_tool_choice_row_through_messages_api(server_factory, tokenizer):
    srv = server_factory()
    client = srv.anthropic_client(
        max_retries=0, timeout=120, default_headers={"X-Promptcache-Cache-Mode": "anthropic"}
    )
    tag = uuid.uuid4().hex[:6]
    tool = {
        "name": "lookup",
        "description": _text(f"T{tag}", 120),
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        "cache_control": {"type": "ephemeral"},
    }
    system = [
        {"type": "text", "text": _text(f"S{tag}", 120), "cache_control": {"type": "ephemeral"}}
    ]
    msgs = [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": _text(f"M{tag}", 60),
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        }
    ]
    kw = dict(model="claude-sonnet-4-5", max_tokens=1, tools=[tool], system=system)
    first = client.messages.create(**kw, messages=msgs, tool_choice={"type": "auto"})
    same = client.messages.create(**kw, messages=msgs, tool_choice={"type": "auto"})
    switched = client.messages.create(**kw, messages=msgs, tool_choice={"type": "any"})
    # what reads when only the messages differ: the system breakpoint (tools + system)
    other = [{"role": "user", "content": [{**msgs[0]["content"][0], "text": _text(f"N{tag}", 60)}]}]
    system_only = client.messages.create(**kw, messages=other, tool_choice={"type": "auto"})
    assert first.usage.cache_read_input_tokens == 0
    whole = same.usage.cache_read_input_tokens
    up_to_system = system_only.usage.cache_read_input_tokens
    assert 0 < up_to_system < whole
    assert switched.usage.cache_read_input_tokens == up_to_system


def test_web_search_row_through_messages_api(server_factory):
    srv = server_factory()
    client = srv.anthropic_client(
        max_retries=0, timeout=120, default_headers={"X-Promptcache-Cache-Mode": "anthropic"}
    )
    tag = uuid.uuid4().hex[:6]
    tool = {
        "name": "lookup",
        "description": _text(f"T{tag}", 120),
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        "cache_control": {"type": "ephemeral"},
    }
    web = {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}

    def system(t):
        return [{"type": "text", "text": _text(t, 120), "cache_control": {"type": "ephemeral"}}]

    msgs = [{"role": "user", "content": "Which policy applies?"}]
    kw = dict(model="claude-sonnet-4-5", max_tokens=1, messages=msgs)
    client.messages.create(**kw, tools=[tool], system=system(f"S{tag}"))
    # what reads when the system text differs: the tools breakpoint only
    tools_only = client.messages.create(**kw, tools=[tool], system=system(f"X{tag}"))
    toggled = client.messages.create(**kw, tools=[tool, web], system=system(f"S{tag}"))
    up_to_tools = tools_only.usage.cache_read_input_tokens
    assert up_to_tools > 0
    assert toggled.usage.cache_read_input_tokens == up_to_tools
