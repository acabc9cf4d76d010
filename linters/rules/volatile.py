"""PC001: a volatile value (clock, date, UUID, random, request id, pid, hostname) reaches a
cached prefix: the system prompt, tool definitions, a system/developer message, or any
message before the last one."""

from __future__ import annotations

import ast
import string
from typing import Any

from linters.flow.facts import MESSAGES, PROMPT, ROLE
from linters.flow.reach import last_cached
from linters.flow.tables import (
    RATE_CONVERSATION,
    RATE_DAY,
    RATE_HOUR,
    RATE_ORDER,
    RATE_REQUEST,
    RATE_WRITE,
)
from linters.flow.values import (
    HAZARD_VOLATILE,
    SEG_STATIC,
    SEG_UNKNOWN,
    SEG_VOLATILE,
    static_chars,
)
from linters.model import Finding, Rule
from linters.rules.context import RuleContext
from linters.rules.layout import CHARS_PER_TOKEN, MIN_CACHEABLE_TOKENS

RULES = (
    Rule(
        "PC001",
        "volatile-in-prefix",
        "a volatile value (clock, date, UUID, random, request id, pid, hostname) is "
        "interpolated into a cached prefix",
    ),
)


def _system_placeholders(an: RuleContext) -> set[str]:
    """Variables of system-message templates (``("system", "Today is {date}")``,
    ``SystemMessagePromptTemplate.from_template(...)``) whose text is a literal."""
    names: set[str] = set()
    for sink in an.facts.sinks:
        if sink.kind != ROLE:
            continue
        expr = sink.expr
        if type(expr) is ast.Tuple:
            template = expr.elts[1]
        elif (
            type(expr) is ast.Call
            and type(expr.func) is ast.Attribute
            and expr.func.attr == "from_template"
            and expr.args
        ):
            template = expr.args[0]
        else:
            continue
        text = an.ev.literal_str(template, sink.scope)
        if not text:
            continue
        try:
            names.update(
                f.split(".", 1)[0].split("[", 1)[0]
                for _, f, _, _ in string.Formatter().parse(text)
                if f
            )
        except ValueError:
            continue
    return names


def _template_fills(an: RuleContext) -> list[Finding]:
    """``prompt.partial(date=datetime.now())`` / ``chain.invoke({"date": ...})`` filling a
    variable of a system-message template with a volatile value."""
    names = _system_placeholders(an) if an.facts.template_fills else set()
    out: list[Finding] = []
    if not names:
        return out
    for call, scope in an.facts.template_fills:
        pairs = [(kw.arg, kw.value) for kw in call.keywords if kw.arg in names]
        if call.args and type(call.args[0]) is ast.Dict:
            d = call.args[0]
            pairs += [
                (k.value, v)
                for k, v in zip(d.keys, d.values)
                if type(k) is ast.Constant and k.value in names
            ]
        for key, value in pairs:
            for h in an.ev.hazards(value, scope):
                if h.kind != HAZARD_VOLATILE or id(h.node) in an.reported:
                    continue
                out.append(
                    an.finding(
                        "PC001",
                        h.node,
                        f"{h.detail} fills `{{{key}}}` of a system-message template: the cached "
                        "prefix changes on every request; move the variable to the human message",
                    )
                )
    return out


def check(an: RuleContext) -> list[Finding]:
    """PC001 findings: template variables, whole prompt strings, and volatile hazards that
    reach a cached prefix."""
    out = _template_fills(an)
    for sink in an.facts.sinks:
        if sink.kind != PROMPT:
            continue
        # a whole prompt string: only what is followed by static text is in the prefix
        segs = an.ev.segments(sink.expr, sink.scope)
        for i, seg in enumerate(segs):
            if seg[0] != SEG_VOLATILE or id(seg[1]) in an.reported:
                continue
            after = static_chars(segs[i + 1 :])
            if after is None or after >= an.config.min_static_chars:
                out.append(
                    an.finding(
                        "PC001",
                        seg[1],
                        f"{seg[2]} comes before {'a file' if after is None else f'{after} characters'} "
                        f"of static text in {sink.label}: the cached prefix changes on every request; "
                        "move it to the end of the prompt",
                    )
                )
    out.extend(_reached(an))
    return out


_RATE_TEXT = {
    RATE_REQUEST: (
        "warning",
        "the cached prefix changes on every request; move it after the static text, into "
        "the last user message",
    ),
    RATE_WRITE: (
        "warning",
        "the conversation itself rewrites it (a tool the model calls writes the store), so "
        "every turn after a write writes the cached prefix anew from here; move it after the "
        "static text, into the last user message",
    ),
    RATE_HOUR: (
        "warning",
        "it changes every hour: the cached prefix is written anew at least 24 times a day; "
        "move it into the last user message",
    ),
    RATE_CONVERSATION: (
        "info",
        "it is evaluated once per conversation (pydantic-ai replays a system prompt that is not "
        "`dynamic=True` from the message history): one cache write per conversation; move it "
        "into the user message if that write matters",
    ),
    RATE_DAY: (
        "info",
        "it changes once a day: one cache write per day; move it into the last user message "
        "if that write matters",
    ),
}


