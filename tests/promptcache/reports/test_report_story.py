"""A report that tells the story (issue 17): ``--html`` honours ``--by``; a request that
reused 16 of 1,778 tokens is not a hit (the rule is stated); no Python repr in the subtitle;
one prefix-label format; the chart's bucket follows the time span; ``print(summary)`` is the
report's table; ``Prompt.explain()`` returns its text and prints nothing, numbering blocks
within their layer."""

from __future__ import annotations

import re
import warnings
from decimal import Decimal as D

from promptcache import Price, Tracker, Usage, build
from promptcache.cli import main
from promptcache.reports.report import format_table

PRICE = Price(input="3", output="15", cache_read="0.30", cache_write_5m="3.75")
T0 = 1_795_000_000.0


def _demo_ledger(path) -> Tracker:
    """The demo's shape: a naive run (16 of 1,778 tokens reused: the chat template's first
    block) and a built run (1,760 of 1,778 reused), tagged metadata.demo_run, 90 s apart."""
    t = Tracker(path)
    for i in range(4):
        t.record(
            Usage(uncached_input_tokens=1762, cache_read_tokens=16, output_tokens=8),
            model="SmolLM2-135M-Instruct",
            provider="local",
            price=PRICE,
            prefix_hash="4dadc80cff1b0f3c" + "0" * 48,
            metadata={"demo_run": "naive"},
            ts=T0 + i * 10,
        )
    for i in range(4):
        t.record(
            Usage(uncached_input_tokens=18, cache_read_tokens=1760, output_tokens=8),
            model="SmolLM2-135M-Instruct",
            provider="local",
            price=PRICE,
            prefix_hash="pc-8632823893133aaaabbbbccccdddd",
            metadata={"demo_run": "promptcache.build"},
            ts=T0 + 50 + i * 10,
        )
    return t


def test_html_honours_by(tmp_path):
    db = tmp_path / "l.db"
    _demo_ledger(db).close()
    out = tmp_path / "r.html"
    assert main(["report", "--db", str(db), "--by", "metadata.demo_run", "--html", str(out)]) == 0
    page = out.read_text()
    assert "By metadata.demo_run" in page
    rows = dict(re.findall(r"<tr><td>([^<]+)</td><td>(\d+)</td>", page))
    assert rows == {"naive": "4", "promptcache.build": "4"}
    # cost per run, from the counts: naive 4 x (1762*3 + 16*0.3 + 8*15) = 21,643.2 micro-$;
    # built 4 x (18*3 + 1760*0.3 + 8*15) = 2,808 micro-$
    assert "$0.021643" in page and "$0.002808" in page


def test_a_request_that_reused_16_of_1778_tokens_is_not_a_hit(tmp_path):
    db = tmp_path / "l.db"
    t = _demo_ledger(db)
    assert t.hit_counts("prefix_hash", 0.5) == {
        "4dadc80cff1b0f3c" + "0" * 48: (0, 4),
        "pc-8632823893133aaaabbbbccccdddd": (4, 4),
    }
    t.close()
    out = tmp_path / "r.html"
    assert main(["report", "--db", str(db), "--html", str(out)]) == 0
    page = out.read_text()
    assert "4/4 requests not a hit" in page  # the naive prefix
    assert "0/4 requests not a hit" in page  # the built prefix
    assert "at least 50% of its prompt tokens" in page  # the rule, said


def test_subtitle_has_no_repr_and_prefix_labels_share_one_format(tmp_path, capsys):
    db = tmp_path / "l.db"
    _demo_ledger(db).close()
    out = tmp_path / "r.html"
    assert main(["report", "--db", str(db), "--by", "prefix_hash", "--html", str(out)]) == 0
    table = capsys.readouterr().out
    page = out.read_text()
    assert "Tracker(" not in page and str(db) in page
    labels = re.findall(r'data-chart="prefix-misses".*', page)[0]
    keys = set(re.findall(r'data-key="([^"]+)"', labels))
    assert keys == {"4dadc80cff1b0f3c", "8632823893133aaa"}
    for k in keys:
        assert re.fullmatch(r"[0-9a-f]{16}", k)
        assert re.search(rf"^{k}\s", table, re.M), table
    assert "pc-" not in table


def test_a_short_run_is_charted_in_buckets_of_its_span(tmp_path):
    db = tmp_path / "l.db"
    _demo_ledger(db).close()  # 80 seconds of traffic
    out = tmp_path / "r.html"
    assert main(["report", "--db", str(db), "--html", str(out)]) == 0
    page = out.read_text()
    pts = re.findall(r'<circle class="pt"[^>]*data-key="([^"]+)" data-value="([^"]+)"', page)
    # 10-second buckets (80 s / 10 s = 8 < 48 points): 8 points, naive ~0.009, built ~0.99
    assert len(pts) == 8, pts
    assert "per 10 seconds" in page
    vals = [float(v) for _, v in pts]
    assert vals[:4] == [round(16 / 1778, 6)] * 4 and vals[4:] == [round(1760 / 1778, 6)] * 4
    from promptcache.reports.html import pick_bucket

    assert pick_bucket(0) == 1 and pick_bucket(3 * 3600) == 300 and pick_bucket(30 * 86400) == 86400


def test_print_summary_is_the_report_table(tmp_path, capsys):
    db = tmp_path / "l.db"
    t = _demo_ledger(db)
    rows = t.summary(by="model")
    text = str(rows)
    assert "SummaryRow(" not in text
    assert main(["report", "--db", str(db), "--by", "model"]) == 0
    assert text == capsys.readouterr().out.rstrip("\n")
    assert rows[0].key == "SmolLM2-135M-Instruct" and len(rows) == 1  # still a list
    total = [ln for ln in text.splitlines() if ln.startswith("TOTAL")][0]
    assert "8" in total.split()[1] and f"{(16 * 4 + 1760 * 4) / (1778 * 8):.1%}" in total
    assert format_table(list(rows), "model", None).splitlines()[0] == text.splitlines()[0]


def test_explain_returns_text_prints_nothing_and_numbers_within_layer(capsys):
    policy = "Our refund policy: items may be returned within 30 days. " * 120
    tools = [{"name": "lookup", "description": "find an order", "input_schema": {"type": "object"}}]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exp = build(system=policy, tools=tools, dynamic="Can I return shoes?").explain(
            "claude-sonnet-4-6"
        )
    assert capsys.readouterr().out == ""  # prints nothing
    text = str(exp)
    assert repr(exp) == text and text.startswith("prompt ")
    # one system item: the breakpoint is on system block 1 (the tools block is before it)
    assert "on system block 1 " in text, text
    assert "system block 2" not in text
    assert D(exp.cacheable_tokens) > 0
