"""The digest chain: segments in cache order, atoms whose offsets match the serialization,
block digests of long strings, breakpoints, reuse of unchanged segments, and no text."""

from __future__ import annotations

import copy
import json

import pytest

from promptcache.misses.digest_chain import (
    BLOCK_CHARS,
    DigestChain,
    build_chain,
    format_path,
    parse_path,
    serialize,
)


def ser(v: object) -> str:
    # the reference serialization, written independently of the module
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


def tool(i: int) -> dict:
    return {
        "name": f"tool_{i}",
        "description": f"Tool number {i}.",
        "input_schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    }


SYSTEM = "You are a weather assistant. Answer briefly. " * 20  # 900 characters


def anthropic_body() -> dict:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "tools": [tool(0), tool(1), tool(2)],
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Weather in Oslo?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "tu_1",
                        "name": "tool_0",
                        "input": {"city": "Oslo"},
                        "cache_control": {"type": "ephemeral", "ttl": "1h"},
                    },
                ],
            },
        ],
    }


def test_segments_are_in_cache_order_with_offsets_of_the_serialization() -> None:
    body = anthropic_body()
    chain = build_chain(body, "messages")
    assert [s.path for s in chain.segments] == [
        "$.tools[0]",
        "$.tools[1]",
        "$.tools[2]",
        "$.system[0]",
        "$.messages[0]",
        "$.messages[1]",
    ]
    system_clean = {"type": "text", "text": SYSTEM}
    msg1_clean = copy.deepcopy(body["messages"][1])
    del msg1_clean["content"][1]["cache_control"]
    pieces = [tool(0), tool(1), tool(2), system_clean, body["messages"][0], msg1_clean]
    pos = 0
    for seg, piece in zip(chain.segments, pieces):
        assert seg.start == pos
        assert seg.chars == len(ser(piece))
        pos += len(ser(piece))
    assert chain.chars == pos
    # markers are not part of the content: the chain equals that of the unmarked body
    bare = anthropic_body()
    del bare["system"][0]["cache_control"]
    del bare["messages"][1]["content"][1]["cache_control"]
    assert build_chain(bare, "messages").digests() == chain.digests()
    assert build_chain(bare, "messages").breakpoints == ()


def test_breakpoints_record_end_offset_block_index_and_ttl() -> None:
    chain = build_chain(anthropic_body(), "messages")
    sys_end = sum(len(ser(tool(i))) for i in range(3)) + len(ser({"type": "text", "text": SYSTEM}))
    first, second = chain.breakpoints
    assert (first.end, first.block, first.ttl, first.path) == (
        sys_end,
        3,
        "5m",
        "$.system[0].cache_control",
    )
    # blocks: 3 tools, 1 system block, message 0 (1 block), message 1 (2 blocks): the
    # tool_use block is block index 6 and its marker ends the chain
    assert (second.block, second.ttl, second.end) == (6, "1h", chain.chars)


