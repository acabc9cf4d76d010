"""Output formats: ``text``, ``json``, ``sarif`` (2.1.0) and ``github`` (workflow commands).

``text`` prints ``path:line:col: CODE message`` per finding (``CODE [info]`` for info
findings), then a one-line summary; ``json`` prints ``{"findings": [...], "summary": {...}}``;
the other formats print only their document so that stdout stays machine-readable.

Rule links resolve for a pip user: JSON's ``doc`` is the command that prints the installed
rule page (``promptcache lint --explain PC001``); SARIF carries each page itself as the
rule's ``help`` (markdown). The project publishes no documentation site URL (mkdocs.yml has
no ``site_url``), so no web link is given.
"""

from __future__ import annotations

import json
from collections import Counter

from linters.model import SEVERITIES, Finding
from linters.rule_docs import page
from linters.rules import RULES

FORMATS = ("text", "json", "sarif", "github")
TOOL_NAME = "promptcache-lint"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
_GH_COMMAND = {"error": "error", "warning": "warning", "info": "notice"}


def summary(findings: list[Finding], files: int, fixed: int = 0) -> str:
    """One line: counts of findings, fixable ones, files, and fixes applied."""
    n = len(findings)
    fixed_part = f"fixed {fixed} finding{'s' if fixed != 1 else ''}; " if fixed else ""
    checked = f"{files} file{'s' if files != 1 else ''} checked"
    unparsed = not_parsed(findings)
    if unparsed:
        does = "does" if unparsed == 1 else "do"
        checked = (
            f"{files} file{'s' if files != 1 else ''} read: {files - unparsed} checked, "
            f"{unparsed} {does} not parse (PC900, not checked)"
        )
    if not n:
        return f"{fixed_part}no findings, {checked}."
    fixable = sum(1 for f in findings if f.fix)
    in_files = len({f.path for f in findings})
    fix_part = f" ({fixable} fixable with --fix)" if fixable else ""
    return (
        f"{fixed_part}found {n} finding{'s' if n != 1 else ''}{fix_part} in {in_files} "
        f"file{'s' if in_files != 1 else ''}, {checked}."
    )


def not_parsed(findings: list[Finding]) -> int:
    """How many Python files were not checked because they do not parse (PC900, info)."""
    return len({f.path for f in findings if f.code == "PC900" and f.severity == "info"})


def text(findings: list[Finding]) -> str:
    """``path:line:col: CODE message`` lines (``CODE [info] message`` for info)."""
    return "".join(
        f"{f.path}:{f.line}:{f.col}: {f.code}{' [info]' if f.severity == 'info' else ''} "
        f"{f.message}\n"
        for f in findings
    )


def explain_command(code: str) -> str:
    """The command that prints a rule's installed page."""
    return f"promptcache lint --explain {code}"


def summary_dict(findings: list[Finding], files: int) -> dict:
    """The summary the text output prints, as data: files checked (of which
    ``files_not_parsed`` do not parse: read, not checked), findings by rule and by severity,
    fixable findings."""
    return {
        "files_checked": files,
        "files_not_parsed": not_parsed(findings),
        "findings": len(findings),
        "fixable": sum(1 for f in findings if f.fix),
        "by_rule": dict(sorted(Counter(f.code for f in findings).items())),
        "by_severity": {
            s: n for s in SEVERITIES if (n := sum(1 for f in findings if f.severity == s))
        },
    }


def as_json(findings: list[Finding], files: int = 0) -> str:
    """``{"findings": [...], "summary": {...}}``: each finding's code, name, severity,
    message, path, 1-based line/column range, fixable, doc (the command printing its rule
    page); the summary as :func:`summary_dict`."""
    out = []
    for f in findings:
        rule = RULES.get(f.code)
        out.append(
            {
                "code": f.code,
                "name": rule.name if rule else None,
                "severity": f.severity,
                "message": f.message,
                "path": f.path,
                "line": f.line,
                "column": f.col,
                "end_line": f.end_line,
                "end_column": f.end_col,
                "fixable": bool(f.fix),
                "doc": explain_command(f.code) if rule else None,
            }
        )
    doc = {"findings": out, "summary": summary_dict(findings, files)}
    return json.dumps(doc, indent=2) + "\n"


def _help(code: str) -> dict:
    try:
        text = page(code)
    except KeyError:
        return {"text": explain_command(code)}
    return {"text": f"Run `{explain_command(code)}`.", "markdown": text}


def sarif(findings: list[Finding], version: str) -> str:
    """A SARIF 2.1.0 log with one run; every known rule is listed in the driver."""
    rules = [
        {
            "id": r.code,
            "name": r.name,
            "shortDescription": {"text": r.summary},
            "help": _help(r.code),
            "defaultConfiguration": {"level": _SARIF_LEVEL[r.severity]},
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
                "level": _SARIF_LEVEL[f.severity],
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
        cmd = _GH_COMMAND[f.severity]
        lines.append(f"::{cmd} {props}::{_gh_escape_data(f'{f.code} {f.message}')}\n")
    return "".join(lines)


def render(fmt: str, findings: list[Finding], version: str, files: int = 0) -> str:
    """The document for ``fmt`` (text: the finding lines only; the caller adds the summary)."""
    if fmt == "json":
        return as_json(findings, files)
    if fmt == "sarif":
        return sarif(findings, version)
    if fmt == "github":
        return github(findings)
    return text(findings)
