"""Breakpoints a function sets and then clears itself: the statement order of one function
over the message blocks it shares with a clean-up loop.

The shape (khoj-ai/khoj, fixed in 253656b6, 2025-05-27)::

    self.messages += [Msg(content=results)]         # results joins the history
    results[-1]["cache_control"] = {"type": "ephemeral"}   # the new breakpoint ...
    for msg in self.messages:                       # ... and the "remove old markers" loop
        for block in msg.content:
            if "cache_control" in block:
                del block["cache_control"]          # deletes the new one too

Every request then goes out without the breakpoint, so nothing after the system prompt is
ever read from cache. Found per function, without following calls:

- a *set*: ``B["cache_control"] = value`` (value not ``None``);
- a *clear*: ``del X["cache_control"]`` or ``X.pop("cache_control", ...)`` inside a ``for``
  loop; the loop's outermost iterable is the cleared *collection* ``C``;
- the set comes before the clear loop (not inside it, not in the other branch of one
  ``if``/``try``), no set follows the loop in the function, and no ``if`` around the clear
  names the set's block or its list (``if b is not last``: the clean-up spares it);
- the set's block belongs to ``C``: ``B`` (its subscripts and attributes stripped one by
  one) is ``C`` or an item of it, was put into ``C`` earlier in the function
  (``C += [...B...]``, ``C.append(...)``, ``C.extend(...)``, ``C.insert(...)``), or is a
  name bound from ``C`` (``last = C[-1]``, ``for m in C``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from linters.flow import tables

KEY = tables.CACHE_CONTROL
_ADDERS = frozenset({"append", "extend", "insert"})
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True, slots=True)
class ClearedBreakpoint:
    """A breakpoint set at ``set_node`` (the ``B["cache_control"]`` target) and deleted by
    ``clear_node`` (the ``del``/``pop``) in the loop over ``collection`` (its source text)
    that runs after it in ``function`` (its name)."""

    set_node: ast.Subscript
    clear_node: ast.AST
    collection: str
    function: str


def _key(node: Any) -> bool:
    return type(node) is ast.Constant and node.value == KEY


def _chain(node: Any) -> list[str]:
    """Source texts of ``node`` and of what it is part of, subscripts and attributes
    stripped one by one: ``a.b[-1]`` -> ``["a.b[-1]", "a.b", "a"]``."""
    out = []
    while True:
        out.append(ast.unparse(node))
        if type(node) in (ast.Subscript, ast.Attribute):
            node = node.value
        else:
            return out


class _Events:
    """Sets, clear loops, additions and bindings of one function, each with its path of
    (branching statement, branch index) pairs from the function body down."""

    def __init__(self) -> None:
        self.sets: list[tuple[ast.Subscript, int, tuple]] = []
        # (clear node, loop statement, loop path, collection text)
        self.clears: list[tuple[ast.AST, ast.stmt, tuple, str]] = []
        # (line, collection text, texts inside the added value)
        self.adds: list[tuple[int, str, frozenset[str]]] = []
        # name -> source texts it was bound from (``x = C[-1]``, ``for x in C``)
        self.bound: dict[str, set[str]] = {}

    def walk(self, stmts: list, path: tuple, loop: Any) -> None:
        for s in stmts:
            if isinstance(s, (*_FUNCS, ast.ClassDef)):
                continue
            self.stmt(s, path, loop)

    def stmt(self, s: Any, path: tuple, loop: Any) -> None:
        t = type(s)
        if t is ast.Assign:
            for tgt in s.targets:
                if type(tgt) is ast.Subscript and _key(tgt.slice):
                    if not (type(s.value) is ast.Constant and s.value.value is None):
                        self.sets.append((tgt, s.lineno, path))
                elif type(tgt) is ast.Name:
                    self.bound.setdefault(tgt.id, set()).update(_chain(s.value))
        elif t is ast.AugAssign and type(s.op) is ast.Add:
            self.adds.append((s.lineno, ast.unparse(s.target), _texts(s.value)))
        elif t is ast.Delete and loop is not None:
            for tgt in s.targets:
                if type(tgt) is ast.Subscript and _key(tgt.slice):
                    self.clears.append((tgt, *loop))
        elif t is ast.Expr:
            self.call(s.value, loop)
        if t in (ast.For, ast.AsyncFor):
            if type(s.target) is ast.Name:
                self.bound.setdefault(s.target.id, set()).update(_chain(s.iter))
            inner = loop or (s, path, ast.unparse(s.iter))
            self.walk(s.body, path + ((id(s), 0),), inner)
            self.walk(s.orelse, path + ((id(s), 1),), loop)
        elif t is ast.While:
            self.walk(s.body, path + ((id(s), 0),), loop)
            self.walk(s.orelse, path + ((id(s), 1),), loop)
        elif t is ast.If:
            self.walk(s.body, path + ((id(s), 0),), loop)
            self.walk(s.orelse, path + ((id(s), 1),), loop)
        elif t in (ast.With, ast.AsyncWith):
            self.walk(s.body, path, loop)
        elif t in (ast.Try, getattr(ast, "TryStar", ast.Try)):
            self.walk(s.body, path + ((id(s), 0),), loop)
            for i, h in enumerate(s.handlers, 1):
                self.walk(h.body, path + ((id(s), i),), loop)
            self.walk(s.orelse, path + ((id(s), 0),), loop)
            self.walk(s.finalbody, path, loop)

    def call(self, node: Any, loop: Any) -> None:
        if type(node) is not ast.Call or type(node.func) is not ast.Attribute:
            return
        attr, owner = node.func.attr, node.func.value
        if attr == "pop" and loop is not None and node.args and _key(node.args[0]):
            self.clears.append((node, *loop))
        elif attr in _ADDERS and node.args:
            added = frozenset().union(*(_texts(a) for a in node.args))
            self.adds.append((node.lineno, ast.unparse(owner), added))


def _texts(node: Any) -> frozenset[str]:
    """Source texts of the values inside ``node``: every expression except those that are
    only the base of an attribute, subscript or call (``m`` of ``m.text`` is not added)."""
    bases = set()
    for n in ast.walk(node):
        if isinstance(n, (ast.Attribute, ast.Subscript)):
            bases.add(id(n.value))
        elif type(n) is ast.Call:
            bases.add(id(n.func))
    return frozenset(
        ast.unparse(n) for n in ast.walk(node) if isinstance(n, ast.expr) and id(n) not in bases
    )


def _exclusive(a: tuple, b: tuple) -> bool:
    """Whether two paths part in different branches of one statement (never both run)."""
    for (sa, ba), (sb, bb) in zip(a, b):
        if sa != sb:
            return False
        if ba != bb:
            return True
    return False


def _belongs(ev: _Events, block: ast.expr, coll: str, before: int) -> bool:
    """Whether the block ``block`` (a set's target owner) is in the collection ``coll``."""
    chain = _chain(block)
    if any(c == coll or c.startswith(coll + "[") for c in chain):
        return True
    for line, target, added in ev.adds:
        if line < before and target == coll and any(c in added for c in chain):
            return True
    root = chain[-1]
    return any(c == coll or c.startswith(coll + "[") for c in ev.bound.get(root, ()))


def _spared(clear: ast.AST, loop: ast.stmt, block: ast.expr) -> bool:
    """Whether an ``if`` around ``clear`` inside ``loop`` names the set's block (or the list
    it is in): ``if b is not last``, ``if b is not history[-1]``: the clean-up spares it."""
    line = getattr(clear, "lineno", 0)
    names = set(_chain(block))
    for n in ast.walk(loop):
        if type(n) is ast.If and n.lineno < line <= (n.end_lineno or n.lineno):
            if names & {ast.unparse(e) for e in ast.walk(n.test) if isinstance(e, ast.expr)}:
                return True
    return False


def _in_loop(node: ast.AST, loop: ast.stmt) -> bool:
    line = getattr(node, "lineno", 0)
    return loop.lineno <= line <= (loop.end_lineno or loop.lineno)


def _function(fn: Any) -> list[ClearedBreakpoint]:
    ev = _Events()
    ev.walk(fn.body, (), None)
    out = []
    for tgt, line, spath in ev.sets:
        for clear, loop, lpath, coll in ev.clears:
            if line >= loop.lineno or _in_loop(tgt, loop) or _exclusive(spath, lpath):
                continue
            end = loop.end_lineno or loop.lineno
            if any(other > end for _t, other, _p in ev.sets):
                continue  # a breakpoint is set again after the clean-up
            if _belongs(ev, tgt.value, coll, loop.lineno) and not _spared(clear, loop, tgt.value):
                out.append(ClearedBreakpoint(tgt, clear, coll, fn.name))
                break
    return out


def cleared_breakpoints(tree: ast.Module) -> list[ClearedBreakpoint]:
    """Every breakpoint of ``tree`` that its own function deletes after setting it.

    Returns them in source order of the set. Never raises on a valid syntax tree.
    """
    out: list[ClearedBreakpoint] = []
    for node in ast.walk(tree):
        if isinstance(node, _FUNCS):
            out.extend(_function(node))
    return sorted(out, key=lambda c: (c.set_node.lineno, c.set_node.col_offset))
