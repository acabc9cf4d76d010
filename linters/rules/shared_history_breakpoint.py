"""PC010: a breakpoint written in place into the caller's message dicts at a moving position.

The function copies the caller's list but marks one of the dicts it shares with it, at an
index that moves as the history grows; old markers are never cleared, so they pile up in
the caller's history until a request carries more breakpoints than the API accepts
(:data:`promptcache.limits.ANTHROPIC_MAX_BREAKPOINTS`). Facts from
:mod:`linters.flow.shared_marks`.
"""

from __future__ import annotations

from linters.model import Finding, Rule
from linters.rules.context import RuleContext
from promptcache.limits import ANTHROPIC_MAX_BREAKPOINTS

RULES = (
    Rule(
        "PC010",
        "breakpoint-in-shared-history",
        "a `cache_control` breakpoint written in place into the caller's message dicts at a "
        "position that moves each turn, old markers never cleared",
    ),
)


def check(an: RuleContext) -> list[Finding]:
    """PC010 findings: one per place a moving item of the shared history is marked."""
    out = []
    for m in an.facts.shared_marks:
        if id(m.node) in an.reported:
            continue
        out.append(
            an.finding(
                "PC010",
                m.node,
                f"`{m.item}` gets a breakpoint in place (`{m.marker}()`, line {m.mark_line}), "
                f"but `{m.holder}` holds the caller's message dicts (`{m.param}` copied into it "
                f"at line {m.holder_line} in `{m.builder}()`): the marker stays in the caller's "
                "history, each turn adds one at a new position and none is cleared, so after "
                f"{ANTHROPIC_MAX_BREAKPOINTS} turns the request carries more than "
                f"{ANTHROPIC_MAX_BREAKPOINTS} breakpoints and the API rejects it; mark a copy "
                "(`copy.deepcopy`) or clear the old markers first",
            )
        )
    return out
