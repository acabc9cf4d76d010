"""Dispatch tables: a call of a value taken from a dict or list of the project's functions.

The shape (dimagi/open-chat-studio, fixed in 6288ec3d1, 2026)::

    @property
    def factories(self):
        return {"source_material": self.get_source_material,
                "current_datetime": self.get_current_datetime}    # the *table*

    def get_context(self, variables):
        for key, factory in self.factories.items():
            context[key] = factory()                               # the *dispatch call*

    def get_current_datetime(self):
        return pretty_date(timezone.now(), tz)                     # to the second

The call ``factory()`` runs one of the table's functions; which one is decided at run time,
so the value it returns carries the hazards of each of them (they join; a finding takes the
fastest rate among them). Resolved, never guessed:

- the *callee* of a call the linter cannot otherwise resolve: a name bound by a loop over a
  table (``for f in T``, ``for k, f in T.items()``, ``for f in T.values()``) or assigned
  from an item of one (``f = T[k]``, ``f = T.get(k)``), or the item itself (``T[k](...)``,
  ``T.get(k)(...)``); a name assigned a function itself (``f = self.get_time``, either
  branch of ``a if c else b``) is a table of one (or two);
- the *table* ``T``: a dict, list or tuple display, through names, ``self.attr`` (assigned
  in any method, filled by ``T[k] = f`` or ``T.append(f)``), a ``@property`` of the class,
  or a function of the project that returns one;
- an *entry*: a function of the project (``f``, ``mod.f``, ``Cls.m``) or a bound method
  (``self.m``); entries that are anything else (a lambda, a class, a value) are skipped.
  Nothing is followed through parameters: a callback handed in by a caller is not a table.
"""

from __future__ import annotations

import ast
from typing import Any

from linters.flow.facts import APPEND, ASSIGN, ITER, SETITEM, Scope
from linters.flow.resolve import class_of

_MAX_DEPTH = 8
_VIEWS = ("items", "values")
_PROPERTIES = ("property", "cached_property")


def dispatch_targets(ev: Any, call: ast.Call, scope: Scope) -> list[tuple[Scope, bool, Any]]:
    """The project functions a call may run through a dispatch table:
    ``[(function scope, self bound, evaluator of its module)]``, in table order, without
    repeats; empty when ``call.func`` is not an entry of a table (see the module doc)."""
    out: dict[int, tuple[Scope, bool, Any]] = {}
    for expr, s, owner in _callee_entries(ev, call.func, scope, 0):
        got = _function_ref(owner, expr, s)
        if got is not None:
            out.setdefault(id(got[0]), got)
    return list(out.values())


def _callee_entries(ev: Any, func: Any, scope: Scope, depth: int) -> list[tuple[Any, Scope, Any]]:
    """Entries of the table the callee expression ``func`` takes its value from."""
    if depth > _MAX_DEPTH:
        return []
    t = type(func)
    if t is ast.Subscript and type(func.slice) is not ast.Slice:
        return _entries(ev, func.value, scope, depth + 1)
    if t is ast.Call and _is_get(func):
        return _entries(ev, func.func.value, scope, depth + 1)
    if t is not ast.Name:
        return []
    out: list[tuple[Any, Scope, Any]] = []
    for b in ev.resolve(func.id, scope, func.lineno):
        if b.kind == ITER:
            out.extend(_iterated_entries(ev, b.value, b.scope, depth + 1))
        elif b.kind == ASSIGN:
            out.extend(_assigned(ev, b.value, b.scope, depth + 1))
    return out


def _assigned(ev: Any, value: Any, scope: Scope, depth: int) -> list[tuple[Any, Scope, Any]]:
    """What a name assigned ``value`` may hold as a callee: an item of a table
    (``T[k]``, ``T.get(k)``), a function itself (``f = self.get_time``, ``f = helper``), or
    either branch of ``a if c else b``."""
    if depth > _MAX_DEPTH:
        return []
    t = type(value)
    if t is ast.IfExp:
        return _assigned(ev, value.body, scope, depth + 1) + _assigned(
            ev, value.orelse, scope, depth + 1
        )
    if t is ast.Attribute:
        return [(value, scope, ev)]
    if t is ast.Name:
        return [(value, scope, ev), *_callee_entries(ev, value, scope, depth + 1)]
    if t in (ast.Subscript, ast.Call):
        return _callee_entries(ev, value, scope, depth + 1)
    return []


