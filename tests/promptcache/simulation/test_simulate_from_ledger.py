"""``promptcache simulate --from-ledger`` (issue 17): replay the traffic the ledger recorded
(digest chains + token counts, no prompt text) through the same simulator as a JSONL
trace, and refuse an empty selection, a missing ledger or digest-less records with one
line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import httpx2
import openai
import pytest

import promptcache
from promptcache import Tracker, Usage
from promptcache.cli import main
from promptcache.simulation.simulate import segments_from_request

MODEL = "claude-sonnet-4-6"
POLICY_A = "You answer questions about our refund policy. " * 200
POLICY_B = "You answer questions about our shipping policy. " * 200


def _body(policy: str, question: str) -> dict:
    return {
        "model": MODEL,
        "max_tokens": 16,
        "system": [{"type": "text", "text": policy, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": question}],
    }


CALLS = [
    (POLICY_A, "Can I return shoes?"),
    (POLICY_A, "And a jacket?"),
    (POLICY_B, "How long does shipping take?"),
    (POLICY_A, "What about socks?"),
]


def _record(tmp_path):
    """Send CALLS through wrap(client, tracker, trace=...) with a fake Anthropic server
    that reports no caching; each call's input_tokens is the trace's token count of its
    body, so ledger and trace agree on every request's prompt size."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        n = sum(s.tokens for s in segments_from_request(body, MODEL))
        usage = {"input_tokens": n, "cache_read_input_tokens": 0, "output_tokens": 5}
        return httpx2.Response(
            200,
            json={
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": [{"type": "text", "text": "ok"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": usage,
            },
        )

    client = anthropic.Anthropic(
        api_key="k", http_client=httpx2.Client(transport=httpx2.MockTransport(handler))
    )
    db, trace = tmp_path / "l.db", tmp_path / "trace.jsonl"
    tracker = Tracker(db)
    promptcache.wrap(client, tracker, trace=trace)
    prompts = []
    for policy, q in CALLS:
        body = _body(policy, q)
        prompts.append(sum(s.tokens for s in segments_from_request(body, MODEL)))
        client.messages.create(**{k: v for k, v in body.items() if k != "model"}, model=MODEL)
    tracker.close()
    return db, trace, prompts


def _replay(capsys, argv):
    assert main(["simulate", *argv, "--provider", "anthropic", "--json"]) == 0
    return json.loads(capsys.readouterr().out)["as_traced"]


def test_from_ledger_replays_recorded_traffic_like_the_jsonl_trace(tmp_path, capsys):
    db, trace, prompts = _record(tmp_path)
    led = _replay(capsys, ["--from-ledger", "--db", str(db)])
    jsonl = _replay(capsys, [str(trace)])
    # by hand, Anthropic rules (one 5m breakpoint after the system block, which is over
    # the 1,024-token minimum; the four calls lie seconds apart, inside the TTL):
    #   1 A+q1: nothing cached -> write the A prefix
    #   2 A+q2: reads the A prefix
    #   3 B+q3: B differs from A in its first block -> miss, writes the B prefix
    #   4 A+q4: the A prefix (written by 1, refreshed by 2) is still cached -> read
    want_read = [False, True, False, True]
    want_write = [True, False, True, False]
    for doc in (led, jsonl):
        per = doc["per_request"]
        assert doc["requests"] == 4
        assert [r["cache_read_tokens"] > 0 for r in per] == want_read
        assert [sum(r["cache_write_tokens"].values()) > 0 for r in per] == want_write
    lp, jp = led["per_request"], jsonl["per_request"]
    # the A prefix: what request 1 wrote is what requests 2 and 4 read
    assert (
        lp[1]["cache_read_tokens"]
        == lp[3]["cache_read_tokens"]
        == lp[0]["cache_write_tokens"]["5m"]
    )
    # the ledger keeps each record's prompt tokens; segment tokens are estimated from
    # characters, so each request's size is the recorded one within rounding
    for r, p in zip(lp, prompts):
        assert abs(r["prompt_tokens"] - p) <= 2
    # the system block is ~95% of each prompt's characters: the estimated cached share
    # agrees with the trace's exact per-block count within 2%
    for a, b in zip(lp, jp):
        assert a["cache_read_tokens"] == pytest.approx(b["cache_read_tokens"], rel=0.02)
    # and no prompt text reached the ledger's chains
    assert "refund" not in db.read_bytes().decode("latin-1")


def test_from_ledger_since_selects_recent_records(tmp_path, capsys):
    db, _, _ = _record(tmp_path)
    with Tracker(db) as t:  # an old digest-less record, outside --since 1h
        t.record(Usage(uncached_input_tokens=10, provider="anthropic", model=MODEL), ts=1.0)
    doc = _replay(capsys, ["--from-ledger", "--db", str(db), "--since", "1h"])
    assert doc["requests"] == 4
    # without --since the digest-less record is left out with a note on stderr
    assert main(["simulate", "--from-ledger", "--db", str(db), "--provider", "anthropic"]) == 0
    cap = capsys.readouterr()
    assert "1 record(s) without a digest chain" in cap.err and "4 requests" in cap.out


