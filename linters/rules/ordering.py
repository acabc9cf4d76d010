"""Iteration order that is not the same on every run, reaching a prompt prefix.

PC003: text or tools built by iterating a set (string order changes with PYTHONHASHSEED,
i.e. between processes). PC006: tool lists (or prefix text) built from a dict view whose
insertion order follows the request or run-time registration.
"""

from __future__ import annotations

from typing import Any

from linters.flow.values import HAZARD_SET, HAZARD_VIEW
from linters.model import Finding, Rule
from linters.rules.context import RuleContext
from linters.rules.volatile import where

RULES = (
    Rule(
        "PC003",
        "set-order-in-prompt",
        "text or tools built by iterating an unordered collection (a set, `set(...)`)",
    ),
    Rule(
        "PC006",
        "input-ordered-tools",
        "tool definitions built from a dict view whose insertion order depends on input",
    ),
)


def _with_origin(h: Any, f: Finding) -> Finding:
    """``f`` marked with the hazard's origin (one finding per root cause across files)."""
    if h.origin is not None:
        f.origin = id(h.origin)
    return f


def check(an: RuleContext) -> list[Finding]:
    """PC003 and PC006 findings from the hazards that reach a cached prefix."""
    out = []
    for r in an.reaches:
        h = r.hazard
        if id(h.node) in an.reported:
            continue
        if h.kind == HAZARD_SET:
            out.append(
                _with_origin(
                    h,
                    an.finding(
                        "PC003",
                        h.node,
                        f"{h.detail}, building {where(r)}: set order differs between processes "
                        "(PYTHONHASHSEED), so the prefix does too; iterate `sorted(...)` instead",
                    ),
                )
            )
        elif h.kind == HAZARD_VIEW:
            out.append(
                an.finding(
                    "PC006",
                    h.node,
                    f"{where(r)} built from a dict view: {h.detail}; sort it by a stable "
                    "key (e.g. `sorted(..., key=lambda t: t['name'])`)",
                )
            )
    return out
