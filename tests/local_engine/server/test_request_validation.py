"""Request validation as the hosted APIs do it: every pydantic error names its field
(OpenAI ``param``, Anthropic message prefix), ``tool_choice`` is enforced where the engine
can honour it and refused with a 400 where it cannot, and tool messages must answer the
calls right before them.

The first part checks the field path of every field of every request model in-process
(through :func:`parse_body`, what the routes call); the rest goes through the official
clients (or httpx for bodies the clients' types would not send) against ``promptcache
serve``."""

from __future__ import annotations

import copy
import json
import uuid

import anthropic
import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, ValidationError

from local_engine.server import protocol_anthropic as pa
from local_engine.server import protocol_openai as po
from local_engine.server.errors import APIError, parse_body
from local_engine.server.rendering import TOOLS_HEADER

# ---------------------------------------------------------------------------- every field's path

#: wrong values tried in turn; the first one a field refuses is used
WRONG = [{"__wrong__": [1]}, "zz", 1.5, True, [[["x"]]], -1]

#: valid bodies holding one instance of every nested model, and where each instance is
CHAT = {
    "model": "m",
    "stream_options": {"include_usage": True},
    "prompt_cache_options": {"mode": "implicit"},
    "messages": [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "q",
                    "prompt_cache_breakpoint": {"mode": "explicit"},
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ],
}
CHAT_MODELS = [
    ((), po.ChatCompletionRequest),
    (("stream_options",), po.StreamOptions),
    (("prompt_cache_options",), po.PromptCacheOptions),
    (("messages", 0), po.ChatMessage),
    (("messages", 0, "content", 0), po.ContentPart),
    (("messages", 0, "content", 0, "prompt_cache_breakpoint"), po.PromptCacheBreakpoint),
    (("messages", 0, "content", 0, "cache_control"), po.CacheControl),
    (("messages", 1, "tool_calls", 0), po.ToolCall),
]
COMPLETION = {"model": "m", "prompt": "p", "stream_options": {"include_usage": True}}
COMPLETION_MODELS = [((), po.CompletionRequest), (("stream_options",), po.StreamOptions)]
MESSAGES = {
    "model": "m",
    "max_tokens": 4,
    "tool_choice": {"type": "auto"},
    "diagnostics": {},
    "cache_control": {"type": "ephemeral"},
    "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
    "tools": [
        {
            "name": "lookup",
            "input_schema": {"type": "object"},
            "cache_control": {"type": "ephemeral"},
        }
    ],
    "messages": [
        {
            "role": "user",
            "content": [{"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}}],
        }
    ],
}
MESSAGES_MODELS = [
    ((), pa.MessagesRequest),
    (("tool_choice",), pa.ToolChoice),
    (("diagnostics",), pa.Diagnostics),
    (("cache_control",), pa.CacheControl),
    (("system", 0), pa.TextBlock),
    (("tools", 0), pa.Tool),
    (("messages", 0), pa.Message),
    (("messages", 0, "content", 0), pa.ContentBlock),
    (("messages", 0, "content", 0, "cache_control"), pa.CacheControl),
]


def _at(body, path):
    for key in path:
        body = body[key]
    return body


def field_cases(request_model, body, nested):
    """(field path, body with that one field wrong) for every field of every nested model."""
    request_model.model_validate_json(json.dumps(body), strict=True)  # the base body is valid
    for where, model in nested:
        assert issubclass(model, BaseModel)
        for name in model.model_fields:
            for wrong in WRONG:
                bad = copy.deepcopy(body)
                _at(bad, where)[name] = wrong
                try:
                    request_model.model_validate_json(json.dumps(bad), strict=True)
                except ValidationError:
                    yield ".".join(map(str, (*where, name))), bad
                    break
            else:
                raise AssertionError(f"no wrong value found for {model.__name__}.{name}")


ALL_FIELDS = [
    *(
        (po.ChatCompletionRequest, p, b)
        for p, b in field_cases(po.ChatCompletionRequest, CHAT, CHAT_MODELS)
    ),
    *(
        (po.CompletionRequest, p, b)
        for p, b in field_cases(po.CompletionRequest, COMPLETION, COMPLETION_MODELS)
    ),
    *(
        (pa.MessagesRequest, p, b)
        for p, b in field_cases(pa.MessagesRequest, MESSAGES, MESSAGES_MODELS)
    ),
]


@pytest.mark.parametrize(
    "model,path,body", ALL_FIELDS, ids=[f"{m.__name__}:{p}" for m, p, _ in ALL_FIELDS]
)
def test_every_field_error_names_its_path(model, path, body):
    with pytest.raises(APIError) as e:
        parse_body(model, json.dumps(body).encode())
    err = e.value
    assert err.status == 400
    # the path is the field, or a part of it (a union member that failed deeper)
    assert err.param == path or err.param.startswith(path + "."), (err.param, err.message)
    assert err.message.startswith(err.param + ": "), err.message


def test_union_member_tags_are_not_part_of_the_path():
    # pydantic reports ('messages', 0, 'content', 'list[ContentPart]', 0, 'type') here
    body = {"model": "m", "messages": [{"role": "user", "content": [{"type": 5, "text": "x"}]}]}
    with pytest.raises(APIError) as e:
        parse_body(po.ChatCompletionRequest, json.dumps(body).encode())
    assert e.value.param == "messages.0.content.0.type"
    assert e.value.message.startswith(
        "messages.0.content.0.type: Input should be a valid string (got 5)"
    )
    body = {"model": "m", "prompt": [[1, 2], [3, "four"]]}
    with pytest.raises(APIError) as e:
        parse_body(po.CompletionRequest, json.dumps(body).encode())
    assert e.value.param == "prompt.1.1"


# ---------------------------------------------------------------------------- through the server


@pytest.fixture(scope="module")
def server(server_factory):
    return server_factory()


@pytest.fixture(scope="module")
def oai(server):
    return server.openai_client(max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def claude(server):
    return server.anthropic_client(max_retries=0, timeout=120)


def openai_error(r: httpx.Response) -> dict:
    assert r.status_code == 400, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, (
        body
    )
    assert body["error"]["type"] == "invalid_request_error"
    return body["error"]


def anthropic_error(r: httpx.Response) -> str:
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
    assert body["request_id"].startswith("req_")
    return body["error"]["message"]


USER = {"role": "user", "content": "Hi"}


def test_stream_non_boolean_names_the_field(server):
    err = openai_error(
        httpx.post(
            server.openai_base_url + "/chat/completions",
            json={"model": "m", "messages": [USER], "stream": "yes"},
        )
    )
    assert err["param"] == "stream"
    assert err["message"] == 'stream: Input should be a valid boolean (got "yes")'
    err = openai_error(
        httpx.post(
            server.openai_base_url + "/completions",
            json={"model": "m", "prompt": "x", "stream": "yes"},
        )
    )
    assert err["param"] == "stream"
    err = openai_error(
        httpx.post(
            server.openai_base_url + "/chat/completions",
            json={"model": "m", "messages": [USER], "stream_options": {"include_usage": "y"}},
        )
    )
    assert err["param"] == "stream_options.include_usage"
    msg = anthropic_error(
        httpx.post(
            server.base_url + "/v1/messages",
            json={"model": "m", "max_tokens": 4, "messages": [USER], "stream": "yes"},
        )
    )
    assert msg == 'stream: Input should be a valid boolean (got "yes")'


@pytest.mark.parametrize("ids,bad", [([-1], -1), ([5, 2**70], 2**70), ([49152], 49152)])
def test_completions_token_id_out_of_range_is_400(server, ids, bad):
    """SmolLM2's vocabulary is 49,152 ids (0..49151); a negative or huge id used to reach the
    tokenizer's decode and came back as a 500."""
    err = openai_error(
        httpx.post(
            server.openai_base_url + "/completions",
            json={"model": "m", "prompt": ids, "max_tokens": 1},
        )
    )
    assert err["param"] == "prompt"
    assert err["message"] == f"prompt token id {bad} is out of range 0..49151"


def test_nested_paths_over_http(server):
    err = openai_error(
        httpx.post(
            server.openai_base_url + "/chat/completions",
            json={
                "model": "m",
                "messages": [USER, {"role": "assistant", "tool_calls": [{"type": "function"}]}],
            },
        )
    )
    assert err["param"] == "messages.1.tool_calls.0.id" and err["message"].endswith(
        "Field required"
    )
    msg = anthropic_error(
        httpx.post(
            server.base_url + "/v1/messages",
            json={
                "model": "m",
                "max_tokens": 4,
                "messages": [USER],
                "tools": [{"name": "a"}, {"description": "no name"}],
            },
        )
    )
    assert msg == "tools.1.name: Field required"
    # checked while rendering, not by pydantic: the path is the param too
    err = openai_error(
        httpx.post(
            server.openai_base_url + "/chat/completions",
            json={
                "model": "m",
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "What is this?"},
                            {"type": "image_url", "image_url": {"url": "data:,"}},
                        ],
                    }
                ],
            },
        )
    )
    assert err["param"] == "messages.0.content.1.image_url.url" and err["message"].startswith(
        "messages.0.content.1.image_url.url: "
    )


