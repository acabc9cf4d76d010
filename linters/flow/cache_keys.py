"""Prompt cache keys computed from the request's whole message list (the facts of PC011).

OpenAI routes a request to a cache machine by a hash of the prompt's first tokens combined
with ``prompt_cache_key`` when one is sent (OpenAI, "Prompt caching", "How it works",
<https://developers.openai.com/api/docs/guides/prompt-caching>, read 2026-12-03). A key
computed from the whole conversation changes on every request, since every request adds a
message, so no request lands where the previous one's prefix is cached. The shape
(HKUDS/nanobot, fixed in 2d17a095, 2026-05-15)::

    def _prompt_cache_key(messages):
        return hashlib.sha256(json.dumps(messages).encode()).hexdigest()

    system, input_items = _convert_messages(messages)
    body = {"input": input_items, "prompt_cache_key": _prompt_cache_key(messages)}

Found per function, without guessing from names:

- the *key*: ``prompt_cache_key=V`` in a call, ``"prompt_cache_key": V`` in a dict display,
  or ``X["prompt_cache_key"] = V``;
- the *conversation* of the same function: the name given as ``messages=``, ``input=`` or
  ``contents=`` (keyword or dict key, or ``X["input"] = name``), and the names it was made
  from by a one-argument call (``items = convert(messages)``, tuple targets too), a list
  display or a concatenation;
- reported when ``V`` uses a conversation name *whole*: not through a subscript
  (``messages[:2]``, ``messages[0]`` are fine); through local variables, standard-library
  and builtin calls (``hashlib``, ``json.dumps``, ``str``), method calls on the result, and
  functions or methods defined in the same module (the parameter it lands in must itself
  be used whole there). A call to anything else (an imported project helper) is not seen
  into and not reported.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from typing import Any

from linters.flow import tables
from linters.flow.nodes import const_str, own_nodes

KEY = "prompt_cache_key"
#: request fields holding the whole message list (OpenAI chat ``messages``, Responses
#: ``input``, Gemini ``contents``)
CONVERSATION_FIELDS = frozenset({"messages", "input", "contents"})
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_DEPTH = 4


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """``node`` (the key's value) uses ``name`` whole, the request's ``field`` list (or what
    it is made from), in ``function``."""

    node: ast.expr
    name: str
    field: str
    function: str


def _targets(node: ast.AST) -> list[str]:
    """Plain names an assignment target binds (``a``, ``a, b``)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [n for elt in node.elts for n in _targets(elt)]
    return []


class _Module:
    """The module's functions by name, methods by (class, name), stdlib imports."""

    def __init__(self, tree: ast.Module) -> None:
        self.functions: dict[str, ast.AST] = {}
        self.methods: dict[tuple[str, str], ast.AST] = {}
        self.parent_class: dict[int, str] = {}
        self.stdlib: set[str] = set()
        for node in tree.body:
            if isinstance(node, _FUNCS):
                self.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, _FUNCS):
                        self.methods[(node.name, item.name)] = item
                        self.parent_class[id(item)] = node.name
        for imp in ast.walk(tree):
            if isinstance(imp, ast.Import):
                for a in imp.names:
                    if a.name.split(".")[0] in sys.stdlib_module_names:
                        self.stdlib.add(a.asname or a.name.split(".")[0])
            elif isinstance(imp, ast.ImportFrom) and imp.module and not imp.level:
                if imp.module.split(".")[0] in sys.stdlib_module_names:
                    self.stdlib.update(a.asname or a.name for a in imp.names)


class _Function:
    """One function's local assignments, the key values and the conversation names."""

    def __init__(self, fn: ast.AST) -> None:
        self.fn = fn
        self.assigned: dict[str, list[ast.expr]] = {}
        self.keys: list[ast.expr] = []
        self.conversation: dict[str, str] = {}  # name -> field
        for node in own_nodes(ast.iter_child_nodes(fn)):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    self._assign(t, node.value)
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                self._assign(node.target, node.value)
            elif isinstance(node, ast.Call):
                for kw in node.keywords:
                    self._field(kw.arg, kw.value)
            elif isinstance(node, ast.Dict):
                for k, v in zip(node.keys, node.values):
                    self._field(const_str(k), v)
        self._derive()

    def _assign(self, target: ast.AST, value: ast.expr) -> None:
        if isinstance(target, ast.Subscript):
            self._field(const_str(target.slice), value)
        for name in _targets(target):
            self.assigned.setdefault(name, []).append(value)

    def _field(self, key: str | None, value: ast.expr) -> None:
        if key == KEY:
            self.keys.append(value)
        elif key in CONVERSATION_FIELDS and isinstance(value, ast.Name):
            self.conversation.setdefault(value.id, key)

    def _derive(self) -> None:
        """Add the names a conversation name was made from (one-argument calls, list
        displays, concatenations), transitively."""
        todo = list(self.conversation)
        while todo:
            name = todo.pop()
            for value in self.assigned.get(name, []):
                for src in _sources(value):
                    if src not in self.conversation:
                        self.conversation[src] = self.conversation[name]
                        todo.append(src)


