import hashlib
import json
import warnings

import pytest

import promptcache
from promptcache import PromptCacheWarning, VolatilePrefixError, build

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City"},
        "unit": {"enum": ["C", "F"], "type": "string"},
    },
    "required": ["city"],
}
OPENAI_TOOL = {
    "type": "function",
    "function": {"name": "weather", "description": "Weather.", "parameters": SCHEMA},
}
ANTHROPIC_TOOL = {"name": "weather", "description": "Weather.", "input_schema": SCHEMA}


def reordered(value):
    """The same JSON value with every dict's keys in reverse order."""
    if isinstance(value, dict):
        return {k: reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reordered(v) for v in value]
    return value


def test_prefix_hash_is_sha256_of_the_documented_canonical_bytes():
    p = build(system="Hi", dynamic="q")
    expected = b'{"documents":[],"system":["Hi"],"tools":[],"v":"promptcache/1"}'
    assert p.canonical_prefix() == expected
    assert p.prefix_hash == hashlib.sha256(expected).hexdigest()


def test_tool_canonical_bytes_by_hand():
    p = build(
        tools=[
            {"name": "f", "input_schema": {"type": "object", "properties": {}}, "description": "d"}
        ]
    )
    assert p.canonical_prefix() == (
        b'{"documents":[],"system":[],"tools":[{"description":"d",'
        b'"input_schema":{"properties":{},"type":"object"},'
        b'"name":"f"}],"v":"promptcache/1"}'
    )


def test_prefix_hash_invariant_under_dict_order_and_tool_form():
    a = build(system="S", tools=[OPENAI_TOOL], dynamic="q")
    b = build(system="S", tools=[reordered(OPENAI_TOOL)], dynamic="q")
    c = build(system="S", tools=[ANTHROPIC_TOOL])
    d = build(
        system="S",
        tools=[
            {
                "type": "function",
                "name": "weather",
                "description": "Weather.",
                "parameters": reordered(SCHEMA),
            }
        ],
    )
    assert a.prefix_hash == b.prefix_hash == c.prefix_hash == d.prefix_hash
    # and the rendered tools are byte-identical whatever the input order
    assert json.dumps(a.to_openai("gpt-4o")["tools"]) == json.dumps(b.to_openai("gpt-4o")["tools"])
    assert json.dumps(a.to_anthropic("claude-sonnet-4-5", max_tokens=5)["tools"]) == json.dumps(
        b.to_anthropic("claude-sonnet-4-5", max_tokens=5)["tools"]
    )


def test_prefix_hash_normalizes_line_endings_and_trailing_space():
    assert build(system="a\r\nb  \n\n").prefix_hash == build(system="a\nb").prefix_hash


@pytest.mark.parametrize(
    "change",
    [
        dict(system="S!"),
        dict(tools=[{**ANTHROPIC_TOOL, "description": "Weather now."}]),
        dict(tools=[{**ANTHROPIC_TOOL, "input_schema": {**SCHEMA, "required": []}}]),
        dict(tools=[ANTHROPIC_TOOL, {**ANTHROPIC_TOOL, "name": "weather2"}]),
        dict(documents=["doc"]),
        dict(documents=[{"text": "doc", "title": "T"}]),
    ],
)
def test_prefix_hash_changes_on_any_frozen_change(change):
    base = dict(system="S", tools=[ANTHROPIC_TOOL], documents=None)
    assert build(**{**base, **change}).prefix_hash != build(**base).prefix_hash


def test_prefix_hash_ignores_session_history_and_dynamic():
    a = build(system="S", tools=[ANTHROPIC_TOOL])
    b = build(
        system="S",
        tools=[ANTHROPIC_TOOL],
        session="user Ann",
        messages=[{"role": "user", "content": "hi"}],
        dynamic="now",
    )
    assert a.prefix_hash == b.prefix_hash
    assert a.session_hash != b.session_hash


def test_sort_tools_sorts_by_name_and_default_keeps_order():
    t1 = {**ANTHROPIC_TOOL, "name": "b"}
    t2 = {**ANTHROPIC_TOOL, "name": "a"}
    assert [t["name"] for t in build(tools=[t1, t2]).tools] == ["b", "a"]
    assert [t["name"] for t in build(tools=[t1, t2], sort_tools=True).tools] == ["a", "b"]
    assert (
        build(tools=[t1, t2], sort_tools=True).prefix_hash
        == build(tools=[t2, t1], sort_tools=True).prefix_hash
    )


def test_strict_raises_with_layer_offset_and_text():
    with pytest.raises(VolatilePrefixError) as ei:
        build(system="Policy.\nNow: 2024-05-01T10:00:00Z", strict=True)
    msg = str(ei.value)
    assert "'system'" in msg and "offset 13" in msg and "2024-05-01T10:00:00Z" in msg
    f = ei.value.findings[0]
    assert (f.layer, f.path, f.offset, f.kind) == ("system", "system[0]", 13, "iso_datetime")


def test_volatile_in_tools_and_session_named_by_path():
    tool = {**ANTHROPIC_TOOL, "description": "Valid until 2025-01-31."}
    with pytest.raises(VolatilePrefixError) as ei:
        build(tools=[tool], session="req_01HZX8Y9ABCDEF", strict=True)
    got = {(f.layer, f.path, f.offset) for f in ei.value.findings}
    assert got == {("tools", "tools[0].description", 12), ("session", "session[0]", 0)}


