"""Every rule has a documentation page with a bad example, a good example and why it costs
money; the Python examples of PC001-PC008 are checked: Bad is reported, Good is not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from linters.rules import RULES
from linters.runner import lint_source

# the rule pages ship inside the linters package (``promptcache lint --explain CODE``)
DOCS = Path(__file__).resolve().parents[2] / "linters" / "rule_pages"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def section(text: str, title: str) -> str:
    m = re.search(rf"^## {title}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"missing section '## {title}'"
    return m.group(1)


@pytest.mark.parametrize("code", list(RULES))
def test_rule_page(code):
    page = DOCS / f"{code}.md"
    text = page.read_text()
    rule = RULES[code]
    assert text.startswith(f"# {code}: {rule.name}\n")
    for title in ("Why it costs money", "Bad", "Good"):
        assert section(text, title).strip()
    assert f"[{code}]({code}.md)" in (DOCS / "README.md").read_text()


@pytest.mark.parametrize("code", [c for c in RULES if c < "PC900"])
def test_examples_behave_as_documented(code):
    text = (DOCS / f"{code}.md").read_text()
    prelude = "import anthropic, openai, json, uuid\nfrom datetime import datetime\nfrom pathlib import Path\n"
    bad = BLOCK.findall(section(text, "Bad"))
    good = BLOCK.findall(section(text, "Good"))
    assert bad and good
    for snippet in bad:
        got = {f.code for f in lint_source(prelude + snippet, "bad.py")}
        assert code in got, snippet
    for snippet in good:
        assert [f.code for f in lint_source(prelude + snippet, "good.py")] == [], snippet