# ---------------------------------------------------------------------------- tool_choice (OpenAI)

FN = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
FN2 = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}


@pytest.mark.parametrize(
    "choice",
    [
        "required",
        {"type": "function", "function": {"name": "get_weather"}},
        {
            "type": "allowed_tools",
            "allowed_tools": {
                "mode": "required",
                "tools": [{"type": "function", "function": {"name": "get_weather"}}],
            },
        },
    ],
    ids=["required", "named", "allowed-required"],
)
def test_openai_tool_choice_that_forces_a_call_returns_a_valid_call(oai, choice):
    # a closed schema (as OpenAI's strict tools), so the call ends within max_tokens
    params = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}},
        "required": ["city"],
        "additionalProperties": False,
    }
    fn = {"type": "function", "function": {"name": "get_weather", "parameters": params}}
    only_weather = choice == "required"
    tools = [fn] if only_weather else [fn, FN2]
    r = oai.chat.completions.create(
        model="m", max_tokens=40, messages=[USER], tools=tools, tool_choice=choice
    )
    choice0 = r.choices[0]
    assert choice0.finish_reason == "tool_calls" and choice0.message.content is None
    (call,) = choice0.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), params)


def test_openai_tool_choice_naming_an_undeclared_tool_is_400(oai):
    for choice in (
        {"type": "function", "function": {"name": "get_stock"}},
        {
            "type": "allowed_tools",
            "allowed_tools": {
                "mode": "auto",
                "tools": [{"type": "function", "function": {"name": "get_stock"}}],
            },
        },
    ):
        with pytest.raises(openai.BadRequestError) as e:
            oai.chat.completions.create(
                model="m", max_tokens=1, messages=[USER], tools=[FN], tool_choice=choice
            )
        assert e.value.body["param"] == "tool_choice"
        assert e.value.body["message"] == (
            "Invalid value for 'tool_choice': it names the function tool 'get_stock', which 'tools' does not "
            "declare (declared: function 'get_weather'). Name a declared tool, or send tool_choice \"auto\"."
        )


