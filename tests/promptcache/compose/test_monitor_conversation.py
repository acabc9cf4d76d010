import json
import subprocess
import sys

import pytest

from promptcache import Conversation, PrefixMonitor, build
from promptcache.compose.monitor import cache_miss_reason

TOOL = {
    "name": "weather",
    "description": "Weather.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


# ---- PrefixMonitor ---------------------------------------------------------------------------


def test_monitor_reports_layer_char_and_token_offset(word_tokens):
    clock = Clock()
    seen = []
    mon = PrefixMonitor(model="claude-sonnet-4-6", clock=clock, on_change=seen.append)
    assert mon.observe("support", build(system="one two three four", tools=[TOOL])) is None
    assert (
        mon.observe("support", build(system="one two three four", tools=[TOOL], dynamic="other"))
        is None
    )  # same prefix
    clock.t += 10
    ch = mon.observe("support", build(system="one two THREE four", tools=[TOOL]))
    assert (ch.layer, ch.char_offset) == ("system", 8)
    # tokens before the difference: tools layer JSON (no spaces: 1 word) + "one two " (2)
    assert ch.token_offset == 3
    assert ch.changes_in_window == 1 and seen == [ch]
    assert ch.old_hash != ch.new_hash and ch.new_hash == mon.prefix_hash("support")
    assert "THREE" in ch.after and "three" in ch.before


def test_monitor_counts_changes_in_the_last_hour():
    clock = Clock()
    mon = PrefixMonitor(clock=clock)
    for i in range(4):
        mon.observe("p", build(system=f"version {i}"))
        clock.t += 1200  # every 20 minutes
    # changes happened at t=2200, 3400, 4600; now t=5800: the window (3600 s) holds 3400, 4600
    assert mon.changes("p") == 2
    assert mon.changes("never") == 0


def test_monitor_names_the_tools_layer():
    mon = PrefixMonitor()
    mon.observe("p", build(system="S", tools=[TOOL]))
    ch = mon.observe("p", build(system="S", tools=[{**TOOL, "description": "Weather!"}]))
    # the tools layer's canonical text starts '[{"description":"Weather.' -> "." is at 24
    assert (ch.layer, ch.char_offset) == ("tools", len('[{"description":"Weather'))


def test_monitor_separates_names_and_validates():
    mon = PrefixMonitor()
    mon.observe("a", build(system="A"))
    assert mon.observe("b", build(system="B")) is None
    with pytest.raises(ValueError):
        PrefixMonitor(window_s=0)


def test_cache_miss_reason_from_json_and_absent():
    msg = {
        "id": "msg_1",
        "diagnostics": {
            "cache_miss_reason": {"type": "messages_changed", "cache_missed_input_tokens": 4200}
        },
    }
    miss = cache_miss_reason(msg)
    assert (miss.reason, miss.missed_tokens) == ("messages_changed", 4200)
    assert cache_miss_reason({"id": "msg_2"}) is None
    assert cache_miss_reason({"diagnostics": {"cache_miss_reason": None}}) is None
    mon = PrefixMonitor()
    assert mon.observe_response("chat", msg) == miss and mon.miss_reasons["chat"] == miss


# ---- Conversation ----------------------------------------------------------------------------


def frozen_bytes(kw):
    return json.dumps(kw["tools"]).encode(), json.dumps(kw["system"][0]).encode()


def test_commit_and_clear_keeps_frozen_bytes_identical():
    calls = []

    def summarize(messages, previous):
        calls.append((list(messages), previous))
        return f"{len(messages)} messages about weather"

    conv = Conversation(system="You are terse.", tools=[TOOL], summarizer=summarize, max_turns=2)
    first = conv.prompt(dynamic="hello").to_anthropic("claude-sonnet-4-6")
    hashes = {conv.prompt().prefix_hash}
    for i in range(3):
        conv.append({"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"})
        kw = conv.prompt(dynamic="next").to_anthropic("claude-sonnet-4-6")
        assert frozen_bytes(kw) == frozen_bytes(first)
        hashes.add(conv.prompt().prefix_hash)
    assert len(hashes) == 1
    # the third turn crossed max_turns=2: the summarizer got all 6 messages as appended
    assert conv.compactions == 1 and len(calls) == 1
    assert calls[0][0][0] == {"role": "user", "content": "q0"} and calls[0][1] is None
    assert len(conv) == 0 and conv.summary == "6 messages about weather"
    kw = conv.prompt(dynamic="next").to_anthropic("claude-sonnet-4-6")
    assert (
        kw["system"][1]["text"] == "Summary of the conversation so far:\n6 messages about weather"
    )
    assert kw["messages"] == [{"content": [{"text": "next", "type": "text"}], "role": "user"}]


def test_keep_last_turns_and_previous_summary():
    got = []
    conv = Conversation(
        system="S",
        summarizer=lambda m, prev: got.append((m, prev)) or f"summary{len(got)}",
        max_turns=3,
        keep_last_turns=1,
    )
    for i in range(4):
        conv.append({"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"})
        conv.prompt()
    assert [m["content"] for m in got[0][0]] == ["q0", "a", "q1", "a", "q2", "a"]
    assert [m["content"][0]["text"] for m in conv.messages] == ["q3", "a"]
    for i in range(4, 7):
        conv.append({"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": "a"})
        conv.prompt()
    assert got[1][1] == "summary1"  # the previous summary is passed on


def test_token_threshold_and_tool_results_are_one_turn():
    conv = Conversation(system="S", summarizer=lambda m, p: "s", max_history_tokens=50)
    conv.append(
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
    )
    assert conv.turns == 1 and len(conv) == 3  # the two tool results merged into one message
    assert not conv.needs_compaction()
    conv.append({"role": "user", "content": "word " * 80})
    assert conv.needs_compaction()
    conv.prompt()
    assert conv.compactions == 1 and conv.history_tokens == 0


def test_appending_does_not_renormalize_the_past(monkeypatch):
    import importlib

    conv = Conversation(system="S")
    conv.append({"role": "user", "content": "one"})
    mod = importlib.import_module("promptcache.compose.conversation")
    seen = []
    real = mod.normalize_messages
    monkeypatch.setattr(mod, "normalize_messages", lambda m: seen.append(len(m)) or real(m))
    conv.append({"role": "assistant", "content": "two"})
    conv.prompt(dynamic="q")
    assert seen == [1]  # only the new message


def test_conversation_errors():
    with pytest.raises(ValueError, match="summarizer"):
        Conversation(max_turns=3)
    conv = Conversation(summarizer=lambda m, p: "  ")
    conv.append({"role": "user", "content": "x"})
    with pytest.raises(ValueError, match="non-empty"):
        conv.compact()
    assert len(conv) == 1  # unchanged after a failed compaction


# ---- the SDK stays light -----------------------------------------------------------------------


def test_import_promptcache_is_light():
    code = (
        "import sys, promptcache; p = promptcache.build(system='s', tools=[{'name': 'f', "
        "'input_schema': {'type': 'object'}}], dynamic='q'); p.to_openai('gpt-4o'); "
        "p.to_anthropic('claude-sonnet-4-6'); p.to_bedrock('amazon.nova-pro-v1:0'); "
        "p.to_gemini('gemini-2.5-flash'); promptcache.check(p.to_openai('gpt-4o'), 'openai');"
        "heavy = [m for m in ('torch', 'local_engine', 'openai', 'anthropic', 'boto3', "
        "'google.genai', 'httpx') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
