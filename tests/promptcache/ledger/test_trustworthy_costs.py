"""Costs a user can trust (issue 17): every model the installed official SDKs name has a
sourced price row or is declared unknown; an unknown price is ``n/a`` (never $0) in every
report format; recording an unknown model warns once; ``report --prices`` reprices old rows.
"""

from __future__ import annotations

import json
import re
import typing
import warnings
from decimal import Decimal as D
from pathlib import Path

import pytest

from promptcache import Tracker, Usage
from promptcache.cli import main
from promptcache.errors import PricingError
from promptcache.ledger import pricing

T0 = 1_795_000_000.0  # 2026-11-18, a fixed clock for the ledger rows


def _literal_values(tp: object) -> list[str]:
    """The string literals of a ``Literal[...]`` / ``Union[Literal[...], str]`` alias."""
    out: list[str] = []
    for arg in typing.get_args(tp):
        if isinstance(arg, str):
            out.append(arg)
        else:
            out += _literal_values(arg)
    return out


def sdk_models() -> dict[str, list[str]]:
    """Model ids listed by the installed official SDKs: anthropic's ``Model`` literal and
    openai's ``ChatModel`` literal."""
    from anthropic.types.model import Model
    from openai.types.shared.chat_model import ChatModel

    return {"anthropic": _literal_values(Model), "openai": _literal_values(ChatModel)}


def test_sdk_model_lists_are_read():
    models = sdk_models()
    # spot checks against the installed packages' sources
    assert "claude-sonnet-4-6" in models["anthropic"] and "claude-opus-4-7" in models["anthropic"]
    assert "gpt-4.1" in models["openai"] and "o3" in models["openai"]
    assert len(models["anthropic"]) >= 20 and len(models["openai"]) >= 80


def _resolves(model: str) -> pricing.Price | None:
    try:
        return pricing.price_for(model)
    except PricingError:
        return None


def _declared_unknown(model: str) -> bool:
    """Named (or a dated snapshot of a model named) in prices.toml's ``[unpriced]``."""
    try:
        pricing.price_for(model)
    except PricingError as e:
        return "no sourced price" in str(e)
    return False


def test_every_sdk_model_has_a_sourced_price_or_is_declared_unknown():
    """A model the SDKs name either resolves to a row that carries its source page and
    the date it was read, or is listed in prices.toml's ``[unpriced]`` table (with the
    reason); a newly released SDK model fails this test until someone looks it up."""
    declared = pricing.unpriced_models()
    undeclared, stale, unsourced = [], [], []
    for names in sdk_models().values():
        for m in names:
            p = _resolves(m)
            if p is None and not _declared_unknown(m):
                undeclared.append(m)
            if p is not None and m.lower() in declared:
                stale.append(m)
            if p is not None and not (
                (p.source or "").startswith("https://")
                and re.fullmatch(r"\d{4}-\d{2}-\d{2}", p.date or "")
            ):
                unsourced.append(m)
    assert not undeclared, f"SDK models with no price row and not declared unknown: {undeclared}"
    assert not stale, f"declared unknown but priced: {stale}"
    assert not unsourced, f"price rows without a source URL and date: {unsourced}"
    # the reason for each declared-unknown model is said
    assert all(reason.strip() for reason in declared.values())


def test_declared_unknown_is_never_priced_by_a_prefix_match():
    """gpt-4o-2024-05-13 would match the gpt-4o row as a dated snapshot, but the launch
    snapshot was priced differently: declared unknown, it raises instead."""
    assert "gpt-4o-2024-05-13" in pricing.unpriced_models()
    with pytest.raises(PricingError, match="no sourced price"):
        pricing.price_for("gpt-4o-2024-05-13")
    assert pricing.price_for("gpt-4o-2024-08-06").model == "gpt-4o"


def test_claude_sonnet_4_6_priced_from_the_pricing_page():
    # platform.claude.com/docs/en/docs/about-claude/pricing: $3 / $3.75 / $6 / $0.30 / $15
    p = pricing.price_for("claude-sonnet-4-6")
    assert (p.input, p.cache_write_5m, p.cache_write_1h, p.cache_read, p.output) == (
        D("3"),
        D("3.75"),
        D("6"),
        D("0.30"),
        D("15"),
    )
    assert p.source and "claude.com" in p.source