def _one_line_exit_2(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert err.startswith("promptcache simulate:") and "\n" not in err, err
    assert "Traceback" not in cap.err and cap.out == ""
    return err


def test_from_ledger_missing_ledger_is_exit_2(tmp_path, capsys):
    err = _one_line_exit_2(
        capsys,
        ["simulate", "--from-ledger", "--db", str(tmp_path / "no.db"), "--provider", "openai"],
    )
    assert "no ledger at" in err


def test_from_ledger_empty_selection_is_exit_2(tmp_path, capsys):
    db, _, _ = _record(tmp_path)
    err = _one_line_exit_2(
        capsys,
        ["simulate", "--from-ledger", "--db", str(db), "--since", "2099-01-01",
         "--provider", "anthropic"],
    )  # fmt: skip
    assert "has no requests since 2099-01-01" in err
    Tracker(tmp_path / "empty.db").close()
    err = _one_line_exit_2(
        capsys,
        ["simulate", "--from-ledger", "--db", str(tmp_path / "empty.db"), "--provider", "openai"],
    )
    assert "has no requests" in err


def test_from_ledger_without_digests_is_exit_2(tmp_path, capsys):
    db = tmp_path / "old.db"
    with Tracker(db) as t:  # recorded without request bodies: no digest chain
        for _ in range(3):
            t.record(Usage(uncached_input_tokens=2000, provider="anthropic", model=MODEL))
    err = _one_line_exit_2(
        capsys, ["simulate", "--from-ledger", "--db", str(db), "--provider", "anthropic"]
    )
    assert "none of the 3 selected records" in err and "schema v5" in err


@pytest.mark.parametrize(
    "argv, says",
    [
        (["--from-ledger", "t.jsonl"], "either a TRACE.jsonl file or --from-ledger"),
        ([], "either a TRACE.jsonl file or --from-ledger"),
        (["t.jsonl", "--since", "1h"], "--db and --since go with --from-ledger"),
        (["--from-ledger", "--since", "yesterday"], "expected a duration"),
    ],
)
def test_from_ledger_bad_arguments_are_exit_2(tmp_path, capsys, argv, says):
    err = _one_line_exit_2(capsys, ["simulate", *argv, "--provider", "anthropic"])
    assert says in err


def test_simulate_help_explains_from_ledger(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = capsys.readouterr().out
    assert "--from-ledger" in out and "--since" in out and "schema v5" in out
    root = Path(__file__).resolve().parents[3]
    for doc in (root / "README.md", root / "docs" / "sdk.md"):
        assert "promptcache simulate --from-ledger" in doc.read_text().replace("\n", " ")


def test_from_ledger_openai_partitions_by_prompt_cache_key(tmp_path, capsys):
    """gpt-4o (before GPT-5.6: no breakpoints, 1,024-token minimum, 128-token steps),
    caches partitioned by prompt_cache_key -- replayed from the ledger and from the
    JSONL trace of the same calls."""
    model = "gpt-4o"

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        n = sum(s.tokens for s in segments_from_request(body, model))
        return httpx2.Response(
            200,
            json={
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1700000000,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "ok"},
                        "finish_reason": "stop",
                        "logprobs": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": n,
                    "completion_tokens": 2,
                    "total_tokens": n + 2,
                    "prompt_tokens_details": {"cached_tokens": 0},
                },
            },
        )

    client = openai.OpenAI(
        api_key="sk-test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    db, trace = tmp_path / "o.db", tmp_path / "o.jsonl"
    tracker = Tracker(db)
    promptcache.wrap(client, tracker, trace=trace)
    calls = [("team-a", "Can I return shoes?"), ("team-b", "And a jacket?"), ("team-a", "Socks?")]
    for key, q in calls:
        client.chat.completions.create(
            model=model,
            prompt_cache_key=key,
            messages=[{"role": "system", "content": POLICY_A}, {"role": "user", "content": q}],
        )
    tracker.close()
    # by hand: 1 team-a, empty cache -> miss; 2 team-b, another partition -> miss although
    # the prompt starts alike; 3 team-a again -> reads the system prefix written by 1
    want = [False, False, True]
    for argv in (["--from-ledger", "--db", str(db)], [str(trace)]):
        assert main(["simulate", *argv, "--provider", "openai", "--json"]) == 0
        per = json.loads(capsys.readouterr().out)["as_traced"]["per_request"]
        assert [r["cache_read_tokens"] > 0 for r in per] == want
        # OpenAI reads in 128-token steps from 1,024
        assert (per[2]["cache_read_tokens"] - 1024) % 128 == 0
