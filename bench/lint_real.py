"""``promptcache lint`` on real projects: judged precision, recall on historical fixes, speed.

Usage::

    PYTHONPATH=. .venv/bin/python bench/lint_real.py --fetch     # export sources (once)
    PYTHONPATH=. .venv/bin/python bench/lint_real.py             # the table
    PYTHONPATH=. .venv/bin/python bench/lint_real.py --unjudged build/unjudged.jsonl

The corpus is ``bench/lint_corpus.toml``: projects (repository, commit, ``half`` = tune or
holdout, or aside: the projects issue 28 keeps out of the corpus for an independent check;
or fresh: a blind check, linted once at the end) and historical fixes (the fix commit, its
parent, the lines it changed; ``aside = true``: a kept-aside project's fix; ``fresh = true``:
a fix collected without running the linter). Each group is reported apart. ``--fetch``
exports each commit (for a fix: its parent and the fix) from a local git mirror
(``--mirrors``, default ``/work/.mirror``, laid out ``<owner>+<name>/repo``) into
``build/lint_corpus/`` (ignored by git). Each project is
linted whole with the default settings, as a new user runs ``promptcache lint .`` in it.

Scoring:

- Precision: every warning-or-error finding is looked up in ``bench/lint_labels.jsonl``
  (project, path, line, rule -> TRUE / FALSE / UNSURE and a one-line reason, judged by
  reading the code). Precision = TRUE / (TRUE + FALSE); UNSURE and unjudged findings are
  counted apart, never in the ratio. Per rule and overall, per half.
- Recall: a fix is flagged when linting its parent commit gives a warning-or-error finding
  in one of the fix's files on one of the lines it changed, or a finding elsewhere whose
  hops name one of those lines (``... at pkg/time.py:24, returned by `now_text()` ...``, or
  ``from `now` (set on line 77)`` for a line of the finding's own file: the value is reported
  where it enters the request, its origin named), and that finding
  (same rule, file and message, line numbers aside) is gone when the fix commit itself is
  linted: flagged before the fix, not after it.
- Speed: files per second of the linter over every project (one process, one core), and
  pcdlint (https://pypi.org/project/pcdlint/) over the same folders when it is installed.
  Each is run once (a benchmark, not a loop); wall time.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from linters import lint_paths  # noqa: E402
from linters.config import LintConfig  # noqa: E402

CORPUS = ROOT / "bench" / "lint_corpus.toml"
LABELS = ROOT / "bench" / "lint_labels.jsonl"
BUILD = ROOT / "build" / "lint_corpus"
SEVERE = ("warning", "error")
CPU = [0.0]  # CPU seconds of promptcache lint over the projects (the box is shared)


def load_corpus() -> dict:
    return tomllib.loads(CORPUS.read_text(encoding="utf-8"))


def export(repo: str, commit: str, dest: Path, mirrors: Path, paths: list[str] | None) -> None:
    """``git archive`` of ``commit`` (only ``paths`` when given) into ``dest``."""
    if dest.exists():
        return
    git_dir = mirrors / repo.replace("/", "+") / "repo"
    dest.mkdir(parents=True)
    # Python sources and .gitignore files only: mirrors may lack large binary blobs
    listed = subprocess.run(
        ["git", "--git-dir", str(git_dir), "ls-tree", "-r", "--name-only", commit, "--"]
        + (paths or []),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    keep = [n for n in listed if n.endswith((".py", "/.gitignore")) or n == ".gitignore"]
    cmd = ["git", "--git-dir", str(git_dir), "archive", "--format=tar", commit, "--", *keep]
    tar = subprocess.run(cmd, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=tar, check=True)


def fetch(corpus: dict, mirrors: Path) -> None:
    for p in corpus["project"]:
        export(p["repo"], p["commit"], BUILD / p["name"], mirrors, None)
        print(f"exported {p['name']}")
    for f in corpus.get("fix", []):
        export(f["repo"], f["parent"], BUILD / "fixes" / f["name"], mirrors, f["paths"])
        export(f["repo"], f["fix"], BUILD / "fixed" / f["name"], mirrors, f["paths"])
        print(f"exported fix {f['name']} (parent and fix)")


def lint_dir(folder: Path, paths: list[str] | None = None) -> tuple[list, int, float]:
    """Findings, files and seconds for ``promptcache lint`` run in ``folder``."""
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        config = LintConfig(root=folder)
        t0 = time.perf_counter()
        c0 = time.process_time()
        report = lint_paths(paths or ["."], config)
        dt = time.perf_counter() - t0
        CPU[0] += time.process_time() - c0
    finally:
        os.chdir(cwd)
    return report.findings, report.files, dt


def severity(f) -> str:
    return getattr(f, "severity", "warning")


def load_labels() -> dict:
    labels = {}
    if LABELS.exists():
        for line in LABELS.read_text(encoding="utf-8").splitlines():
            if line.strip():
                d = json.loads(line)
                labels[(d["project"], d["path"], d["line"], d["rule"])] = d
    return labels


def precision_table(rows: list, labels: dict, title: str) -> list[str]:
    """Lines of the per-rule table for ``rows`` = [(project, finding)] at warning+."""
    per: dict[str, Counter] = defaultdict(Counter)
    for project, f in rows:
        lab = labels.get((project, f.path, f.line, f.code))
        verdict = lab["verdict"] if lab else "unjudged"
        for key in (f.code, "all"):
            per[key][verdict] += 1
            per[key]["findings"] += 1
    out = [f"### {title}", "", "| rule | findings | TRUE | FALSE | UNSURE | unjudged | precision |"]
    out.append("|---|---:|---:|---:|---:|---:|---:|")
    for key in sorted(per, key=lambda k: (k == "all", k)):
        c = per[key]
        judged = c["TRUE"] + c["FALSE"]
        prec = f"{100 * c['TRUE'] / judged:.0f}%" if judged else "n/a"
        out.append(
            f"| {key} | {c['findings']} | {c['TRUE']} | {c['FALSE']} | {c['UNSURE']} | "
            f"{c['unjudged']} | {prec} |"
        )
    if not per:
        out.append("| all | 0 | 0 | 0 | 0 | 0 | n/a |")
    return out


def _stable(f) -> tuple[str, str, str]:
    """A finding's identity across commits: rule, file and message without line numbers."""
    return (f.code, f.path, re.sub(r"(:|line |lines? )\d+", r"\1N", f.message))


