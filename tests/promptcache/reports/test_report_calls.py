"""``promptcache report --calls`` and the calls-without-usage note.

Three calls of one conversation (gpt-4o, prices from the bundled table) and one call whose
response carried no usage: the listing has one line per call, oldest first, with the cause,
the tokens read/written/missed and the cost; the unknown call shows ``?`` (never 0); the
report says "1 call without usage: hit rate covers 3 of 4".
"""

from __future__ import annotations

import json
from decimal import Decimal as D

from promptcache import Tracker, Usage
from promptcache.cli import main
from promptcache.limits import cache_limits
from promptcache.providers.usage_record import unknown_usage

RULES = cache_limits("gpt-4o")


def body(turns: int) -> dict:
    msgs = [{"role": "system", "content": "You plan trips. " * 300}]
    for i in range(turns + 1):
        msgs += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
    return {"model": "gpt-4o", "messages": msgs[:-1]}


def ledger(path) -> Tracker:
    t = Tracker(path)
    for i, (read, prompt) in enumerate([(0, 1200), (1152, 1210), (1152, 1220)]):
        u = Usage(
            uncached_input_tokens=prompt - read,
            cache_read_tokens=read,
            output_tokens=10,
            provider="openai",
            model="gpt-4o",
        )
        t.record(u, request=body(i), api="chat.completions", ts=1_800_000_000.0 + i, rules=RULES)
    t.record(
        unknown_usage("openai", "gpt-4o"),
        request=body(3),
        api="chat.completions",
        ts=1_800_000_003.0,
        stream=True,
    )
    return t


def test_calls_listing(tmp_path, capsys) -> None:
    db = tmp_path / "l.db"
    ledger(db).close()
    assert main(["report", "--db", str(db), "--calls"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split()[:8] == [
        "time",
        "lineage",
        "cause",
        "path",
        "read",
        "written",
        "missed",
        "cost",
    ]
    rows = [ln.split() for ln in lines[1:5]]
    assert [r[0] for r in rows] == [f"2027-01-15T08:00:0{i}.000Z" for i in range(4)]
    assert [r[2] for r in rows] == ["cold", "hit", "hit", "-"]
    # read / written / missed: missed = prompt - read (1200, 58, 68), unknown shows n/a (as the
    # summary report and the HTML page write it)
    assert [r[4:7] for r in rows] == [
        ["0", "0", "1200"],
        ["1152", "0", "58"],
        ["1152", "0", "68"],
        ["n/a", "n/a", "n/a"],
    ]
    # gpt-4o (prices.toml): $2.50 input, $1.25 cached, $10 output per million tokens
    # turn 1: 1200*2.5 + 10*10 = 3100 micro-$; turn 2: 58*2.5 + 1152*1.25 + 100 = 1685
    assert [r[7] for r in rows] == ["$0.003100", "$0.001685", "$0.001710", "n/a"]
    assert len({r[1] for r in rows[:3]}) == 1  # one conversation
    assert lines[5] == "1 call without usage: hit rate covers 3 of 4"


def test_calls_json_and_summary_note(tmp_path, capsys) -> None:
    db = tmp_path / "l.db"
    ledger(db).close()
    assert main(["report", "--db", str(db), "--calls", "--json", "--limit", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["cause"] for d in doc] == ["hit", None]
    assert doc[1]["usage_known"] is False and doc[1]["cost"] is None and doc[1]["read"] is None
    assert D(doc[0]["cost"]) == D("0.00171")
    assert main(["report", "--db", str(db)]) == 0
    assert "1 call without usage: hit rate covers 3 of 4" in capsys.readouterr().out
    assert main(["report", "--db", str(db), "--json"]) == 0
    usage = json.loads(capsys.readouterr().out)["usage"]
    assert usage == {"calls": 4, "calls_without_usage": 1, "hit_rate_covers": 3}
