"""Sentinel cache boundaries: a constant marker string that a function of the project splits
a prompt text at, putting the breakpoint on the part before it only, so that whatever a
builder places after the same marker is past that block's breakpoint. It is out of the
cached prefix only when nothing cached follows it in the request: a system prompt ahead of
a message history is still ahead of the history's cache (automatic prefix caching, or a
breakpoint on a later turn), so :func:`linters.flow.reach.single_turn` decides; the hazards
of such an item carry ``past_mark``.

The shape (mozilla-ai/clawbolt, fixed in a956485a, 2026-04-13)::

    _CACHE_BOUNDARY = "<!-- CACHE_BOUNDARY -->"

    def prepare_system_with_caching(system):                     # the *splitter*
        if _CACHE_BOUNDARY in system:
            stable, dynamic = system.split(_CACHE_BOUNDARY, 1)
            return [{"type": "text", "text": stable, "cache_control": {"type": "ephemeral"}},
                    {"type": "text", "text": dynamic}]
        ...

    class SystemPromptBuilder:                                   # the *builder*
        CACHE_BOUNDARY = "\\n<!-- CACHE_BOUNDARY -->\\n"
        def add_section(self, heading, content, *, dynamic=False):
            self._sections.append((heading, content, dynamic))
        def build(self):
            for heading, content, dynamic in self._sections:
                if dynamic and not hit_dynamic:
                    hit_dynamic = True
                    parts.append(self.CACHE_BOUNDARY.strip())     # the marker, by value
                parts.append(f"## {heading}\\n{content}")

A *splitter* is a function that binds the parts of ``text.split(C, ...)`` (two names),
``text.partition(C)`` (three) or ``text[:i]`` / ``text[i...:]`` with ``i = text.index(C)``
(or ``find``), where ``C`` is a string the linter knows exactly (a literal, a module or class
constant, ``.strip()`` of one), and puts the part before ``C`` in a block that carries a
breakpoint (a dict literal with a ``"cache_control"`` key, or a block listed before a
``{"cachePoint": ...}`` block) and the part after it in none. Splitters that mark both
parts, or neither, or whose parts the linter cannot follow, define no boundary.

A *builder* places a stored item after the marker when, in the method that reads the
items (``build``), a loop over ``self.<items>`` appends a value equal to a splitter's ``C``
under a test that names one of the loop's unpacked fields (``if dynamic ...``), before it
appends the item's text; the item is after the marker when that field, given to the storing
method (``add_section(..., dynamic=True)``) is a true constant for it or for an item stored
before it. Matching is by value (the exact text), never by name.
"""

from __future__ import annotations

import ast
from typing import Any

from linters.flow.facts import Scope

_SPLIT = {"split": 2, "partition": 3}  # method -> number of parts bound (before: 0, after: -1)
_INDEX = frozenset({"index", "find"})
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _names(node: Any) -> set[str]:
    return {n.id for n in ast.walk(node) if type(n) is ast.Name}


def _tokens(node: Any) -> set[str]:
    """Names used in ``node`` and ``#id`` of its subscripts (``text[:i]``)."""
    return {
        n.id if type(n) is ast.Name else f"#{id(n)}"
        for n in ast.walk(node)
        if type(n) in (ast.Name, ast.Subscript)
    }


def _marked(fn: Any) -> set[str]:
    """:func:`_tokens` of every block that carries a breakpoint in ``fn``: the values of a
    dict literal with a ``"cache_control"`` key, and the blocks listed before a
    ``{"cachePoint": ...}`` block in a list literal (what comes after it is not cached)."""
    marked: set[str] = set()
    for n in ast.walk(fn):
        if type(n) is ast.Dict:
            keys = [k.value if type(k) is ast.Constant else None for k in n.keys]
            if "cache_control" in keys:
                for k, v in zip(keys, n.values):
                    if k != "cache_control":
                        marked |= _tokens(v)
        elif type(n) is ast.List:
            at = [
                i
                for i, e in enumerate(n.elts)
                if type(e) is ast.Dict
                and any(type(k) is ast.Constant and k.value == "cachePoint" for k in e.keys)
            ]
            for e in n.elts[: at[-1] if at else 0]:
                marked |= _tokens(e)
    return marked