def _sources(value: ast.expr) -> list[str]:
    """Names ``value`` carries whole into a list: ``f(x)`` (one positional argument, no
    keywords), ``[*x, m]``, ``x + [m]``, ``list(x)``."""
    if isinstance(value, ast.Name):
        return [value.id]
    if isinstance(value, ast.Call) and len(value.args) == 1 and not value.keywords:
        return _sources(value.args[0])
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        return _sources(value.left) + _sources(value.right)
    if isinstance(value, (ast.List, ast.Tuple)):
        return [
            e.value.id
            for e in value.elts
            if isinstance(e, ast.Starred) and isinstance(e.value, ast.Name)
        ]
    return []


class _Uses:
    """Whether an expression uses a name whole (see the module docstring)."""

    def __init__(self, module: _Module) -> None:
        self.module = module

    def whole(self, expr: Any, name: str, fn: _Function, depth: int, seen: set[str]) -> bool:
        """Whether ``expr`` in ``fn`` is ``name`` itself or made from all of it (through
        local assignments, not a slice or an item); ``depth`` bounds the calls followed,
        ``seen`` the local names already followed."""
        if isinstance(expr, ast.Name):
            if expr.id == name:
                return True
            if expr.id in seen or expr.id not in fn.assigned:
                return False
            seen = seen | {expr.id}
            return any(self.whole(v, name, fn, depth, seen) for v in fn.assigned[expr.id])
        if isinstance(expr, ast.Subscript):
            if isinstance(expr.value, ast.Name) and expr.value.id == name:
                return False
            return self.whole(expr.value, name, fn, depth, seen) or self.whole(
                expr.slice, name, fn, depth, seen
            )
        if isinstance(expr, ast.Attribute):
            if isinstance(expr.value, ast.Name) and expr.value.id == name:
                return False  # an attribute of it (``request.messages``), not it
            return self.whole(expr.value, name, fn, depth, seen)
        if isinstance(expr, ast.Call):
            return self._call(expr, name, fn, depth, seen)
        if isinstance(expr, (ast.Lambda, *_FUNCS, ast.ClassDef)):
            return False
        return any(self.whole(c, name, fn, depth, seen) for c in ast.iter_child_nodes(expr))

    def _call(self, call: ast.Call, name: str, fn: _Function, depth: int, seen: set[str]) -> bool:
        args = [*call.args, *(kw.value for kw in call.keywords)]
        hits = [i for i, a in enumerate(args) if self.whole(a, name, fn, depth, seen)]
        func = call.func
        if isinstance(func, ast.Attribute):
            base = func.value
            if isinstance(base, ast.Name) and base.id == "self":
                cls = self.module.parent_class.get(id(fn.fn))
                target = self.module.methods.get((cls or "", func.attr))
                return bool(hits) and self._into(target, call, hits, depth, skip_self=True)
            if isinstance(base, ast.Name) and base.id in self.module.stdlib:
                return bool(hits)
            # a method of a value computed here (``sha256(...).hexdigest()``, ``s.encode()``)
            if isinstance(base, (ast.Call, ast.Constant, ast.JoinedStr, ast.BinOp)):
                return bool(hits) or self.whole(base, name, fn, depth, seen)
            if isinstance(base, ast.Name) and base.id in fn.assigned:
                return bool(hits) or self.whole(base, name, fn, depth, seen)
            return False
        if isinstance(func, ast.Name):
            if func.id in self.module.functions:
                return bool(hits) and self._into(
                    self.module.functions[func.id], call, hits, depth, skip_self=False
                )
            if func.id in self.module.stdlib or func.id in _BUILTINS:
                return bool(hits)
        return False

    def _into(
        self, target: Any, call: ast.Call, hits: list[int], depth: int, skip_self: bool
    ) -> bool:
        """Whether a module function ``target`` uses whole the parameters at ``hits``."""
        if target is None or depth <= 0:
            return False
        params = [a.arg for a in (*target.args.posonlyargs, *target.args.args)]
        if skip_self:
            params = params[1:]
        by_kw = {kw.arg: i for i, kw in enumerate(call.keywords, len(call.args))}
        inner = _Function(target)
        for i in hits:
            if i < len(call.args):
                param = params[i] if i < len(params) else None
            else:
                param = next((k for k, j in by_kw.items() if j == i), None)
            if param is None:
                continue
            for node in own_nodes(ast.iter_child_nodes(target)):
                if isinstance(node, ast.Return) and node.value is not None:
                    if self.whole(node.value, param, inner, depth - 1, set()):
                        return True
        return False


