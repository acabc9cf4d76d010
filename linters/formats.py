"""Output formats: ``text``, ``json``, ``sarif`` (2.1.0) and ``github`` (workflow commands).

``text`` prints ``path:line:col: CODE message`` per finding, then a one-line summary;
the other formats print only their document so that stdout stays machine-readable.
"""

from __future__ import annotations

import json

from linters.model import Finding
from linters.rules import RULES

FORMATS = ("text", "json", "sarif", "github")
TOOL_NAME = "promptcache-lint"
INFO_URI = "https://github.com/promptcache/promptcache/tree/main/docs/rules"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def summary(findings: list[Finding], files: int, fixed: int = 0) -> str:
    """One line: counts of findings, fixable ones, files, and fixes applied."""
    n = len(findings)
    fixed_part = f"fixed {fixed} finding{'s' if fixed != 1 else ''}; " if fixed else ""
    checked = f"{files} file{'s' if files != 1 else ''} checked"
    if not n:
        return f"{fixed_part}no findings, {checked}."
    fixable = sum(1 for f in findings if f.fix)
    in_files = len({f.path for f in findings})
    fix_part = f" ({fixable} fixable with --fix)" if fixable else ""
    return (
        f"{fixed_part}found {n} finding{'s' if n != 1 else ''}{fix_part} in {in_files} "
        f"file{'s' if in_files != 1 else ''}, {checked}."
    )


def text(findings: list[Finding]) -> str:
    """``path:line:col: CODE message`` lines."""
    return "".join(f"{f.path}:{f.line}:{f.col}: {f.code} {f.message}\n" for f in findings)


def as_json(findings: list[Finding]) -> str:
    """A JSON array: code, name, message, path, 1-based line/column range, fixable, doc."""
    out = []
    for f in findings:
        rule = RULES.get(f.code)
        out.append(
            {
                "code": f.code,
                "name": rule.name if rule else None,
                "message": f.message,
                "path": f.path,
                "line": f.line,
                "column": f.col,
                "end_line": f.end_line,
                "end_column": f.end_col,
                "fixable": bool(f.fix),
                "doc": rule.doc if rule else None,
            }
        )
    return json.dumps(out, indent=2) + "\n"


def sarif(findings: list[Finding], version: str) -> str:
    """A SARIF 2.1.0 log with one run; every known rule is listed in the driver."""
    rules = [
        {
            "id": r.code,
            "name": r.name,
            "shortDescription": {"text": r.summary},
            "helpUri": f"{INFO_URI}/{r.code}.md",
            "defaultConfiguration": {"level": "error"},
        }
        for r in RULES.values()
    ]
    index = {r.code: i for i, r in enumerate(RULES.values())}
    results = []
    for f in findings:
        results.append(
            {
                "ruleId": f.code,
                "ruleIndex": index.get(f.code, 0),
                "level": "error",
                "message": {"text": f.message},
                "locations": [
                    {
                        "physicalLocation": {
                            "artifactLocation": {"uri": f.path, "uriBaseId": "%SRCROOT%"},
                            "region": {
                                "startLine": f.line,
                                "startColumn": f.col,
                                "endLine": f.end_line,
                                "endColumn": max(f.end_col, 1),
                            },
                        },
                    }
                ],
            }
        )
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": TOOL_NAME,
                        "version": version,
                        "informationUri": INFO_URI,
                        "rules": rules,
                    }
                },
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }
    return json.dumps(log, indent=2) + "\n"


def _gh_escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_escape_prop(s: str) -> str:
    return _gh_escape_data(s).replace(":", "%3A").replace(",", "%2C")


def github(findings: list[Finding]) -> str:
    """GitHub Actions annotations: ``::error file=...,line=...::message``."""
    lines = []
    for f in findings:
        props = (
            f"file={_gh_escape_prop(f.path)},line={f.line},col={f.col},"
            f"endLine={f.end_line},endColumn={f.end_col},title={_gh_escape_prop(f.code)}"
        )
        lines.append(f"::error {props}::{_gh_escape_data(f'{f.code} {f.message}')}\n")
    return "".join(lines)


def render(fmt: str, findings: list[Finding], version: str) -> str:
    """The document for ``fmt`` (text: the finding lines only; the caller adds the summary)."""
    if fmt == "json":
        return as_json(findings)
    if fmt == "sarif":
        return sarif(findings, version)
    if fmt == "github":
        return github(findings)
    return text(findings)
