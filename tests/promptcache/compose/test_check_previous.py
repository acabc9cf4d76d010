"""check(cur, provider, previous=prev): unsorted tool-schema keys are a defect only when
their bytes changed between the two requests."""

from __future__ import annotations

import copy

from promptcache import check


def request() -> dict:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "tools": [
            {
                "name": f"t{i}",
                "description": "A tool.",
                "input_schema": {
                    "type": "object",
                    "required": ["z"],
                    "properties": {"z": {"type": "string"}, "a": {"type": "integer"}},
                },
            }
            for i in range(3)
        ],
        "tool_choice": {"type": "auto"},
        "messages": [{"role": "user", "content": "hi"}],
    }


def canonical(findings: list) -> list[tuple[str, str]]:
    return [(f.severity, f.path) for f in findings if f.code == "non-canonical-json"]


def test_alone_every_unsorted_schema_is_a_warning() -> None:
    found = canonical(check(request(), "anthropic"))
    assert found == [("warning", f"$.tools[{i}].input_schema") for i in range(3)]


def test_same_bytes_as_the_previous_request_is_info_only() -> None:
    prev, cur = request(), request()
    cur["tool_choice"] = {"type": "any"}  # only tool_choice changed
    found = check(cur, "anthropic", previous=prev)
    assert canonical(found) == [("info", f"$.tools[{i}].input_schema") for i in range(3)]
    assert not [f for f in found if f.severity == "warning" and f.code == "non-canonical-json"]


def test_a_schema_whose_key_order_changed_stays_a_warning() -> None:
    prev = request()
    cur = copy.deepcopy(prev)
    props = cur["tools"][1]["input_schema"]["properties"]
    cur["tools"][1]["input_schema"]["properties"] = {"a": props["a"], "z": props["z"]}
    cur["tools"][1]["input_schema"] = {
        "properties": cur["tools"][1]["input_schema"]["properties"],
        "type": "object",
        "required": ["z"],
    }
    found = check(cur, "anthropic", previous=prev)
    by_path = {f.path: f for f in found if f.code == "non-canonical-json"}
    assert by_path["$.tools[0].input_schema"].severity == "info"
    changed = by_path["$.tools[1].input_schema"]
    assert changed.severity == "warning" and "changed since the previous request" in changed.message
