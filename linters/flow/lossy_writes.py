"""Text read from a lossy view and written back through its setter (the facts of PC012).

``agent.system_prompt = f"{agent.system_prompt}\\n\\n{extra}"``: when ``system_prompt`` is a
text setter (:mod:`linters.flow.text_setters`: the getter joins the text of content blocks,
the setter turns a str into one text block), the write replaces the blocks the object held,
a cache breakpoint among them, with one text block. Found per function, resolved:

- the *write*: ``x.P = V`` or ``x.P += V`` (``x`` a name) in a function;
- the *read*: ``V`` is text made from ``x.P`` read in the same function: the attribute
  itself, f-strings, ``+``/``%``, ``a or b``, ``a if c else b``, ``str`` methods
  (``.replace``, ``.strip``, ...) and ``sep.join([...])`` over such text, and local names
  bound to such text (any of their bindings). Text not made from ``x.P`` (a new prompt) is
  not a finding: replacing the prompt drops its old blocks on purpose;
- ``x``'s class is resolved (:func:`linters.flow.classes.held_class`) and ``P`` is a text
  setter of it or of a project base;
- not when the write sits in a branch where the blocks are known absent: an ``if`` on the
  blocks (``x.<blocks>`` or a property returning them, or a local name bound to one) that is
  ``None`` or empty there (``if content is not None: ... else: <write>``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from linters.flow.classes import held_class
from linters.flow.facts import ASSIGN, AUG, Scope
from linters.flow.tables import STR_REWRITE_METHODS
from linters.flow.text_setters import TextSetter, text_setter

_DEPTH = 8
_EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


@dataclass(frozen=True, slots=True)
class LossyWrite:
    """``node`` writes text made from ``obj.<prop>`` (read on ``read_line``) back through
    the text setter ``setter``, in ``function``."""

    node: ast.stmt
    obj: str
    read_line: int
    function: str
    setter: TextSetter


def lossy_writes(ev: Any) -> list[LossyWrite]:
    """Every write in ``ev``'s module (a :class:`linters.flow.values.Evaluator`) of text read
    from a text setter's own getter back into it."""
    out = []
    for node, target, value, kind, scope in ev.facts.attr_writes:
        obj, prop = target.value.id, target.attr
        read = target if kind == AUG else _text_read(ev, value, obj, prop, scope, set(), 0)
        if read is None:
            continue
        ref = held_class(ev, target.value, scope)
        ts = text_setter(ref, prop) if ref is not None else None
        if ts is None or _blocks_absent(ev, scope, node, obj, ts.views):
            continue
        out.append(LossyWrite(node, obj, read.lineno, scope.name, ts))
    return out


def _text_read(
    ev: Any, expr: Any, obj: str, prop: str, scope: Scope, seen: set[str], depth: int
) -> ast.Attribute | None:
    """The read of ``obj.prop`` that the text ``expr`` is made from, or None."""
    if depth > _DEPTH:
        return None
    t = type(expr)

    def sub(e: Any) -> ast.Attribute | None:
        """:func:`_text_read` of a part ``e`` of ``expr``, one level deeper."""
        return _text_read(ev, e, obj, prop, scope, seen, depth + 1)

    if t is ast.Attribute:
        if expr.attr == prop and type(expr.value) is ast.Name and expr.value.id == obj:
            read: ast.Attribute = expr
            return read
        return None
    if t is ast.Name:
        if expr.id in seen:
            return None
        seen.add(expr.id)
        for b in ev.resolve(expr.id, scope, expr.lineno):
            if b.scope is scope and b.kind in (ASSIGN, AUG):
                found = sub(b.value)
                if found is not None:
                    return found
        return None
    parts: list[Any] = []
    if t is ast.JoinedStr:
        parts = [v.value for v in expr.values if type(v) is ast.FormattedValue]
    elif t is ast.BinOp and type(expr.op) in (ast.Add, ast.Mod):
        parts = [expr.left, expr.right]
    elif t is ast.BoolOp:
        parts = list(expr.values)
    elif t is ast.IfExp:
        parts = [expr.body, expr.orelse]
    elif t is ast.Call and type(expr.func) is ast.Attribute:
        if expr.func.attr in STR_REWRITE_METHODS:
            parts = [expr.func.value]
        elif expr.func.attr == "join" and len(expr.args) == 1:
            arg = expr.args[0]
            parts = list(arg.elts) if type(arg) in (ast.List, ast.Tuple) else []
    for p in parts:
        found = sub(p)
        if found is not None:
            return found
    return None


def _blocks_absent(ev: Any, scope: Scope, stmt: ast.stmt, obj: str, views: frozenset) -> bool:
    """True when ``stmt`` runs only where an ``if`` found the blocks ``None`` or empty."""
    for test, in_body in _guards(scope.node.body, stmt) or ():
        present = _blocks_test(ev, scope, test, obj, views)
        if present is not None and present != in_body:
            return True
    return False


def _blocks_test(ev: Any, scope: Scope, test: Any, obj: str, views: frozenset) -> bool | None:
    """Whether ``test`` being true means the blocks are present (True) or absent (False);
    None when ``test`` is not about the blocks."""
    if type(test) is ast.UnaryOp and type(test.op) is ast.Not:
        inner = _blocks_test(ev, scope, test.operand, obj, views)
        return None if inner is None else not inner
    if (
        type(test) is ast.Compare
        and len(test.ops) == 1
        and type(test.ops[0]) in (ast.Is, ast.IsNot)
        and type(test.comparators[0]) is ast.Constant
        and test.comparators[0].value is None
    ):
        if not _reads_blocks(ev, scope, test.left, obj, views):
            return None
        return type(test.ops[0]) is ast.IsNot
    return True if _reads_blocks(ev, scope, test, obj, views) else None


def _reads_blocks(ev: Any, scope: Scope, e: Any, obj: str, views: frozenset) -> bool:
    """``obj.<view>``, or a local name bound once to it."""
    if type(e) is ast.Name:
        bl = ev.resolve(e.id, scope, e.lineno)
        if len(bl) != 1 or bl[0].kind != ASSIGN or bl[0].scope is not scope:
            return False
        e = bl[0].value
    return (
        type(e) is ast.Attribute
        and e.attr in views
        and type(e.value) is ast.Name
        and e.value.id == obj
    )


def _guards(body: list, stmt: ast.stmt) -> list[tuple[ast.expr, bool]] | None:
    """The ``if`` tests on the way to ``stmt`` in ``body``, each with whether ``stmt`` is
    in its body (True) or its ``else`` (False); an earlier ``if`` of the same body that
    always leaves it (its body ends in ``return``, ``raise``, ``continue`` or ``break``,
    no ``else``) counts as one whose ``else`` holds ``stmt``. None when ``stmt`` is not in
    ``body``."""
    exits: list[tuple[ast.expr, bool]] = []
    for s in body:
        if s is stmt:
            return exits
        t = type(s)
        if t is ast.If and not s.orelse and type(s.body[-1]) in _EXITS:
            exits.append((s.test, False))
        if t in (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef):
            continue
        if t is ast.If:
            for branch, flag in ((s.body, True), (s.orelse, False)):
                found = _guards(branch, stmt)
                if found is not None:
                    return [*exits, (s.test, flag), *found]
            continue
        blocks = [getattr(s, n, None) or [] for n in ("body", "orelse", "finalbody")]
        blocks += [h.body for h in getattr(s, "handlers", None) or []]
        blocks += [c.body for c in getattr(s, "cases", None) or []]
        for b in blocks:
            found = _guards(b, stmt)
            if found is not None:
                return [*exits, *found]
    return None
