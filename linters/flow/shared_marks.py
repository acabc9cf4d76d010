"""Breakpoints written in place into the caller's message dicts, at a position that moves.

The shape (MervinPraison/PraisonAI, fixed in fe92c9ad, 2026-07-13)::

    def _build_messages(self, prompt, chat_history=None):
        messages = []
        messages.extend(chat_history)           # a new list, the caller's dicts
        self._mark_history_prefix(messages, 1)

    def _mark_history_prefix(self, messages, start):
        i = len(messages) - 3                   # moves as the history grows
        self._mark(messages[i])

    @staticmethod
    def _mark(message):
        message["content"][-1]["cache_control"] = {"type": "ephemeral"}   # in place

The function copies the caller's list (so it does not mean to change the caller's history)
but marks one of the shared dicts: the marker stays in the caller's history, the next turn
marks another message, and after four turns the request carries more than four breakpoints
(the API rejects it). Found per module, following calls to functions of the module and
``self.`` methods of the same class (two calls deep):

- a *holder*: ``h.extend(P)``, ``h += P``, ``h = list(P)`` / ``P[:]`` / ``P.copy()`` /
  ``[*P]`` of a parameter ``P`` (a shallow copy: new list, shared items);
- a *moving item*: ``h[i]`` where ``i`` is a negative constant or contains ``len(...)``
  (directly or through a local name);
- an *in-place mark* of that item: ``item...["cache_control"] = v`` or
  ``item[k] = [{..., "cache_control": ...}]``, in the function or in a callee that gets the
  item (or the holder) as an argument;
- no ``del``/``pop`` of ``"cache_control"`` in any function of the chain (old markers are
  not cleared) and the item is not copied first (``copy.deepcopy``/``dict(...)`` give a new
  name, which is not the holder's item).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

KEY = "cache_control"
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_STRIP_CALLS = frozenset({"get", "setdefault"})
_WRAPPERS = frozenset({"reversed", "enumerate", "iter"})


@dataclass(frozen=True, slots=True)
class SharedMark:
    """A breakpoint put in place on ``item`` (source text, e.g. ``messages[boundary_index]``)
    taken at ``node``; ``mark_line`` is the line of the ``cache_control`` assignment (in
    function ``marker``); ``holder_line`` the line where list ``holder`` took the caller's
    items from parameter ``param`` of function ``builder``."""

    node: Any
    item: str
    marker: str
    mark_line: int
    holder: str
    param: str
    builder: str
    holder_line: int


def _key(node: Any) -> bool:
    return type(node) is ast.Constant and node.value == KEY


def _params(fn: Any, bound: bool) -> list[str]:
    """Parameter names a call passes positionally into (``self`` dropped for bound calls)."""
    names = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    static = any(type(d) is ast.Name and d.id == "staticmethod" for d in fn.decorator_list)
    return names[1:] if bound and not static and names else names


class _Fn:
    """What one function does with ``cache_control`` and its parameters."""

    def __init__(self, fn: Any, owner: str | None) -> None:
        self.fn = fn
        self.owner = owner
        self.aliases: dict[str, ast.expr] = {}
        # (marked expression, line, whether the mark replaces its "content")
        self.marks: list[tuple[ast.expr, int, bool]] = []
        self.clears = False
        self.holders: dict[str, tuple[str, int]] = {}  # holder -> (param, line)
        self.calls: list[ast.Call] = []
        params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
        for node in _own_nodes(fn):
            self.node(node, params)

    def node(self, n: Any, params: set[str]) -> None:
        t = type(n)
        if t is ast.Assign:
            for tgt in n.targets:
                if type(tgt) is ast.Name:
                    self.aliases[tgt.id] = n.value
                    src = _shallow_copy_of(n.value)
                    if src in params:
                        self.holders[tgt.id] = (src, n.lineno)
                elif type(tgt) is ast.Subscript:
                    if _key(tgt.slice):
                        if not (type(n.value) is ast.Constant and n.value.value is None):
                            self.marks.append((tgt.value, n.lineno, False))
                    elif any(
                        type(d) is ast.Dict and any(map(_key, d.keys)) for d in ast.walk(n.value)
                    ):
                        self.marks.append((tgt.value, n.lineno, _is_content(tgt)))
        elif t in (ast.For, ast.AsyncFor, ast.comprehension) and type(n.target) is ast.Name:
            self.aliases[n.target.id] = n.iter
        elif t is ast.AugAssign and type(n.target) is ast.Name and type(n.value) is ast.Name:
            if n.value.id in params and type(n.op) is ast.Add:
                self.holders[n.target.id] = (n.value.id, n.lineno)
        elif t is ast.Delete:
            self.clears |= any(type(x) is ast.Subscript and _key(x.slice) for x in n.targets)
        elif t is ast.Call:
            self.call(n, params)

    def call(self, n: ast.Call, params: set[str]) -> None:
        f = n.func
        if type(f) is ast.Attribute:
            if f.attr == "pop" and n.args and _key(n.args[0]):
                self.clears = True
            elif f.attr == "extend" and type(f.value) is ast.Name and n.args:
                a = n.args[0]
                if type(a) is ast.Name and a.id in params:
                    self.holders[f.value.id] = (a.id, n.lineno)
        self.calls.append(n)

    def steps(self, e: Any) -> list[Any]:
        """The expressions ``e`` is part of, outermost last: through subscripts, attributes,
        ``.get(...)``, ``reversed(...)`` and names bound from such expressions."""
        out = [e]
        for _ in range(64):
            t = type(e)
            if t in (ast.Subscript, ast.Attribute):
                e = e.value
            elif t is ast.Call and type(e.func) is ast.Attribute and e.func.attr in _STRIP_CALLS:
                e = e.func.value
            elif t is ast.Call and type(e.func) is ast.Name and e.func.id in _WRAPPERS and e.args:
                e = e.args[0]
            elif t is ast.Name and e.id in self.aliases and len(out) < 48:
                e = self.aliases[e.id]
            else:
                break
            out.append(e)
        return out

    def root(self, e: Any) -> tuple[str | None, bool]:
        """The parameter or local name ``e`` is part of (None if it is new data), and whether
        the path passes through a message's ``content``."""
        path = self.steps(e)
        names = [n.id for n in path if type(n) is ast.Name]
        params = set(_params(self.fn, False))
        name = next((n for n in names if n in params), names[-1] if names else None)
        return name, any(map(_is_content, path))

    def moving(self, s: Any, depth: int = 0) -> bool:
        """Whether index ``s`` moves as the list grows (negative constant, ``len(...)``)."""
        for n in ast.walk(s):
            if type(n) is ast.UnaryOp and type(n.op) is ast.USub:
                return True
            if type(n) is ast.Call and type(n.func) is ast.Name and n.func.id == "len":
                return True
            if type(n) is ast.Name and n.id in self.aliases and depth < 4:
                if self.moving(self.aliases[n.id], depth + 1):
                    return True
        return False