def _parts(fn: Any) -> list[tuple[ast.expr, set[str], set[str]]]:
    """``(marker expression, names of the part before, names of the part after)`` for every
    split of ``fn``: ``a, b = t.split(C, 1)``, ``a, _, b = t.partition(C)``, and
    ``i = t.index(C)`` with ``t[:i]`` / ``t[i + n:]``."""
    out = []
    index_of: dict[str, ast.expr] = {}
    for n in ast.walk(fn):
        if type(n) is not ast.Assign or len(n.targets) != 1 or type(n.value) is not ast.Call:
            continue
        call, tgt = n.value, n.targets[0]
        if type(call.func) is not ast.Attribute or not call.args:
            continue
        attr = call.func.attr
        if attr in _SPLIT and type(tgt) is ast.Tuple and len(tgt.elts) == _SPLIT[attr]:
            first, last = tgt.elts[0], tgt.elts[-1]
            if type(first) is ast.Name and type(last) is ast.Name:
                out.append((call.args[0], {first.id}, {last.id}))
        elif attr in _INDEX and type(tgt) is ast.Name:
            index_of[tgt.id] = call.args[0]
    for name, marker in index_of.items():
        before: set[str] = set()
        after: set[str] = set()
        for n in ast.walk(fn):
            if type(n) is ast.Subscript and type(n.slice) is ast.Slice:
                lo, hi = n.slice.lower, n.slice.upper
                if lo is None and hi is not None and name in _names(hi):
                    before.add(f"#{id(n)}")
                elif hi is None and lo is not None and name in _names(lo):
                    after.add(f"#{id(n)}")
        if before and after:
            out.append((marker, before, after))
    return out


def module_sentinels(ev: Any) -> frozenset[str]:
    """The marker strings at which a function of ``ev``'s module splits a text and marks
    only the part before the marker (see the module docstring)."""
    got: frozenset[str] | None = getattr(ev, "sentinels_cache", None)
    if got is not None:
        return got
    found: set[str] = set()
    for fn in ast.walk(ev.facts.module.node):
        if not isinstance(fn, _FUNCS):
            continue
        splits = _parts(fn)
        if not splits:
            continue
        scope = ev.function_scope(fn)
        if scope is None:
            continue
        marked = _marked(fn)
        for marker, before, after in splits:
            text = ev.literal_str(marker, scope)
            if text and before & marked and not after & marked:
                # the part before the marker carries the breakpoint, the part after none
                found.add(text)
    got = ev.sentinels_cache = frozenset(found)
    return got


def project_sentinels(ev: Any) -> frozenset[str]:
    """:func:`module_sentinels` of every module of the project (of ``ev``'s module alone
    when it is linted without a project), computed once per project."""
    project = getattr(ev, "project", None)
    if project is None:
        return module_sentinels(ev)
    got: frozenset[str] | None = getattr(project, "sentinels", None)
    if got is None:
        project.sentinels = frozenset()  # cycle guard
        found: set[str] = set()
        seen: set[int] = set()
        for word in (b"cache_control", b"cachePoint"):
            for other in project.evaluators(word):
                if id(other) not in seen:
                    seen.add(id(other))
                    found |= module_sentinels(other)
        got = project.sentinels = frozenset(found)
    return got


def boundary_flag(ev: Any, reader: Scope, storer: Scope) -> str | None:
    """The parameter of ``storer`` (``add_section``) whose true value makes ``reader``
    (``build``, of the same class) put a splitter's marker before the stored item and every
    item stored after it; None when ``reader`` places no such marker (or not by a flag)."""
    attrs = _stored_tuples(storer)
    if not attrs:
        return None
    for loop in ast.walk(reader.node):
        if not isinstance(loop, (ast.For, ast.AsyncFor)) or type(loop.target) is not ast.Tuple:
            continue
        it = loop.iter
        if not (
            type(it) is ast.Attribute
            and type(it.value) is ast.Name
            and it.value.id == "self"
            and it.attr in attrs
        ):
            continue
        fields = [e.id if type(e) is ast.Name else None for e in loop.target.elts]
        stored = attrs[it.attr]
        if len(stored) != len(fields):
            continue
        for i, stmt in enumerate(loop.body):
            if type(stmt) is not ast.If or not _appends_later(loop.body[i + 1 :]):
                continue
            flag = _positive_flag(stmt.test, fields)
            if flag is None or not _appends_marker(ev, stmt.body, reader):
                continue
            param = stored[fields.index(flag)]
            if param in storer.params:
                return param
    return None


