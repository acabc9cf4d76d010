"""Request payloads named on the command line go through ``promptcache.check``."""

from __future__ import annotations

import json

import pytest

from linters.cli import main
from linters.payloads import value_offset
from promptcache.compose.check import infer_provider

LONG = "Policy text. " * 400  # 5,200 characters: long enough to be cached on any model


def block(ttl=None):
    cc = {"type": "ephemeral"} if ttl is None else {"type": "ephemeral", "ttl": ttl}
    return {"type": "text", "text": LONG, "cache_control": cc}


def request(system, model="claude-sonnet-4-5"):
    return {
        "model": model,
        "max_tokens": 10,
        "system": system,
        "messages": [{"role": "user", "content": "hi"}],
    }


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *argv):
    status = main(["-q", *argv])
    return status, capsys.readouterr().out.splitlines()


def test_json_payload_findings_point_at_the_line(here, capsys):
    text = json.dumps(request([block() for _ in range(5)]), indent=2)
    (here / "five.json").write_text(text)
    status, out = run(capsys, "five.json")
    assert status == 1
    (line,) = out
    # the fifth "cache_control" key of the file is the one over the limit
    lines = text.splitlines()
    fifth = [i for i, ln in enumerate(lines, 1) if '"cache_control"' in ln][4]
    assert line.startswith(
        f"five.json:{fifth}:1: PC005 $.system[4].cache_control: 5 cache breakpoints"
    )


def test_jsonl_one_request_per_line(here, capsys):
    good = request([block()])
    ttl = request([block(), block("1h")])
    stamped = request(
        [
            {
                "type": "text",
                "text": "Now: 2026-11-29T10:31:02Z. " + LONG,
                "cache_control": {"type": "ephemeral"},
            }
        ]
    )
    (here / "trace.jsonl").write_text("\n".join(json.dumps(r) for r in (good, ttl, stamped)) + "\n")
    status, out = run(capsys, "trace.jsonl")
    assert status == 1
    assert [ln.split()[0] + " " + ln.split()[1] for ln in out] == [
        "trace.jsonl:2:1: PC005",
        "trace.jsonl:3:1: PC001",
    ]


def test_clean_payload_and_provider_override(here, capsys):
    openai_req = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "hi"},
        ],
    }
    (here / "o.json").write_text(json.dumps(openai_req))
    assert run(capsys, "o.json") == (0, [])
    assert infer_provider(openai_req) == "openai"
    assert infer_provider(request([block()])) == "anthropic"
    assert infer_provider({"modelId": "x", "messages": []}) == "bedrock"
    assert infer_provider({"contents": []}) == "gemini"
    status, out = run(capsys, "--provider", "gemini", "o.json")
    assert status == 0


def test_a_payload_whose_provider_cannot_be_told_says_so(here, capsys):
    """No field, role, marker or model family names the provider: one PC901 finding asking
    for --provider, not a silent guess; with --provider the payload is checked."""
    (here / "q.json").write_text(
        json.dumps({"model": "my-model", "messages": [{"role": "user", "content": "hi"}]})
    )
    status, out = run(capsys, "q.json")
    assert status == 1
    assert len(out) == 1 and "PC901" in out[0] and "pass provider=" in out[0]
    assert run(capsys, "--provider", "openai", "q.json") == (0, [])


def test_dated_model_names_in_payloads_are_not_pc001(here, capsys):
    """The payload linter shares promptcache.prompt.volatile: a model snapshot date is stable."""
    text = "Escalate from claude-3-5-sonnet-20241022 to o1-2024-12-17. " + LONG
    named = request(
        [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}],
        model="claude-3-5-sonnet-20241022",
    )
    dated = request(
        [
            {
                "type": "text",
                "text": "Today is 2024-08-06. " + LONG,
                "cache_control": {"type": "ephemeral"},
            }
        ]
    )
    (here / "m.jsonl").write_text(json.dumps(named) + "\n" + json.dumps(dated) + "\n")
    status, out = run(capsys, "m.jsonl")
    assert status == 1
    assert [ln.split()[0] + " " + ln.split()[1] for ln in out] == ["m.jsonl:2:1: PC001"]


def test_bad_payloads_are_findings(here, capsys):
    (here / "bad.json").write_text('{"model": "x",\n "messages": [\n}')
    (here / "list.json").write_text("[1, 2]")
    (here / "bad.jsonl").write_text('{"model": "x"}\nnot json\n')
    status, out = run(capsys, "bad.json", "list.json", "bad.jsonl")
    assert status == 1
    assert [ln.split(": ")[0] + " " + ln.split()[1] for ln in out] == [
        "bad.json:3:1 PC900",
        "bad.jsonl:2:1 PC900",
        "list.json:1:1 PC901",
        "list.json:1:1 PC901",
    ]


def test_folders_do_not_read_json(here, capsys):
    (here / "five.json").write_text(json.dumps(request([block() for _ in range(5)])))
    assert run(capsys, ".") == (0, [])


def test_missing_check_is_one_clear_finding(here, capsys, monkeypatch):
    import sys

    (here / "a.json").write_text(json.dumps(request([block()])))
    monkeypatch.setitem(sys.modules, "promptcache.compose.check", None)  # import raises ImportError
    status, out = run(capsys, "a.json")
    assert status == 1
    (line,) = out
    assert line.startswith(
        "a.json:1:1: PC901 cannot check request payloads: promptcache.check is not available"
    )


def test_value_offset_walks_paths():
    text = '{"a": [1, {"b": "x"}, 3], "c": {"d": [true]}}'
    assert text[value_offset(text, "$.a[1].b") :].startswith('"x"')
    assert text[value_offset(text, "$.c.d[0]") :].startswith("true")
    assert value_offset(text, "$.a[5]") is None
    assert value_offset(text, "$.zz") is None