def _is_content(n: Any) -> bool:
    """Whether ``n`` reads a message's content: ``m["content"]``, ``m.content``,
    ``m.get("content")``."""
    t = type(n)
    if t is ast.Subscript:
        return bool(type(n.slice) is ast.Constant and n.slice.value == "content")
    if t is ast.Attribute:
        return bool(n.attr == "content")
    if t is ast.Call and type(n.func) is ast.Attribute and n.func.attr == "get" and n.args:
        a = n.args[0]
        return bool(type(a) is ast.Constant and a.value == "content")
    return False


def _shallow_copy_of(v: Any) -> str | None:
    """``P`` when ``v`` is ``list(P)``, ``P[:]``, ``P.copy()`` or ``[*P]``."""
    t = type(v)
    if t is ast.Call and type(v.func) is ast.Name and v.func.id == "list" and len(v.args) == 1:
        v = v.args[0]
    elif t is ast.Call and type(v.func) is ast.Attribute and v.func.attr == "copy" and not v.args:
        v = v.func.value
    elif t is ast.Subscript and type(v.slice) is ast.Slice and v.slice.lower is None:
        v = v.value
    elif t is ast.List and len(v.elts) == 1 and type(v.elts[0]) is ast.Starred:
        v = v.elts[0].value
    else:
        return None
    return v.id if type(v) is ast.Name else None


def _own_nodes(fn: Any) -> list[Any]:
    """Nodes of ``fn``'s body, nested functions and classes left out."""
    out, stack = [], list(fn.body)
    while stack:
        n = stack.pop()
        if isinstance(n, (*_FUNCS, ast.ClassDef, ast.Lambda)):
            continue
        out.append(n)
        stack.extend(ast.iter_child_nodes(n))
    return out


