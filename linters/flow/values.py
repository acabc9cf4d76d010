"""What an expression's value carries, found by following names through a module.

:class:`Evaluator` answers, memoised per syntax node:

- :meth:`~linters.flow.hazards.HazardMixin.hazards`: which cache hazards flow into a value
  (:mod:`linters.flow.hazards`);
- :meth:`~linters.flow.segments.SegmentMixin.segments`: the value as ordered static,
  per-request and unknown parts (:mod:`linters.flow.segments`);
- :meth:`~linters.flow.literals.LiteralMixin.literal_str` / ``literal_obj``: exact literal
  values (:mod:`linters.flow.literals`);
- :meth:`Evaluator.message_items`: the items of a message list, in order.

Data flow is followed through assignments (``x = ...``, ``x += ...``), list building
(``append``/``extend``/``insert``), loop variables, ``self.attr`` across methods, module
constants, closures, calls to functions of the project and what they return or yield
(:mod:`linters.flow.resolve`). Message lists also follow lists that functions of the module
return (``[system] + self.readonly() + [user]``) and an object's fields summed by its method
(:mod:`linters.flow.fields`); a request's keywords include those a ``**m`` splat passes when
the function builds ``m`` (:func:`linters.flow.walker.splat_pairs`).
"""

from __future__ import annotations

import ast
from typing import Any

from linters.flow.facts import APPEND, ASSIGN, AUG, DEEPSET, EXTEND, Binding, ModuleFacts, Scope
from linters.flow.fields import method_items
from linters.flow.hazards import (
    HAZARD_JSON,
    HAZARD_PARAM,
    HAZARD_SET,
    HAZARD_VIEW,
    HAZARD_VOLATILE,
    Hazard,
    HazardMixin,
)
from linters.flow.literals import LiteralMixin
from linters.flow.resolve import Resolver, short
from linters.flow.segments import (
    SEG_DYNAMIC,
    SEG_STATIC,
    SEG_UNKNOWN,
    SEG_VOLATILE,
    SegmentMixin,
    classify,
    static_chars,
)

__all__ = [
    "Evaluator",
    "Hazard",
    "HAZARD_VOLATILE",
    "HAZARD_JSON",
    "HAZARD_SET",
    "HAZARD_VIEW",
    "HAZARD_PARAM",
    "SEG_STATIC",
    "SEG_DYNAMIC",
    "SEG_VOLATILE",
    "SEG_UNKNOWN",
    "classify",
    "static_chars",
    "short",
]


class Evaluator(HazardMixin, SegmentMixin, LiteralMixin, Resolver):
    """Answers questions about expressions of one module (see the module docstring).

    ``extra_volatile`` adds fully qualified call names to the volatile table.
    """

    def __init__(self, facts: ModuleFacts, extra_volatile: frozenset[str] = frozenset()) -> None:
        super().__init__(facts, extra_volatile)
        self._hz: dict[int, tuple] = {}
        self._seg: dict[int, tuple] = {}
        self._set: dict[int, bool] = {}
        self._dict: dict[tuple[int, bool], str | None] = {}
        self._param_static: dict[tuple[int, str], bool] = {}
        self._items_active: set[int] = set()  # functions whose returned messages are being read

    def message_items(
        self, node: Any, scope: Scope, line: int | None = None, depth: int = 0
    ) -> Any:
        """The elements of a message list in order, as ``[(expr, scope, repeats)]``;
        ``repeats`` marks items appended inside a loop (they also sit before the last)."""
        if depth > 8:
            return []
        t = type(node)
        if t in (ast.List, ast.Tuple):
            return [(e, scope, False) for e in node.elts]
        if t is ast.BinOp and type(node.op) is ast.Add:
            return self.message_items(node.left, scope, line, depth + 1) + self.message_items(
                node.right, scope, line, depth + 1
            )
        if t is ast.Call:
            func = node.func
            q = self.facts.qualname(func)
            if q in ("builtins.list", "copy.copy", "copy.deepcopy") and len(node.args) == 1:
                return self.message_items(node.args[0], scope, line, depth + 1)
            if type(func) is ast.Attribute and func.attr == "copy" and not node.args:
                return self.message_items(func.value, scope, line, depth + 1)
            return self._returned_items(node, scope, depth)
        if t is ast.Name:
            return self.binding_items(self.resolve(node.id, scope, line or node.lineno), depth)
        return []

    def binding_items(self, bindings: list[Binding], depth: int) -> Any:
        """The messages a list gets from its ``bindings`` (assignments, ``append``/``insert``,
        ``extend``/``+=``, element writes), in source order; see :meth:`message_items`."""
        items: list[Any] = []
        for b in sorted(bindings, key=lambda b: (b.line, b.col)):
            if b.kind == ASSIGN:
                items.extend(self.message_items(b.value, b.scope, b.line, depth + 1))
            elif b.kind == APPEND:
                call = b.node
                if (
                    type(call) is ast.Call
                    and getattr(call.func, "attr", None) == "insert"
                    and len(call.args) == 2
                ):
                    # list.insert semantics; an unknown index counts as the front
                    idx = call.args[0]
                    pos = idx.value if type(idx) is ast.Constant and type(idx.value) is int else 0
                    items.insert(pos, (b.value, b.scope, b.in_loop))
                else:
                    items.append((b.value, b.scope, b.in_loop))
            elif b.kind in (EXTEND, AUG):
                items.extend(
                    (e, s, b.in_loop or r)
                    for e, s, r in self.message_items(b.value, b.scope, b.line, depth + 1)
                )
            elif b.kind == DEEPSET and not _targets_last(b.node):
                # ``messages[0]["content"] += ...`` changes an earlier message
                items.insert(0, (b.value, b.scope, True))
        return items

    def _returned_items(self, call: ast.Call, scope: Scope, depth: int) -> Any:
        """The messages a call to a function or method of this module returns, from its
        ``return`` expressions (``[system] + self.readonly() + [user]``), or that a method
        of an object sums from fields its makers set (:func:`linters.flow.fields.method_items`);
        empty for other calls and for a function already being read (recursion)."""
        got = method_items(self, call, scope, depth)
        if got is not None:
            return got
        fs, _bound, owner = self.callee_any(call, scope)
        if fs is None or owner is not self or id(fs) in self._items_active:
            return []
        self._items_active.add(id(fs))
        try:
            items = []
            for r in fs.returns:
                items.extend(self.message_items(r, fs, None, depth + 1))
            return items
        finally:
            self._items_active.discard(id(fs))


def _targets_last(stmt: ast.stmt) -> bool:
    """True when an element assignment writes ``x[-1]...`` (the last message)."""
    target: Any = stmt.targets[0] if type(stmt) is ast.Assign else getattr(stmt, "target", None)
    first = None
    while type(target) in (ast.Subscript, ast.Attribute):
        if type(target) is ast.Subscript:
            first = target.slice
        target = target.value
    return (
        type(first) is ast.UnaryOp
        and type(first.op) is ast.USub
        and type(first.operand) is ast.Constant
        and first.operand.value == 1
    )