def test_gpt_5_codex_priced_from_its_model_page():
    """`import codex` rows showed n/a (the tryout): gpt-5-codex is priced from its model page,
    $1.25 input / $0.125 cached input / $10 output per MTok. A call of 6,000 input tokens of
    which 4,864 cached, 150 output: 1,136 x 1.25 + 4,864 x 0.125 + 150 x 10 = 3,528 per MTok
    -> $0.003528."""
    p = pricing.price_for("gpt-5-codex")
    assert (p.input, p.cache_read, p.output) == (D("1.25"), D("0.125"), D("10"))
    assert p.source and p.source.endswith("/models/gpt-5-codex")
    usage = Usage(
        provider="openai",
        model="gpt-5-codex",
        uncached_input_tokens=1136,
        cache_read_tokens=4864,
        output_tokens=150,
    )
    assert pricing.cost(usage).total == D("0.003528")


def test_anthropic_min_length_is_never_borrowed_from_another_model():
    """claude-sonnet-5-5 must not take claude-sonnet-5's documented minimum by prefix:
    a model with no row of its own gets the provider default, flagged known=False."""
    from promptcache.limits import cache_limits as cache_rules

    snapshot = re.compile(r"^(?:-\d{8})?$")
    for m in sdk_models()["anthropic"]:
        r = cache_rules(m, "anthropic")
        if r.known:
            assert snapshot.match(m[len(r.family) :]), (m, r.family)
    assert cache_rules("claude-sonnet-5-5", "anthropic").known is False
    assert cache_rules("claude-sonnet-5", "anthropic").known is True
    assert cache_rules("claude-sonnet-4-5-20250929", "anthropic").family == "claude-sonnet-4-5"


# --- n/a, never $0 --------------------------------------------------------------------


