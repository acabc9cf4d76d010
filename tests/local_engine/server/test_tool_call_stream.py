"""Forced tool calls streamed as each provider streams them: the arguments arrive in pieces
(OpenAI Chat ``tool_calls[].function.arguments`` chunks, Responses
``response.function_call_arguments.delta``, Anthropic ``input_json_delta``), read through the
official clients' stream helpers; the pieces join into the arguments of the same greedy
request made without streaming, which validate against the tool's schema (``jsonschema``).
Plus :class:`ToolCallText` on texts worked out by hand."""

from __future__ import annotations

import json

import jsonschema
import pytest

from local_engine.server.structured_output import ToolCallText, split_tool_call

PARAMS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "days": {"type": "integer", "minimum": 1, "maximum": 9},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
USER = {"role": "user", "content": "What is the weather in Paris for the next 3 days?"}


@pytest.fixture(scope="module")
def server(server_factory):
    return server_factory()


# ---------------------------------------------------------------------------- the splitter


def test_tool_call_text_streams_the_arguments_and_holds_back_a_closing_brace():
    text = '{"name":"get_weather","arguments":{"city":"}","days":{"n":2}}}'
    call, name_at, pieces = ToolCallText(), None, []
    for i in range(1, len(text) + 1):
        name, piece = call.feed(text[:i], finished=i == len(text))
        if name is not None:
            name_at = i
        pieces.append(piece)
    # the name is known once '{"name":"get_weather","arguments":' is complete (34 chars)
    assert call.name == "get_weather" and name_at == 34
    args = '{"city":"}","days":{"n":2}}'
    assert "".join(pieces) == call.arguments == args and call.complete
    # a "}" is sent only once the next character shows it is the arguments' own
    brace = text.index('}","days"')  # pieces[i] is what feeding text[: i + 1] sent
    assert pieces[brace] == "" and pieces[brace + 1] == '}"'


def test_split_tool_call_cut_short_and_before_the_name():
    cut = split_tool_call('{"name":"f","arguments":{"a":[1,')
    assert (cut.name, cut.arguments, cut.complete) == ("f", '{"a":[1,', False)
    early = split_tool_call('{"name":"f')
    assert early.name is None and early.arguments == ""
    whole = split_tool_call('{"name":"f","arguments":{}}')
    assert (whole.name, whole.arguments, whole.complete) == ("f", "{}", True)


# ---------------------------------------------------------------------------- the APIs


def test_chat_stream_helper_gets_argument_pieces(server):
    oai = server.openai_client(max_retries=0, timeout=120)
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}
    kw = dict(model="m", messages=[USER], max_tokens=40, temperature=0, tools=[tool])
    plain = oai.chat.completions.create(**kw, tool_choice="required")
    expected = plain.choices[0].message.tool_calls[0].function.arguments
    jsonschema.validate(json.loads(expected), PARAMS)
    with oai.chat.completions.stream(**kw, tool_choice="required") as stream:
        events = list(stream)
        final = stream.get_final_completion()
    pieces = [e.arguments_delta for e in events if e.type == "tool_calls.function.arguments.delta"]
    (done,) = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    assert len(pieces) > 1 and "".join(pieces) == done.arguments == expected
    assert done.name == "get_weather"
    assert final.choices[0].finish_reason == "tool_calls"
    assert final.choices[0].message.tool_calls[0].function.arguments == expected


def test_chat_stream_chunks_have_openais_shape(server):
    oai = server.openai_client(max_retries=0, timeout=120)
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}
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
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant" and deltas[0].content is None
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    head = calls[0]  # the first names the call, with empty arguments
    assert head.id.startswith("call_") and head.type == "function"
    assert head.function.name == "get_weather" and head.function.arguments == ""
    assert all(tc.id is None and tc.function.name is None for tc in calls[1:])
    jsonschema.validate(json.loads("".join(tc.function.arguments for tc in calls)), PARAMS)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_responses_stream_helper_gets_argument_deltas(server):
    oai = server.openai_client(max_retries=0, timeout=120)
    tool = {"type": "function", "name": "get_weather", "parameters": PARAMS}
    kw = dict(
        model="m",
        input=USER["content"],
        tools=[tool],
        tool_choice="required",
        max_output_tokens=40,
        temperature=0,
    )
    expected = oai.responses.create(**kw).output[0].arguments
    jsonschema.validate(json.loads(expected), PARAMS)
    with oai.responses.stream(**kw) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    pieces = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert len(pieces) > 1 and "".join(pieces) == done.arguments == expected
    assert kinds.index("response.output_item.added") < kinds.index(
        "response.function_call_arguments.delta"
    )
    (item,) = final.output
    assert item.type == "function_call" and item.name == "get_weather"
    assert item.arguments == expected and item.status == "completed"
    assert done.item_id == item.id


def test_responses_call_cut_by_the_token_limit_is_an_incomplete_function_call(server):
    oai = server.openai_client(max_retries=0, timeout=120)
    tool = {"type": "function", "name": "get_weather", "parameters": PARAMS}
    r = oai.responses.create(
        model="m", input=USER["content"], tools=[tool], tool_choice="required", max_output_tokens=12
    )
    # 12 tokens cover the name ('{"name":"get_weather","arguments":' is under 12 tokens in
    # SmolLM2's vocabulary) but not the whole call
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    (item,) = r.output
    assert item.type == "function_call" and item.status == "incomplete"
    assert item.arguments.startswith("{") and item.arguments != ""


def test_anthropic_stream_helper_gets_input_json_pieces(server):
    claude = server.anthropic_client(max_retries=0, timeout=120)
    tool = {"name": "get_weather", "input_schema": PARAMS}
    kw = dict(
        model="m",
        max_tokens=40,
        extra_body={"temperature": 0},  # this client version has no temperature argument
        messages=[USER],
        tools=[tool],
        tool_choice={"type": "tool", "name": "get_weather"},
    )
    expected = claude.messages.create(**kw).content[0].input
    jsonschema.validate(expected, PARAMS)
    with claude.messages.stream(**kw) as stream:
        events = list(stream)
        final = stream.get_final_message()
    pieces = [e.partial_json for e in events if e.type == "input_json"]
    assert len(pieces) > 1 and json.loads("".join(pieces)) == expected
    starts = [e for e in events if e.type == "content_block_start"]
    assert starts[0].content_block.type == "tool_use" and starts[0].content_block.input == {}
    assert final.stop_reason == "tool_use"
    (block,) = final.content
    assert block.type == "tool_use" and block.name == "get_weather" and block.input == expected


def test_chat_call_cut_by_max_tokens_is_a_partial_call_streamed_or_not(server):
    oai = server.openai_client(max_retries=0, timeout=120)
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}
    kw = dict(
        model="m",
        messages=[USER],
        max_tokens=12,  # past the name, inside the arguments (as the Responses case above)
        temperature=0,
        tools=[tool],
        tool_choice="required",
    )
    plain = oai.chat.completions.create(**kw).choices[0]
    assert plain.finish_reason == "length"
    (call,) = plain.message.tool_calls
    assert call.function.name == "get_weather" and call.function.arguments.startswith("{")
    with pytest.raises(ValueError):
        json.loads(call.function.arguments)  # cut short: not yet JSON
    chunks = list(oai.chat.completions.create(**kw, stream=True))
    pieces = [tc.function.arguments for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert "".join(pieces) == call.function.arguments
    assert chunks[-1].choices[0].finish_reason == "length"
