import copy
import json

import pytest

from promptcache import build, check
from promptcache.compose.check import diff_requests

EPH = {"type": "ephemeral"}


def W(n):
    return " ".join(["w"] * n)


def request():
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 10,
        "tools": [
            {
                "name": "a",
                "description": "A.",
                "input_schema": {"properties": {}, "type": "object"},
                "cache_control": EPH,
            }
        ],
        "system": [{"type": "text", "text": "Policy. " + W(1100), "cache_control": EPH}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": EPH}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "a", "input": {"a": 1, "b": 2}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": "ok",
                        "cache_control": EPH,
                    }
                ],
            },
        ],
    }


def codes(findings):
    return [(f.code, f.path) for f in findings]


def test_clean_request_has_only_the_expected_info(word_tokens):
    r = request()
    r["tools"][0].pop("cache_control")  # the tool alone is under the minimum
    assert codes(check(r, "anthropic")) == []


def test_too_many_breakpoints_names_the_fifth_in_cache_order(word_tokens):
    r = request()
    r["messages"][1]["content"][0]["cache_control"] = EPH
    r["messages"].append(
        {"role": "user", "content": [{"type": "text", "text": "more", "cache_control": EPH}]}
    )
    found = [f for f in check(r, "anthropic") if f.code == "too-many-breakpoints"]
    # order: tools[0], system[0], messages[0], messages[1], messages[2] <- the 5th
    assert [(f.path, f.severity) for f in found] == [
        ("$.messages[2].content[0].cache_control", "error")
    ]


def test_one_hour_after_five_minutes(word_tokens):
    r = request()
    r["messages"][2]["content"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    found = [f for f in check(r, "anthropic") if f.code == "ttl-order"]
    assert [f.path for f in found] == ["$.messages[2].content[0].cache_control"]


def test_breakpoint_under_the_minimum(word_tokens):
    # tools[0] alone: its canonical JSON has no spaces, so it counts as 1 word-token < 1024
    found = [f for f in check(request(), "anthropic") if f.code == "below-minimum"]
    assert [f.path for f in found] == ["$.tools[0].cache_control"]
    assert "about 1 tokens" in found[0].message


def test_volatile_value_ahead_of_the_last_breakpoint():
    r = request()
    r["system"][0]["text"] = "Now: 2024-05-01T10:00:00Z. " + r["system"][0]["text"]
    r["messages"].append({"role": "user", "content": "at 2024-05-02T10:00:00Z"})  # after: fine
    found = [f for f in check(r, "anthropic") if f.code == "volatile-in-prefix"]
    assert [(f.path, f.offset) for f in found] == [("$.system[0].text", 5)]


def test_non_canonical_json_in_tool_inputs():
    found = [f for f in check(request(), "anthropic") if f.code == "non-canonical-json"]
    assert found == []  # {"a": 1, "b": 2} is sorted
    r = request()
    r["messages"][1]["content"][0]["input"] = {"b": 2, "a": 1}
    found = [f for f in check(r, "anthropic") if f.code == "non-canonical-json"]
    assert [f.path for f in found] == ["$.messages[1].content[0].input"]


def test_openai_arguments_and_system_volatility():
    r = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Request id 550e8400-e29b-41d4-a716-446655440000."},
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"b": 1, "a": 2}'},
                    }
                ],
            },
            {"role": "user", "content": "2024-05-01 is fine here"},
        ],
    }
    found = codes(check(json.dumps(r), "openai"))
    assert ("volatile-in-prefix", "$.messages[0].content") in found
    assert ("non-canonical-json", "$.messages[1].tool_calls[0].function.arguments") in found
    assert not any(p == "$.messages[2].content" for _, p in found)


def test_dated_model_name_is_not_volatile_but_a_date_is():
    r = {
        "model": "gpt-4o-2024-08-06",
        "messages": [
            {"role": "system", "content": "You are gpt-4o-2024-08-06; escalate to o1-2024-12-17."},
            {"role": "system", "content": "Today is 2024-08-06."},
            {"role": "user", "content": "hi"},
        ],
    }
    found = [f for f in check(r, "openai") if f.code == "volatile-in-prefix"]
    assert [f.path for f in found] == ["$.messages[1].content"]
    assert "2024-08-06" in found[0].message


def test_built_requests_pass_check(word_tokens):
    p = build(
        system=W(1100),
        tools=[{"name": "a", "input_schema": {"type": "object"}}],
        session=W(20),
        messages=[{"role": "user", "content": "x"}],
        dynamic="q",
    )
    assert [
        f for f in check(p.to_anthropic("claude-sonnet-4-6"), "anthropic") if f.severity != "info"
    ] == []
    assert [
        f
        for f in check(p.to_bedrock("us.anthropic.claude-sonnet-4-5-20250929-v1:0"), "bedrock")
        if f.severity != "info"
    ] == []
    assert check(p.to_openai("gpt-4o"), "openai") == []


def test_bedrock_segment_rule(word_tokens):
    kw = {
        "modelId": "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "system": [
            {"text": W(1100)},
            {"cachePoint": {"type": "default"}},
            {"text": W(100)},
            {"cachePoint": {"type": "default"}},
        ],
        "messages": [{"role": "user", "content": [{"text": "q"}]}],
    }
    found = [f for f in check(kw, "bedrock") if f.code == "segment-below-minimum"]
    assert [f.path for f in found] == ["$.system[3].cachePoint"]