def _mixed_ledger(path: Path) -> Tracker:
    t = Tracker(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # 2 priced gpt-4.1 requests: 1000 input x $2 + 100 output x $8 = $0.0028 each
        for i in range(2):
            t.record(
                Usage(uncached_input_tokens=1000, output_tokens=100),
                model="gpt-4.1",
                provider="openai",
                ts=T0 + i,
            )
        # 3 requests of a model nobody priced
        for i in range(3):
            t.record(
                Usage(uncached_input_tokens=500, output_tokens=50),
                model="acme-llm-7",
                provider="acme",
                ts=T0 + 10 + i,
            )
    return t


def test_table_shows_na_for_unknown_price_and_total_says_what_it_leaves_out(tmp_path, capsys):
    db = tmp_path / "l.db"
    _mixed_ledger(db).close()
    assert main(["report", "--db", str(db), "--by", "model"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("acme-llm-7"))
    assert "n/a" in row and "$0" not in row
    gpt = next(line for line in out.splitlines() if line.startswith("gpt-4.1"))
    assert "$0.0056" in gpt  # 2 x $0.0028
    total = next(line for line in out.splitlines() if line.startswith("TOTAL"))
    assert "$0.0056" in total
    assert "leave out 3 request(s)" in out and "counted as $0" not in out


def test_json_cost_is_null_for_unknown_price(tmp_path, capsys):
    db = tmp_path / "l.db"
    _mixed_ledger(db).close()
    assert main(["report", "--db", str(db), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["key"]: r for r in doc["rows"]}
    assert rows["acme-llm-7"]["cost"] is None and rows["acme-llm-7"]["saving"] is None
    assert rows["gpt-4.1"]["cost"] == "0.0056"
    assert doc["total"]["cost"] == "0.0056" and doc["total"]["unpriced_requests"] == 3


def test_html_shows_na_for_unknown_price(tmp_path):
    db = tmp_path / "l.db"
    _mixed_ledger(db).close()
    out = tmp_path / "r.html"
    assert main(["report", "--db", str(db), "--html", str(out)]) == 0
    page = out.read_text()
    row = re.search(r"<tr><td>acme-llm-7</td>.*?</tr>", page).group(0)
    assert "n/a" in row and "$0" not in row
    assert "leave out 3 request(s)" in page and "count as $0" not in page


# --- warning at record time -----------------------------------------------------------


def test_recording_an_unknown_model_warns_once_per_model(tmp_path):
    t = Tracker(tmp_path / "w.db")
    u = Usage(uncached_input_tokens=10, output_tokens=1)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for _ in range(3):
            t.record(u, model="gpt-4.1-mni")
        t.record(u, model="acme-other-9")
        t.record(u, model="gpt-4.1")  # priced: no warning
    msgs = [str(w.message) for w in got if issubclass(w.category, pricing.UnknownPriceWarning)]
    assert len(msgs) == 2, msgs
    assert "gpt-4.1-mni" in msgs[0] and "gpt-4.1-mini" in msgs[0]  # names the closest
    assert "acme-other-9" in msgs[1]
    assert t.count() == 5  # still recorded


# --- repricing at report time ---------------------------------------------------------

PRICES = """
[models."acme-llm-7"]
input = "2"
output = "10"
source = "https://acme.example/pricing"
date = "2026-11-30"
"""


def test_report_prices_file_reprices_recorded_rows(tmp_path, capsys):
    db = tmp_path / "l.db"
    _mixed_ledger(db).close()
    f = tmp_path / "p.toml"
    f.write_text(PRICES)
    assert main(["report", "--db", str(db), "--json", "--prices", str(f)]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = {r["key"]: r for r in doc["rows"]}
    # acme: 3 x (500 x $2 + 50 x $10) / 1e6 = 3 x $0.0015 = $0.0045
    assert D(rows["acme-llm-7"]["cost"]) == D("0.0045")
    assert D(rows["gpt-4.1"]["cost"]) == D("0.0056")  # stored price kept
    assert D(doc["total"]["cost"]) == D("0.0101") and doc["total"]["unpriced_requests"] == 0


def test_report_prices_file_overrides_a_bundled_price(tmp_path, capsys):
    db = tmp_path / "l.db"
    _mixed_ledger(db).close()
    f = tmp_path / "p.toml"
    f.write_text('[models."gpt-4.1"]\ninput = "1"\noutput = "4"\n')
    assert main(["report", "--db", str(db), "--json", "--prices", str(f)]) == 0
    rows = {r["key"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    # 2 x (1000 x $1 + 100 x $4) / 1e6 = $0.0028
    assert D(rows["gpt-4.1"]["cost"]) == D("0.0028")
    assert rows["acme-llm-7"]["cost"] is None


def test_promptcache_prices_env_reprices_too(tmp_path, capsys, monkeypatch):
    db = tmp_path / "l.db"
    _mixed_ledger(db).close()
    f = tmp_path / "p.toml"
    f.write_text(PRICES)
    monkeypatch.setenv("PROMPTCACHE_PRICES", str(f))
    assert main(["report", "--db", str(db), "--by", "model"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("acme-llm-7"))
    assert "$0.0045" in row


def test_report_prices_bad_file_is_one_line_exit_2(tmp_path, capsys):
    db = tmp_path / "l.db"
    _mixed_ledger(db).close()
    f = tmp_path / "p.toml"
    f.write_text("[models.x]\ninput = \n")
    assert main(["report", "--db", str(db), "--prices", str(f)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("promptcache report:") and "\n" not in err
    assert main(["report", "--db", str(db), "--prices", str(tmp_path / "nope.toml")]) == 2


def test_report_help_documents_the_prices_file(capsys):
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    out = capsys.readouterr().out
    assert "--prices" in out and "PROMPTCACHE_PRICES" in out
    assert '[models."' in out and "input" in out and "cache_read" in out


def test_the_cli_prints_an_unknown_price_as_one_line(tmp_path, capsys):
    """The tryout saw Python's raw warning (file:line: UnknownPriceWarning: ..., then a
    source line) from `promptcache import codex`; the CLI prints one line instead."""
    src = Path(__file__).parents[1] / "transcripts" / "fixtures" / "codex"
    dst = tmp_path / "codex"
    for f in src.rglob("*.jsonl"):
        out = dst / f.relative_to(src)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f.read_text().replace('"gpt-5-codex"', '"acme-coder-3"'))
    pricing._WARNED.discard("acme-coder-3")
    status = main(["import", "codex", str(dst), "--db", str(tmp_path / "l.db")])
    err = capsys.readouterr().err.splitlines()
    assert status == 0
    warned = [ln for ln in err if "acme-coder-3" in ln]
    assert len(warned) == 1
    assert warned[0].startswith("promptcache: warning: requests for acme-coder-3 are recorded")
    assert not any("UnknownPriceWarning" in ln or ".py:" in ln for ln in err)
