"""promptcache simulate: hand-worked traces under Anthropic and OpenAI rules, --compare,
request-payload traces, and the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal as D
from pathlib import Path

import pytest

from promptcache.simulation.simulate import (
    Segment,
    TraceError,
    TraceRequest,
    load_trace,
    relayout,
    simulate,
)

ROOT = Path(__file__).resolve().parents[3]


def seg(tokens, h, cache=None, layer=None):
    return {
        "tokens": tokens,
        "hash": h,
        **({"cache": cache} if cache else {}),
        **({"layer": layer} if layer else {}),
    }


def line(ts, segments, out=10, **kw):
    return json.dumps({"ts": ts, "segments": segments, "output_tokens": out, **kw})


def test_anthropic_ttl_refresh_and_expiry():
    # a 2,000-token system block with a 5m breakpoint, then a 50-token question
    trace = [
        line(t, [seg(2000, "sys", "5m", "system"), seg(50, f"q{i}", layer="messages")])
        for i, t in enumerate([0, 60, 120, 500])
    ]
    res = simulate(load_trace(trace), "anthropic", "claude-sonnet-4-5")
    got = [
        (u.cache_read_tokens, u.cache_write_5m_tokens, u.uncached_input_tokens) for u in res.usages
    ]
    # t=0 writes 2000; t=60 and t=120 read it (each hit refreshes the 5 minutes: expiry
    # 120+300 = 420); t=500 is past 420, so the entry is gone and is written again
    assert got == [(0, 2000, 50), (2000, 0, 50), (2000, 0, 50), (0, 2000, 50)]
    # sonnet-4-5: writes 2*(2000*3.75 + 50*3) = 2*7650 = 15,300; reads 2*(2000*0.3 + 150) =
    # 2*750 = 1,500; output 4*10*15 = 600 -> 17,400 micro-$
    assert res.cost == D("0.0174")
    # no cache: 4*(2050*3) + 600 = 24,600 + 600 = 25,200 micro-$
    assert res.baseline == D("0.0252")
    assert res.hit_rate == pytest.approx(4000 / 8200)


def test_anthropic_1h_ttl_survives_the_gap_and_minimum_length():
    trace = [line(t, [seg(2000, "sys", "1h", "system"), seg(50, f"q{t}")]) for t in (0, 1000, 4000)]
    res = simulate(load_trace(trace), "anthropic", "claude-sonnet-4-5")
    # 1h entry: t=1000 hits (expiry -> 4600), t=4000 hits again
    assert [u.cache_read_tokens for u in res.usages] == [0, 2000, 2000]
    assert res.usages[0].cache_write_1h_tokens == 2000
    # claude-haiku-4-5's minimum cacheable prompt is 4,096 tokens: 2,050 is never cached
    res2 = simulate(load_trace(trace), "anthropic", "claude-haiku-4-5")
    assert all(u.cache_read_tokens == 0 and u.cache_write_tokens == 0 for u in res2.usages)


def test_openai_1024_minimum_128_steps_and_cache_key():
    trace = [
        line(0, [seg(1500, "sys"), seg(30, "q1")]),
        line(10, [seg(1500, "sys"), seg(30, "q2")]),
        line(20, [seg(1500, "sys"), seg(30, "q3")], prompt_cache_key="other-tenant"),
        line(30, [seg(900, "short"), seg(30, "q4")]),
        line(40, [seg(900, "short"), seg(30, "q5")]),
    ]
    res = simulate(load_trace(trace), "openai", "gpt-4o")
    # the shared prefix is the 1,500-token system block; cached lengths are 1024 + 128k:
    # 1024, 1152, 1280, 1408 lie inside it (1536 > 1530 does not exist) -> 1,408 read
    # a different prompt_cache_key routes to another cache: no hit
    # a 930-token prompt is under the 1,024 minimum: never cached
    assert [u.cache_read_tokens for u in res.usages] == [0, 1408, 0, 0, 0]
    assert [u.uncached_input_tokens for u in res.usages] == [1530, 122, 1530, 930, 930]
    assert all(u.cache_write_tokens == 0 for u in res.usages)  # not reported before GPT-5.6
    # gpt-4o: input 2.50, cached 1.25, output 10
    # uncached (1530+122+1530+930+930)=5042 * 2.5 = 12,605; read 1408*1.25 = 1,760;
    # output 5*10*10 = 500 -> 14,865 micro-$
    assert res.cost == D("0.014865")


def test_rejected_request_names_the_line():
    bad = line(0, [seg(500, f"b{i}", "5m") for i in range(5)])
    with pytest.raises(TraceError, match="line 1: .*maximum of 4"):
        simulate(load_trace([bad]), "anthropic", "claude-sonnet-4-5")
    order = line(0, [seg(1500, "a", "5m"), seg(1500, "b", "1h")])
    with pytest.raises(TraceError, match="must not come after"):
        simulate(load_trace([order]), "anthropic", "claude-sonnet-4-5")


@pytest.mark.parametrize(
    "text,match",
    [
        ("{not json", "line 1: not JSON"),
        ('{"segments": [{"tokens": 1, "hash": "a"}]}', "'ts'"),
        ('{"ts": 1, "segments": [{"tokens": -1, "hash": "a"}]}', "tokens"),
        ('{"ts": 1, "segments": [{"tokens": 1, "hash": "a", "cache": "2h"}]}', "cache"),
        ('{"ts": 1}', "segments"),
    ],
)
def test_malformed_trace_lines(text, match):
    with pytest.raises(TraceError, match=match):
        load_trace([text])
    with pytest.raises(TraceError, match="line 2: ts"):
        load_trace([line(5, [seg(1, "a")]), line(4, [seg(1, "a")])])


def naive_trace():
    """The naive layout: the current time at the TOP of the prompt (changes every request),
    then a 3,000-token system prompt carrying the breakpoint, then the question."""
    return [
        line(
            t,
            [
                seg(12, f"time-{t}", layer="dynamic"),
                seg(3000, "sys", "5m", "system"),
                seg(40, f"q{t}", layer="messages"),
            ],
        )
        for t in (0, 30, 60, 90)
    ]


def test_compare_relays_the_trace_like_build():
    reqs = load_trace(naive_trace())
    naive = simulate(reqs, "anthropic", "claude-sonnet-4-5")
    # every prefix starts with a new timestamp: nothing is ever read, 3,012 written each time
    assert [u.cache_read_tokens for u in naive.usages] == [0, 0, 0, 0]
    assert [u.cache_write_tokens for u in naive.usages] == [3012] * 4
    built = relayout(reqs, "anthropic", "claude-sonnet-4-5")
    assert [s.layer for s in built[0].segments] == ["system", "messages", "dynamic"]
    # plan(): a frozen breakpoint after the system block, a history one after the question
    assert [s.cache for s in built[0].segments] == ["5m", "5m", None]
    res = simulate(built, "anthropic", "claude-sonnet-4-5")
    # request 1 writes 3,000 + 40; later ones read the 3,000 system tokens and write their
    # own question (40) at the history breakpoint; the timestamp (12) is always uncached
    got = [(u.cache_read_tokens, u.cache_write_tokens, u.uncached_input_tokens) for u in res.usages]
    assert got == [(0, 3040, 12), (3000, 40, 12), (3000, 40, 12), (3000, 40, 12)]
    # costs (sonnet-4-5): naive = 4*(3012*3.75 + 40*3) + out 4*10*15
    #   = 4*(11,295 + 120) + 600 = 46,260 micro-$
    assert naive.cost == D("0.04626")
    # built: req1 3040*3.75 + 12*3 = 11,436; others 3000*0.3 + 40*3.75 + 12*3 = 900+150+36
    #   = 1,086 each -> 11,436 + 3*1,086 + 600 = 15,294 micro-$
    assert res.cost == D("0.015294")


def test_cli_table_json_compare_and_errors(tmp_path):
    f = tmp_path / "trace.jsonl"
    f.write_text("\n".join(naive_trace()) + "\n")
    cmd = [
        sys.executable,
        "-m",
        "promptcache.cli",
        "simulate",
        str(f),
        "--provider",
        "anthropic",
        "--model",
        "claude-sonnet-4-5",
    ]
    r = subprocess.run(cmd + ["--compare"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "promptcache.build" in r.stdout and "$0.046260" in r.stdout and "$0.015294" in r.stdout
    j = json.loads(
        subprocess.run(
            cmd + ["--json", "--compare"], capture_output=True, text=True, cwd=ROOT
        ).stdout
    )
    assert j["as_traced"]["hit_rate"] == 0.0
    assert j["promptcache_build"]["per_request"][1]["cache_read_tokens"] == 3000
    bad = tmp_path / "bad.jsonl"
    bad.write_text(line(0, [seg(1, "a")]) + "\n{oops\n")
    r = subprocess.run(
        cmd[:4] + [str(bad), "--provider", "openai"], capture_output=True, text=True, cwd=ROOT
    )
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "line 2" in r.stderr
    r = subprocess.run(
        cmd[:4] + [str(tmp_path / "none.jsonl"), "--provider", "openai"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 2 and "cannot read" in r.stderr


def test_request_payload_traces_use_the_tokenizer():
    from promptcache.prompt.tokens import text_tokens

    system = "You are a support agent for a bicycle shop. " * 120
    lines = [
        json.dumps(
            {
                "ts": t,
                "output_tokens": 5,
                "request": {
                    "model": "gpt-4o",
                    "messages": [
                        {"role": "system", "content": system},
                        {"role": "user", "content": f"Question {t}?"},
                    ],
                },
            }
        )
        for t in (0, 20)
    ]
    reqs = load_trace(lines)
    n_sys = text_tokens(f"system: {system}", "gpt-4o")
    assert reqs[0].segments[0].tokens == n_sys and n_sys > 1024
    res = simulate(reqs, "openai")
    # the second request reads the longest 1024 + 128k prefix inside the shared system block
    expect = 1024 + 128 * ((n_sys - 1024) // 128)
    assert [u.cache_read_tokens for u in res.usages] == [0, expect]
    # Anthropic payload: cache_control on the system block marks the breakpoint
    a = json.dumps(
        {
            "ts": 0,
            "request": {
                "model": "claude-sonnet-4-5",
                "system": [
                    {
                        "type": "text",
                        "text": system,
                        "cache_control": {"type": "ephemeral", "ttl": "1h"},
                    }
                ],
                "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 5,
            },
        }
    )
    (r,) = load_trace([a])
    assert r.segments[0].cache == "1h" and r.segments[0].layer == "system"


def test_segment_dataclasses_round_trip():
    r = TraceRequest(0.0, [Segment(10, "a")], 1)
    assert r.prompt_tokens == 10


def test_compare_on_payload_traces_uses_promptcache_build():
    rules = "\n".join(
        f"Rule {i}: answer questions about order {i} politely and briefly." for i in range(200)
    )
    tool_a = {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Find an order",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
        },
    }
    # the naive app: the clock at the top of the system prompt and tool JSON whose key order
    # changes from request to request (dict built from a set, say)
    tool_b = {
        "function": {
            "parameters": {"properties": {"id": {"type": "string"}}, "type": "object"},
            "description": "Find an order",
            "name": "lookup_order",
        },
        "type": "function",
    }
    lines = []
    for i, t in enumerate((0, 15, 30, 45)):
        lines.append(
            json.dumps(
                {
                    "ts": t,
                    "output_tokens": 5,
                    "request": {
                        "model": "gpt-4o",
                        "tools": [tool_a if i % 2 else tool_b],
                        "messages": [
                            {
                                "role": "system",
                                "content": f"Current time: 2026-11-29T10:00:{t:02d}Z\n{rules}",
                            },
                            {"role": "user", "content": f"Where is order {i}?"},
                        ],
                    },
                }
            )
        )
    reqs = load_trace(lines)
    naive = simulate(reqs, "openai")
    assert [u.cache_read_tokens for u in naive.usages] == [0, 0, 0, 0]
    built = relayout(reqs, "openai")
    # build moved the timestamp line to the end and canonicalized the tool JSON, so the
    # first segments (tools, then the system rules) are byte-identical across requests
    assert len({tuple(s.hash for s in r.segments[:2]) for r in built}) == 1
    assert built[0].prompt_cache_key  # to_openai keys the cache by the prefix hash
    res = simulate(built, "openai")
    reads = [u.cache_read_tokens for u in res.usages]
    shared = built[0].segments[0].tokens + built[0].segments[1].tokens
    # every later request reads the longest 1024 + 128k prefix inside the shared part
    expect = 1024 + 128 * ((shared - 1024) // 128)
    assert reads == [0, expect, expect, expect] and shared > 1024


def test_gemini_implicit_minimum_and_longest_live_boundary():
    # Gemini implicit caching (https://ai.google.dev/gemini-api/docs/caching, read 2026-12-03):
    # gemini-2.5-flash caches from 2,048 tokens, gemini-2.5-pro from 4,096; a request reads
    # the longest earlier prefix ending at a content boundary; no write is billed
    trace = [
        line(0, [seg(3000, "sys"), seg(50, "q1")]),
        line(10, [seg(3000, "sys"), seg(50, "q2")]),
        line(20, [seg(1500, "short"), seg(50, "q3")]),
        line(30, [seg(1500, "short"), seg(50, "q4")]),
    ]
    res = simulate(load_trace(trace), "gemini", "gemini-2.5-flash")
    # t=10 shares the 3,000-token block (3,050 ends in another question); the 1,550-token
    # prompts are under 2,048 at every boundary: never cached
    assert [u.cache_read_tokens for u in res.usages] == [0, 3000, 0, 0]
    assert [u.uncached_input_tokens for u in res.usages] == [3050, 50, 1550, 1550]
    assert all(u.cache_write_tokens == 0 for u in res.usages)
    pro = simulate(load_trace(trace), "gemini", "gemini-2.5-pro")
    assert [u.cache_read_tokens for u in pro.usages] == [0, 0, 0, 0]  # 3,000 < 4,096


def test_cli_accepts_gemini(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        "\n".join(line(t, [seg(3000, "sys"), seg(50, f"q{t}")]) for t in (0, 10)) + "\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "promptcache",
            "simulate",
            str(trace),
            "--provider",
            "gemini",
            "--model",
            "gemini-2.5-flash",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    reads = [r["cache_read_tokens"] for r in json.loads(out.stdout)["as_traced"]["per_request"]]
    assert reads == [0, 3000]
