"""PC009: a ``cache_control`` breakpoint that its own function deletes right after setting it.

The "remove the previous markers" loop runs after the new marker is set and walks the
collection the new block was put into, so the request never carries the breakpoint and
nothing after the system prompt is read from cache. The facts come from
:mod:`linters.flow.breakpoints`.
"""

from __future__ import annotations

from linters.model import Finding, Rule
from linters.rules.context import RuleContext

RULES = (
    Rule(
        "PC009",
        "breakpoint-cleared-after-set",
        "a `cache_control` breakpoint deleted by a clean-up loop that runs after it is set",
    ),
)


def check(an: RuleContext) -> list[Finding]:
    """PC009 findings: one per breakpoint set and then cleared in the same function."""
    out = []
    for c in an.facts.cleared_breakpoints:
        if id(c.set_node) in an.reported:
            continue
        out.append(
            an.finding(
                "PC009",
                c.set_node,
                f"this breakpoint is deleted by the loop over `{c.collection}` at line "
                f"{c.clear_node.lineno} that runs after it in `{c.function}()`: the request "
                "carries no breakpoint here and every turn re-processes the history at full "
                "price; clear the old markers first, then set the new one",
            )
        )
    return out