def _iterated_entries(ev: Any, it: Any, scope: Scope, depth: int) -> list[tuple[Any, Scope, Any]]:
    """Entries a loop over ``it`` binds: the values of ``T.items()`` / ``T.values()``, the
    items of a list or tuple ``T``."""
    if type(it) is ast.Call and type(it.func) is ast.Attribute and not it.args:
        if it.func.attr in _VIEWS:
            return _entries(ev, it.func.value, scope, depth, dicts_only=True)
        return []
    return _entries(ev, it, scope, depth, lists_only=True)


def _entries(
    ev: Any,
    table: Any,
    scope: Scope,
    depth: int,
    dicts_only: bool = False,
    lists_only: bool = False,
) -> list[tuple[Any, Scope, Any]]:
    """The entry expressions of table ``table``: ``(expr, its scope, its evaluator)``."""
    if depth > _MAX_DEPTH:
        return []
    t = type(table)
    if t is ast.Dict:
        return [] if lists_only else [(v, scope, ev) for v in table.values]
    if t in (ast.List, ast.Tuple):
        if dicts_only:
            return []
        return [(e, scope, ev) for e in table.elts if type(e) is not ast.Starred]
    if t is ast.Name:
        return _bound_entries(
            ev, ev.resolve(table.id, scope, table.lineno), depth, dicts_only, lists_only
        )
    if t is ast.Attribute and type(table.value) is ast.Name and table.value.id == "self":
        cls = class_of(scope)
        prop = cls.funcs.get(table.attr) if cls is not None else None
        if prop is not None and _is_property(prop):
            return [
                e
                for r in prop.returns
                for e in _entries(ev, r, prop, depth + 1, dicts_only, lists_only)
            ]
        return _bound_entries(ev, ev.self_attr(table.attr, scope), depth, dicts_only, lists_only)
    if t is ast.Call:
        fs, _bound, owner = ev.callee_any(table, scope)
        if fs is None or owner is None:
            return []
        return [
            e for r in fs.returns for e in _entries(owner, r, fs, depth + 1, dicts_only, lists_only)
        ]
    return []


def _bound_entries(
    ev: Any, bindings: list[Any], depth: int, dicts_only: bool, lists_only: bool
) -> list[tuple[Any, Scope, Any]]:
    """Entries a table name (or ``self.attr``) gets from its bindings: assigned displays,
    ``T[k] = f``, ``T.append(f)``."""
    out: list[tuple[Any, Scope, Any]] = []
    for b in bindings:
        if b.kind == ASSIGN:
            out.extend(_entries(ev, b.value, b.scope, depth + 1, dicts_only, lists_only))
        elif b.kind == SETITEM and not lists_only:
            out.append((b.value, b.scope, ev))
        elif b.kind == APPEND and not dicts_only:
            out.append((b.value, b.scope, ev))
    return out


def _function_ref(ev: Any, expr: Any, scope: Scope) -> tuple[Scope, bool, Any] | None:
    """The project function a table entry names: ``f``, ``mod.f``, ``Cls.m``, ``self.m``."""
    if type(expr) not in (ast.Name, ast.Attribute):
        return None
    probe = ast.Call(func=expr, args=[], keywords=[])
    probe.lineno = getattr(expr, "lineno", 0)
    probe.col_offset = getattr(expr, "col_offset", 0)
    fs, bound, owner = ev.callee_any(probe, scope)
    if fs is None or owner is None or _is_property(fs):
        return None
    return fs, bound, owner


def _is_get(node: ast.Call) -> bool:
    return type(node.func) is ast.Attribute and node.func.attr == "get" and bool(node.args)


def _is_property(fs: Scope) -> bool:
    for d in getattr(fs.node, "decorator_list", ()):
        name = d.attr if type(d) is ast.Attribute else getattr(d, "id", None)
        if name in _PROPERTIES:
            return True
    return False
