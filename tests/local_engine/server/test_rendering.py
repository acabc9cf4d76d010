"""Prompt rendering: chat template, tools in the system turn, block boundaries in tokens."""

from __future__ import annotations

import json

import pytest

from local_engine.server.protocol_anthropic import MessagesRequest, messages_to_turns
from local_engine.server.protocol_openai import ChatCompletionRequest, chat_to_turns
from local_engine.server.rendering import TOOLS_HEADER, Block, RenderError, Turn, render_chat

TOOL_A = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"unit": {"type": "string"}, "city": {"type": "string"}},
        "required": ["city"],
    },
}


def render_anthropic(tokenizer, body):
    req = MessagesRequest.model_validate({"model": "m", "max_tokens": 1, **body})
    tools, system, turns, cont = messages_to_turns(req)
    return render_chat(tokenizer, tools=tools, system=system, turns=turns, continue_final=cont)


def test_plain_conversation_matches_the_template(tokenizer):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    req = ChatCompletionRequest.model_validate({"model": "m", "messages": msgs})
    tools, system, turns = chat_to_turns(req)
    r = render_chat(tokenizer, tools=tools, system=system, turns=turns)
    text = tokenizer.apply_chat_template(msgs)
    assert r.token_ids == tokenizer.encode(text)
    # block ends: end of "Be brief." and end of "Hi there", each before its <|im_end|>
    im_end = tokenizer.id_of("<|im_end|>")
    assert [r.token_ids[e] for e in r.block_ends] == [im_end, im_end]
    assert tokenizer.decode(r.token_ids[: r.block_ends[0]], skip_special_tokens=False).endswith(
        "Be brief."
    )
    assert r.system_end == r.block_ends[0] and r.message_ends == [r.block_ends[1]]


def test_tools_are_canonical_json_before_the_system_text(tokenizer):
    shuffled = json.loads(json.dumps(TOOL_A))
    shuffled["input_schema"]["properties"] = {
        "city": {"type": "string"},
        "unit": {"type": "string"},
    }
    shuffled = dict(reversed(list(shuffled.items())))
    r1 = render_anthropic(
        tokenizer,
        {"tools": [TOOL_A], "system": "Sys", "messages": [{"role": "user", "content": "q"}]},
    )
    r2 = render_anthropic(
        tokenizer,
        {
            "tools": [{**shuffled, "cache_control": {"type": "ephemeral"}}],
            "system": "Sys",
            "messages": [{"role": "user", "content": "q"}],
        },
    )
    assert r1.token_ids == r2.token_ids  # key order and cache_control do not change the prompt
    text = tokenizer.decode(r1.token_ids, skip_special_tokens=False)
    line = json.dumps(TOOL_A, sort_keys=True, separators=(",", ":"))
    assert TOOLS_HEADER + line in text
    assert text.index(line) < text.index("Sys")
    assert r1.tools_end == r1.block_ends[0] < r1.system_end


def test_shared_blocks_give_identical_token_prefixes(tokenizer):
    system = [
        {"type": "text", "text": "Rules: be kind.   "},
        {"type": "text", "text": "Context: shop FAQ"},
    ]
    a = render_anthropic(
        tokenizer, {"system": system, "messages": [{"role": "user", "content": "  spaces"}]}
    )
    b = render_anthropic(
        tokenizer, {"system": system, "messages": [{"role": "user", "content": "other"}]}
    )
    # the first two blocks end at the same offsets and the tokens before them agree
    assert a.block_ends[:2] == b.block_ends[:2]
    assert a.token_ids[: a.system_end] == b.token_ids[: b.system_end]


def test_anthropic_breakpoints_and_automatic_caching_marks(tokenizer):
    body = {
        "tools": [{**TOOL_A, "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "system": [{"type": "text", "text": "S", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            }
        ],
        "cache_control": {"type": "ephemeral"},
    }
    r = render_anthropic(tokenizer, body)
    marks = [(b.cache_control, e) for b, e in zip(r.blocks, r.block_ends) if b.cache_control]
    assert [m[0] for m in marks] == [
        ("1h", "tools.0.cache_control"),
        ("5m", "system.0.cache_control"),
        ("5m", "cache_control"),
    ]
    assert marks[-1][1] == r.block_ends[-1]  # automatic: on the last block


def test_assistant_prefill_continues_the_last_turn(tokenizer):
    r = render_anthropic(
        tokenizer,
        {
            "messages": [
                {"role": "user", "content": "Say a colour"},
                {"role": "assistant", "content": "The colour is"},
            ]
        },
    )
    text = tokenizer.decode(r.token_ids, skip_special_tokens=False)
    assert text.endswith("<|im_start|>assistant\nThe colour is")


def test_tool_use_and_results_render_deterministically(tokenizer):
    body = {
        "messages": [
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "t1",
                        "name": "get_weather",
                        "input": {"city": "Paris", "a": 1},
                    }
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "sunny"}],
            },
        ]
    }
    text = tokenizer.decode(render_anthropic(tokenizer, body).token_ids, skip_special_tokens=False)
    assert (
        '{"id":"t1","input":{"a":1,"city":"Paris"},"name":"get_weather","type":"tool_use"}' in text
    )
    assert '{"content":"sunny","tool_use_id":"t1","type":"tool_result"}' in text


def test_unsupported_content_is_a_render_error(tokenizer):
    with pytest.raises(RenderError, match="'audio' is not supported"):
        render_anthropic(
            tokenizer,
            {"messages": [{"role": "user", "content": [{"type": "audio", "data": "AA"}]}]},
        )
    with pytest.raises(RenderError, match=r"image\.source\.base64\.data: invalid base64"):
        render_anthropic(
            tokenizer,
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": "AA",
                                },
                            }
                        ],
                    }
                ]
            },
        )
    req = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": None}]}
    )
    with pytest.raises(RenderError, match="needs content"):
        chat_to_turns(req)


def test_marker_characters_in_user_text_are_neutralised(tokenizer):
    r = render_chat(tokenizer, turns=[Turn("user", [Block("a\U0010fffdb", "messages", 0)], 0)])
    assert len(r.block_ends) == 1
    assert "\U0010fffd" not in tokenizer.decode(r.token_ids, skip_special_tokens=False)
