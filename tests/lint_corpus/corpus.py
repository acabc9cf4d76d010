"""Load the lint corpus: ``positive/*.py`` mark each expected finding with a trailing
``# expect: PC001`` comment (several codes separated by spaces or commas);
``negative/*.py`` expect nothing. Used by tests/linters/test_corpus.py and
bench/lint_eval.py."""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent
EXPECT_RE = re.compile(r"#\s*expect:\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*)")


@dataclass(frozen=True)
class Case:
    """One corpus file: ``expected`` holds ``(line, code)`` pairs; ``string_end`` maps a
    line inside a multi-line string to the line the string ends on (where a comment can
    sit)."""

    path: Path
    positive: bool
    expected: frozenset[tuple[int, str]]
    string_end: dict[int, int]

    def normalize(self, line: int) -> int:
        return self.string_end.get(line, line)


def load_case(path: Path, positive: bool) -> Case:
    text = path.read_text(encoding="utf-8")
    expected = set()
    string_end: dict[int, int] = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            m = EXPECT_RE.search(tok.string)
            if m:
                for code in re.split(r"[\s,]+", m.group("codes")):
                    expected.add((tok.start[0], code))
        elif tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
            for ln in range(tok.start[0], tok.end[0]):
                string_end[ln] = tok.end[0]
    return Case(path, positive, frozenset(expected), string_end)


def load_cases() -> list[Case]:
    cases = [load_case(p, True) for p in sorted((ROOT / "positive").glob("*.py"))]
    cases += [load_case(p, False) for p in sorted((ROOT / "negative").glob("*.py"))]
    return cases
