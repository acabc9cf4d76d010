"""PC001: a volatile value (clock, date, UUID, random, request id, pid, hostname) reaches a
cached prefix: the system prompt, tool definitions, a system/developer message, or any
message before the last one."""

from __future__ import annotations

from linters.flow.facts import MESSAGES, PROMPT
from linters.flow.values import VOLAT, VOLATILE, static_chars
from linters.model import Finding, Rule

RULES = (Rule("PC001", "volatile-in-prefix",
              "a volatile value (clock, date, UUID, random, request id, pid, hostname) is "
              "interpolated into a cached prefix"),)


def check(an) -> list[Finding]:
    out = []
    for sink in an.facts.sinks:
        if sink.kind != PROMPT:
            continue
        # a whole prompt string: only what is followed by static text is in the prefix
        segs = an.ev.segments(sink.expr, sink.scope)
        for i, seg in enumerate(segs):
            if seg[0] != VOLAT or id(seg[1]) in an.reported:
                continue
            after = static_chars(segs[i + 1:])
            if after is None or after >= an.config.min_static_chars:
                out.append(an.finding(
                    "PC001", seg[1],
                    f"{seg[2]} comes before {'a file' if after is None else f'{after} characters'} "
                    f"of static text in {sink.label}: the cached prefix changes on every request; "
                    "move it to the end of the prompt"))
    for r in an.reaches:
        h = r.hazard
        if h.kind != VOLATILE or id(h.node) in an.reported:
            continue
        out.append(an.finding(
            "PC001", h.node,
            f"{h.detail} reaches {where(r)}: the cached prefix changes on every request; move "
            "it after the static text, into the last user message or `dynamic=`"))
    return out


def where(reach) -> str:
    """Where a hazard lands, for messages: "the system prompt (passed to `f()` as `x`)"."""
    sink = reach.sink
    label = f"a message before the last in {sink.label}" if sink.kind == MESSAGES else sink.label
    return f"{label} ({reach.via})" if reach.via else label
