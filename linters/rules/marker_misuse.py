"""PC005's marker checks: cache markers that a known request ignores or rejects.

The facts come from :mod:`linters.flow.markers` (which also cites the sources of each
rule); this module words the findings. A marker the client ignores costs a breakpoint (the
prefix is re-processed at full price on every request: a warning); one the API rejects
fails the request (an error).
"""

from __future__ import annotations

from linters.flow.markers import (
    EMPTY_TEXT,
    MISSPELT,
    RAW_CACHE_POINT,
    THINKING,
    MarkerIssue,
    marker_issues,
)
from linters.model import Finding
from linters.rules.context import RuleContext


def _where(issue: MarkerIssue) -> str:
    return f"`{issue.req.name}` (line {issue.req.node.lineno})"


def _message(issue: MarkerIssue) -> tuple[str, str]:
    """(severity, text) of one issue."""
    key, where = issue.key, _where(issue)
    if issue.kind == MISSPELT:
        return "warning", (
            f"`{key}` is not a cache marker: this dict reaches {where}, and litellm and the "
            "Anthropic API read only `cache_control`, so the request carries no cache "
            "breakpoint and pays full input price for the whole prefix; spell it `cache_control`"
        )
    if issue.kind == RAW_CACHE_POINT:
        if issue.req.kind == "litellm":
            return "warning", (
                f"a raw `cachePoint` in a message of {where}: litellm reads only "
                "`cache_control` (it makes Bedrock's cachePoint from it) and drops this key, "
                "so the request carries no cache breakpoint; use "
                '`"cache_control": {"type": "ephemeral"}`'
            )
        return "error", (
            f"`cachePoint` (a Bedrock Converse field) in a request of {where}: the "
            "Messages API has no such field and rejects the request; use `cache_control`"
        )
    if issue.kind == EMPTY_TEXT:
        return "error", (
            f"`cache_control` on a text block whose text can be empty, sent by {where}: "
            f'{issue.detail}. The API rejects the request (400 "cache_control cannot be '
            'set for empty text blocks"); mark the block only when the text is non-empty'
        )
    assert issue.kind == THINKING
    return "error", (
        f"`cache_control` on a block that can be a thinking block, sent by {where}: "
        f"{issue.detail}. The API rejects a `thinking`/`redacted_thinking` block with a "
        'marker (400 "...thinking.cache_control: Extra inputs are not permitted"); mark '
        "the first block whose type is not thinking"
    )


def findings(an: RuleContext) -> list[Finding]:
    """PC005 findings for the module's markers that a known request ignores or rejects. Empty
    when none. Never raises on a valid syntax tree."""
    out = []
    for issue in marker_issues(an.ev, an.source):
        if id(issue.node) in an.reported:
            continue
        severity, text = _message(issue)
        out.append(an.finding("PC005", issue.node, text, severity=severity))
    return out
