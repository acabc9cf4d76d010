"""Breakpoints written in place into shared message dicts, at a position that moves.

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

and with a history the instance keeps (amaiya/patchpal, fixed in 3834d1d)::

    messages = [{"role": "system", "content": SYSTEM}] + self.messages   # same dicts
    for idx in non_system[-2:]:
        messages[idx]["content"][-1].update({"cache_control": {...}})     # in place

The function copies a list that outlives the call (so it does not mean to change that
history) but marks one of the shared dicts: the marker stays in the history, the next turn
marks another message, and after four turns the request carries more than four breakpoints
(the API rejects it). Found per module, following calls to functions of the module and
``self.`` methods of the same class (two calls deep):

- a *shared list* ``P``: a parameter (the caller's list), or ``self.X`` where the class
  grows ``self.X`` (``.append``/``.extend``/``.insert``/``+=`` in any method: a history kept
  across calls);
- a *holder*: ``h.extend(P)``, ``h += P``, ``h = list(P)`` / ``P[:]`` / ``P.copy()`` /
  ``[*P]`` / ``[a, *P]`` / ``[a] + P`` / ``P + [b]`` (a shallow copy: new list, shared items);
- a *moving item*: ``h[i]`` where ``i`` is a negative constant or contains ``len(...)``
  (directly or through a local name, the value it holds at that line);
- an *in-place mark* of that item: ``item...["cache_control"] = v``,
  ``item[k] = [{..., "cache_control": ...}]``, ``item.update({"cache_control": v})`` (or a
  name given such a dict, or ``cache_control=v``), ``item.setdefault("cache_control", v)``,
  in the function or in a callee that gets the item (or the holder) as an argument;
- no ``del``/``pop`` of ``"cache_control"`` in any function of the chain (old markers are
  not cleared), no count of the markers already there (``n += 1`` under
  ``if "cache_control" in block``, ``sum``/``len`` over such a filter: a budget), and the
  item is not copied first (``copy.deepcopy``/``dict(...)`` give a new name, which is not
  the holder's item). A check of the marked item alone (``"cache_control" in block``) is
  named in the finding: it does not stop the markers piling up.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from linters.flow import tables
from linters.flow.nodes import FUNCS, own_nodes

KEY = tables.CACHE_CONTROL
_STRIP_CALLS = frozenset({"get", "setdefault"})
_WRAPPERS = frozenset({"reversed", "enumerate", "iter"})


@dataclass(frozen=True, slots=True)
class SharedMark:
    """A breakpoint put in place on ``item`` (source text, e.g. ``messages[boundary_index]``)
    taken at ``node``; ``mark_line`` is the line of the ``cache_control`` assignment (in
    function ``marker``); ``holder_line`` the line where list ``holder`` took the items of
    ``param``: a parameter of function ``builder`` (the caller's list) or ``self.X`` (a list
    the instance keeps and grows across calls); ``check_line`` the last line before the mark
    where the marking function looks for a marker already on the item (``KEY in block``: a check of
    that item only, not a count of the history's markers), None if it does not."""

    node: Any
    item: str
    marker: str
    mark_line: int
    holder: str
    param: str
    builder: str
    holder_line: int
    check_line: int | None = None


def _key(node: Any) -> bool:
    return type(node) is ast.Constant and node.value == KEY


def _params(fn: Any, bound: bool) -> list[str]:
    """Parameter names a call passes positionally into (``self`` dropped for bound calls)."""
    names = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    static = any(type(d) is ast.Name and d.id == "staticmethod" for d in fn.decorator_list)
    return names[1:] if bound and not static and names else names


class _Fn:
    """What one function does with ``cache_control`` and its parameters."""

    def __init__(
        self,
        fn: Any,
        owner: str | None,
        kept: frozenset[str] = frozenset(),
        markers: frozenset[str] = frozenset(),
    ) -> None:
        self.fn = fn
        self.markers = markers  # module constants that are marker dicts (``MARK = {KEY: ...}``)
        self.owner = owner
        # every value a local name is given, with the line of the binding
        self.bound: dict[str, list[tuple[int, ast.expr]]] = {}
        # (marked expression, line, whether the mark replaces its "content")
        self.marks: list[tuple[ast.expr, int, bool]] = []
        # old markers cleared (``del``/``.pop``) or counted against the budget first
        self.clears = _counts_markers(fn)
        self.holders: dict[str, tuple[str, int]] = {}  # holder -> (source list, line)
        self.calls: list[ast.Call] = []
        params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
        # lists that outlive the call: the caller's (parameters) and the instance's growing
        # lists (``self.messages``, kept across calls)
        self.shared = params | {f"self.{k}" for k in kept}
        nodes = own_nodes(fn.body)
        for node in nodes:  # names first: a mark may use a name bound further down
            t = type(node)
            if t is ast.Assign:
                for tgt in node.targets:
                    if type(tgt) is ast.Name:
                        self.bound.setdefault(tgt.id, []).append((node.lineno, node.value))
            elif t in (ast.For, ast.AsyncFor, ast.comprehension) and type(node.target) is ast.Name:
                line = getattr(node, "lineno", node.iter.lineno)
                self.bound.setdefault(node.target.id, []).append((line, node.iter))
        for lst in self.bound.values():
            lst.sort(key=lambda p: p[0])
        for node in nodes:
            self.node(node)

    def node(self, n: Any) -> None:
        t = type(n)
        if t is ast.Assign:
            for tgt in n.targets:
                if type(tgt) is ast.Name:
                    src = _shallow_copy_of(n.value, self.shared)
                    if src is not None:
                        self.holders[tgt.id] = (src, n.lineno)
                elif type(tgt) is ast.Subscript:
                    if _key(tgt.slice):
                        if not (type(n.value) is ast.Constant and n.value.value is None):
                            self.marks.append((tgt.value, n.lineno, False))
                    elif any(
                        type(d) is ast.Dict and any(map(_key, d.keys)) for d in ast.walk(n.value)
                    ):
                        self.marks.append((tgt.value, n.lineno, _is_content(tgt)))
        elif t is ast.AugAssign and type(n.target) is ast.Name and type(n.op) is ast.Add:
            src = _shared_name(n.value, self.shared)
            if src is not None:
                self.holders[n.target.id] = (src, n.lineno)
        elif t is ast.Delete:
            self.clears |= any(type(x) is ast.Subscript and _key(x.slice) for x in n.targets)
        elif t is ast.Call:
            self.call(n)

    def call(self, n: ast.Call) -> None:
        f = n.func
        if type(f) is ast.Attribute:
            if f.attr == "pop" and n.args and _key(n.args[0]):
                self.clears = True
            elif f.attr == "extend" and type(f.value) is ast.Name and n.args:
                src = _shared_name(n.args[0], self.shared)
                if src is not None:
                    self.holders[f.value.id] = (src, n.lineno)
            elif f.attr == "setdefault" and n.args and _key(n.args[0]):
                self.marks.append((f.value, n.lineno, False))  # item.setdefault(KEY, v)
            elif f.attr == "update" and self._marker_dict(n):
                self.marks.append((f.value, n.lineno, False))  # item.update({KEY: v})
        self.calls.append(n)

    def _marker_dict(self, n: ast.Call) -> bool:
        """``x.update(...)`` writes ``cache_control``: a keyword, a dict display with the key,
        or a local name one of whose values is such a display (``marker = {KEY: ...}`` on
        one branch, another provider's marker on the other)."""
        if any(k.arg == KEY for k in n.keywords):
            return True
        if len(n.args) != 1:
            return False
        a = n.args[0]
        if type(a) is ast.Name and a.id not in self.bound:
            return a.id in self.markers
        values = [v for _, v in self.bound.get(a.id, [])] if type(a) is ast.Name else [a]
        return any(_marker_display(v) for v in values)

    def alias(self, name: str, line: int) -> ast.expr:
        """The value ``name`` holds at ``line``: its last binding on an earlier line (or on
        ``line``: a loop header), the first one when none comes before."""
        got = self.bound[name]
        before = [v for ln, v in got if ln <= line]
        return before[-1] if before else got[0][1]

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
            elif t is ast.Name and e.id in self.bound and len(out) < 48:
                e = self.alias(e.id, getattr(e, "lineno", 0))
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
            if type(n) is ast.Name and n.id in self.bound and depth < 4:
                # the value it holds there: ``for idx in first_two`` ... ``for idx in last_two``
                if self.moving(self.alias(n.id, getattr(n, "lineno", 0)), depth + 1):
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


def _marker_display(v: Any) -> bool:
    """``{..., "cache_control": ...}``: a dict display that carries a marker."""
    return type(v) is ast.Dict and any(map(_key, v.keys))


def _shared_name(v: Any, shared: set[str] | frozenset[str]) -> str | None:
    """``P`` (a parameter) or ``self.X`` when ``v`` is one of the lists in ``shared``."""
    if type(v) is ast.Name and v.id in shared:
        return v.id
    if type(v) is ast.Attribute and type(v.value) is ast.Name and v.value.id == "self":
        name = f"self.{v.attr}"
        return name if name in shared else None
    return None


def _shallow_copy_of(v: Any, shared: set[str] | frozenset[str], depth: int = 0) -> str | None:
    """``P`` when ``v`` is a new list of the items of a shared list ``P`` (a parameter or
    ``self.X``): ``list(P)``, ``P[:]``, ``P.copy()``, ``[*P]``, ``[a, *P]``, ``[a] + P``,
    ``P + [b]``."""
    t = type(v)
    if depth > 8:
        return None
    if t is ast.Call and type(v.func) is ast.Name and v.func.id == "list" and len(v.args) == 1:
        return _shared_name(v.args[0], shared)
    if t is ast.Call and type(v.func) is ast.Attribute and v.func.attr == "copy" and not v.args:
        return _shared_name(v.func.value, shared)
    if t is ast.Subscript and type(v.slice) is ast.Slice and v.slice.lower is None:
        return _shared_name(v.value, shared)
    if t is ast.List:
        for e in v.elts:
            src = _shared_name(e.value, shared) if type(e) is ast.Starred else None
            if src is not None:
                return src
        return None
    if t is ast.BinOp and type(v.op) is ast.Add:
        for side in (v.left, v.right):
            src = _shared_name(side, shared) or _shallow_copy_of(side, shared, depth + 1)
            if src is not None:
                return src
    return None


def _counts_markers(fn: Any) -> bool:
    """Whether ``fn`` (nested functions included) counts the markers already there before
    adding its own (a budget): ``n += 1`` under ``if KEY in block``, or ``sum(...)`` /
    ``len([...])`` over items filtered by ``KEY in ...``."""
    for n in ast.walk(fn):
        if isinstance(n, ast.If) and _tests_key(n.test):
            if any(isinstance(b, ast.AugAssign) and type(b.op) is ast.Add for b in ast.walk(n)):
                return True
        elif isinstance(n, ast.Call) and type(n.func) is ast.Name and n.func.id in ("sum", "len"):
            for c in ast.walk(n):
                if type(c) is ast.comprehension and any(map(_tests_key, c.ifs)):
                    return True
    return False


def _checks(fn: Any, mark_line: int) -> int | None:
    """The last line of ``fn`` up to ``mark_line`` that tests ``KEY in x`` (the check that
    guards the mark; nested functions left out), None if there is none."""
    lines = [
        n.lineno
        for n in own_nodes(fn.body)
        if type(n) is ast.Compare and n.lineno <= mark_line and _tests_key(n)
    ]
    return max(lines) if lines else None


def _tests_key(test: Any) -> bool:
    """``KEY in x`` somewhere in ``test``."""
    return any(
        type(c) is ast.Compare and _key(c.left) and any(type(op) is ast.In for op in c.ops)
        for c in ast.walk(test)
    )


class _Module:
    """The functions of one module, the marks they make and the calls between them."""

    def __init__(self, tree: ast.Module) -> None:
        self.fns: dict[tuple[str | None, str], _Fn] = {}
        markers = frozenset(
            t.id
            for node in tree.body
            if type(node) is ast.Assign and _marker_display(node.value)
            for t in node.targets
            if type(t) is ast.Name
        )
        for node in tree.body:
            if isinstance(node, FUNCS):
                self.fns[(None, node.name)] = _Fn(node, None, markers=markers)
            elif type(node) is ast.ClassDef:
                kept = _growing_attrs(node)
                for m in node.body:
                    if isinstance(m, FUNCS):
                        self.fns[(node.name, m.name)] = _Fn(m, node.name, kept, markers)

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

    def item_marks(self, f: _Fn, depth: int = 0) -> list[tuple[str, Any, str, _Fn, int, bool]]:
        """Moving items of local lists that ``f`` (or a callee) marks in place:
        (list name, site node, item text, marking function, mark line, any clears)."""
        out: list[tuple[str, Any, str, _Fn, int, bool]] = []
        for expr, line, content in f.marks:
            hit = _moving_item(f, expr)
            if hit and (content or _content_before(f, expr, hit[1])):
                out.append((hit[0], hit[1], ast.unparse(hit[1]), f, line, f.clears))
        if depth > 2:
            return out
        for call in f.calls:
            for p, a, g in self.args(f, call):
                mline = self.marked_params(g).get(p)
                hit = _moving_item(f, a) if mline is not None else None
                if hit and mline is not None:
                    item = ast.unparse(hit[1])
                    out.append((hit[0], call, item, g, mline, f.clears or g.clears))
                    continue
                if type(a) is not ast.Name:
                    continue
                for name, site, item, marker, mline, cl in self.item_marks(g, depth + 1):
                    if name == p:  # reported where the moving item is taken
                        out.append((a.id, site, item, marker, mline, f.clears or cl))
        return out


_GROW = frozenset({"append", "extend", "insert"})


def _growing_attrs(cls: ast.ClassDef) -> frozenset[str]:
    """Attributes of the instance that grow across calls, a history kept by the object:
    ``self.X.append/extend/insert(...)`` or ``self.X += ...`` in any method."""
    out = set()
    for n in ast.walk(cls):
        target: Any
        if isinstance(n, ast.Call) and type(n.func) is ast.Attribute and n.func.attr in _GROW:
            target = n.func.value
        elif isinstance(n, ast.AugAssign) and type(n.op) is ast.Add:
            target = n.target
        else:
            continue
        if type(target) is ast.Attribute and type(target.value) is ast.Name:
            if target.value.id == "self":
                out.add(target.attr)
    return frozenset(out)


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
            check = _checks(marker.fn, line)
            out.setdefault(
                id(site),
                SharedMark(site, item, marker.fn.name, line, name, param, f.fn.name, hline, check),
            )
    return sorted(out.values(), key=lambda m: (m.node.lineno, m.node.col_offset))
