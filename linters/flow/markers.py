"""Cache markers that the API or the client ignores or rejects (facts of PC005).

Each marker is followed to the request it reaches (:mod:`linters.flow.marker_flow`); a
marker whose dict reaches no known request is not reported. Four shapes, each a real fix:

- **a misspelt marker key** (``cacheControl``, ``cache-control``, ``CacheControl``: the
  letters of ``cache_control`` spelt another way) in a dict sent through litellm or the
  Anthropic SDK: neither reads it, so the request carries no breakpoint (amaiya/patchpal
  dcb403f);
- **a raw ``cachePoint``** (Bedrock Converse's field) in a litellm or Anthropic-SDK request:
  litellm builds Converse's ``cachePoint`` only from ``cache_control`` (litellm 1.110.2,
  ``AmazonConverseConfig.get_cache_point_block`` reads ``message_block.get("cache_control")``;
  the message converter in ``litellm_core_utils/prompt_templates/factory.py`` copies only
  ``text`` from a text block), so the key is dropped (amaiya/patchpal 0689b99). In a boto3
  ``converse`` request ``cachePoint`` is right and is not reported;
- **a marker on a text block whose text can be empty**: the Anthropic API rejects it with
  400 "cache_control cannot be set for empty text blocks" (quoted in anthropics/claude-code
  issues #54013, 2026-04-27, and #55302, 2026-05-01). Reported when the text is, through
  local names, a literal ``""`` on some path (``m.get("content", "")``, ``x or ""``) or the
  ``content`` of a message of the conversation being sent (an assistant turn with only
  tool calls, or an empty tool result, has ``""``), with no test that it is non-empty
  around the marker (``if text:``, ``if not text: return``) and not taken from messages
  selected as ``role == "system"`` (robusta-dev/holmesgpt d8034963);
- **a marker on the first block of a message that can be a thinking block**: the API
  rejects ``cache_control`` on ``thinking``/``redacted_thinking`` blocks with 400
  "messages.N.content.0.thinking.cache_control: Extra inputs are not permitted" (quoted in
  LeenHawk/gproxy issue #67, 2026-04-03; Wei-Shaw/sub2api issue #225, 2026-01-10).
  Anthropic returns thinking blocks first in an assistant turn. Reported when
  ``L[0]["cache_control"] = ...`` marks the first block of a message's ``content`` with no
  test of the block's ``type``, and the function that made those messages (followed
  through calls and returns, into other modules of the project) builds ``{"type":
  "thinking", ...}`` blocks (nex-agi/NexAU e746af1).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from linters.flow import tables
from linters.flow.marker_flow import Flow, Fn, Req
from linters.flow.nodes import const_str, inside
from linters.flow.values import Evaluator

MARKER = tables.CACHE_CONTROL
CACHE_POINT = "cachePoint"
MISSPELT = "misspelt"
RAW_CACHE_POINT = "cache-point"
EMPTY_TEXT = "empty-text"
THINKING = "thinking"
THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
#: request kinds that read ``cache_control`` (litellm converts it for each provider)
_MARKER_CLIENTS = frozenset({"litellm", "anthropic"})
_EXITS = (ast.Return, ast.Continue, ast.Break, ast.Raise)
# a marker key as a string literal: the functions holding one are the only ones looked at
_WORD = re.compile(rb"""(?i)["'](cache.?control|cachepoint)["']""")


@dataclass(frozen=True, slots=True)
class MarkerIssue:
    """A marker at ``node`` (its key) of kind ``kind`` that reaches ``req``; ``detail``
    says why, in words (with line numbers)."""

    node: ast.AST
    kind: str
    key: str
    req: Req
    detail: str = ""


def misspelt(key: str) -> bool:
    """Whether ``key`` is ``cache_control`` spelt another way (case, ``-``, no separator);
    False for ``cache_control`` itself. Never raises."""
    return key != MARKER and re.sub(r"[^a-z]", "", key.lower()) == "cachecontrol"


def marker_issues(ev: Evaluator, source: bytes) -> list[MarkerIssue]:
    """Every marker of the module (``ev``; ``source`` its bytes) that a known request ignores
    or rejects, one :class:`MarkerIssue` per marker; empty when none. Never raises on a
    valid syntax tree."""
    lines = [i for i, text in enumerate(source.splitlines(), 1) if _WORD.search(text)]
    if not lines:
        return []
    flow = Flow(ev)
    fns = {id(f.node): f for f in map(flow.at, lines)}
    out: list[MarkerIssue] = []
    done: set[int] = set()
    for fn in fns.values():
        for d in fn.dicts:
            for k in d.keys:
                key = const_str(k)
                if key is None or id(k) in done or not (misspelt(key) or key == CACHE_POINT):
                    continue
                req = flow.placed(fn, d)
                issue = _key_issue(k, key, req) if k is not None else None
                if issue is not None:
                    done.add(id(k))
                    out.append(issue)
            issue = _empty_text(flow, fn, d)
            if issue is not None and id(issue.node) not in done:
                done.add(id(issue.node))
                out.append(issue)
        for stmt in fn.assigns:
            for tgt in stmt.targets:
                issue = _subscript_marker(flow, fn, tgt)
                if issue is not None and id(issue.node) not in done:
                    done.add(id(issue.node))
                    out.append(issue)
    return out


def _key_issue(k: ast.AST, key: str, req: Req | None) -> MarkerIssue | None:
    if req is None or req.kind not in _MARKER_CLIENTS:
        return None
    return MarkerIssue(k, MISSPELT if misspelt(key) else RAW_CACHE_POINT, key, req)


def _subscript_marker(flow: Flow, fn: Fn, tgt: Any) -> MarkerIssue | None:
    """``X["cacheControl"] = ...`` / ``X["cachePoint"] = ...`` / a ``cache_control`` on a
    block that can be a thinking block."""
    if type(tgt) is not ast.Subscript:
        return None
    key = const_str(tgt.slice)
    if key is None or not (key == MARKER or misspelt(key) or key == CACHE_POINT):
        return None
    names = flow.roots(fn, tgt.value)
    req = flow._reach_all(fn, names, None)
    if key != MARKER:
        return _key_issue(tgt.slice, key, req)
    if req is None or req.kind not in _MARKER_CLIENTS:
        return None
    why = _first_block_thinking(flow, fn, tgt)
    return None if why is None else MarkerIssue(tgt.slice, THINKING, key, req, why)


# -- empty text -----------------------------------------------------------------------


def _marks(fn: Fn, d: ast.Dict) -> ast.AST | None:
    """The ``cache_control`` key node a dict display carries, directly or through
    ``**name`` of a local bound to a dict display that has one."""
    for k, v in zip(d.keys, d.values):
        if const_str(k) == MARKER:
            return k
        if k is None and type(v) is ast.Name:
            for value in fn.aliases.get(v.id, ()):
                if type(value) is ast.Dict:
                    for kk in value.keys:
                        if const_str(kk) == MARKER:
                            return kk
    return None


def _empty_text(flow: Flow, fn: Fn, d: ast.Dict) -> MarkerIssue | None:
    fields = {const_str(k): v for k, v in zip(d.keys, d.values) if k is not None}
    kind = fields.get("type")
    if const_str(kind) != "text" or "text" not in fields:
        return None
    mark = _marks(fn, d)
    if mark is None:
        return None
    text = fields["text"]
    why = _may_be_empty(flow, fn, text, d.lineno)
    if why is None or _guarded(fn, d, _name_chain(fn, text)):
        return None
    if _system_only(fn, d, text):
        return None
    req = flow.placed(fn, d)
    if req is None or req.kind not in _MARKER_CLIENTS:
        return None
    test = next((a for a in fn.ancestors(d) if type(a) is ast.If), None)
    where = (
        f"; the test on line {test.lineno} (`{ast.unparse(test.test)[:60]}`) lets it through"
        if test is not None
        else ""
    )
    return MarkerIssue(mark, EMPTY_TEXT, MARKER, req, why + where)


def _name_chain(fn: Fn, e: Any) -> list[str]:
    """``e``'s name and the names it is a plain copy of (``a = b``, ``a = b or c``)."""
    out: list[str] = []
    todo = [e]
    while todo and len(out) < 16:
        x = todo.pop()
        if type(x) is ast.Name and x.id not in out:
            out.append(x.id)
            todo.extend(fn.aliases.get(x.id, ()))
        elif type(x) is ast.BoolOp:
            todo.extend(x.values)
        elif type(x) is ast.IfExp:
            todo += [x.body, x.orelse]
    return out


def _last_before(fn: Fn, name: str, line: int) -> list[ast.expr]:
    """The value ``name`` was last bound to before ``line`` (all of them if none is)."""
    values = fn.aliases.get(name, [])
    before = [v for v in values if getattr(v, "lineno", 0) < line]
    return [max(before, key=lambda v: v.lineno)] if before else list(values)


def _may_be_empty(flow: Flow, fn: Fn, text: Any, line: int) -> str | None:
    """Why a text value used on ``line`` can be ``""`` (None: no path found)."""
    todo: list[Any] = [text]
    seen: set[int] = set()
    while todo and len(seen) < 24:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        t = type(e)
        if t is ast.Constant and e.value == "":
            return f'`{ast.unparse(text)}` can be "" (line {e.lineno})'
        if t is ast.Name:
            todo.extend(_last_before(fn, e.id, line))
        elif t is ast.BoolOp:
            todo.extend(e.values)
        elif t is ast.IfExp:
            todo += [e.body, e.orelse]
        elif t is ast.Call and type(e.func) is ast.Attribute and e.func.attr == "get":
            todo.extend(e.args[1:2])
            if e.args and const_str(e.args[0]) == "content":
                msg = e.func.value
                if _in_request(flow, fn, msg):
                    return _content_why(text, msg, e.lineno)
        elif t is ast.Subscript and const_str(e.slice) == "content":
            if _in_request(flow, fn, e.value):
                return _content_why(text, e.value, e.lineno)
    return None


def _content_why(text: Any, msg: Any, line: int) -> str:
    return (
        f"`{ast.unparse(text)}` is the content of `{ast.unparse(msg)}` (line {line}), a "
        'message of the conversation: "" for an assistant turn with only tool calls or an '
        "empty tool result"
    )


def _in_request(flow: Flow, fn: Fn, msg: Any) -> bool:
    return flow._reach_all(fn, flow.roots(fn, msg), None) is not None


def _truthy_names(test: Any) -> set[str]:
    """Names a test requires to be non-empty: ``x``, ``a and x``, ``len(x)``,
    ``x.strip()``, ``x != ""``, ``len(x) > 0``."""
    t = type(test)
    if t is ast.Name:
        return {test.id}
    if t is ast.BoolOp and type(test.op) is ast.And:
        return set().union(*(_truthy_names(v) for v in test.values))
    if t is ast.Call:
        f = test.func
        if type(f) is ast.Name and f.id in ("len", "bool") and test.args:
            return _truthy_names(test.args[0])
        if type(f) is ast.Attribute and f.attr == "strip":
            return _truthy_names(f.value)
    if t is ast.Compare and len(test.ops) == 1:
        if type(test.ops[0]) in (ast.NotEq, ast.Gt, ast.GtE):
            return _truthy_names(test.left)
    return set()


def _falsy_names(test: Any) -> set[str]:
    """Names a test is true for when they are empty: ``not x``, ``x == ""``."""
    t = type(test)
    if t is ast.UnaryOp and type(test.op) is ast.Not:
        return _truthy_names(test.operand)
    if t is ast.BoolOp and type(test.op) is ast.Or:
        return set().union(*(_falsy_names(v) for v in test.values))
    if t is ast.Compare and len(test.ops) == 1 and type(test.ops[0]) is ast.Eq:
        return _truthy_names(test.left)
    return set()


def _guarded(fn: Fn, node: ast.AST, names: list[str]) -> bool:
    """Whether ``node`` runs only when one of ``names`` is non-empty: under ``if x:``, or
    after ``if not x: return`` in the same function."""
    want = set(names)
    for up in fn.ancestors(node):
        if type(up) in (ast.If, ast.While, ast.IfExp) and want & _truthy_names(up.test):
            if not any(inside(node, s) for s in getattr(up, "orelse", ()) or ()):
                return True
        if type(up) is ast.comprehension and any(want & _truthy_names(c) for c in up.ifs):
            return True
    line = getattr(node, "lineno", 0)
    for n in fn.parent.values():
        if type(n) is ast.If and n.lineno < line and want & _falsy_names(n.test):
            if n.body and isinstance(n.body[-1], _EXITS):
                return True
    return False


def _system_only(fn: Fn, node: ast.AST, text: Any) -> bool:
    """Whether the marked text is taken from messages selected by ``role == "system"``
    (a comparison in an enclosing test or in the expressions the text is taken from)."""
    exprs: list[Any] = [a.test for a in fn.ancestors(node) if type(a) is ast.If]
    todo: list[Any] = [text]
    seen: set[int] = set()
    while todo and len(seen) < 48:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        exprs.append(e)
        for sub in ast.walk(e):
            if type(sub) is ast.Name:
                todo.extend(fn.aliases.get(sub.id, ()))
    return any(_is_system_test(sub) for e in exprs for sub in ast.walk(e))


def _is_system_test(node: Any) -> bool:
    if type(node) is not ast.Compare or len(node.ops) != 1 or type(node.ops[0]) is not ast.Eq:
        return False
    sides = [node.left, *node.comparators]
    return any(const_str(s) == "system" for s in sides) and any(
        const_str(sub) == "role" for s in sides for sub in ast.walk(s)
    )


# -- thinking blocks ---------------------------------------------------------------------


def _first_block_thinking(flow: Flow, fn: Fn, tgt: ast.Subscript) -> str | None:
    """Why the block ``tgt.value`` can be a thinking block (None: not shown)."""
    block = _through_names(fn, tgt.value)
    if type(block) is not ast.Subscript or type(block.slice) is not ast.Constant:
        return None
    if block.slice.value != 0:
        return None
    content = _through_names(fn, block.value)
    msg = _message_of(content)
    if msg is None or _type_tested(fn, tgt, flow.roots(fn, tgt.value)):
        return None
    found = _thinking_maker(flow, fn, flow.roots(fn, msg), 0)
    if found is None:
        return None
    return (
        f"`{ast.unparse(block)}` is the first block of `{ast.unparse(msg)}`'s content, "
        f"whatever its type; those messages come from {found}, which makes `thinking` blocks "
        "(first in an assistant turn)"
    )


def _through_names(fn: Fn, e: Any) -> Any:
    """``e`` with local names replaced by their only value, ``cast(T, x)`` by ``x``."""
    for _ in range(8):
        if type(e) is ast.Name and len(fn.aliases.get(e.id, ())) == 1:
            e = fn.aliases[e.id][0]
        elif type(e) is ast.Call and type(e.func) is ast.Name and e.func.id == "cast" and e.args:
            e = e.args[-1]
        else:
            break
    return e


def _message_of(content: Any) -> Any:
    """``m`` for ``m["content"]`` / ``m.get("content")``, else None."""
    if type(content) is ast.Subscript and const_str(content.slice) == "content":
        return content.value
    if (
        type(content) is ast.Call
        and type(content.func) is ast.Attribute
        and content.func.attr == "get"
        and content.args
        and const_str(content.args[0]) == "content"
    ):
        return content.func.value
    return None


def _type_tested(fn: Fn, node: ast.AST, names: list[str]) -> bool:
    """Whether an enclosing test reads the block's ``type`` (``b.get("type")``, ``b["type"]``)."""
    want = set(names)
    for up in fn.ancestors(node):
        if type(up) not in (ast.If, ast.While, ast.IfExp):
            continue
        for sub in ast.walk(up.test):
            base = None
            if type(sub) is ast.Subscript and const_str(sub.slice) == "type":
                base = sub.value
            elif type(sub) is ast.Call and type(sub.func) is ast.Attribute:
                if sub.func.attr == "get" and sub.args and const_str(sub.args[0]) == "type":
                    base = sub.func.value
            if base is not None and want & {n.id for n in ast.walk(base) if type(n) is ast.Name}:
                return True
    return False


def _makes_thinking(node: ast.AST) -> int | None:
    """Line of a ``{"type": "thinking" | "redacted_thinking", ...}`` display in ``node``."""
    for sub in ast.walk(node):
        if type(sub) is ast.Dict:
            for k, v in zip(sub.keys, sub.values):
                if const_str(k) == "type" and const_str(v) in THINKING_TYPES:
                    return sub.lineno
    return None


def _thinking_maker(flow: Flow, fn: Fn, names: list[str], depth: int) -> str | None:
    """``"`f()` (path:line)"`` for a function that made the messages held by ``names``
    and builds thinking blocks: followed through the calls the names are bound from, their
    returned calls (into other modules), and back to callers for parameters."""
    if depth > 3:
        return None
    for name in names:
        for value in fn.aliases.get(name, ()):
            for call in (c for c in ast.walk(value) if type(c) is ast.Call):
                found = _in_callee(flow.ev, call, fn.node, 0)
                if found is not None:
                    return found
        if name in fn.params and fn.scope is not None:
            for call, caller, bound in flow.callers(fn):
                arg = flow.ev.arg_for(call, fn.scope, name, bound)
                if arg is not None:
                    found = _thinking_maker(flow, caller, flow.roots(caller, arg), depth + 1)
                    if found is not None:
                        return found
    return None


def _in_callee(ev: Evaluator, call: ast.Call, within: ast.AST, depth: int) -> str | None:
    target = _resolve(ev, call, within)
    if target is None or depth > 3:
        return None
    tev, scope = target
    line = _makes_thinking(scope.node)
    name = f"`{scope.name}()`"
    if line is not None:
        return f"{name} ({getattr(tev, 'path', '') or 'this module'}:{line})"
    for sub in ast.walk(scope.node):
        if type(sub) is ast.Return and sub.value is not None:
            for c in (c for c in ast.walk(sub.value) if type(c) is ast.Call):
                found = _in_callee(tev, c, scope.node, depth + 1)
                if found is not None:
                    return found
    return None


def _resolve(ev: Evaluator, call: ast.Call, within: ast.AST) -> tuple[Any, Any] | None:
    """``(evaluator, function scope)`` a call reaches: a function or method of this module
    or of the project, or ``Cls().method(...)`` for a class of either."""
    scope = ev.function_scope(within) or ev.facts.module
    target, _bound, tev = ev.callee_any(call, scope)
    if target is not None:
        return tev, target
    func = call.func
    if type(func) is ast.Attribute and type(func.value) is ast.Call:
        cls = func.value.func
        if type(cls) in (ast.Name, ast.Attribute):
            found = ev.project_def(cls, "class")
            if found is not None:
                m = found[1].funcs.get(func.attr)
                return (found[0], m) if m is not None else None
    return None
