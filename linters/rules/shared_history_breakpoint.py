"""PC010: a breakpoint written in place into shared message dicts at a moving position.

The function copies a list that outlives the call (the caller's, or a history the instance
keeps in ``self``) but marks one of the dicts it shares with it, at an index that moves as
the history grows; old markers are never cleared nor counted, so they pile up in that
history until a request carries more breakpoints than the API accepts
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
        "a `cache_control` breakpoint written in place into message dicts shared with a "
        "history that outlives the call, at a position that moves each turn, old markers "
        "never cleared",
    ),
)


def check(an: RuleContext) -> list[Finding]:
    """PC010 findings: one per place a moving item of the shared history is marked. Empty
    when none. Never raises on a valid syntax tree."""
    out = []
    for m in an.facts.shared_marks:
        if id(m.node) in an.reported:
            continue
        if m.param.startswith("self."):
            whose = f"the message dicts of `{m.param}`, a history the instance keeps across calls"
            where = "that history"
        else:
            whose = "the caller's message dicts"
            where = "the caller's history"
        checked = (
            f"; the check on line {m.check_line} looks at the marked message only and "
            "counts nothing"
            if m.check_line is not None
            else ""
        )
        out.append(
            an.finding(
                "PC010",
                m.node,
                f"`{m.item}` gets a breakpoint in place (`{m.marker}()`, line {m.mark_line}), "
                f"but `{m.holder}` holds {whose} (`{m.param}` copied into it at line "
                f"{m.holder_line} in `{m.builder}()`): the marker stays in {where}, each turn "
                "adds one at a new position and none is cleared, so after "
                f"{ANTHROPIC_MAX_BREAKPOINTS} turns the request carries more than "
                f"{ANTHROPIC_MAX_BREAKPOINTS} breakpoints and the API rejects it{checked}; "
                "mark a copy (`copy.deepcopy`), clear the old markers, or count them against "
                "the budget first",
            )
        )
    return out
