"""``promptcache lint PATH...``: the command line of the linter.

Exit status: 0 no findings, or only info ones (a date; a Python file that does not parse),
1 findings, 2 usage error (one line on stderr saying what to fix: a missing path, a bad
option or config).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from linters import formats
from linters.config import PROVIDERS, ConfigError, load_config, with_cli
from linters.files import PathNotFound, discover
from linters.fix import fix_source, unified_diff
from linters.rule_docs import page
from linters.rules import RULES
from linters.runner import Report, lint_target, lint_targets
from promptcache import __version__


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``lint`` options to ``parser``."""
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="files or folders to check (default: the current folder)",
    )
    parser.add_argument(
        "--format", choices=formats.FORMATS, default="text", help="output format (default: text)"
    )
    parser.add_argument(
        "--select",
        action="append",
        metavar="CODES",
        help="only these codes or prefixes, comma-separated (replaces the config)",
    )
    parser.add_argument(
        "--ignore",
        action="append",
        metavar="CODES",
        help="skip these codes or prefixes, comma-separated (added to the config)",
    )
    parser.add_argument(
        "--exclude",
        action="append",
        metavar="PATTERN",
        help="gitignore-style pattern of paths to leave out (added to the config)",
    )
    parser.add_argument(
        "--fix", action="store_true", help="apply safe fixes in place (PC002: add sort_keys=True)"
    )
    parser.add_argument(
        "--diff",
        action="store_true",
        help="print the fixes as a unified diff and write nothing (also with --fix, as in "
        "ruff); exit 1 when there would be changes",
    )
    parser.add_argument(
        "--config", metavar="FILE", help="read [tool.promptcache.lint] from this pyproject.toml"
    )
    parser.add_argument("--isolated", action="store_true", help="ignore every config file")
    parser.add_argument(
        "--no-respect-gitignore",
        action="store_true",
        help="also read files that .gitignore ignores",
    )
    parser.add_argument(
        "--include-tests",
        action="store_true",
        help="also lint tests, examples, docs and evaluation folders (skipped by default)",
    )
    parser.add_argument(
        "--force-exclude",
        action="store_true",
        help="leave out named test files and files under tests/examples/docs/... folders too, "
        "as a folder walk does (unless --include-tests): for pre-commit, which passes file names",
    )
    parser.add_argument(
        "--provider",
        choices=PROVIDERS,
        help="provider of .json/.jsonl request payloads (default: from their shape)",
    )
    parser.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=1,
        metavar="N",
        help="worker processes (default: 1, which follows calls between the files; with N > 1 "
        "each file is linted on its own)",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no summary line")
    parser.add_argument("--list-rules", action="store_true", help="print the rules and exit")
    parser.add_argument(
        "--explain", metavar="CODE", help="print the documentation page of a rule and exit"
    )


def _explain(code: str) -> int:
    """Print rule ``code``'s page as installed with the package (exit 0; 2 if unknown)."""
    if code.upper() not in RULES:
        return _usage(f"--explain: unknown rule code {code!r} (known: {', '.join(RULES)})")
    try:
        sys.stdout.write(page(code))
    except KeyError:
        return _usage(f"--explain: the page of {code.upper()} is not installed")
    return 0


def _usage(msg: str) -> int:
    print(f"promptcache lint: error: {msg}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    """Run the linter for parsed ``args``; returns the exit status."""

    if args.list_rules:
        for r in RULES.values():
            fix = " [fix]" if r.fixable else ""
            print(f"{r.code}  {r.name}{fix}: {r.summary}")
        return 0
    if args.jobs < 1:
        return _usage(f"--jobs must be at least 1, got {args.jobs}")
    if args.explain:
        return _explain(args.explain)
    try:
        config = load_config(Path(args.config) if args.config else None, isolated=args.isolated)
        config = with_cli(
            config,
            select=args.select,
            ignore=args.ignore,
            exclude=args.exclude,
            provider=args.provider,
        )
        if args.no_respect_gitignore:
            config = replace(config, respect_gitignore=False)
        if getattr(args, "include_tests", False):
            config = replace(config, include_tests=True)
        skipped: list[str] = []
        targets = discover(
            args.paths or ["."], config, skipped=skipped, force_exclude=args.force_exclude
        )
    except (ConfigError, PathNotFound) as exc:
        return _usage(str(exc))
    for why in skipped:
        print(f"promptcache lint: skipped {why}", file=sys.stderr)

    report = lint_targets(targets, config, jobs=args.jobs)
    out = sys.stdout
    if args.fix or args.diff:
        report = _apply_fixes(report, targets, config, write=not args.diff, out=out)
        if args.diff:  # as ruff: the diff only, exit 1 when there would be changes
            if not args.quiet:
                print(formats.summary(report.findings, report.files), file=sys.stderr)
            return 1 if report.fixed else 0
    try:
        out.write(formats.render(args.format, report.findings, __version__, report.files))
        if args.format == "text" and not args.quiet:
            out.write(formats.summary(report.findings, report.files, report.fixed) + "\n")
        out.flush()
    except BrokenPipeError:  # e.g. piped into `head`: the reader is gone, the status stands
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    # info findings (a value that changes once a day) are shown but do not fail the run
    return 1 if any(f.severity != "info" for f in report.findings) else 0


def _apply_fixes(report: Report, targets: Any, config: Any, *, write: bool, out: Any) -> Report:
    """Apply (``write``) or print as a diff the fixable findings; re-lint fixed files so the
    report describes the files as they are now."""

    by_path: dict[str, list] = {}
    for f in report.findings:
        if f.fix:
            by_path.setdefault(f.path, []).append(f)
    if not by_path:
        return report
    target_of = {t.display: t for t in targets}
    fixed = 0
    refreshed: dict[str, list] = {}
    for path, found in sorted(by_path.items()):
        target = target_of.get(path)
        if target is None:
            continue
        before = target.path.read_bytes()
        after, n = fix_source(before, found)
        if not n:
            continue
        if write:
            target.path.write_bytes(after)
            fixed += n
            refreshed[path] = lint_target(target, config)
        else:
            out.write(unified_diff(path, before, after))
            fixed += n
    if not write:
        return Report(report.findings, report.files, fixed)
    findings = [f for f in report.findings if f.path not in refreshed]
    for found in refreshed.values():
        findings.extend(found)
    findings.sort(key=lambda f: f.sort_key())
    return Report(findings, report.files, fixed)


def main(argv: list[str] | None = None) -> int:
    """``python -m linters``: the same command without the ``promptcache`` dispatcher."""

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            self.exit(2, f"{self.prog}: error: {message}\n")

    parser = _Parser(
        prog="promptcache lint",
        description="check Python code for patterns that bust prompt caches",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