def test_openai_tool_choice_without_tools_and_bad_shapes_are_400(server, oai):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="m", max_tokens=1, messages=[USER], tool_choice="auto")
    assert e.value.body["param"] == "tool_choice"
    assert e.value.body["message"].startswith(
        "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
    )
    for choice, words in (
        ("sometimes", 'got "sometimes"'),
        ({"type": "function"}, '"function": {"name"'),
        ({"type": "magic"}, "unknown tool_choice type 'magic'"),
    ):
        err = openai_error(
            httpx.post(
                server.openai_base_url + "/chat/completions",
                json={"model": "m", "messages": [USER], "tools": [FN], "tool_choice": choice},
            )
        )
        assert (
            err["param"] == "tool_choice"
            and err["message"].startswith("tool_choice: ")
            and words in err["message"]
        )


def test_openai_tool_choice_none_leaves_the_tools_out(oai, chat_ids):
    messages = [
        {"role": "system", "content": f"[{uuid.uuid4().hex[:8]}] You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
    ]

    def prompt_tokens(**kw):
        return oai.chat.completions.create(
            model="m", max_tokens=1, messages=messages, **kw
        ).usage.prompt_tokens

    # "none": exactly the plain conversation, tokenized here with the template and no tools
    assert prompt_tokens(tools=[FN, FN2], tool_choice="none") == len(chat_ids(messages))
    offered = prompt_tokens(tools=[FN, FN2], tool_choice="auto")
    assert offered == prompt_tokens(tools=[FN, FN2]) > len(chat_ids(messages))
    # allowed_tools in "auto" mode offers just those: the same prompt as sending only them
    allowed = {
        "type": "allowed_tools",
        "allowed_tools": {
            "mode": "auto",
            "tools": [{"type": "function", "function": {"name": "get_time"}}],
        },
    }
    only = prompt_tokens(tools=[FN2])
    assert prompt_tokens(tools=[FN, FN2], tool_choice=allowed) == only
    assert len(chat_ids(messages)) < only < offered


# ---------------------------------------------------------------------------- tool_choice (Anthropic)

TOOL = {
    "name": "lookup",
    "description": "Look a book up",
    "input_schema": {"type": "object", "properties": {"title": {"type": "string"}}},
}


@pytest.mark.parametrize(
    "choice", [{"type": "any"}, {"type": "tool", "name": "lookup"}], ids=["any", "tool"]
)
def test_anthropic_tool_choice_that_forces_a_call_returns_a_tool_use(claude, choice):
    closed = {
        **TOOL,
        "input_schema": {
            **TOOL["input_schema"],
            "required": ["title"],
            "additionalProperties": False,
        },
    }
    closed["input_schema"]["properties"] = {"title": {"type": "string", "maxLength": 20}}
    r = claude.messages.create(
        model="m", max_tokens=40, tools=[closed], tool_choice=choice, messages=[USER]
    )
    assert r.stop_reason == "tool_use"
    (block,) = r.content
    assert block.type == "tool_use" and block.name == "lookup" and block.id.startswith("toolu_")
    jsonschema.validate(block.input, closed["input_schema"])
    # counting tokens generates nothing: the same body is counted (with the tools offered)
    counted = claude.messages.count_tokens(
        model="m", tools=[TOOL], tool_choice=choice, messages=[USER]
    )
    assert (
        counted.input_tokens
        == claude.messages.count_tokens(model="m", tools=[TOOL], messages=[USER]).input_tokens
    )


def test_anthropic_tool_choice_naming_an_undeclared_tool_is_400(claude):
    for call in (claude.messages.create, claude.messages.count_tokens):
        kw = {"max_tokens": 1} if call == claude.messages.create else {}
        with pytest.raises(anthropic.BadRequestError) as e:
            call(
                model="m",
                tools=[TOOL],
                tool_choice={"type": "tool", "name": "search"},
                messages=[USER],
                **kw,
            )
        assert e.value.body["error"]["message"] == (
            "tool_choice.name: the tool 'search' is not in tools ('lookup'). Name one of the tools, or send "
            'tool_choice {"type": "auto"}.'
        )
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(
            model="m", max_tokens=1, tool_choice={"type": "tool"}, tools=[TOOL], messages=[USER]
        )
    assert e.value.body["error"]["message"].startswith(
        'tool_choice: a "tool" tool_choice names the tool'
    )


def test_anthropic_tool_choice_none_leaves_the_tools_out(claude, chat_ids):
    system = f"[{uuid.uuid4().hex[:8]}] You are a librarian."
    messages = [{"role": "user", "content": "Find Emma."}]

    def total(**kw):
        u = claude.messages.create(
            model="m", max_tokens=1, system=system, messages=messages, **kw
        ).usage
        return u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens

    plain = len(chat_ids([{"role": "system", "content": system}, *messages]))
    assert total(tools=[TOOL], tool_choice={"type": "none"}) == plain
    assert (
        claude.messages.count_tokens(
            model="m", system=system, messages=messages, tools=[TOOL], tool_choice={"type": "none"}
        ).input_tokens
        == plain
    )
    assert total(tools=[TOOL], tool_choice={"type": "auto"}) == total(tools=[TOOL]) > plain


# ---------------------------------------------------------------------------- message order (OpenAI)

CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
}
ASKED = {"role": "assistant", "content": None, "tool_calls": [CALL]}


