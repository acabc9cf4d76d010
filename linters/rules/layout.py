"""What comes first in a prompt.

PC004: per-request content placed before static content in one prompt string (a system
prompt, instructions, a system message) or before a static message in a message list: the
static part after it can never be served from the cache.
PC007: anywhere in LLM code, string building that puts a per-request value ahead of a long
constant (``long-constant-chars``, default 1000, or a file's contents).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

from linters.flow.facts import MESSAGES, PREFIX, PROMPT, ROLE, Scope
from linters.flow.reach import message_items
from linters.flow.resolve import short
from linters.flow.values import (
    SEG_DYNAMIC,
    SEG_STATIC,
    SEG_VOLATILE,
    Evaluator,
    classify,
    static_chars,
)
from linters.model import Finding, Rule
from linters.rules.context import RuleContext

RULES = (
    Rule(
        "PC004",
        "dynamic-before-static",
        "dynamic content placed before static content in one prompt string or message list",
    ),
    Rule(
        "PC007",
        "dynamic-before-long-constant",
        "string building puts a per-request value ahead of a long constant",
    ),
)


# Stakes (issue 28): static text after a per-request value is re-written on each request.
# Below the smallest minimum cacheable prefix of the providers (1,024 tokens: Anthropic's
# Sonnet/Opus and OpenAI's automatic caching, promptcache.limits, read 2025) nothing would be
# cached even in the right order, so the finding is info. ~4 characters per token (English
# prose with the GPT/Claude tokenizers; an estimate, said so in the message).
MIN_CACHEABLE_TOKENS = 1024
CHARS_PER_TOKEN = 4


def stakes(after: int | None) -> tuple[str, str]:
    """(severity, text) for ``after`` static characters re-written per request (None: a
    file's contents, unknown but taken as large)."""
    if after is None:
        return "warning", ""
    tokens = after // CHARS_PER_TOKEN
    if tokens < MIN_CACHEABLE_TOKENS:
        return (
            "info",
            f" (~{tokens} tokens, below the {MIN_CACHEABLE_TOKENS}-token minimum a cache needs)",
        )
    return "warning", f" (~{tokens} tokens re-written on each request)"


def _chars_at_least(segs: Sequence[Any], min_chars: int) -> bool:
    """Whether static ``segs`` hold at least ``min_chars`` characters (True when unknown)."""
    n = static_chars(segs)
    return n is None or n >= min_chars


def _first_dynamic_before_static(segs: Sequence[Any], min_chars: int) -> Any:
    """The first per-request segment followed by at least ``min_chars`` of static text."""
    for i, s in enumerate(segs):
        if s[0] != SEG_DYNAMIC:
            continue
        after = static_chars(segs[i + 1 :])
        if after is None or after >= min_chars:
            return s, after
        return None
    return None


def _content(ev: Evaluator, node: Any, scope: Scope, depth: int = 0) -> Any:
    """The content expression of one message (dict, ``(role, text)`` tuple, or a
    ``SystemMessage(...)``-style call)."""
    t = type(node)
    if t is ast.Dict:
        for k, v in zip(node.keys, node.values):
            if type(k) is ast.Constant and k.value in ("content", "parts", "text"):
                return v, scope
        return None, scope
    if t is ast.Tuple and len(node.elts) == 2:
        return node.elts[1], scope
    if t is ast.Call:
        for kw in node.keywords:
            if kw.arg == "content":
                return kw.value, scope
        return (node.args[0], scope) if node.args else (None, scope)
    if t is ast.Name and depth < 4:
        bl = ev.resolve(node.id, scope, node.lineno)
        if len(bl) == 1 and bl[0].kind == "assign":
            return _content(ev, bl[0].value, bl[0].scope, depth + 1)
    return None, scope


def _message_text(ev: Evaluator, content: Any, scope: Scope) -> Any:
    if content is None:
        return (("u",),)
    if type(content) in (ast.List, ast.Tuple):
        out: list[Finding] = []
        for e in content.elts:
            out.extend(ev.text_segments(e, scope))
        return tuple(out)
    return ev.segments(content, scope)


def check(an: RuleContext) -> list[Finding]:
    """PC004 findings for prompt strings and message lists; PC007 for string building
    in LLM modules."""
    ev = an.ev
    cfg = an.config
    out: list[Finding] = []
    min_chars = cfg.min_static_chars

    def report_pc004(seg: Any, after: Any, label: str) -> None:
        node = seg[1]
        if id(node) in an.reported:
            return
        more = "a file's contents" if after is None else f"{after} characters of static text"
        severity, stake = stakes(after)
        out.append(
            an.finding(
                "PC004",
                node,
                f"{seg[2]} is per-request and comes before {more} in {label}: everything after it "
                f"misses the cache{stake}; put the static text first and the per-request part last",
                severity=severity,
            )
        )

    for sink in an.facts.sinks:
        if sink.kind == PREFIX or sink.kind == PROMPT:
            segs = ev.text_segments(sink.expr, sink.scope)
        elif sink.kind == ROLE:
            if sink.node is not None:  # the sink is already the message's content
                content, cscope = sink.expr, sink.scope
            else:
                content, cscope = _content(ev, sink.expr, sink.scope)
            segs = _message_text(ev, content, cscope) if content is not None else ()
        elif sink.kind == MESSAGES:
            _check_messages(an, sink, min_chars, out)
            continue
        else:
            continue
        hit = _first_dynamic_before_static(segs, min_chars)
        if hit:
            report_pc004(hit[0], hit[1], sink.label)

    facts = an.facts
    long_chars = cfg.long_constant_chars
    if facts.llm_context and (facts.longest_constant >= long_chars or facts.has_file_read):
        for node, scope in facts.strings:
            segs = ev.segments(node, scope)
            for i, s in enumerate(segs):
                if s[0] not in (SEG_DYNAMIC, SEG_VOLATILE):
                    continue
                big = next(
                    (
                        t
                        for t in segs[i + 1 :]
                        if t[0] == SEG_STATIC
                        and (t[1] is None or t[1] >= long_chars)
                        and (len(t) < 3 or t[2])
                    ),
                    None,
                )  # prose, not CSS/HTML/JSON
                if big is not None and id(s[1]) not in an.reported:
                    size = (
                        "a file's contents" if big[1] is None else f"a {big[1]}-character constant"
                    )
                    severity, stake = stakes(big[1])
                    out.append(
                        an.finding(
                            "PC007",
                            s[1],
                            f"{s[2]} is per-request and is placed ahead of {size}: the constant can "
                            f"only be cached if it comes first{stake}; move the per-request part "
                            "after it",
                            severity=severity,
                        )
                    )
                break
    return out


def _parts(ev: Evaluator, node: Any, scope: Scope, depth: int = 0) -> list[tuple[Any, bool]]:
    """The top-level parts of a message-list expression in order, each ``(node, whole)``:
    ``whole`` marks a part that is a whole list (``*history``, ``history + [...]``)."""
    t = type(node)
    if t is ast.Name and depth < 4:
        bl = ev.resolve(node.id, scope, node.lineno)
        if len(bl) == 1 and bl[0].kind == "assign":
            return _parts(ev, bl[0].value, bl[0].scope, depth + 1)
        return [(node, True)]
    if t is ast.List:
        return [(e.value, True) if type(e) is ast.Starred else (e, False) for e in node.elts]
    if t is ast.BinOp and type(node.op) is ast.Add and depth < 8:
        return _parts(ev, node.left, scope, depth + 1) + _parts(ev, node.right, scope, depth + 1)
    return [(node, True)]


def _grows(ev: Evaluator, node: Any, scope: Scope) -> bool:
    """A list that grows from request to request: a parameter (the caller's history) or a
    list appended to."""
    if type(node) is ast.Attribute and type(node.value) is ast.Name and node.value.id == "self":
        return any(b.kind in ("append", "extend", "aug") for b in ev.self_attr(node.attr, scope))
    if type(node) is not ast.Name:
        return False
    bl = ev.resolve(node.id, scope, node.lineno)
    return any(b.kind in ("param", "append", "extend", "aug") for b in bl)


def _check_static_after_history(an: RuleContext, sink: Any, out: Any) -> bool:
    """PC004 for a static message placed after a growing history: re-sent after the
    history on every step, it is never part of the cached prefix (issue 28)."""
    ev = an.ev
    parts = _parts(ev, sink.expr, sink.scope)
    history = None
    for node, whole in parts:
        if whole:
            if _grows(ev, node, sink.scope):
                history = node
            continue
        if history is None:
            continue
        content, cscope = _content(ev, node, sink.scope)
        segs = _message_text(ev, content, cscope) if content is not None else ()
        chars = static_chars(segs) if segs and classify(segs) == SEG_STATIC else 0
        if not chars or id(node) in an.reported:
            continue
        severity, stake = stakes(chars)
        out.append(
            an.finding(
                "PC004",
                node,
                f"a static message ({chars} characters) comes after the growing history "
                f"`{short(history)}` in {sink.label}: it is re-sent after the history on every "
                f"step and never cached{stake}; put it before the history (system prompt or "
                "first message)",
                severity=severity,
            )
        )
        return True
    return False


def _check_messages(an: RuleContext, sink: Any, min_chars: int, out: Any) -> None:
    ev = an.ev
    if _check_static_after_history(an, sink, out):
        return
    items = message_items(ev, sink.expr, sink.scope)
    if len(items) < 2:
        return
    kinds = []
    for e, s, _rep in items:
        content, cscope = _content(ev, e, s)
        segs = _message_text(ev, content, cscope) if content is not None else ()
        kinds.append((classify(segs) if segs else "u", segs, content))
    for i, (k, segs, content) in enumerate(kinds):
        if k != SEG_DYNAMIC:
            continue
        later = next(
            (
                c
                for kk, sg, c in kinds[i + 1 :]
                if kk == SEG_STATIC and (_chars_at_least(sg, min_chars))
            ),
            None,
        )
        if later is None:
            return
        seg = next((x for x in segs if x[0] in (SEG_DYNAMIC, SEG_VOLATILE)), None)
        node = seg[1] if seg is not None else content
        if id(node) in an.reported:
            return
        after = sum(static_chars(sg) or 0 for kk, sg, _c in kinds[i + 1 :] if kk == SEG_STATIC)
        severity, stake = stakes(after)
        out.append(
            an.finding(
                "PC004",
                node,
                f"a per-request message ({seg[2] if seg else 'dynamic content'}) comes before a "
                f"static message in {sink.label}: the static message after it misses the "
                f"cache{stake}; put static messages (system, examples, documents) first",
                severity=severity,
            )
        )
        return
