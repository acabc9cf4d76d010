"""PC002: ``json.dumps`` without ``sort_keys=True`` feeds a prompt prefix or tool definitions,
so the same data can serialise in a different key order and miss the cache."""

from __future__ import annotations

from linters.flow.values import HAZARD_JSON
from linters.model import Finding, Rule
from linters.rules.context import RuleContext
from linters.rules.volatile import where

RULES = (
    Rule(
        "PC002",
        "unsorted-json-in-prompt",
        "`json.dumps` without `sort_keys=True` feeds a prompt or tool definitions",
        fixable=True,
    ),
)


def check(an: RuleContext) -> list[Finding]:
    """PC002 findings from the hazards that reach a cached prefix."""
    out = []
    for r in an.reaches:
        h = r.hazard
        if h.kind != HAZARD_JSON or id(h.node) in an.reported:
            continue
        out.append(
            an.finding(
                "PC002",
                h.node,
                f"{h.detail} feeds {where(r)}: equal data can serialise in a different key order, "
                "so the prefix differs between requests; pass `sort_keys=True`",
                fix="sort_keys" if h.fixable else None,
            )
        )
    return out
