"""The measured corpus: every expected finding (file, line, code) is reported and nothing
else is, for each of the >= 40 positive and >= 40 negative snippets."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from linters.config import LintConfig
from linters.runner import lint_source

_spec = importlib.util.spec_from_file_location(
    "lint_corpus", Path(__file__).resolve().parents[1] / "lint_corpus" / "corpus.py"
)
corpus = importlib.util.module_from_spec(_spec)
sys.modules["lint_corpus"] = corpus
_spec.loader.exec_module(corpus)
CASES = corpus.load_cases()


def test_corpus_is_big_enough():
    positives = [c for c in CASES if c.positive]
    negatives = [c for c in CASES if not c.positive]
    assert len(positives) >= 40 and len(negatives) >= 40
    assert sum(len(c.expected) for c in positives) >= 40
    assert all(c.expected for c in positives), "every positive file marks a finding"
    assert not any(c.expected for c in negatives)
    codes = {code for c in positives for _, code in c.expected}
    assert {"PC001", "PC002", "PC003", "PC004", "PC005", "PC006", "PC007", "PC008"} <= codes


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.path.parent.name}/{c.path.name}")
def test_corpus_case(case):
    found = lint_source(case.path.read_bytes(), case.path.name, LintConfig(root=case.path.parent))
    got = {(case.normalize(f.line), f.code) for f in found}
    assert got == set(case.expected), "\n".join(
        f"{f.line}:{f.col} {f.code} {f.message}" for f in found
    )
