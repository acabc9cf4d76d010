"""PC013: rolling breakpoints put only on user-role messages in a project whose agent turns
are tool-role messages.

In the OpenAI / litellm message format an agent step adds an assistant message and a
``{"role": "tool"}`` message, never a user message, so a loop that tags the newest N
``role == "user"`` messages keeps its breakpoints on the first messages of the
conversation: every step writes the growing tool-call history to the cache and no step
reads it. Facts from :mod:`linters.flow.role_breakpoints`.
"""

from __future__ import annotations

from linters.flow.role_breakpoints import role_sites, user_only_breakpoints
from linters.model import Finding, Rule
from linters.rules.context import RuleContext

RULES = (
    Rule(
        "PC013",
        "rolling-breakpoint-skips-tool-turns",
        "rolling `cache_control` breakpoints put only on user-role messages while the "
        'project\'s agent turns are `"role": "tool"` messages',
    ),
)


def _place(site: tuple[str, int]) -> str:
    return f"{site[0]}:{site[1]}" if site[0] else f"line {site[1]}"


def check(an: RuleContext) -> list[Finding]:
    """PC013 findings: one per role filter of a newest-first breakpoint loop. Empty
    when none. Never raises on a valid syntax tree."""
    if not an.facts.has_cache_control:
        return []
    found = user_only_breakpoints(an.ev)
    if not found:
        return []
    sites = role_sites(an.ev)
    if sites.tool_message is None or sites.tool_result is not None:
        return []
    out = []
    for b in found:
        if id(b.node) in an.reported:
            continue
        roles = ", ".join(f'"{r}"' for r in b.roles)
        out.append(
            an.finding(
                "PC013",
                b.node,
                f"the rolling `cache_control` breakpoints of `{b.function}()` (set at line "
                f"{b.mark_line} in `{b.marker}()`, walking `{b.collection}` newest first) go "
                f"only on messages with role {roles}, but this project builds "
                f'`"role": "tool"` messages ({_place(sites.tool_message)}): an agent step adds '
                "an assistant and a tool message and no user message, so the breakpoints stay "
                "on the old user messages and the growing tool-call history is written to the "
                "cache on every step and never read; tag tool-role messages too "
                '(`role in ("user", "tool")`)',
            )
        )
    return out