def _names_changed_line(f, want: set[tuple[str, int]]) -> bool:
    """True when finding ``f`` sits on a changed line or its hops name one: ``path:N`` for a
    line of any file, ``(set on line N)`` / ``line N`` for a line of the finding's own file."""
    if (f.path, f.line) in want or any(f"{p}:{ln}" in f.message for p, ln in want):
        return True
    own = {int(n) for n in re.findall(r"\bline (\d+)", f.message)}
    return any((f.path, ln) in want for ln in own)


def _fix_hits(fx: dict) -> tuple[list, list]:
    """Warning+ findings of the parent that point at the fix's changed lines, and those of
    them still reported (same rule, file and message) when the fix commit is linted."""
    findings, _n, _dt = lint_dir(BUILD / "fixes" / fx["name"], fx["paths"])
    want = {(e["file"], ln) for e in fx["expect"] for ln in e["lines"]}
    # a warning+ finding on a changed line, or one whose hops name a changed line
    # ("... at letta/helpers/datetime_helpers.py:24, returned by ...")
    got = [f for f in findings if severity(f) in SEVERE and _names_changed_line(f, want)]
    if not got:
        return [], []
    after, _n, _dt = lint_dir(BUILD / "fixed" / fx["name"], fx["paths"])
    left = {_stable(f) for f in after if severity(f) in SEVERE}
    return got, [f for f in got if _stable(f) in left]


def _recall_rows(fixes: list[dict]) -> tuple[list[str], int]:
    """Table rows for ``fixes`` and how many of them are flagged (before, gone after)."""
    out, hits = [], 0
    for fx in fixes:
        got, stays = _fix_hits(fx)
        gone = [f for f in got if f not in stays]
        hits += bool(gone)
        first = (gone or got)[0] if got else None
        what = f"{first.code} {first.path}:{first.line}" if first else "-"
        out.append(
            f"| {fx['name']} | {fx['static']} | {'yes' if got else 'no'} | "
            f"{('yes' if gone else 'no') if got else '-'} | {what} |"
        )
    return out, hits


def _fix_group(fx: dict) -> str:
    """``aside`` (a kept-aside project's fix), ``fresh`` (the blind check) or ``corpus``."""
    return "aside" if fx.get("aside") else "fresh" if fx.get("fresh") else "corpus"


def recall(corpus: dict) -> list[str]:
    """The historical-fix tables: flagged = a finding at the parent that the fix removes.
    One table per group (:func:`_fix_group`): corpus, kept aside, blind check."""
    out: list[str] = []
    fixes = corpus.get("fix", [])
    totals = [0, 0]
    groups = (("corpus", "corpus projects"), ("aside", "projects kept aside"))
    for group, title in groups + (("fresh", "blind check, never tuned on"),):
        chosen = [fx for fx in fixes if _fix_group(fx) == group]
        if not chosen:
            continue
        out += [f"### Historical fixes, {title} (parent commit linted, then the fix commit)", ""]
        out += ["| fix | static | flagged before | gone after | finding |", "|---|---|---|---|---|"]
        rows, hits = _recall_rows(chosen)
        static = sum(bool(fx["static"]) for fx in chosen)
        out += rows + [
            "",
            f"flagged {hits} of {len(chosen)} fixes (flagged before the fix and gone after it; "
            f"{static} visible in source)",
            "",
        ]
        totals[0] += hits
        totals[1] += len(chosen)
    out.append(f"all fixes: flagged {totals[0]} of {totals[1]}")
    return out


