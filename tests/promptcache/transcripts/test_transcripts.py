"""``promptcache import claude-code|codex``: calls, de-duplication, lineages, causes (worked out
by hand in the comments from the fixtures' numbers; fixtures/README.md says where each shape
comes from), damaged lines and idempotent re-import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from promptcache import Tracker
from promptcache.cli import main

HERE = Path(__file__).parent
FIX = HERE / "fixtures"
ROOT = HERE.parents[2]
S1 = "0b6f6e0c-5b7a-4c5e-9d1e-6f1f9d1a0001"
S2 = "0b6f6e0c-5b7a-4c5e-9d1e-6f1f9d1a0002"


def _by_msg(db: str) -> dict[str, object]:
    from promptcache.transcripts.calls import TranscriptCall
    from promptcache.transcripts.importer import record_id

    recs = {r.record_id: r for r in Tracker(db).records()}
    out = {}
    for mid in ("A", "B", "C", "D", "E", "F", "G", "S2a", "SA1", "SA2"):
        key = f"claude-code:msg_{mid}:req_{mid}"
        fake = TranscriptCall(key, 0.0, None, "anthropic", "messages", "", None)  # type: ignore[arg-type]
        out[mid] = recs[record_id(fake)]
    return out


def test_claude_code_import(tmp_path, capsys):
    db = str(tmp_path / "l.db")
    assert main(["import", "claude-code", str(FIX / "claude-code"), "--db", db]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "claude-code: 10 call(s) read, 10 new in the ledger, 3 line(s) skipped"
    warnings = err.strip().splitlines()
    assert len(warnings) == 3  # one per skipped line
    assert warnings[0].endswith(f"{S1}.jsonl:11: skipped (unknown line type 'brand-new-line-type')")
    assert warnings[1].endswith(f"{S1}.jsonl:16: skipped (not UTF-8 at byte 44)")
    assert warnings[2].endswith(f"{S1}.jsonl:17: skipped (truncated last line)")
    r = _by_msg(db)
    # msg_B was written as three lines (thinking, text, tool_use): one call, output 120
    assert r["B"].usage.output_tokens == 120 and Tracker(db).count() == 10
    assert (
        r["B"].usage.uncached_input_tokens,
        r["B"].usage.cache_read_tokens,
        r["B"].usage.cache_write_tokens,
    ) == (5, 20000, 1500)
    causes = {k: v.miss_cause for k, v in r.items()}
    assert causes == {
        "A": "cold",  # first call, read 0
        "B": "hit",  # read 20,000 = what A wrote (0 + 20,000)
        "C": "hit",  # read 21,500 = B's 20,000 read + 1,500 written
        "D": "ttl_expired",  # read 0 of C's 22,300, 400 s later > the 300 s (5m) TTL
        "E": "hit",  # read 22,300 = D's writes
        "S2a": "hit",  # first call of session 2, read 15,000 (the shared head)
        "SA1": "hit",  # first call of the subagent, read 15,000: now seen twice
        "SA2": "hit",  # read 15,900 = SA1's 15,000 + 900
        "F": "prefix_changed",  # read 15,000 < E's 23,000, 30 s later, 15,000 seen twice
        "G": "unknown",  # read 17,000 < F's 23,100, 20 s later, 17,000 never seen
    }
    assert r["F"].miss_path is None  # the transcript has no request: where is unknown
    lineages = {k: v.lineage for k, v in r.items()}
    assert lineages["A"] == lineages["G"] == f"claude-code:{S1}"
    assert lineages["SA1"] == lineages["SA2"] == f"claude-code:{S1}:agent:a1b2c3"
    assert lineages["S2a"] == f"claude-code:{S2}"
    # idempotent: a second import writes nothing
    assert main(["import", "claude-code", str(FIX / "claude-code"), "--db", db, "--quiet"]) == 0
    assert "10 call(s) read, 0 new in the ledger" in capsys.readouterr().out
    assert Tracker(db).count() == 10


def test_codex_import(tmp_path, capsys):
    db = str(tmp_path / "l.db")
    r = subprocess.run(
        [sys.executable, "-m", "promptcache", "import", "codex", str(FIX / "codex"), "--db", db],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "codex: 4 call(s) read, 4 new in the ledger, 0 line(s) skipped"
    recs = Tracker(db).records()
    got = [
        (
            r.model,
            r.usage.uncached_input_tokens,
            r.usage.cache_read_tokens,
            r.usage.output_tokens,
            r.miss_cause,
        )
        for r in recs
    ]
    assert got == [
        ("gpt-5-codex", 5000, 0, 100, "cold"),
        # 6,000 in, 4,864 cached; the previous 5,000-token prompt left
        # 5,000 - (5,000 - 1,024) mod 128 = 4,992 cached: 4,864 + 128 >= 4,992 -> hit
        ("gpt-5-codex", 1136, 4864, 150, "hit"),
        # no last_token_usage: totals 18,000/10,624/400 minus 11,000/4,864/250
        # = 7,000 in, 5,760 cached, 150 out; 6,000 - 4,976 mod 128 = 5,888 <= 5,760 + 128
        ("gpt-5-codex", 1240, 5760, 150, "hit"),
        # 600 s later (> 300 s in-memory retention), nothing read
        ("gpt-5-codex", 7500, 0, 100, "ttl_expired"),
    ]
    assert {r.lineage for r in recs} == {"codex:019a9776-0a34-7842-8627-112b63d66e90"}


def test_missing_path_is_one_line_exit_2(tmp_path, capsys):
    assert main(["import", "codex", str(tmp_path / "nope"), "--db", str(tmp_path / "l.db")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("nope does not exist")


REAL = FIX / "real"


def _import(kind: str, path: Path, db: str) -> tuple[str, str]:
    r = subprocess.run(
        [sys.executable, "-m", "promptcache", "import", kind, str(path), "--db", db],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip(), r.stderr.strip()


def test_real_claude_code_transcript(tmp_path):
    """A session Claude Code 2.1.197 wrote (3 turns: ``claude -p``, then ``-p --continue``
    twice) against the local engine. The expected usage is the engine's own log of the
    three calls it served (``prompt_tokens`` / ``cached_tokens`` / ``cache_write_tokens`` /
    ``output_tokens``: 28,457/0/28,451/11, 28,483/28,451/26/8, 28,504/28,477/21/7), which
    the proxy recorded identically for the same session."""
    db = str(tmp_path / "l.db")
    out, err = _import("claude-code", REAL / "claude-code-2.1.197", db)
    assert out == "claude-code: 3 call(s) read, 3 new in the ledger, 0 line(s) skipped"
    assert err == ""  # its line types (last-prompt, mode, attachment, ...) are all known
    recs = Tracker(db).records()
    got = [
        (
            r.model,
            r.usage.uncached_input_tokens,
            r.usage.cache_read_tokens,
            r.usage.cache_write_tokens,
            r.usage.output_tokens,
            r.miss_cause,
        )
        for r in recs
    ]
    # uncached = prompt - cached - written: 28,457 - 0 - 28,451 = 6, and 6 for each turn
    assert got == [
        ("claude-sonnet-4-5-20250929", 6, 0, 28451, 11, "cold"),
        ("claude-sonnet-4-5-20250929", 6, 28451, 26, 8, "hit"),  # read = all turn 1 wrote
        ("claude-sonnet-4-5-20250929", 6, 28477, 21, 7, "hit"),  # 28,451 + 26
    ]
    assert {r.lineage for r in recs} == {"claude-code:5fbc1ff1-632c-418d-9480-7b23b8116062"}


def test_real_codex_rollout(tmp_path):
    """A rollout Codex CLI 0.171.0 wrote (``codex exec``, then ``exec resume --last`` twice)
    against the local engine; expected usage from the engine's log (prompt/cached/output:
    6,312/0/4, 6,330/6,272/3, 6,346/6,272/14). Its ``token_usage_record`` lines repeat each
    call's usage: still three calls."""
    db = str(tmp_path / "l.db")
    out, err = _import("codex", REAL / "codex-0.171.0", db)
    assert out == "codex: 3 call(s) read, 3 new in the ledger, 0 line(s) skipped"
    assert err == ""
    recs = Tracker(db).records()
    got = [
        (r.model, r.usage.uncached_input_tokens, r.usage.cache_read_tokens, r.usage.output_tokens)
        for r in recs
    ]
    assert got == [
        ("gpt-5.4", 6312, 0, 4),
        ("gpt-5.4", 6330 - 6272, 6272, 3),
        ("gpt-5.4", 6346 - 6272, 6272, 14),
    ]
    assert [r.miss_cause for r in recs] == ["cold", "hit", "hit"]