def test_non_strict_warns_and_renders():
    with pytest.warns(PromptCacheWarning, match="uuid"):
        p = build(system="run 550e8400-e29b-41d4-a716-446655440000", dynamic="q")
    assert p.findings and p.to_openai("gpt-4o")["messages"][0]["role"] == "system"


DATED_MODELS = (
    "gpt-4o-2024-08-06",
    "claude-3-5-sonnet-20241022",
    "gemini-1.5-pro-002",
    "o1-2024-12-17",
)


@pytest.mark.parametrize("model", DATED_MODELS)
def test_dated_model_names_pass_strict_build(model):
    """A dated model snapshot in the system prompt, a tool description, a tool schema's enum
    and default (a ``model=`` parameter) is stable text: no warning, no error."""
    tool = {
        "name": "delegate",
        "description": f"Delegates to {model} for hard questions.",
        "input_schema": {
            "type": "object",
            "properties": {"model": {"type": "string", "enum": [model], "default": model}},
        },
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = build(
            system=f"You are an assistant served by {model}.",
            tools=[tool],
            session=f"Preferred model: {model}",
            dynamic="q",
            strict=True,
        )
    assert p.findings == () and p.warnings == ()
    kw = p.to_openai(model)
    assert kw["model"] == model


def test_real_date_next_to_a_model_name_still_raises():
    with pytest.raises(VolatilePrefixError) as ei:
        build(system="You are gpt-4o-2024-08-06. Today is 2024-08-06.", strict=True)
    # "You are gpt-4o-2024-08-06. Today is " is 8 + 17 + 11 = 36 characters
    assert [(f.offset, f.kind, f.text) for f in ei.value.findings] == [(36, "date", "2024-08-06")]
    with pytest.warns(PromptCacheWarning, match="20241022 12:00"):
        build(tools=[{**ANTHROPIC_TOOL, "description": "Prices as of 20241022 12:00."}])


def test_dynamic_and_history_are_not_scanned():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build(
            system="S",
            messages=[{"role": "user", "content": "at 2024-05-01T10:00:00Z"}],
            dynamic="Current time: 2024-05-01T10:00:00Z",
            strict=True,
        )


def test_tool_call_arguments_are_canonicalized():
    hist = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {
                        "name": "weather",
                        "arguments": '{ "unit": "C",  "city": "Oslo" }',
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "5C"},
    ]
    kw = build(system="S", tools=[OPENAI_TOOL], messages=hist).to_openai("gpt-4o")
    assert (
        kw["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"city":"Oslo","unit":"C"}'
    )
    ant = build(system="S", messages=hist, dynamic="x").to_anthropic("claude-sonnet-4-5")
    assert list(ant["messages"][0]["content"][0]["input"]) == ["city", "unit"]


def test_invalid_json_arguments_are_kept_verbatim_for_openai():
    hist = [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"trunc'}}
            ],
        }
    ]
    kw = build(messages=hist).to_openai("gpt-4o")
    assert kw["messages"][0]["tool_calls"][0]["function"]["arguments"] == '{"trunc'
    with pytest.raises(ValueError, match="not JSON"):
        build(messages=hist, dynamic="x").to_anthropic("claude-sonnet-4-5")


def test_messages_accept_anthropic_openai_and_responses_forms_equally():
    anth = [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c1", "name": "f", "input": {"a": 1}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "ok"}],
        },
    ]
    oai = [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    resp = [
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    assert (
        build(messages=anth).messages
        == build(messages=oai).messages
        == build(messages=resp).messages
    )


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(system=42), TypeError, "system"),
        (dict(tools={"name": "x"}), TypeError, "single dict"),
        (dict(tools="x"), TypeError, r"^tools: expected a list of tool schemas, got str$"),
        (dict(tools=[{"foo": 1}]), ValueError, r"tools\[0\]"),
        (dict(tools=[ANTHROPIC_TOOL, ANTHROPIC_TOOL]), ValueError, "duplicate"),
        (dict(messages=[{"role": "system", "content": "x"}]), ValueError, "system="),
        (dict(messages=[{"role": "robot", "content": "x"}]), ValueError, "role"),
        (dict(messages=[{"role": "user", "content": [{"type": "video"}]}]), ValueError, "video"),
        (dict(documents=[{"body": "x"}]), TypeError, r"documents\[0\]"),
    ],
)
def test_bad_input_errors_name_the_place(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        build(**kwargs)


def test_frozen_processing_is_memoized():
    import importlib

    # ``promptcache.build`` the attribute is the function; the module is in sys.modules
    bm = importlib.import_module("promptcache.build")

    system = "memo test " * 100
    build(system=system)
    before = dict(bm._frozen_memo)
    p = build(system=system, dynamic="other")
    assert p.prefix_hash in {v.prefix_hash for v in before.values()}
    assert len(bm._frozen_memo) == len(before)


def test_public_names_resolve():
    assert promptcache.build is build and promptcache.Prompt.__name__ == "Prompt"