def pcdlint_time(folders: list[Path]) -> tuple[float, int] | None:
    exe = shutil.which("pcdlint") or str(Path(sys.executable).with_name("pcdlint"))
    if not Path(exe).exists():
        return None
    t0 = time.perf_counter()
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    n = 0
    for folder in folders:
        r = subprocess.run(
            [exe, "--format", "json", "."], cwd=folder, capture_output=True, text=True
        )
        try:
            n += len(json.loads(r.stdout or "[]"))
        except ValueError:
            pass
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    return time.perf_counter() - t0, cpu, n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fetch", action="store_true", help="export the sources from the mirrors")
    ap.add_argument("--mirrors", default="/work/.mirror", type=Path)
    ap.add_argument("--unjudged", type=Path, help="write unjudged warning+ findings (jsonl)")
    ap.add_argument(
        "--half",
        choices=("tune", "holdout", "aside", "fresh", "all"),
        default="all",
        help="which projects: the tune or holdout half of the corpus, the projects the issue "
        "keeps aside, the fresh ones (a blind check, linted once at the end), or all "
        "(default; also runs the fixes)",
    )
    ap.add_argument("--no-pcdlint", action="store_true")
    args = ap.parse_args(argv)
    corpus = load_corpus()
    if args.fetch:
        fetch(corpus, args.mirrors)
        return 0
    labels = load_labels()
    rows: dict[str, list] = {"tune": [], "holdout": [], "aside": [], "fresh": []}
    info: Counter = Counter()
    files = 0
    seconds = 0.0
    folders = []
    unjudged = []
    for p in corpus["project"]:
        if args.half != "all" and p["half"] != args.half:
            continue
        folder = BUILD / p["name"]
        folders.append(folder)
        findings, n, dt = lint_dir(folder)
        files += n
        seconds += dt
        for f in findings:
            if severity(f) in SEVERE:
                rows[p["half"]].append((p["name"], f))
                if (p["name"], f.path, f.line, f.code) not in labels:
                    unjudged.append(
                        {
                            "project": p["name"],
                            "path": f.path,
                            "line": f.line,
                            "rule": f.code,
                            "severity": severity(f),
                            "message": f.message,
                        }
                    )
            else:
                info[f.code] += 1
        print(f"{p['name']:14} {p['half']:8} files {n:5d}  findings {len(findings):4d}  {dt:6.2f}s")
    cpu = CPU[0]  # the projects only (the recall runs below add to CPU)
    lines = [
        f"command: PYTHONPATH=. python bench/lint_real.py   date: {_dt.date.today()}   "
        f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "",
    ]
    for half in ("tune", "holdout"):
        if args.half in (half, "all"):
            lines += precision_table(rows[half], labels, f"{half} half, warning and error") + [""]
    if args.half == "all":
        lines += precision_table(rows["tune"] + rows["holdout"], labels, "both halves") + [""]
    for half, title in (
        ("aside", "projects kept aside (independent check), warning and error"),
        ("fresh", "fresh projects (blind check, linted once at the end), warning and error"),
    ):
        if args.half in (half, "all") and any(p["half"] == half for p in corpus["project"]):
            lines += precision_table(rows[half], labels, title) + [""]
    lines.append(
        f"info findings (not in precision): {sum(info.values())} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(info.items()))})"
    )
    lines.append("")
    if corpus.get("fix") and args.half == "all":
        lines += recall(corpus) + [""]
    lines.append(
        f"speed: promptcache lint {files} files, wall {seconds:.2f} s = "
        f"{files / seconds:,.0f} files/s, CPU {cpu:.2f} s = {files / cpu:,.0f} files/CPU-s"
    )
    if not args.no_pcdlint:
        got = pcdlint_time(folders)
        if got is None:
            lines.append("pcdlint: not installed")
        else:
            pdt, pcpu, pn = got
            lines.append(
                f"speed: pcdlint same folders, wall {pdt:.2f} s = {files / pdt:,.0f} files/s, "
                f"CPU {pcpu:.2f} s ({pn} findings); promptcache lint is {pdt / seconds:.1f}x "
                f"faster by wall time, {pcpu / cpu:.1f}x by CPU time"
            )
    print("\n".join(lines))
    if args.unjudged:
        args.unjudged.write_text("".join(json.dumps(u) + "\n" for u in unjudged))
        print(f"wrote {len(unjudged)} unjudged findings to {args.unjudged}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
