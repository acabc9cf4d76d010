"""The first-difference locator: paths for value and structural changes, offsets checked
against the common prefix of the cache-order text computed independently."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable

import pytest

from promptcache.misses.digest_chain import BLOCK_CHARS, DigestChain, build_chain
from promptcache.misses.locate import common_prefix_len, excerpts, first_difference


def ser(v: object) -> str:
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


SYSTEM = "You are a weather assistant. Answer briefly and cite the station. " * 12


def body() -> dict:
    return {
        "model": "claude-sonnet-4-5",
        "tools": [tool(0), tool(1), tool(2), tool(3)],
        "system": [{"type": "text", "text": SYSTEM}],
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
    }


def cache_text(b: dict) -> str:
    """The cache-order text, built by hand: tools, system blocks, messages."""
    return "".join(ser(x) for x in [*b["tools"], *b["system"], *b["messages"]])


def without_values(c: DigestChain) -> DigestChain:
    """The chain as read back from storage: digests and atoms, no values."""
    return DigestChain.from_json(c.to_json(), c.atoms_json())


def reorder(b: dict) -> None:
    p = b["tools"][2]["input_schema"]["properties"]
    b["tools"][2]["input_schema"]["properties"] = {"days": p["days"], "city": p["city"]}


def edit_system(b: dict) -> None:
    t = b["system"][0]["text"]
    b["system"][0]["text"] = t[:500] + "Today is 2026-12-01. " + t[500:]


CASES: list[tuple[str, Callable[[dict], None], str, str]] = [
    ("reorder", reorder, "$.tools[2].input_schema.properties", "structure"),
    (
        "add property",
        lambda b: b["tools"][2]["input_schema"]["properties"].update(unit={"type": "string"}),
        "$.tools[2].input_schema.properties",
        "structure",
    ),
    (
        "description",
        lambda b: b["tools"][1].update(description="Tool number one."),
        "$.tools[1].description",
        "changed",
    ),
    ("add tool", lambda b: b["tools"].append(tool(9)), "$.tools[4]", "inserted"),
    ("drop tool", lambda b: b["tools"].pop(), "$.tools[3]", "removed"),
    ("system text", edit_system, "$.system[0].text", "changed"),
    (
        "edited message",
        lambda b: b["messages"][0].update(content="Weather in Bergen?"),
        "$.messages[0].content",
        "changed",
    ),
    (
        "required list grows",
        lambda b: b["tools"][0]["input_schema"]["required"].append("days"),
        "$.tools[0].input_schema.required[1]",
        "structure",
    ),
]


@pytest.mark.parametrize(("name", "edit", "path", "kind"), CASES, ids=[c[0] for c in CASES])
def test_path_kind_and_exact_offset(name: str, edit: Callable, path: str, kind: str) -> None:
    a = body()
    b = copy.deepcopy(a)
    edit(b)
    prev, cur = build_chain(a, "messages"), build_chain(b, "messages", previous=None)
    diff = first_difference(prev, cur)
    assert diff is not None
    assert (diff.path, diff.kind) == (path, kind)
    # the reference: the common prefix of the two cache-order texts
    expected = len(os.path.commonprefix([cache_text(a), cache_text(b)]))
    assert diff.exact
    assert diff.offset_chars == expected


@pytest.mark.parametrize(("name", "edit", "path", "kind"), CASES, ids=[c[0] for c in CASES])
def test_from_digests_alone_the_path_is_the_same_and_the_offset_within_a_block(
    name: str, edit: Callable, path: str, kind: str
) -> None:
    a = body()
    b = copy.deepcopy(a)
    edit(b)
    prev, cur = without_values(build_chain(a, "messages")), build_chain(b, "messages")
    diff = first_difference(prev, cur)
    assert diff is not None and diff.path == path
    expected = len(os.path.commonprefix([cache_text(a), cache_text(b)]))
    # never past the real difference, and at most one block (or one member) before it
    assert expected - BLOCK_CHARS <= diff.offset_chars <= expected + 1


def test_a_clean_continuation_has_no_difference_and_truncation_is_reported() -> None:
    a = body()
    b = copy.deepcopy(a)
    b["messages"].append({"role": "assistant", "content": "Sunny."})
    ca, cb = build_chain(a, "messages"), build_chain(b, "messages")
    assert first_difference(ca, cb) is None
    assert first_difference(ca, ca) is None
    back = first_difference(cb, ca)
    assert back is not None
    assert (back.path, back.kind, back.offset_chars) == ("$.messages[1]", "truncated", ca.chars)


def test_setting_inserted_between_system_and_messages() -> None:
    a = body()
    b = copy.deepcopy(a)
    b["tool_choice"] = {"type": "any"}
    ca, cb = build_chain(a, "messages"), build_chain(b, "messages")
    diff = first_difference(ca, cb)
    assert diff is not None
    assert (diff.path, diff.kind) == ("$.tool_choice", "inserted")
    assert diff.offset_chars == cb.segments[5].start + 2  # '{"' is shared
    assert cb.segments[5].start == sum(len(ser(x)) for x in [*a["tools"], *a["system"]])


def test_excerpts_show_both_sides_around_the_difference() -> None:
    a = body()
    b = copy.deepcopy(a)
    edit_system(b)
    ca, cb = build_chain(a, "messages"), build_chain(b, "messages")
    diff = first_difference(ca, cb)
    assert diff is not None
    ex = excerpts(ca, cb, diff, width=40)
    assert ex is not None
    before, after = ex
    assert "Today is 2026" in after and "Today" not in before
    assert excerpts(without_values(ca), cb, diff) is None


@pytest.mark.parametrize(
    ("x", "y"),
    [("", ""), ("abc", "abd"), ("abc", "abc"), ("abc", "ab"), ("x" * 5000 + "a", "x" * 5000 + "b")],
)
def test_common_prefix_len_matches_os_path(x: str, y: str) -> None:
    assert common_prefix_len(x, y) == len(os.path.commonprefix([x, y]))
