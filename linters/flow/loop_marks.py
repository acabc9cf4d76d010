"""``cache_control`` markers set on every item of an unbounded loop (PC005's count).

Anthropic accepts at most 4 breakpoints a request. A loop over blocks, messages or tool
calls that gives *each* item a marker carries one breakpoint per item: past four items the
API rejects the request. The shapes, one statement of the loop body (inside ``if``/``try``/
``with`` blocks too):

- ``b["cache_control"] = {...}``;
- ``out.append({..., "cache_control": ...})`` or ``out.append(Block(..., cache_control=...))``;
- ``out.append(helper(item, flag))`` where ``helper`` is a function or method of the module
  that returns such a dict or call: the serializer of browser-use (fixed in 378738082,
  2025-11): ``for part in content: blocks.append(Ser._text_part(part, use_cache))`` with
  ``_text_part`` returning ``TextBlockParam(..., cache_control=Ser._cache(use_cache))``.

It is every item only when the marker does not depend on the item: a marker whose value
(or the helper arguments it is computed from) names the loop's own variables (``use_cache
and i == len(parts) - 1``), or an ``if`` on them that is not a filter by kind (``if
part.type == "text"`` still marks every text part; ``if i == last`` marks one), marks a
chosen item only. A loop over at most 4 items (``x[-2:]``, a literal of four, ``range(3)``)
or one that ``break``s or ``return``s is not reported.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from linters.flow import tables
from linters.flow.nodes import FUNCS

KEY = tables.CACHE_CONTROL
_LOOPS = (ast.For, ast.AsyncFor)


@dataclass(frozen=True, slots=True)
class LoopMark:
    """A marker set on every item of the loop over ``iterable``: ``mark`` is the node to
    report (the key, keyword value or helper call inside the loop); ``helper`` names the
    function that puts the marker on the block and ``helper_line`` the line where it does
    (None when the loop sets it itself)."""

    mark: ast.AST
    iterable: ast.expr
    helper: str | None = None
    helper_line: int | None = None


def bounded(it: Any) -> bool:
    """An iterable of at most 4 items (Anthropic's breakpoint limit): a literal of up to 4
    elements, ``x[-k:]``/``x[:k]`` or ``range(k)`` with k <= 4, or ``enumerate`` of one.
    False when not known to be bounded. Never raises."""
    t = type(it)
    if t in (ast.List, ast.Tuple, ast.Set):
        return len(it.elts) <= 4
    if t is ast.Call and type(it.func) is ast.Name and it.args:
        if it.func.id in ("enumerate", "reversed"):
            return bounded(it.args[0])
        if it.func.id == "range" and len(it.args) == 1:
            n = it.args[0]
            return type(n) is ast.Constant and type(n.value) is int and n.value <= 4
    if t is ast.Subscript and type(it.slice) is ast.Slice:
        lo, hi = it.slice.lower, it.slice.upper
        if hi is None and type(lo) is ast.UnaryOp and type(lo.operand) is ast.Constant:
            k = lo.operand.value
            return type(lo.op) is ast.USub and type(k) is int and k <= 4
        if lo is None and type(hi) is ast.Constant and type(hi.value) is int:
            return hi.value <= 4
    return False


def _names(node: Any) -> set[str]:
    return {n.id for n in ast.walk(node) if type(n) is ast.Name} if node is not None else set()


def _none(node: Any) -> bool:
    return type(node) is ast.Constant and node.value is None


def _bound_in(loop: Any) -> set[str]:
    """Names the loop binds: its target and every name assigned in its body."""
    out = _names(loop.target)
    node: Any
    for node in ast.walk(loop):
        if type(node) in (ast.Assign, ast.AugAssign, ast.AnnAssign, *_LOOPS, ast.NamedExpr):
            targets = node.targets if type(node) is ast.Assign else [node.target]
            for t in targets:
                out |= {x.id for x in ast.walk(t) if type(x) is ast.Name}
    return out


def _kind_filter(test: Any, loop_names: set[str]) -> bool:
    """Whether an ``if`` test leaves every item of some kind through: it does not name the
    loop's variables, or only compares an item's field with a string (``part.type ==
    "text"``, ``m["role"] in ("user", "tool")``) or checks its class (``isinstance``)."""
    if not (_names(test) & loop_names):
        return True
    t = type(test)
    if t is ast.BoolOp:
        return all(_kind_filter(v, loop_names) for v in test.values)
    if t is ast.UnaryOp and type(test.op) is ast.Not:
        return _kind_filter(test.operand, loop_names)
    if t is ast.Call and type(test.func) is ast.Name and test.func.id == "isinstance":
        return True
    if t is ast.Compare and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        field = type(left) in (ast.Attribute, ast.Subscript) or (
            type(left) is ast.Call and type(left.func) is ast.Attribute
        )
        consts = (
            [right]
            if type(right) is ast.Constant
            else list(right.elts)
            if type(right) in (ast.Tuple, ast.List, ast.Set)
            else []
        )
        return (
            field
            and bool(consts)
            and all(type(c) is ast.Constant and type(c.value) is str for c in consts)
        )
    return False


class _Module:
    """Functions and methods of one module, for following a helper call one level."""

    def __init__(self, tree: ast.Module) -> None:
        self.funcs: dict[str, Any] = {}
        self.methods: dict[tuple[str, str], Any] = {}
        for node in tree.body:
            if isinstance(node, FUNCS):
                self.funcs[node.name] = node
            elif type(node) is ast.ClassDef:
                for m in node.body:
                    if isinstance(m, FUNCS):
                        self.methods[(node.name, m.name)] = m

    def helper(self, call: ast.Call, cls: str | None) -> tuple[Any, bool] | None:
        """The function a call reaches and whether its first parameter is bound
        (``self.m()``, ``cls.m()``, a classmethod through its class)."""
        func = call.func
        if type(func) is ast.Name:
            fn = self.funcs.get(func.id)
            return (fn, False) if fn is not None else None
        if type(func) is not ast.Attribute or type(func.value) is not ast.Name:
            return None
        owner = func.value.id
        name = cls if owner in ("self", "cls") else owner
        fn = self.methods.get((name, func.attr)) if name is not None else None
        if fn is None:
            return None
        decos = {d.id for d in fn.decorator_list if type(d) is ast.Name}
        if "staticmethod" in decos:
            return fn, False
        return fn, owner in ("self", "cls") or "classmethod" in decos


def _marker_of(node: Any) -> tuple[ast.AST, ast.expr] | None:
    """``(node to report, marker value)`` when ``node`` builds a block carrying a marker:
    a dict with a ``"cache_control"`` key or a call with ``cache_control=`` (not None)."""
    if type(node) is ast.Dict:
        for k, v in zip(node.keys, node.values):
            if type(k) is ast.Constant and k.value == KEY and not _none(v):
                return k, v
    elif type(node) is ast.Call:
        for kw in node.keywords:
            if kw.arg == KEY and not _none(kw.value):
                return kw.value, kw.value
    return None


def _arguments(call: ast.Call, fn: Any, bound: bool) -> dict[str, ast.expr]:
    """The expressions a call passes to each parameter of ``fn`` (defaults not included)."""
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if bound:
        params = params[1:]
    out = {p: a for p, a in zip(params, call.args) if type(a) is not ast.Starred}
    out.update({kw.arg: kw.value for kw in call.keywords if kw.arg is not None})
    return out


def _helper_mark(
    mod: _Module, call: ast.Call, cls: str | None, loop_names: set[str]
) -> tuple[str, int] | None:
    """``(helper name, line of its marker)`` when ``call`` reaches a function of the module
    that returns a block with a marker that does not depend on the loop's variables."""
    found = mod.helper(call, cls)
    if found is None:
        return None
    fn, bound = found
    args = _arguments(call, fn, bound)
    params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
    local: dict[str, ast.expr] = {}
    returns: list[ast.Return] = []
    for n in ast.walk(fn):  # one walk: locals (last binding wins) and returns, in order
        if type(n) is ast.Assign and len(n.targets) == 1 and type(n.targets[0]) is ast.Name:
            local[n.targets[0].id] = n.value
        elif type(n) is ast.Return and n.value is not None:
            returns.append(n)
    for r in returns:
        got = _marker_of(r.value)
        if got is None:
            continue
        names = _names(got[1])
        for name in list(names):  # one step through a local: ``cc = f(flag)``
            if name in local and name not in params:
                names |= _names(local[name])
        used = [args[p] for p in names & params if p in args]
        if not any(_names(a) & loop_names for a in used):
            return ast.unparse(call.func), getattr(got[0], "lineno", r.lineno)
    return None


def _scan(
    stmts: list, loop: Any, names: set[str], mod: _Module, cls: str | None, out: list
) -> None:
    for s in stmts:
        t = type(s)
        if t is ast.If:
            if _kind_filter(s.test, names):
                _scan(s.body, loop, names, mod, cls, out)
                _scan(s.orelse, loop, names, mod, cls, out)
        elif t in (ast.With, ast.AsyncWith):
            _scan(s.body, loop, names, mod, cls, out)
        elif t is ast.Try or t is getattr(ast, "TryStar", None):
            for block in (s.body, *(h.body for h in s.handlers), s.orelse, s.finalbody):
                _scan(block, loop, names, mod, cls, out)
        elif t is ast.Assign:
            tgt = s.targets[0]
            if (
                type(tgt) is ast.Subscript
                and type(tgt.slice) is ast.Constant
                and tgt.slice.value == KEY
                and not _none(s.value)
                and not (_names(s.value) & names)
            ):
                out.append(LoopMark(tgt, loop.iter))
        elif t is ast.Expr and type(s.value) is ast.Call and s.value.args:
            arg = s.value.args[-1]
            got = _marker_of(arg)
            if got is not None:
                if not (_names(got[1]) & names):
                    out.append(LoopMark(got[0], loop.iter))
            elif type(arg) is ast.Call:
                helper = _helper_mark(mod, arg, cls, names)
                if helper is not None:
                    out.append(LoopMark(arg, loop.iter, *helper))


def loop_marks(tree: ast.Module) -> list[LoopMark]:
    """Every marker of ``tree`` set on each item of an unbounded loop, in source order.
    Never raises on a valid syntax tree."""
    mod = _Module(tree)
    out: list[LoopMark] = []
    todo: list[tuple[Any, str | None]] = [(tree, None)]
    while todo:
        node, cls = todo.pop()
        child: Any
        for child in ast.iter_child_nodes(node):
            inner = child.name if type(child) is ast.ClassDef else cls
            if type(child) in _LOOPS and not bounded(child.iter):
                if not any(type(n) in (ast.Break, ast.Return) for n in ast.walk(child)):
                    _scan(child.body, child, _bound_in(child), mod, cls, out)
            todo.append((child, inner))
    return sorted(
        out, key=lambda m: (getattr(m.mark, "lineno", 0), getattr(m.mark, "col_offset", 0))
    )