def test_openai_tool_message_must_answer_a_preceding_call(oai):
    cases = [
        (
            [USER, {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
            1,
            "it follows messages.0, a user message without tool_calls",
        ),
        (
            [USER, ASKED, {"role": "tool", "tool_call_id": "call_9", "content": "sunny"}],
            2,
            "its tool_call_id 'call_9' is not one of the tool_calls ids of messages.1 ('call_1')",
        ),
        (
            [{"role": "tool", "tool_call_id": "call_1", "content": "sunny"}, USER],
            0,
            "it is the first message",
        ),
    ]
    for messages, i, where in cases:
        with pytest.raises(openai.BadRequestError) as e:
            oai.chat.completions.create(model="m", max_tokens=1, messages=messages, tools=[FN])
        body = e.value.body
        assert body["type"] == "invalid_request_error" and body["param"] == f"messages.{i}.role"
        assert body["message"] == (
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with "
            f"'tool_calls'. messages.{i}: {where}; put each tool message after the assistant message whose "
            "tool_calls include its tool_call_id."
        )


def test_openai_tool_calls_need_answers_and_tool_messages_an_id(oai, server):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(
            model="m", max_tokens=1, messages=[USER, ASKED, USER], tools=[FN]
        )
    assert e.value.body["param"] == "messages.1.tool_calls"
    assert e.value.body["message"].startswith(
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
        "'tool_call_id'. The following tool_call_ids did not have response messages: call_1 (messages.1)"
    )
    err = openai_error(
        httpx.post(
            server.openai_base_url + "/chat/completions",
            json={"model": "m", "messages": [USER, ASKED, {"role": "tool", "content": "sunny"}]},
        )
    )
    assert err["param"] == "messages.2.tool_call_id"
    assert err["message"].startswith("Missing required parameter: 'messages.2.tool_call_id'.")


def test_openai_valid_tool_exchange_is_served(oai, chat_ids):
    second = {
        **CALL,
        "id": "call_2",
        "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
    }
    messages = [
        USER,
        {**ASKED, "tool_calls": [CALL, second]},
        {"role": "tool", "tool_call_id": "call_2", "content": "rain"},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    r = oai.chat.completions.create(model="m", max_tokens=1, messages=messages, tools=[FN])
    assert r.usage.completion_tokens == 1

    # expected: the tools in the system turn and the calls as sent, each as JSON with sorted
    # keys and no spaces, laid out by the model's template and tokenized here as one text
    def canonical(value):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))

    expected = chat_ids(
        [
            {"role": "system", "content": TOOLS_HEADER + canonical(FN)},
            USER,
            {"role": "assistant", "content": canonical({"tool_calls": [CALL, second]})},
            {"role": "tool", "content": "rain"},
            {"role": "tool", "content": "sunny"},
        ]
    )
    assert r.usage.prompt_tokens == len(expected)


# ---------------------------------------------------------------------------- message order (Anthropic)

USE = {
    "role": "assistant",
    "content": [
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"title": "Emma"}},
    ],
}