def test_a_marker_on_an_inner_content_block_ends_at_that_block() -> None:
    body = anthropic_body()
    body["messages"][1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    del body["messages"][1]["content"][1]["cache_control"]
    chain = build_chain(body, "messages")
    msg = {"role": "assistant", "content": body["messages"][1]["content"]}
    clean = copy.deepcopy(msg)
    del clean["content"][0]["cache_control"]
    text = ser(clean)
    inner_end = text.index(ser(clean["content"][0])) + len(ser(clean["content"][0]))
    bp = chain.breakpoints[-1]
    assert bp.end == chain.segments[-1].start + inner_end
    assert bp.block == 5


def test_atoms_cover_every_scalar_at_its_offset() -> None:
    chain = build_chain(anthropic_body(), "messages")
    for seg, value in zip(chain.segments, chain.values):
        text = ser(value)
        atoms = chain.atoms[seg.digest]
        for a in atoms:
            piece = text[a.start : a.start + a.chars]
            assert ser(json.loads(piece)) == piece
            node = value
            for c in parse_path("$" + a.path):
                node = node[c]
            assert ser(node) == piece
    tool_atoms = [a.path for a in chain.atoms[chain.segments[0].digest]]
    assert tool_atoms == [
        ".name",
        ".description",
        ".input_schema.type",
        ".input_schema.properties.city.type",
        ".input_schema.properties.days.type",
        ".input_schema.required[0]",
    ]


def test_long_strings_get_one_block_digest_per_block() -> None:
    chain = build_chain(anthropic_body(), "messages")
    (text_atom,) = [a for a in chain.atoms[chain.segments[3].digest] if a.path == ".text"]
    assert text_atom.chars == len(SYSTEM) + 2
    assert len(text_atom.blocks) == -(-(len(SYSTEM) + 2) // BLOCK_CHARS)
    short = [a for a in chain.atoms[chain.segments[3].digest] if a.path == ".type"]
    assert short[0].blocks == ()


def test_no_prompt_text_in_the_stored_form() -> None:
    chain = build_chain(anthropic_body(), "messages")
    stored = json.dumps([chain.to_json(), chain.atoms_json()])
    for word in ("weather", "Oslo", "Checking", "Answer briefly"):
        assert word not in stored
    back = DigestChain.from_json(json.loads(json.dumps(chain.to_json())), chain.atoms_json())
    assert back == chain
    assert back.values == ()
    assert back.atoms == chain.atoms


def test_key_order_matters_as_the_provider_sees_bytes() -> None:
    a = anthropic_body()
    b = anthropic_body()
    props = b["tools"][1]["input_schema"]["properties"]
    b["tools"][1]["input_schema"]["properties"] = dict(reversed(list(props.items())))
    ca, cb = build_chain(a, "messages"), build_chain(b, "messages")
    assert ca.digests()[0] == cb.digests()[0]
    assert ca.digests()[1] != cb.digests()[1]


def test_reuse_of_unchanged_segments_gives_the_same_chain() -> None:
    first = build_chain(anthropic_body(), "messages")
    nxt = anthropic_body()
    nxt["messages"].append({"role": "user", "content": "And tomorrow?"})
    fresh = build_chain(nxt, "messages")
    reused = build_chain(nxt, "messages", previous=first)
    assert reused == fresh
    assert reused.atoms == fresh.atoms


@pytest.mark.parametrize(
    ("api", "body", "paths"),
    [
        (
            "chat.completions",
            {
                "model": "gpt-4o",
                "prompt_cache_key": "k1",
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "messages": [
                    {"role": "system", "content": "sys"},
                    {"role": "user", "content": "hi"},
                ],
            },
            ["$.prompt_cache_key", "$.tools[0]", "$.messages[0]", "$.messages[1]"],
        ),
        (
            "responses",
            {"model": "gpt-5", "instructions": "be brief", "input": [{"role": "user"}]},
            ["$.instructions", "$.input[0]"],
        ),
        (
            "gemini",
            {
                "systemInstruction": {"parts": [{"text": "sys"}]},
                "tools": [{"functionDeclarations": []}],
                "contents": [{"role": "user", "parts": [{"text": "a"}, {"text": "b"}]}],
            },
            ["$.systemInstruction", "$.tools[0]", "$.contents[0]"],
        ),
        (
            "converse",
            {
                "modelId": "anthropic.claude-sonnet-4-5",
                "toolConfig": {"tools": [{"toolSpec": {"name": "t"}}, {"cachePoint": {}}]},
                "system": [{"text": "sys"}, {"cachePoint": {"type": "default"}}],
                "messages": [{"role": "user", "content": [{"text": "q"}]}],
            },
            ["$.toolConfig.tools[0]", "$.system[0]", "$.messages[0]"],
        ),
    ],
)
def test_other_apis_segment_in_their_cache_order(api: str, body: dict, paths: list[str]) -> None:
    chain = build_chain(body, api)
    assert [s.path for s in chain.segments] == paths
    if api == "converse":
        # the two cachePoint items mark the tool and the system block before them
        assert [(b.block, b.path) for b in chain.breakpoints] == [
            (0, "$.toolConfig.tools[1]"),
            (1, "$.system[1]"),
        ]
        assert chain.breakpoints[1].end == chain.segments[1].end


def test_automatic_caching_puts_one_breakpoint_on_the_last_block() -> None:
    body = anthropic_body()
    del body["system"][0]["cache_control"]
    del body["messages"][1]["content"][1]["cache_control"]
    body["cache_control"] = {"type": "ephemeral"}
    chain = build_chain(body, "messages")
    assert chain.automatic
    (bp,) = chain.breakpoints
    assert (bp.end, bp.block, bp.path) == (chain.chars, 6, "$.cache_control")


def test_paths_round_trip_and_unknown_api_is_an_error() -> None:
    comps: list[str | int] = ["tools", 2, "input_schema", "odd key", 0]
    assert format_path(comps) == "$.tools[2].input_schema['odd key'][0]"
    assert parse_path(format_path(comps)) == comps
    with pytest.raises(ValueError, match="not a JSON path"):
        parse_path("tools[2]")
    with pytest.raises(ValueError, match="unknown api"):
        build_chain({}, "embeddings")
    assert serialize({"a": "é"}) == '{"a":"é"}'


def test_a_system_message_marker_closes_its_last_block() -> None:
    """Anthropic's mid-conversation system message carries ``cache_control`` on the message
    (https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages,
    read 2026-12-03); the breakpoint ends at its last content block."""
    body = anthropic_body()
    body["messages"][1]["content"][1].pop("cache_control")
    body["messages"].append({"role": "user", "content": "And Bergen?"})
    rule = {"role": "system", "content": [{"type": "text", "text": "Use Celsius."}]}
    body["messages"].append({**rule, "cache_control": {"type": "ephemeral", "ttl": "1h"}})
    chain = build_chain(body, "messages")
    bp = chain.breakpoints[-1]
    assert (bp.path, bp.ttl) == ("$.messages[3].cache_control", "1h")
    # a marker on a message's last block ends at the message's end (as for tool_use above);
    # the message is digested without its marker
    assert chain.segments[-1].chars == len(ser(rule))
    assert bp.end == chain.segments[-1].start + len(ser(rule)) == chain.chars
    # blocks: 3 tools, 1 system, message 0 (1), message 1 (2), message 2 (1), message 3 (1)
    assert bp.block == 8
    bare = copy.deepcopy(body)
    del bare["messages"][3]["cache_control"]
    assert build_chain(bare, "messages").digests() == chain.digests()
