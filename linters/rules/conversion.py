"""PC015: a message converter rebuilds messages without their message-level ``cache_control``.

A function loops over a message list and builds a new dict (``role`` and ``content``) for
each message; on one branch it copies neither the message's ``cache_control`` key nor the
whole message (``**message``), while the project puts that key on messages of that role. The
breakpoint is dropped from the converted list, so the request sent from it does not cache the
prefix up to that message. Facts from :mod:`linters.flow.conversions`.
"""

from __future__ import annotations

from linters.flow.conversions import DroppingBranch, MessageMark, dropping_branches, message_marks
from linters.model import Finding, Rule
from linters.rules.context import RuleContext

RULES = (
    Rule(
        "PC015",
        "breakpoint-dropped-by-conversion",
        "a converter rebuilds each message from its role and content: on a branch for a role "
        "the project marks at message level it drops the message's `cache_control`",
    ),
)


def check(an: RuleContext) -> list[Finding]:
    """PC015 findings: one per dict display that rebuilds a marked message without the key. Empty
    when none. Never raises on a valid syntax tree."""
    if b"role" not in an.source or b"content" not in an.source:
        return []
    marks = message_marks(an.ev)  # once per project
    if not marks and b"cache_control" not in an.source:
        return []  # no write of the key to cite, and no read of it in this module
    branches = dropping_branches(an.facts.module.node)
    if not branches:
        return []
    here = getattr(an.ev, "path", "")
    out = []
    for b in branches:
        if id(b.node) in an.reported:
            continue
        why = _source(b, [m for m in marks if not (m.path == here and m.func == b.func)])
        if why is None:
            continue
        arm = f"the `{b.role}` branch" if b.role else "this branch"
        out.append(
            an.finding(
                "PC015",
                b.node,
                f"`{b.func}()` rebuilds each `{b.loop_var}` as a new message dict; {arm} "
                f"copies its role and content but not its message-level `cache_control`, "
                f"which {why}: the breakpoint is dropped from the list `{b.returned}` the "
                f"function returns, so the request sent from it does not cache up to that "
                f"message; copy it (`if 'cache_control' in {b.loop_var}: ...`) or spread "
                f"`**{b.loop_var}`",
            )
        )
    return out


def _source(b: DroppingBranch, marks: list[MessageMark]) -> str | None:
    """Why the messages of ``b``'s branch carry the key (a clause), or None if not known:
    a write of the key for the branch's role (or for any role), else, when the project writes
    the key nowhere, the loop's own read of it on another branch."""
    if b.role is not None:
        hit = [m for m in marks if m.roles is None or b.role in m.roles]
    else:
        hit = [m for m in marks if m.roles is None]
    if hit:
        m = hit[0]
        roles = f"on `{b.role}` messages" if m.roles else "on messages"
        return f"`{m.func}()` sets {roles} ({m.path}:{m.line})"
    if b.reads_key and b.role is not None and not marks:
        # no write of the key was found: the converter's own read is the evidence (a
        # project whose writes are resolved to other roles says this role never has it)
        return f"the loop reads from `{b.loop_var}` on another branch"
    return None