def result(tool_use_id, text="Jane Austen, 1815"):
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": tool_use_id, "content": text}],
    }


def test_anthropic_assistant_first_is_accepted(claude):
    """Anthropic's API accepts an assistant message first (it refused it until late 2024), so
    the local server does too: the request runs and counts tokens."""
    msgs = [{"role": "assistant", "content": "Hello."}, USER]
    out = claude.messages.create(model="m", max_tokens=1, messages=msgs)
    u = (
        out.usage
    )  # input_tokens excludes what the cache read or wrote (another test may share the prefix)
    total = u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)
    assert total > 0
    assert claude.messages.count_tokens(model="m", messages=msgs).input_tokens == total


def test_anthropic_empty_messages_is_400(server, claude):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="m", max_tokens=1, messages=[])
    assert e.value.body["error"]["message"].startswith("messages: List should have at least 1 item")
    msg = anthropic_error(
        httpx.post(
            server.base_url + "/v1/messages/count_tokens", json={"model": "m", "messages": []}
        )
    )
    assert msg.startswith("messages: ")


def test_anthropic_tool_result_must_answer_the_previous_message(claude):
    cases = [
        (
            [USER, USE, result("toolu_2")],
            "messages.2.content.0",
            "toolu_2",
            "messages.1 has tool_use ids toolu_1",
        ),
        (
            [
                USER,
                USE,
                result("toolu_1"),
                {"role": "assistant", "content": "Emma."},
                result("toolu_1"),
            ],
            "messages.4.content.0",
            "toolu_1",
            "messages.3 (an assistant message) has no tool_use block",
        ),
        ([result("toolu_1")], "messages.0.content.0", "toolu_1", "no message comes before it"),
    ]
    for messages, path, rid, where in cases:
        with pytest.raises(anthropic.BadRequestError) as e:
            claude.messages.create(model="m", max_tokens=1, tools=[TOOL], messages=messages)
        assert e.value.body["error"]["message"] == (
            f"{path}: unexpected `tool_use_id` found in `tool_result` blocks: {rid}. Each `tool_result` block "
            f"must have a corresponding `tool_use` block in the previous message. ({where}; a tool_result "
            "answers a tool_use of the assistant message right before it.)"
        )


