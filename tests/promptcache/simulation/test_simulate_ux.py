"""A simulator a user can reach (issue 17): a binary or non-JSONL input is one line and
exit 2, the trace format is in ``simulate --help``, the README and the docs, and
``wrap(..., trace=PATH)`` writes a trace that ``simulate`` replays."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx2

import promptcache
from promptcache import Tracker, Usage
from promptcache.cli import main
from promptcache.simulation.simulate import load_trace, segments_from_request

ROOT = Path(__file__).resolve().parents[3]


def _one_line_exit_2(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert err.startswith("promptcache simulate:") and "\n" not in err, err
    assert "Traceback" not in cap.err and cap.out == ""
    return err


def test_a_ledger_database_is_one_line_exit_2(tmp_path, capsys):
    db = tmp_path / "ledger.db"
    t = Tracker(db)
    t.record(Usage(uncached_input_tokens=5, output_tokens=1), model="m", price=None)
    t.close()
    err = _one_line_exit_2(capsys, ["simulate", str(db), "--provider", "anthropic"])
    assert "SQLite" in err and "not a JSONL trace" in err


def test_binary_and_non_jsonl_inputs_are_one_line_exit_2(tmp_path, capsys):
    blob = tmp_path / "x.bin"
    blob.write_bytes(bytes(range(256)) * 4)
    err = _one_line_exit_2(capsys, ["simulate", str(blob), "--provider", "openai"])
    assert "not a JSONL trace" in err
    csv = tmp_path / "x.csv"
    csv.write_text("ts,model,tokens\n1,gpt-5.4,100\n")
    err = _one_line_exit_2(capsys, ["simulate", str(csv), "--provider", "openai"])
    assert "line 1" in err
    err = _one_line_exit_2(capsys, ["simulate", str(tmp_path), "--provider", "openai"])
    assert "directory" in err


def test_trace_format_in_help_readme_and_docs(capsys):
    try:
        main(["simulate", "--help"])
    except SystemExit:
        pass
    out = capsys.readouterr().out
    for needle in ('"segments"', '"tokens"', '"hash"', '"cache"', '"request"', "JSON Lines"):
        assert needle in out, needle
    readme = (ROOT / "README.md").read_text()
    sdk = (ROOT / "docs" / "sdk.md").read_text()
    for text in (readme, sdk):
        assert "promptcache simulate" in text and '"segments"' in text and "trace=" in text


ANTH = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-6",
    "content": [{"type": "text", "text": "Hello!"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 12, "cache_read_input_tokens": 0, "output_tokens": 7},
}


def test_wrap_trace_writes_a_replayable_jsonl_trace_as_it_records(tmp_path, capsys):
    sent: list[dict] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        sent.append(json.loads(request.content))
        return httpx2.Response(200, json=ANTH)

    client = anthropic.Anthropic(
        api_key="k", http_client=httpx2.Client(transport=httpx2.MockTransport(handler))
    )
    trace = tmp_path / "trace.jsonl"
    tracker = Tracker(tmp_path / "l.db")
    promptcache.wrap(client, tracker, trace=trace)
    policy = "You answer questions about our refund policy. " * 200
    for i, q in enumerate(["Can I return shoes?", "And a jacket?"]):
        kw = promptcache.build(system=policy, dynamic=q).to_anthropic(
            "claude-sonnet-4-6", max_tokens=16
        )
        client.messages.create(**kw)
        lines = trace.read_text().splitlines()
        assert len(lines) == i + 1  # written as each call is recorded
    rows = [json.loads(x) for x in lines]
    # no prompt text in the trace: hashes and token counts only
    assert "refund" not in trace.read_text()
    for row, body in zip(rows, sent):
        want = segments_from_request(body, "claude-sonnet-4-6")
        assert [s["tokens"] for s in row["segments"]] == [s.tokens for s in want]
        assert [s["hash"] for s in row["segments"]] == [s.hash for s in want]
        assert [s.get("cache") for s in row["segments"]] == [s.cache for s in want]
        assert row["model"] == "claude-sonnet-4-6" and row["output_tokens"] == 7
    # the two requests share the system block (same hash), not the question
    assert rows[0]["segments"][0]["hash"] == rows[1]["segments"][0]["hash"]
    assert rows[0]["segments"][-1]["hash"] != rows[1]["segments"][-1]["hash"]
    reqs = load_trace(str(trace))
    assert len(reqs) == 2 and reqs[0].ts <= reqs[1].ts
    assert main(["simulate", str(trace), "--provider", "anthropic", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["as_traced"]["requests"] == 2
    # the second request reads the system prefix the first one wrote
    per = doc["as_traced"]["per_request"]
    assert per[0]["cache_read_tokens"] == 0 and per[1]["cache_read_tokens"] > 1000


def test_system_message_marker_is_a_segment_breakpoint():
    """Anthropic's mid-conversation system message: its message-level cache_control marks
    its last block (https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages,
    read 2026-12-03), for string and block content alike."""
    for content in ("Answer in French.", [{"type": "text", "text": "Answer in French."}]):
        body = {
            "model": "claude-opus-4-8",
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "system",
                    "content": content,
                    "cache_control": {"type": "ephemeral", "ttl": "1h"},
                },
            ],
        }
        segs = segments_from_request(body, "claude-opus-4-8")
        assert [s.cache for s in segs] == [None, "1h"]
