"""Precision and recall of ``promptcache lint`` on tests/lint_corpus, with pcdlint side by side.

Usage::

    .venv/bin/python bench/lint_eval.py            # needs `pip install pcdlint` for the peer

Scoring:

1. promptcache lint, exact: a finding is a true positive when its (file, line, code) is an
   ``# expect:`` mark of the corpus (a finding inside a multi-line string counts on the line
   where the string ends); anything else it reports is a false positive, any mark it misses
   a false negative. Per rule and overall.
2. Side by side with pcdlint (https://pypi.org/project/pcdlint/), at (file, code)
   granularity because the two tools point at different lines of the same problem (pcdlint
   at the ``system=`` argument, promptcache lint where the value enters the text). pcdlint's
   codes are mapped to ours: PCL001 (dynamic value before static prompt text) and PCL005
   (taint before a cache breakpoint) -> PC001, PCL002 -> PC002, PCL003 -> PC003, PCL004
   (dynamic tool mutation) -> PC006. Rules pcdlint does not have (PC004, PC005, PC007,
   PC008) count as misses for it; the "shared rules" row scores only PC001, PC002, PC003 and
   PC006.

Targets (issue 8): precision >= 95% and recall >= 95%, per rule and overall.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from linters.config import LintConfig  # noqa: E402
from linters.runner import lint_source  # noqa: E402

_spec = importlib.util.spec_from_file_location("lint_corpus", ROOT / "tests/lint_corpus/corpus.py")
corpus = importlib.util.module_from_spec(_spec)
sys.modules["lint_corpus"] = corpus
_spec.loader.exec_module(corpus)

PCD_MAP = {
    "PCL001": "PC001",
    "PCL005": "PC001",
    "PCL002": "PC002",
    "PCL003": "PC003",
    "PCL004": "PC006",
}
SHARED = ("PC001", "PC002", "PC003", "PC006")


def pct(num: int, den: int) -> str:
    return f"{100.0 * num / den:6.1f}%" if den else "    n/a"


def score(expected: set, got: set, codes) -> dict:
    rows = {}
    for code in codes:
        e = {x for x in expected if x[-1] == code}
        g = {x for x in got if x[-1] == code}
        rows[code] = (len(e & g), len(g - e), len(e - g))
    return rows


def total(rows: dict, codes) -> tuple[int, int, int]:
    return tuple(sum(rows[c][i] for c in codes) for i in range(3))


def ours(cases) -> tuple[set, set, set, set]:
    exact_e, exact_g, file_e, file_g = set(), set(), set(), set()
    for case in cases:
        name = case.path.name
        for line, code in case.expected:
            exact_e.add((name, line, code))
            file_e.add((name, code))
        for f in lint_source(case.path.read_bytes(), name, LintConfig(root=case.path.parent)):
            exact_g.add((name, case.normalize(f.line), f.code))
            file_g.add((name, f.code))
    return exact_e, exact_g, file_e, file_g


def pcdlint(cases) -> tuple[set | None, str]:
    exe = shutil.which("pcdlint") or str(Path(sys.executable).with_name("pcdlint"))
    if not Path(exe).exists():
        return None, "pcdlint is not installed (`.venv/bin/pip install pcdlint`)"
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    got: set = set()
    unmapped: Counter = Counter()
    errors = 0
    for case in cases:
        res = subprocess.run(
            [exe, "--format", "json", str(case.path)],
            capture_output=True,
            text=True,
            cwd=case.path.parent,
        )
        if res.returncode == 2:
            errors += 1
        try:
            items = json.loads(res.stdout or "[]")
        except ValueError:
            errors += 1
            continue
        for item in items:
            code = PCD_MAP.get(item.get("rule_id"))
            if code is None:
                unmapped[item.get("rule_id")] += 1
                continue
            got.add((case.path.name, code))
    note = version + (f"; {errors} files it could not analyse" if errors else "")
    if unmapped:
        note += f"; unmapped codes: {dict(unmapped)}"
    return got, note


def main() -> int:
    cases = corpus.load_cases()
    positives = sum(1 for c in cases if c.positive)
    marks = sum(len(c.expected) for c in cases)
    from linters.rules import RULES

    codes = [c for c in RULES if c < "PC900"]
    exact_e, exact_g, file_e, file_g = ours(cases)
    print(
        f"corpus: {positives} positive files ({marks} expected findings), "
        f"{len(cases) - positives} negative files"
    )
    print()
    print("promptcache lint, exact (file, line, code)")
    print(f"{'rule':8} {'TP':>4} {'FP':>4} {'FN':>4} {'precision':>10} {'recall':>8}")
    rows = score(exact_e, exact_g, codes)
    for code in codes:
        tp, fp, fn = rows[code]
        print(f"{code:8} {tp:4d} {fp:4d} {fn:4d} {pct(tp, tp + fp):>10} {pct(tp, tp + fn):>8}")
    tp, fp, fn = total(rows, codes)
    print(f"{'overall':8} {tp:4d} {fp:4d} {fn:4d} {pct(tp, tp + fp):>10} {pct(tp, tp + fn):>8}")
    ok = tp + fp and tp / (tp + fp) >= 0.95 and tp / (tp + fn) >= 0.95
    per_rule_ok = all(
        (r[0] + r[1] == 0 or r[0] / (r[0] + r[1]) >= 0.95)
        and (r[0] + r[2] == 0 or r[0] / (r[0] + r[2]) >= 0.95)
        for r in rows.values()
    )
    missed = sorted(exact_e - exact_g)
    extra = sorted(exact_g - exact_e)
    for name, line, code in missed:
        print(f"  missed: {name}:{line} {code}")
    for name, line, code in extra:
        print(f"  false positive: {name}:{line} {code}")

    pcd, note = pcdlint(cases)
    print()
    print(f"side by side, (file, code); pcdlint: {note}")
    print(f"{'rule':8} {'ours P':>8} {'ours R':>8} {'pcdlint P':>10} {'pcdlint R':>10}")
    ours_rows = score(file_e, file_g, codes)
    pcd_rows = score(file_e, pcd, codes) if pcd is not None else None
    for code in codes:
        tp, fp, fn = ours_rows[code]
        line = f"{code:8} {pct(tp, tp + fp):>8} {pct(tp, tp + fn):>8}"
        if pcd_rows is not None:
            ptp, pfp, pfn = pcd_rows[code]
            line += f" {pct(ptp, ptp + pfp):>10} {pct(ptp, ptp + pfn):>10}"
        print(line)
    for label, subset in (("overall", codes), ("shared", SHARED)):
        tp, fp, fn = total(ours_rows, subset)
        line = f"{label:8} {pct(tp, tp + fp):>8} {pct(tp, tp + fn):>8}"
        if pcd_rows is not None:
            ptp, pfp, pfn = total(pcd_rows, subset)
            line += f" {pct(ptp, ptp + pfp):>10} {pct(ptp, ptp + pfn):>10}"
        print(line)
    print()
    print(
        f"targets (precision and recall >= 95%, overall and per rule): "
        f"{'met' if ok and per_rule_ok else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
