"""The provider figures in the rule pages match promptcache.limits, the table the linter reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from linters import rule_docs
from promptcache.limits import ANTHROPIC_MAX_BREAKPOINTS, ANTHROPIC_TTLS, MODEL_LIMITS

# the rule pages ship inside the linters package (``promptcache lint --explain CODE``)
DOCS = Path(__file__).resolve().parents[2] / "linters" / "rule_pages"


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_generated_blocks_are_current(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    assert rule_docs.regenerate(text) == text, (
        f"linters/rule_pages/{page} differs from promptcache.limits; run `python -m linters.rule_docs`"
    )


def test_pc005_states_the_breakpoint_limit_and_ttls():
    text = (DOCS / "PC005.md").read_text(encoding="utf-8")
    assert "<!-- limits:anthropic-misuse -->" in text
    assert f"more than **{ANTHROPIC_MAX_BREAKPOINTS}** breakpoints" in text
    for ttl in ANTHROPIC_TTLS:
        assert f'`"{ttl}"`' in text
    readme = (DOCS / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| [PC005]"))
    assert f"more than {ANTHROPIC_MAX_BREAKPOINTS} breakpoints" in row


def test_pc008_lists_every_anthropic_minimum():
    text = (DOCS / "PC008.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| ([\d,]+) \| (.*) \|$", line)
        if m:
            for family in re.findall(r"`([^`]+)`", m.group(2)):
                rows[family] = int(m.group(1).replace(",", ""))
    expected = {r.family: r.min_tokens for r in MODEL_LIMITS if r.provider == "anthropic"}
    assert rows == expected
    # spot checks against the documented figures (Anthropic prompt-caching page, 2026-11-29)
    assert rows["claude-sonnet-4-5"] == 1024 and rows["claude-haiku-4-5"] == 4096
    assert rows["claude-3-5-haiku"] == 2048


def test_regenerate_rewrites_a_stale_block():
    stale = "x\n<!-- limits:anthropic-misuse -->\n- more than **5** breakpoints\n<!-- /limits:anthropic-misuse -->\n"
    fresh = rule_docs.regenerate(stale)
    assert f"**{ANTHROPIC_MAX_BREAKPOINTS}**" in fresh and "**5**" not in fresh
    with pytest.raises(KeyError):
        rule_docs.regenerate("<!-- limits:nope -->\n<!-- /limits:nope -->")