def test_no_breakpoints_info():
    found = check(
        {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "x"}]}, "anthropic"
    )
    assert codes(found) == [("no-breakpoints", "$")]


def test_drift_first_differing_path_and_offset():
    a = request()
    b = copy.deepcopy(a)
    b["system"][0]["text"] = b["system"][0]["text"].replace("Policy.", "Policy!")
    d = diff_requests(a, b, "anthropic")
    assert (d.path, d.offset) == ("$.system[0].text", 6)
    # chars before it: model (17) + tools[0] canonical JSON without cache_control (55) + 6
    tool_json = '{"description":"A.","input_schema":{"properties":{},"type":"object"},"name":"a"}'
    assert d.char_offset == len("claude-sonnet-4-6") + len(tool_json) + 6
    drift = [f for f in check(b, "anthropic", previous=a) if f.code == "prefix-drift"]
    assert drift[0].path == "$.system[0].text" and drift[0].offset == 6


def test_appending_is_not_drift_and_markers_do_not_count():
    a = request()
    b = copy.deepcopy(a)
    b["messages"][0]["content"][0].pop("cache_control")
    b["messages"].append({"role": "assistant", "content": "done"})
    assert diff_requests(a, b, "anthropic") is None


def test_drift_on_tool_reorder_names_the_tool():
    a = request()
    a["tools"].append({"name": "b", "input_schema": {"type": "object"}})
    b = copy.deepcopy(a)
    b["tools"].reverse()
    assert diff_requests(a, b, "anthropic").path == "$.tools[0]"


def test_bad_payloads():
    with pytest.raises(ValueError, match="not valid JSON"):
        check("{nope", "anthropic")
    with pytest.raises(TypeError):
        check([1, 2], "anthropic")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown provider"):
        check({}, "cohere")


# bodies in each provider's documented shape (API references, read 2026-12-03)
@pytest.mark.parametrize(
    ("body", "provider"),
    [
        (
            {"model": "claude-sonnet-4-6", "max_tokens": 8, "system": "s", "messages": []},
            "anthropic",
        ),
        ({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 8, "messages": []}, "anthropic"),
        (
            {
                "model": "x",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "t", "cache_control": EPH}],
                    }
                ],
            },
            "anthropic",
        ),
        ({"model": "gpt-5.4", "messages": [{"role": "user", "content": "hi"}]}, "openai"),
        ({"model": "llama", "messages": [{"role": "system", "content": "s"}]}, "openai"),
        ({"model": "gpt-5.4", "input": "hi", "instructions": "s"}, "openai"),
        ({"model": "m", "messages": [], "prompt_cache_key": "k"}, "openai"),
        ({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}, "gemini"),
        ({"modelId": "anthropic.claude-sonnet-4-6", "messages": []}, "bedrock"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"text": "t"}, {"cachePoint": {"type": "default"}}],
                    }
                ]
            },
            "bedrock",
        ),
        ({"model": "anthropic/claude-sonnet-4-6", "messages": []}, "anthropic"),
    ],
)
def test_infer_provider_reads_the_body(body, provider):
    from promptcache.compose.check import infer_provider

    assert infer_provider(body) == provider


def test_check_without_provider_uses_the_bodys_rules():
    """The tryout's case: an OpenAI body checked with the provider left out got Anthropic's
    'no cache marker' finding; OpenAI caches automatically, so nothing is said."""
    p = build(system="Policy. " + W(1100), messages=[{"role": "user", "content": "hi"}])
    body = p.to_openai("gpt-5.4")
    assert [f.code for f in check(body)] == [f.code for f in check(body, "openai")]
    assert "no-breakpoints" not in [f.code for f in check(body)]
    # an Anthropic body with no marker still gets it
    bare = {"model": "claude-sonnet-4-6", "max_tokens": 8, "system": "s", "messages": []}
    assert [f.code for f in check(bare)] == ["no-breakpoints"]


def test_check_asks_for_the_provider_when_the_body_does_not_tell():
    with pytest.raises(ValueError, match="pass provider="):
        check({"model": "my-model", "messages": [{"role": "user", "content": "hi"}]})


def test_mid_conversation_system_message_marker_counts(word_tokens):
    """Anthropic's mid-conversation system message (Claude Opus 4.8,
    https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages,
    read 2026-12-03): its message-level cache_control is a breakpoint like any other."""
    from promptcache.compose.check import infer_provider

    r = request()
    r["model"] = "claude-opus-4-8"
    r["messages"].append({"role": "system", "content": "Answer in French.", "cache_control": EPH})
    found = [f for f in check(r, "anthropic") if f.code == "too-many-breakpoints"]
    # order: tools[0], system[0], messages[0], messages[2], messages[3] <- the 5th
    assert [f.path for f in found] == ["$.messages[3].cache_control"]
    r["messages"][3] = {
        "role": "system",
        "content": [{"type": "text", "text": "Answer in French."}],
        "cache_control": EPH,
    }
    found = [f for f in check(r, "anthropic") if f.code == "too-many-breakpoints"]
    assert [f.path for f in found] == ["$.messages[3].cache_control"]
    # no top-level system, no marker: the Claude model name says Anthropic, not OpenAI
    body = {
        "model": "claude-opus-4-8",
        "messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "s"}],
    }
    assert infer_provider(body) == "anthropic"
