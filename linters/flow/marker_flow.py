"""Where a dict goes: from the place a cache marker is written to the request that sends it.

The marker checks (:mod:`linters.flow.markers`) report a marker only when the dict that
carries it really reaches a request of a client the linter knows, found by data flow, not
by names (issue 28). This module is that data flow, per module:

- a *function model* (:class:`Fn`) of each function body (and of the module body): the
  names bound from other expressions (assignments, loop targets), the requests it makes,
  the values it returns, the values it puts into other containers;
- :meth:`Flow.roots`: the local names a marked expression is part of
  (``messages[idx]["content"][-1]`` -> ``messages``; through ``.get()``, ``reversed()``,
  ``enumerate()``, ``cast()`` and names bound from those);
- :meth:`Flow.reach`: whether the object a local name holds ends up in a request field
  (``messages``/``system``/``tools``/``input``) of a known request call: in the function
  itself (keywords, or ``**kwargs`` built as a dict display), through another container it
  is put into, back to the callers of the function when it is a parameter (the callers'
  object is changed in place) or when it is returned, and into functions of the module it
  is passed to. Callers and callees are the module's own functions and methods
  (:meth:`linters.flow.resolve.Resolver.callee`), six hops at most.

Known requests (:func:`request_kind`): ``litellm.completion``/``acompletion`` (also through
a local name bound to the ``litellm`` module), ``<client>.messages.create``/``stream``
(Anthropic), ``<client>.chat.completions.create`` and ``<client>.responses.create``
(OpenAI), boto3 ``converse``/``converse_stream``, and request bodies written as a dict
display with a ``"model"`` key.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from linters.flow import tables
from linters.flow.facts import Scope
from linters.flow.nodes import FUNCS, const_str, inside
from linters.flow.values import Evaluator

#: request fields that carry content blocks (the places a marker can sit)
FIELDS = frozenset({"messages", "system", "tools", "input"})
#: calls whose result is their (first) argument, or holds its items
_PASS = frozenset({"reversed", "enumerate", "iter", "list", "sorted", "tuple"})
_PASS_QUAL = frozenset({"typing.cast", "copy.copy", "copy.deepcopy", "builtins.list"})
_MAX_HOPS = 6


@dataclass(slots=True)
class Req:
    """A request call (or body dict) ``node`` of kind ``kind`` (``litellm``,
    ``anthropic``, ``openai``, ``converse``, ``body``) whose marker-carrying fields are
    ``values``; ``name`` is how to call it in a message (``litellm.completion()``)."""

    node: Any
    kind: str
    name: str
    values: list[ast.expr] = field(default_factory=list)
    spreads: set[str] = field(default_factory=set)  # dict locals given as ``**name``


def request_kind(fn: Fn, call: ast.Call, ev: Evaluator) -> tuple[str, str] | None:
    """``(kind, display name)`` of a known request call (``("anthropic", "messages.create()")``;
    kinds as :class:`Req`), or None when ``call`` is not one. Never raises."""
    func = call.func
    qual = ev.facts.qualname(func) or ""
    if qual in tables.REQUEST_FUNCTIONS and qual.startswith("litellm."):
        return "litellm", qual + "()"
    if type(func) is not ast.Attribute:
        return None
    if func.attr in ("converse", "converse_stream"):
        return "converse", f"{func.attr}()"
    recv = func.value
    if func.attr in tables.REQUEST_METHODS and type(recv) is ast.Attribute:
        kind = {"messages": "anthropic", "completions": "openai", "responses": "openai"}.get(
            recv.attr
        )
        if kind is not None and not _chain_has(recv, "threads"):
            return kind, f"{recv.attr}.{func.attr}()"
    if func.attr in ("completion", "acompletion") and type(recv) is ast.Name:
        if fn.is_module(recv.id, "litellm", ev):
            return "litellm", f"{recv.id}.{func.attr}()"
    return None


def _chain_has(node: Any, attr: str) -> bool:
    while type(node) is ast.Attribute:
        if node.attr == attr:
            return True
        node = node.value
    return False


class Fn:
    """One function body (or the module body): parents, bindings, requests, returns."""

    def __init__(self, node: Any, scope: Scope | None, ev: Evaluator) -> None:
        self.node = node
        self.scope = scope
        self.parent: dict[int, ast.AST] = {}
        self.aliases: dict[str, list[ast.expr]] = {}
        self.puts: list[tuple[ast.expr, ast.expr]] = []  # (container, value put into it)
        self.returns: list[ast.expr] = []
        self.calls: list[ast.Call] = []
        self.dicts: list[ast.Dict] = []
        self.assigns: list[ast.Assign] = []
        args = getattr(node, "args", None)
        self.params: list[str] = (
            [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)] if args else []
        )
        stack: list[Any] = list(node.body)
        while stack:
            n = stack.pop()
            if isinstance(n, (*FUNCS, ast.ClassDef, ast.Lambda)):
                continue
            self._note(n)
            for child in ast.iter_child_nodes(n):
                self.parent[id(child)] = n
                stack.append(child)
        self.requests = self._requests(ev)

    def _bind(self, target: Any, value: ast.expr) -> None:
        if type(target) is ast.Name:
            self.aliases.setdefault(target.id, []).append(value)
        elif type(target) in (ast.Tuple, ast.List):
            for elt in target.elts:
                self._bind(elt.value if type(elt) is ast.Starred else elt, value)
        elif type(target) in (ast.Subscript, ast.Attribute):
            self.puts.append((target.value, value))
            if type(target) is ast.Attribute and _is_self(target.value):
                self.aliases.setdefault("self." + target.attr, []).append(value)

    def _note(self, n: Any) -> None:
        t = type(n)
        if t is ast.Assign:
            self.assigns.append(n)
            for tgt in n.targets:
                self._bind(tgt, n.value)
        elif t in (ast.AnnAssign, ast.NamedExpr) and n.value is not None:
            self._bind(n.target, n.value)
        elif t is ast.AugAssign:
            self._bind(n.target, n.value)
        elif t in (ast.For, ast.AsyncFor, ast.comprehension):
            self._bind(n.target, n.iter)
        elif t is ast.withitem and n.optional_vars is not None:
            self._bind(n.optional_vars, n.context_expr)
        elif t is ast.Return and n.value is not None:
            self.returns.append(n.value)
        elif t is ast.Call:
            self.calls.append(n)
            f = n.func
            if type(f) is ast.Attribute and f.attr in ("append", "extend", "insert", "update"):
                for a in n.args:
                    self.puts.append((f.value, a))
        elif t is ast.Dict:
            self.dicts.append(n)

    def is_module(self, name: str, module: str, ev: Evaluator) -> bool:
        """Whether local ``name`` is bound to ``module`` itself (``x = m``, ``x = w(m) if c
        else m``); False when unknown. Never raises."""
        for value in self.aliases.get(name, ()):
            for sub in ast.walk(value):
                if type(sub) is ast.Name and ev.facts.qualname(sub) == module:
                    if type(value) in (ast.Name, ast.IfExp, ast.BoolOp):
                        return True
        return False

    def _requests(self, ev: Evaluator) -> list[Req]:
        out = []
        spread: set[str] = set()  # dict locals passed as ``**name`` to a known request
        for call in self.calls:
            kn = request_kind(self, call, ev)
            if kn is None:
                continue
            req = Req(call, kn[0], kn[1])
            for kw in call.keywords:
                if kw.arg in FIELDS:
                    req.values.append(kw.value)
                elif kw.arg is None and type(kw.value) is ast.Name:
                    req.values.extend(self.fields_of(kw.value.id))
                    req.spreads.add(kw.value.id)
                    spread.add(kw.value.id)
            out.append(req)
        for d in self.dicts:
            keys = [const_str(k) for k in d.keys]
            up: Any = self.parent.get(id(d))
            if type(up) in (ast.Assign, ast.AnnAssign):
                targets = up.targets if type(up) is ast.Assign else [up.target]
                if any(type(t) is ast.Name and t.id in spread for t in targets):
                    continue  # the body of a call above: that call is the request
            if "model" in keys and FIELDS.intersection(k for k in keys if k):
                req = Req(d, "body", "the request body")
                req.values = [v for k, v in zip(keys, d.values) if k in FIELDS]
                out.append(req)
        return out

    def fields_of(self, name: str) -> list[ast.expr]:
        """Values given to request fields of the dict local ``name`` holds (a dict display,
        or ``name["messages"] = v``); empty when none is known. Never raises."""
        out = []
        for value in self.aliases.get(name, ()):
            if type(value) is ast.Dict:
                out += [v for k, v in zip(value.keys, value.values) if const_str(k) in FIELDS]
        for stmt in self.parent.values():
            if type(stmt) is ast.Assign:
                for tgt in stmt.targets:
                    if (
                        type(tgt) is ast.Subscript
                        and type(tgt.value) is ast.Name
                        and tgt.value.id == name
                        and const_str(tgt.slice) in FIELDS
                    ):
                        out.append(stmt.value)
        return out

    def ancestors(self, node: ast.AST) -> list[Any]:
        """The enclosing nodes of ``node`` inside this function, innermost first (empty for
        a node outside it). Never raises."""
        out: list[Any] = []
        cur = self.parent.get(id(node))
        while cur is not None:
            out.append(cur)
            cur = self.parent.get(id(cur))
        return out


def _is_self(node: Any) -> bool:
    return type(node) is ast.Name and node.id == "self"


def carries(expr: Any, name: str, depth: int = 0) -> bool:
    """Whether ``expr``'s value holds the object local ``name`` holds (or its items): the
    name itself, a display or concatenation containing it, a shallow copy, a slice, a
    comprehension over it. False when unknown (or past 12 levels). Never raises."""
    if depth > 12 or expr is None:
        return False
    t = type(expr)
    if t is ast.Name:
        return bool(expr.id == name)
    if t is ast.Attribute:
        return _is_self(expr.value) and name == "self." + expr.attr
    if t in (ast.List, ast.Tuple, ast.Set):
        return any(carries(e, name, depth + 1) for e in expr.elts)
    if t is ast.Starred:
        return carries(expr.value, name, depth + 1)
    if t is ast.Dict:
        return any(carries(v, name, depth + 1) for v in expr.values if _content_value(expr, v))
    if t is ast.BinOp:
        return type(expr.op) is ast.Add and (
            carries(expr.left, name, depth + 1) or carries(expr.right, name, depth + 1)
        )
    if t is ast.IfExp:
        return carries(expr.body, name, depth + 1) or carries(expr.orelse, name, depth + 1)
    if t is ast.BoolOp:
        return any(carries(v, name, depth + 1) for v in expr.values)
    if t is ast.Subscript:
        return type(expr.slice) is ast.Slice and carries(expr.value, name, depth + 1)
    if t in (ast.ListComp, ast.GeneratorExp):
        return any(carries(g.iter, name, depth + 1) for g in expr.generators)
    if t is ast.Call:
        f = expr.func
        if type(f) is ast.Name and f.id in _PASS and expr.args:
            return carries(expr.args[0], name, depth + 1)
        if type(f) is ast.Attribute and f.attr == "copy" and not expr.args:
            return carries(f.value, name, depth + 1)
        if type(f) in (ast.Name, ast.Attribute) and expr.args:
            return _dotted(f) in ("cast", "typing.cast", "copy.copy", "copy.deepcopy") and carries(
                expr.args[-1] if _dotted(f).endswith("cast") else expr.args[0], name, depth + 1
            )
    return False


def _dotted(f: Any) -> str:
    parts = []
    while type(f) is ast.Attribute:
        parts.append(f.attr)
        f = f.value
    if type(f) is ast.Name:
        parts.append(f.id)
    return ".".join(reversed(parts))


class Flow:
    """The function models of one module, made on first use, and the calls between them
    (call sites from the walk's index, :attr:`linters.flow.facts.ModuleFacts.calls`)."""

    def __init__(self, ev: Evaluator) -> None:
        self.ev = ev
        self._fns: dict[int, Fn] = {}
        self.scopes: list[Scope] = []
        todo = [ev.facts.module]
        while todo:
            sc = todo.pop()
            for fs in sc.funcs.values():
                todo.append(fs)
                if fs.kind == "function":
                    self.scopes.append(fs)

    def fn(self, scope: Scope) -> Fn:
        """The model of a function scope (or of the module body for the module scope), made
        once per scope. Never raises on a valid syntax tree."""
        got = self._fns.get(id(scope.node))
        if got is None:
            got = self._fns[id(scope.node)] = Fn(scope.node, scope, self.ev)
        return got

    def at(self, line: int) -> Fn:
        """The model of the innermost function holding ``line`` (1-based; the module body if
        none). Never raises on a valid syntax tree."""
        best: Scope | None = None
        for sc in self.scopes:
            node = sc.node
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                if best is None or node.lineno >= best.node.lineno:
                    best = sc
        return self.fn(best if best is not None else self.ev.facts.module)

    def callee(self, call: ast.Call, fn: Fn) -> tuple[Fn | None, bool]:
        """The module function a call of ``fn`` reaches (None if not one of the module's),
        and whether ``self`` is bound. Never raises on a valid syntax tree."""
        if fn.scope is None:
            return None, False
        target, bound = self.ev.callee(call, fn.scope)
        if target is None or target.kind != "function":
            return None, False
        return self.fn(target), bound

    def callers(self, fn: Fn) -> list[tuple[ast.Call, Fn, bool]]:
        """``(call, calling function, self bound)`` for every call of ``fn`` in the module
        (empty if none). Never raises on a valid syntax tree."""
        scope = fn.scope
        if scope is None or scope.kind != "function":
            return []
        calls = self.ev.facts.calls
        sites = list(calls.get(scope.name, ()))
        if scope.cls is not None:
            sites += calls.get("self." + scope.name, [])
        out = []
        for call, cscope in sites:
            target, bound = self.ev.callee(call, cscope)
            if target is scope:
                out.append((call, self.fn(_function_of(cscope)), bound))
        return out

    def roots(self, fn: Fn, expr: Any) -> list[str]:
        """Local names (and ``self.attr``) whose object ``expr`` is part of, nearest first
        (at most 32). Never raises."""
        out: list[str] = []
        stack = [expr]
        while stack and len(out) < 32:
            e = stack.pop()
            t = type(e)
            if t is ast.Attribute and _is_self(e.value):
                if "self." + e.attr not in out:
                    out.append("self." + e.attr)
            elif t in (ast.Subscript, ast.Attribute, ast.Starred):
                stack.append(e.value)
            elif t is ast.Call:
                f = e.func
                if type(f) is ast.Attribute and f.attr in ("get", "setdefault", "copy", "pop"):
                    stack.append(f.value)
                elif e.args and (
                    (type(f) is ast.Name and f.id in _PASS)
                    or (self.ev.facts.qualname(f) or "") in _PASS_QUAL
                ):
                    stack.append(e.args[-1] if _dotted(f).endswith("cast") else e.args[0])
            elif t is ast.Name:
                if e.id not in out:
                    out.append(e.id)
                    stack.extend(fn.aliases.get(e.id, ()))
            elif t is ast.BoolOp:
                stack.extend(e.values)
            elif t is ast.IfExp:
                stack += [e.body, e.orelse]
        return out

    def placed(self, fn: Fn, node: ast.AST, seen: set | None = None) -> Req | None:
        """The request a dict display ``node`` of ``fn`` ends up in, by where it is put; None
        when not found. Never raises on a valid syntax tree."""
        cur: Any = node
        for up in fn.ancestors(node):
            t = type(up)
            req = next((r for r in fn.requests if r.node is up), None)
            if req is not None:
                return req if any(v is cur or inside(cur, v) for v in req.values) else None
            if t is ast.Dict and not _content_value(up, cur):
                return None
            if t in (ast.List, ast.Tuple, ast.Dict, ast.Starred, ast.IfExp, ast.keyword):
                cur = up
                continue
            if t is ast.comprehension or t in (ast.ListComp, ast.GeneratorExp):
                cur = up
                continue
            if t in (ast.Assign, ast.AnnAssign, ast.AugAssign):
                targets = up.targets if t is ast.Assign else [up.target]
                return self._reach_all(fn, [r for tg in targets for r in self.roots(fn, tg)], seen)
            if t is ast.Call:
                f = up.func
                if type(f) is ast.Attribute and f.attr in ("append", "extend", "insert", "update"):
                    return self._reach_all(fn, self.roots(fn, f.value), seen)
                return self._into_callee(fn, up, cur, seen)
            if t is ast.Return:
                return self._returned(fn, seen)
            return None
        return None

    def _reach_all(self, fn: Fn, names: list[str], seen: set | None) -> Req | None:
        seen = set() if seen is None else seen
        for name in names:
            hit = self.reach(fn, name, seen)
            if hit is not None:
                return hit
        return None

    def reach(self, fn: Fn, name: str, seen: set | None = None, hops: int = 0) -> Req | None:
        """The request the object local ``name`` of ``fn`` holds ends up in (None: not
        found within :data:`_MAX_HOPS` hops). Never raises on a valid syntax tree."""
        seen = set() if seen is None else seen
        key = (id(fn.node), name)
        if key in seen or hops > _MAX_HOPS:
            return None
        seen.add(key)
        for req in fn.requests:
            if name in req.spreads or any(carries(v, name) for v in req.values):
                return req
        for container, value in fn.puts:
            if carries(value, name):
                hit = self._reach_all(fn, [r for r in self.roots(fn, container) if r != name], seen)
                if hit is not None:
                    return hit
        for tgt, values in fn.aliases.items():
            if tgt != name and any(carries(v, name) for v in values):
                hit = self.reach(fn, tgt, seen, hops + 1)
                if hit is not None:
                    return hit
        if name.startswith("self.") and fn.scope is not None and fn.scope.cls is not None:
            for method in fn.scope.cls.funcs.values():
                if method.kind == "function" and method.node is not fn.node:
                    hit = self.reach(self.fn(method), name, seen, hops + 1)
                    if hit is not None:
                        return hit
        if name in fn.params:
            for call, caller, bound in self.callers(fn):
                arg = self.ev.arg_for(call, fn.scope, name, bound) if fn.scope else None
                if arg is not None:
                    hit = self._reach_all(caller, self.roots(caller, arg), seen)
                    if hit is not None:
                        return hit
        if any(carries(r, name) for r in fn.returns):
            hit = self._returned(fn, seen)
            if hit is not None:
                return hit
        for call in fn.calls:
            for a in call.args:
                if carries(a, name):
                    hit = self._into_callee(fn, call, a, seen)
                    if hit is not None:
                        return hit
        return None

    def _returned(self, fn: Fn, seen: set | None) -> Req | None:
        """The request a value ``fn`` returns ends up in, at one of its callers."""
        for call, caller, _bound in self.callers(fn):
            hit = self.placed(caller, call, seen)
            if hit is not None:
                return hit
        return None

    def _into_callee(self, fn: Fn, call: ast.Call, arg: Any, seen: set | None) -> Req | None:
        target, bound = self.callee(call, fn)
        if target is None or target.scope is None:
            return None
        params = target.scope.params[1:] if bound else target.scope.params
        for i, a in enumerate(call.args):
            if (a is arg or inside(arg, a)) and i < len(params):
                return self.reach(target, params[i], seen)
        for kw in call.keywords:
            if kw.arg and (kw is arg or kw.value is arg or inside(arg, kw.value)):
                return self.reach(target, kw.arg, seen)
        return None


def _content_value(d: ast.Dict, cur: Any) -> bool:
    """Whether ``cur`` is a value of dict display ``d`` that can hold content blocks: not a
    key, not under a key naming headers, and, in a request body (a dict with ``"model"``),
    under one of :data:`FIELDS`."""
    keys = [const_str(k) for k in d.keys]
    for k, key, v in zip(d.keys, keys, d.values):
        if k is cur:
            return False
        if v is cur:
            if key is not None and "header" in key.lower():
                return False
            return "model" not in keys or key is None or key in FIELDS
    return True


def _function_of(scope: Scope) -> Scope:
    """``scope`` itself, or for a class body the scope that holds the class."""
    while scope.kind == "class" and scope.parent is not None:
        scope = scope.parent
    return scope