def test_anthropic_tool_ids_are_required(claude):
    nameless = {"role": "user", "content": [{"type": "tool_result", "content": "x"}]}
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(
            model="m", max_tokens=1, tools=[TOOL], messages=[USER, USE, nameless]
        )
    assert (
        e.value.body["error"]["message"]
        == "messages.2.content.0.tool_use_id: Field required (a string)"
    )
    no_id = {"role": "assistant", "content": [{"type": "tool_use", "name": "lookup", "input": {}}]}
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="m", max_tokens=1, tools=[TOOL], messages=[USER, no_id])
    assert e.value.body["error"]["message"] == "messages.1.content.0.id: Field required (a string)"


def test_anthropic_tool_use_needs_a_result_in_the_next_message(claude):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model="m", max_tokens=1, tools=[TOOL], messages=[USER, USE, USER])
    assert e.value.body["error"]["message"] == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1. Each "
        "`tool_use` block must have a corresponding `tool_result` block in the next message. (Add a "
        "tool_result block for each to messages.2.)"
    )


def test_anthropic_valid_tool_exchange_and_tool_use_prefill_are_served(claude):
    r = claude.messages.create(
        model="m", max_tokens=1, tools=[TOOL], messages=[USER, USE, result("toolu_1")]
    )
    assert r.usage.output_tokens == 1
    # a last assistant message is a prefill: its tool_use has no next message to answer it yet
    r = claude.messages.create(model="m", max_tokens=1, tools=[TOOL], messages=[USER, USE])
    assert r.usage.output_tokens == 1