def _stored_tuples(storer: Scope) -> dict[str, list[str | None]]:
    """``self.<attr>.append((a, b, c))`` in ``storer``: attr -> the names stored, by field."""
    out: dict[str, list[str | None]] = {}
    for n in ast.walk(storer.node):
        if (
            type(n) is ast.Call
            and type(n.func) is ast.Attribute
            and n.func.attr == "append"
            and len(n.args) == 1
            and type(n.args[0]) is ast.Tuple
            and type(n.func.value) is ast.Attribute
            and type(n.func.value.value) is ast.Name
            and n.func.value.value.id == "self"
        ):
            out[n.func.value.attr] = [e.id if type(e) is ast.Name else None for e in n.args[0].elts]
    return out


def _positive_flag(test: Any, fields: list[str | None]) -> str | None:
    """A loop field the test requires to be true: ``if dynamic`` / ``if dynamic and ...``."""
    terms = test.values if type(test) is ast.BoolOp and type(test.op) is ast.And else [test]
    for t in terms:
        if type(t) is ast.Name and t.id in fields:
            return t.id
    return None


def _appends_later(stmts: list) -> bool:
    return any(
        type(n) is ast.Call and type(n.func) is ast.Attribute and n.func.attr == "append"
        for s in stmts
        for n in ast.walk(s)
    )


def _appends_marker(ev: Any, stmts: list, scope: Scope) -> bool:
    """Whether ``stmts`` append a value equal to a marker some splitter of the project
    splits at (compared by value)."""
    values = []
    for s in stmts:
        for n in ast.walk(s):
            if (
                type(n) is ast.Call
                and type(n.func) is ast.Attribute
                and n.func.attr == "append"
                and len(n.args) == 1
            ):
                text = ev.literal_str(n.args[0], scope)
                if text:
                    values.append(text)
    return any(contains_mark(ev, v) for v in values)


def contains_mark(ev: Any, text: str) -> bool:
    """Whether ``text`` contains a marker some splitter of the project splits at: the
    split falls at its first occurrence, so whatever follows ``text`` is after it."""
    return any(m in text for m in project_sentinels(ev))


def has_mark(ev: Any, node: Any, scope: Scope) -> bool:
    """Whether the text of ``node`` contains a splitter's marker as a piece the linter
    knows exactly: a literal or constant (``MARK``, ``self.MARK.strip()``), a literal part
    of an f-string, or an operand of ``+``."""
    if not project_sentinels(ev):
        return False
    if type(node) is ast.FormattedValue:
        node = node.value
    t = type(node)
    if t is ast.JoinedStr:
        return any(
            contains_mark(ev, v.value)
            if type(v) is ast.Constant and type(v.value) is str
            else type(v) is ast.FormattedValue and has_mark(ev, v.value, scope)
            for v in node.values
        )
    if t is ast.BinOp and type(node.op) is ast.Add:
        return has_mark(ev, node.left, scope) or has_mark(ev, node.right, scope)
    if t is ast.Constant and type(node.value) is not str:
        return False
    text = ev.literal_str(node, scope)
    return text is not None and contains_mark(ev, text)


def after_marker(ev: Any, reader: Scope, storer: Scope, calls: list) -> set[int]:
    """Of ``calls`` (``recv.add_section(...)`` nodes, in source order), the ids of those
    whose item ``reader`` places after a splitter's marker (see :func:`boundary_flag`)."""
    flag = boundary_flag(ev, reader, storer)
    if flag is None:
        return set()
    out: set[int] = set()
    past = False
    for call in sorted(calls, key=lambda c: (c.lineno, c.col_offset)):
        arg = ev.arg_for(call, storer, flag, True)
        if arg is None:
            default = storer.node.args
            arg = _default(default, flag)
        if type(arg) is ast.Constant and arg.value is True:
            past = True
        if past:
            out.add(id(call))
    return out


def _default(args: ast.arguments, name: str) -> Any:
    """The default value node of parameter ``name`` (None when it has none)."""
    pos = args.posonlyargs + args.args
    for a, d in zip(pos[len(pos) - len(args.defaults) :], args.defaults):
        if a.arg == name:
            return d
    for a, kd in zip(args.kwonlyargs, args.kw_defaults):
        if a.arg == name:
            return kd
    return None