_BUILTINS = frozenset({"str", "repr", "hash", "len", "tuple", "list", "bytes", "format"})


def conversation_keys(tree: ast.Module) -> list[ConversationKey]:
    """Every ``prompt_cache_key`` value of ``tree`` that uses its request's whole message
    list (one per key expression)."""
    module = _Module(tree)
    uses = _Uses(module)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, _FUNCS):
            continue
        fn = _Function(node)
        if not fn.keys or not fn.conversation:
            continue
        for value in fn.keys:
            for conv, field in fn.conversation.items():
                if uses.whole(value, conv, fn, _DEPTH, set()):
                    out.append(ConversationKey(value, conv, field, node.name))
                    break
    return out


@dataclass(frozen=True, slots=True)
class VolatileKey:
    """``node`` (a ``prompt_cache_key`` value of a request made in ``function``) is made
    from ``why`` (a volatile call, e.g. "`uuid.uuid4()` (a random UUID)") evaluated on
    every request."""

    node: ast.expr
    why: str
    function: str


def volatile_keys(ev: Any) -> list[VolatileKey]:
    """Every ``prompt_cache_key`` value of a request (a keyword of a known request call, a
    key of its ``extra_body`` dict display, or a key of a request body dict display with a
    ``"model"`` key, also set as ``body["prompt_cache_key"] = v``) that is made, through
    local variables of the same function, from a call whose value changes on every
    request (:meth:`linters.flow.resolve.Resolver.volatile_call`, rate ``request``). A key
    kept on ``self`` or in a module constant is made once per object or process and is
    not reported (a session id is what the key is for)."""
    out = []
    for node in ast.walk(ev.facts.module.node):
        if not isinstance(node, _FUNCS):
            continue
        fn = _Function(node)
        if not fn.keys:
            continue
        scope = ev.function_scope(node)
        for value in _request_keys(node, fn, ev):
            why = _volatile_in(value, fn, ev, scope, 0)
            if why is not None:
                out.append(VolatileKey(value, why, node.name))
    return out


def _body(d: Any) -> bool:
    return isinstance(d, ast.Dict) and "model" in {const_str(k) for k in d.keys}


def _request_keys(fn_node: ast.AST, fn: _Function, ev: Any) -> list[ast.expr]:
    """The ``prompt_cache_key`` values of requests made in ``fn_node``."""
    out: list[ast.expr] = []
    for node in own_nodes(ast.iter_child_nodes(fn_node)):
        if isinstance(node, ast.Call):
            if not tables.is_request_call(node.func, ev.facts.qualname(node.func) or ""):
                continue
            for kw in node.keywords:
                if kw.arg == KEY:
                    out.append(kw.value)
                elif kw.arg == "extra_body" and isinstance(kw.value, ast.Dict):
                    out += [
                        v for k, v in zip(kw.value.keys, kw.value.values) if const_str(k) == KEY
                    ]
        elif _body(node):
            assert isinstance(node, ast.Dict)
            out += [v for k, v in zip(node.keys, node.values) if const_str(k) == KEY]
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if (
                    isinstance(t, ast.Subscript)
                    and const_str(t.slice) == KEY
                    and isinstance(t.value, ast.Name)
                    and any(_body(v) for v in fn.assigned.get(t.value.id, []))
                ):
                    out.append(node.value)
    return out


def _volatile_in(value: Any, fn: _Function, ev: Any, scope: Any, depth: int) -> str | None:
    """The per-request volatile call ``value`` is made from (through local names)."""
    if depth > _DEPTH:
        return None
    for sub in ast.walk(value):
        if isinstance(sub, ast.Call):
            found = ev.volatile_call(sub, scope)
            if found is not None and found[1] == tables.RATE_REQUEST:
                return str(found[0])
        elif isinstance(sub, ast.Name) and sub.id in fn.assigned:
            for v in fn.assigned[sub.id]:
                why = _volatile_in(v, fn, ev, scope, depth + 1)
                if why is not None:
                    return why
    return None