def _reached(an: RuleContext) -> list[Finding]:
    """One PC001 per root cause (the call that makes the volatile value), at its first
    site in the source; the other sites it reaches are listed in the message. Values that
    change once per process (host, user, pid, platform) are not reported."""
    groups: dict[int, list[Any]] = {}
    for r in an.reaches:
        h = r.hazard
        if h.kind != HAZARD_VOLATILE or h.rate not in _RATE_TEXT:
            continue
        groups.setdefault(id(h.origin if h.origin is not None else h.node), []).append(r)
    out: list[Finding] = []
    mine: dict[int, Finding] = {}  # findings made here, by node: two causes, one use
    for reaches in groups.values():
        reaches.sort(key=lambda r: (getattr(r.hazard.node, "lineno", 0), r.hazard.node.col_offset))
    # the fastest rate first: it leads a finding that two root causes share
    for reaches in sorted(groups.values(), key=lambda rs: RATE_ORDER.index(rs[0].hazard.rate)):
        first = reaches[0]
        h = first.hazard
        if id(h.node) in an.reported and id(h.node) not in mine:
            continue
        severity, text = _RATE_TEXT[h.rate]
        if h.partial:
            severity = "info"
            text = (
                "on one code path only (another path gives the same name a stable or "
                "slower-changing value): " + text
            )
        others = sorted({r.hazard.node.lineno for r in reaches[1:]} - {h.node.lineno})
        also = (
            f" (also reaches a prefix on line{'s' if len(others) > 1 else ''} "
            + ", ".join(map(str, others))
            + ")"
            if others
            else ""
        )
        for r in reaches[1:]:
            an.reported.add(id(r.hazard.node))
        # once per conversation: the conversation after it is new anyway
        cost, stake = _stakes(an, first) if h.rate != RATE_CONVERSATION else (None, "")
        if cost == "info":
            severity = "info"
        message = f"{h.detail} reaches {where(first)}{also}: {text}{stake}"
        same = mine.get(id(h.node))
        if same is not None:  # another root cause reaching the same use: one finding
            same.message += f"; also {message}"
            if severity == "warning":
                same.severity = "warning"
            continue
        f = mine[id(h.node)] = an.finding("PC001", h.node, message, severity=severity)
        f.origin = id(h.origin) if h.origin is not None else None
        out.append(f)
    return out


def _stakes(an: RuleContext, reach: Any) -> tuple[str | None, str]:
    """What the changing value costs, when the sink's text is known: ``(severity, text)``.

    Only the text after the value, to the end of the cached prefix, is written anew: a
    prefix cache still serves the text before it (issue 28: a clock near the end of a long
    system message was counted as the whole message). The estimate is the static text after
    the value in the sink (4 characters a token, :data:`CHARS_PER_TOKEN`). The severity is
    "info" when the loss is known and small: nothing cached follows the sink in its request
    (:func:`last_cached`), the text before the value is static and at least the 1,024-token
    minimum a cache needs (:data:`MIN_CACHEABLE_TOKENS`, as PC004/PC007: it is cached
    either way), and the static text after it is below that minimum. Otherwise None (the
    rate decides); a history after the sink is written anew too."""
    sink = reach.sink
    if sink.kind == MESSAGES or not any(s is sink for s in an.facts.sinks):
        return None, ""  # a message list, or a sink of another module (its text is read there)
    segs = an.ev.text_segments(sink.expr, sink.scope)
    at = _position(segs, reach.hazard.node)
    if at is None:
        return None, ""  # where the value sits in the text is not known
    after = static_chars(segs[at + 1 :])
    if after is None:
        return None, f" (a file's contents after it in {sink.label} are written anew with it)"
    unknown_after = any(seg[0] != SEG_STATIC for seg in segs[at + 1 :])
    last = last_cached(an.ev, sink)
    tokens = after // CHARS_PER_TOKEN
    before = static_chars(segs[:at])
    # the text before the value is a cacheable prefix on its own (static, at the minimum)
    kept = all(seg[0] == SEG_STATIC for seg in segs[:at]) and (
        before is None or before // CHARS_PER_TOKEN >= MIN_CACHEABLE_TOKENS
    )
    if last and kept and not unknown_after and tokens < MIN_CACHEABLE_TOKENS:
        # the whole loss is the text after the value, below what a cache would keep
        return "info", (
            f" (~{tokens} tokens of static text after it in {sink.label}, the end of the "
            f"cached prefix, are written anew with it; below the {MIN_CACHEABLE_TOKENS}-token "
            "minimum a cache needs, the text before it is served from a prefix cache)"
        )
    pieces = [f"~{tokens} tokens of static text"] if after >= 400 else []
    if unknown_after:
        pieces.append("text of unknown size")
    if not pieces:
        return None, ""
    history = "" if last else ", and the conversation after it,"
    served = "; a prefix cache still serves the text before it" if kept else ""
    return (
        None,
        f" ({' and '.join(pieces)} after it in {sink.label}{history} are written anew with it{served})",
    )


def _position(segs: Any, node: ast.AST) -> int | None:
    """Index of the segment holding ``node`` (the value's use), or None."""
    line = getattr(node, "lineno", None)
    col = getattr(node, "col_offset", None)
    for i, seg in enumerate(segs):
        if seg[0] == SEG_STATIC or seg[0] == SEG_UNKNOWN or len(seg) < 2:
            continue
        n = seg[1]
        if n is node:
            return i
        if line is None or getattr(n, "end_lineno", None) is None:
            continue
        if (n.lineno, n.col_offset) <= (line, col) and (line, col) < (
            n.end_lineno,
            n.end_col_offset,
        ):
            return i
    return None


def where(reach: Any) -> str:
    """Where a hazard lands, for messages: "the system prompt (passed to `f()` as `x`)"."""
    sink = reach.sink
    label = f"a message before the last in {sink.label}" if sink.kind == MESSAGES else sink.label
    return f"{label} ({reach.via})" if reach.via else label