class _Module:
    """The functions of one module, the marks they make and the calls between them."""

    def __init__(self, tree: ast.Module) -> None:
        self.fns: dict[tuple[str | None, str], _Fn] = {}
        for node in tree.body:
            if isinstance(node, _FUNCS):
                self.fns[(None, node.name)] = _Fn(node, None)
            elif type(node) is ast.ClassDef:
                for m in node.body:
                    if isinstance(m, _FUNCS):
                        self.fns[(node.name, m.name)] = _Fn(m, node.name)

    def callee(self, f: _Fn, call: ast.Call) -> tuple[_Fn, list[str]] | None:
        """The module's function a call runs and the parameter names its arguments fill."""
        fn = call.func
        if type(fn) is ast.Attribute and type(fn.value) is ast.Name and fn.value.id == "self":
            g = self.fns.get((f.owner, fn.attr))
            return (g, _params(g.fn, True)) if g else None
        if type(fn) is ast.Name:
            g = self.fns.get((None, fn.id))
            return (g, _params(g.fn, False)) if g else None
        return None

    def args(self, f: _Fn, call: ast.Call) -> list[tuple[str, ast.expr, _Fn]]:
        """(callee parameter, argument, callee) for every argument of a resolved call."""
        got = self.callee(f, call)
        if got is None:
            return []
        g, names = got
        out = [(p, a, g) for p, a in zip(names, call.args) if type(a) is not ast.Starred]
        out += [(k.arg, k.value, g) for k in call.keywords if k.arg]
        return out

    def marked_params(self, g: _Fn) -> dict[str, int]:
        """Parameters whose dict ``g`` marks in place -> line of the mark."""
        names = set(_params(g.fn, False))
        out: dict[str, int] = {}
        for expr, line, content in g.marks:
            r, via = g.root(expr)
            if r in names and (content or via):  # the item is a message, not a block
                out[r] = min(line, out.get(r, line))
        return out

    def item_marks(self, f: _Fn, depth: int = 0) -> list[tuple[str, Any, str, str, int, bool]]:
        """Moving items of local lists that ``f`` (or a callee) marks in place:
        (list name, site node, item text, marking function, mark line, any clears)."""
        out: list[tuple[str, Any, str, str, int, bool]] = []
        for expr, line, content in f.marks:
            hit = _moving_item(f, expr)
            if hit and (content or _content_before(f, expr, hit[1])):
                out.append((hit[0], hit[1], ast.unparse(hit[1]), f.fn.name, line, f.clears))
        if depth > 2:
            return out
        for call in f.calls:
            for p, a, g in self.args(f, call):
                mline = self.marked_params(g).get(p)
                hit = _moving_item(f, a) if mline is not None else None
                if hit and mline is not None:
                    item = ast.unparse(hit[1])
                    out.append((hit[0], call, item, g.fn.name, mline, f.clears or g.clears))
                    continue
                if type(a) is not ast.Name:
                    continue
                for name, site, item, marker, mline, cl in self.item_marks(g, depth + 1):
                    if name == p:  # reported where the moving item is taken
                        out.append((a.id, site, item, marker, mline, f.clears or cl))
        return out


def _moving_item(f: _Fn, e: Any) -> tuple[str, ast.Subscript] | None:
    """``(name, name[i])`` when ``e`` is, or is part of, an item of a local list at a moving
    index ``i``; None otherwise."""
    for n in f.steps(e):
        if type(n) is ast.Subscript and type(n.value) is ast.Name and f.moving(n.slice):
            return n.value.id, n
    return None


def _content_before(f: _Fn, e: Any, item: ast.AST) -> bool:
    """Whether the path from ``e`` to the list item ``item`` reads the item's content (the
    item is a message, whose list grows each turn, not a block of a fixed list)."""
    for n in f.steps(e):
        if n is item:
            return False
        if _is_content(n):
            return True
    return False


def shared_marks(tree: ast.Module) -> list[SharedMark]:
    """Every in-place breakpoint on a moving item of a shallow copy of a caller's list.

    One per (function, site), in source order. Never raises on a valid syntax tree.
    """
    mod = _Module(tree)
    out: dict[int, SharedMark] = {}
    for f in mod.fns.values():
        if not f.holders:
            continue
        for name, site, item, marker, line, clears in mod.item_marks(f):
            if clears or name not in f.holders:
                continue
            param, hline = f.holders[name]
            out.setdefault(
                id(site),
                SharedMark(site, item, marker, line, name, param, f.fn.name, hline),
            )
    return sorted(out.values(), key=lambda m: (m.node.lineno, m.node.col_offset))
