"""What an expression's value carries, found by following names through a module.

Two questions are answered, both memoised per syntax node:

- :meth:`Evaluator.hazards`: which cache hazards flow into the value -- a volatile source
  (clock, UUID, random, pid, hostname, request id), ``json.dumps`` without sorted keys,
  iteration over a set, a dict view whose order depends on input, or a function parameter
  (so that a caller's argument can be substituted later).
- :meth:`Evaluator.segments`: the value as an ordered sequence of static text, per-request
  text and unknown parts, for the rules about what comes first.

Data flow is followed through assignments (``x = ...``, ``x += ...``), list building
(``append``/``extend``/``insert``), loop variables, ``self.attr`` across methods, module
constants, closures and calls to functions defined in the same module.
"""

from __future__ import annotations

import ast
import string
from typing import NamedTuple

from linters.flow import tables
from linters.flow.facts import (
    APPEND, ASSIGN, AUG, DEF, EXTEND, IMPORT, ITER, OPAQUE, PARAM, SETITEM, SHUFFLE, UNPACK,
    UPDATE, WITH, Binding, ModuleFacts, Scope,
)

# Hazard kinds.
VOLATILE = "volatile"
JSON = "json"
SET = "set"
VIEW = "view"
PARAM_H = "param"

_MAX_DEPTH = 24
_FORMATTER = string.Formatter()
_STATIC_LITERAL_MAX = 200_000


class Hazard(NamedTuple):
    """A hazard flowing into a value: ``node`` is where it enters (what a finding points
    at), ``detail`` a human description (for PARAM: ``(function scope, parameter name)``),
    ``fixable`` whether an automatic fix exists (PC002)."""

    kind: str
    node: ast.AST
    detail: object
    fixable: bool = False


# Segment kinds: ("s", chars or None for file contents), ("d", node, desc) per-request,
# ("v", node, desc) volatile, ("u",) unknown.
STATIC, DYNAMIC, VOLAT, UNKNOWN = "s", "d", "v", "u"
_U = (UNKNOWN,)


def short(node: ast.AST, limit: int = 48) -> str:
    """Source text of ``node`` for a message, shortened to ``limit`` characters."""
    try:
        text = ast.unparse(node)
    except Exception:  # pragma: no cover - unparse handles every node the parser makes
        return "<expr>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def classify(segs) -> str:
    """``"d"`` if any part is per-request or volatile, ``"s"`` if all parts are static,
    else ``"u"``."""
    kind = STATIC
    for s in segs:
        k = s[0]
        if k == DYNAMIC or k == VOLAT:
            return DYNAMIC
        if k == UNKNOWN:
            kind = UNKNOWN
    return kind


def static_chars(segs) -> int | None:
    """Total static characters (None stands for file contents: unknown but large)."""
    total = 0
    for s in segs:
        if s[0] == STATIC:
            if s[1] is None:
                return None
            total += s[1]
    return total


class Evaluator:
    """Answers questions about expressions of one module (see the module docstring).

    ``extra_volatile`` adds fully qualified call names to the volatile table.
    """

    def __init__(self, facts: ModuleFacts, extra_volatile: frozenset[str] = frozenset()):
        self.facts = facts
        self.extra_volatile = extra_volatile
        self._hz: dict[int, tuple] = {}
        self._seg: dict[int, tuple] = {}
        self._set: dict[int, bool] = {}
        self._dict: dict[tuple[int, bool], str | None] = {}
        self._active: set[int] = set()
        self._fscopes: dict[int, Scope] | None = None
        self._param_static: dict[tuple[int, str], bool] = {}

    # -- name resolution -------------------------------------------------------------
    def resolve(self, name: str, scope: Scope, line: int) -> list[Binding]:
        """Bindings of ``name`` visible from ``scope`` at ``line``: the nearest scope that
        binds it; in the use's own scope, only bindings on earlier lines (all if none)."""
        s = scope
        while s is not None:
            bl = s.bindings.get(name)
            if bl:
                if s is scope:
                    before = [b for b in bl if b.line < line]
                    return before or bl
                return bl
            s = s.parent
        return []

    def function_scope(self, node: ast.AST) -> Scope | None:
        if self._fscopes is None:
            found: dict[int, Scope] = {}
            todo = [self.facts.module]
            while todo:
                s = todo.pop()
                for fs in s.funcs.values():
                    found[id(fs.node)] = fs
                    todo.append(fs)
            self._fscopes = found
        return self._fscopes.get(id(node))

    def callee(self, call: ast.Call, scope: Scope) -> tuple[Scope | None, bool]:
        """The module-local function a call reaches, and whether ``self`` is bound."""
        func = call.func
        if type(func) is ast.Name:
            for b in self.resolve(func.id, scope, call.lineno):
                if b.kind == DEF and isinstance(b.value, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    return self.function_scope(b.value), False
            return None, False
        if (type(func) is ast.Attribute and type(func.value) is ast.Name
                and func.value.id == "self"):
            s = scope
            while s is not None and s.cls is None:
                s = s.parent
            if s is not None:
                fs = s.cls.funcs.get(func.attr)
                if fs is not None and fs.kind == "function":
                    return fs, True
        return None, False

    @staticmethod
    def arg_for(call: ast.Call, fs: Scope, pname: str, bound: bool) -> ast.expr | None:
        """The argument a call passes for parameter ``pname`` of ``fs`` (None: default)."""
        params = fs.params[1:] if bound else fs.params
        for kw in call.keywords:
            if kw.arg == pname:
                return kw.value
        try:
            i = params.index(pname)
        except ValueError:
            return None
        args = call.args
        for a in args[: i + 1]:
            if type(a) is ast.Starred:
                return None
        return args[i] if i < len(args) else None

    # -- volatile sources ------------------------------------------------------------
    def volatile_call(self, node: ast.Call) -> str | None:
        """Why a call's result changes between requests, or None."""
        q = self.facts.qualname(node.func)
        if q is None:
            return None
        what = tables.VOLATILE_CALLS.get(q)
        if what is None and q in self.extra_volatile:
            what = "a value configured as volatile"
        if what is None:
            n = tables.CLOCK_DEFAULT_CALLS.get(q)
            if n is not None and len(node.args) < n and not node.keywords:
                what = "the clock"
        if what is None:
            mod, _, fn = q.rpartition(".")
            exc = tables.RANDOM_MODULES.get(mod)
            if exc is not None and fn not in exc:
                what = "a random number generator"
        if what is None:
            return None
        return f"`{short(node.func, 40)}()` ({what})"

    @staticmethod
    def _request_id_key(node) -> bool:
        return (type(node) is ast.Constant and type(node.value) is str
                and tables.REQUEST_ID_RE.match(node.value) is not None)

    # -- hazards ---------------------------------------------------------------------
    def hazards(self, node: ast.AST, scope: Scope) -> tuple[Hazard, ...]:
        """Hazards flowing into the value of ``node`` (evaluated in ``scope``)."""
        key = id(node)
        got = self._hz.get(key)
        if got is not None:
            return got
        if key in self._active or len(self._active) > _MAX_DEPTH * 4:
            return ()
        self._active.add(key)
        try:
            res = self._hazards(node, scope)
        finally:
            self._active.discard(key)
        res = tuple(dict.fromkeys(res))  # de-duplicate, keep order
        self._hz[key] = res
        return res

    def _hazards(self, node, scope) -> list[Hazard] | tuple:
        t = type(node)
        if t is ast.Constant:
            return ()
        if t is ast.Name:
            return self._h_name(node, scope)
        if t is ast.JoinedStr:
            out: list[Hazard] = []
            for v in node.values:
                if type(v) is ast.FormattedValue:
                    out.extend(self.hazards(v.value, scope))
                    if self.is_set(v.value, scope):
                        out.append(Hazard(SET, v.value, f"formatting the set `{short(v.value)}`"))
            return out
        if t is ast.Call:
            return self._h_call(node, scope)
        if t is ast.Attribute:
            return self._h_attribute(node, scope)
        if t is ast.Subscript:
            if self._request_id_key(node.slice):
                return (Hazard(VOLATILE, node, f"`{short(node)}` (a per-request id)"),)
            return self.hazards(node.value, scope) + self.hazards(node.slice, scope)
        if t is ast.BinOp:
            return self.hazards(node.left, scope) + self.hazards(node.right, scope)
        if t is ast.BoolOp:
            out = []
            for v in node.values:
                out.extend(self.hazards(v, scope))
            return out
        if t is ast.IfExp:
            return self.hazards(node.body, scope) + self.hazards(node.orelse, scope)
        if t in (ast.List, ast.Tuple, ast.Set):
            out = []
            for e in node.elts:
                out.extend(self.hazards(e, scope))
            return out
        if t is ast.Starred:
            out = list(self.hazards(node.value, scope))
            if self.is_set(node.value, scope):
                out.append(Hazard(SET, node, f"unpacking the set `{short(node.value)}`"))
            return out
        if t is ast.Dict:
            out = []
            for k, v in zip(node.keys, node.values):
                if k is not None:
                    out.extend(self.hazards(k, scope))
                out.extend(self.hazards(v, scope))
            return out
        if t in (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp):
            return self._h_comprehension(node, scope)
        if t in (ast.Await, ast.NamedExpr, ast.FormattedValue):
            return self.hazards(node.value, scope)
        if t is ast.UnaryOp:
            return () if type(node.op) is ast.Not else self.hazards(node.operand, scope)
        return ()

    def _h_comprehension(self, node, scope) -> list[Hazard]:
        out: list[Hazard] = []
        t = type(node)
        for gen in node.generators:
            out.extend(self.hazards(gen.iter, scope))
            if t is not ast.SetComp:
                if self.is_set(gen.iter, scope):
                    out.append(Hazard(SET, gen.iter, f"iterating the set `{short(gen.iter)}`"))
                else:
                    why = self.input_dict(gen.iter, scope)
                    if why:
                        out.append(Hazard(VIEW, gen.iter, why))
        if t is ast.DictComp:
            out.extend(self.hazards(node.key, scope))
            out.extend(self.hazards(node.value, scope))
        else:
            out.extend(self.hazards(node.elt, scope))
        return out

    def _h_name(self, node: ast.Name, scope: Scope) -> list[Hazard]:
        bindings = self.resolve(node.id, scope, node.lineno)
        out: list[Hazard] = []
        if tables.REQUEST_ID_RE.match(node.id) and not any(
                b.kind in (ASSIGN, AUG) for b in bindings):
            return [Hazard(VOLATILE, node, f"`{node.id}` (a per-request id)")]
        for b in bindings:
            out.extend(self._h_binding(b, node))
        return out

    def _h_binding(self, b: Binding, use: ast.AST) -> list[Hazard] | tuple:
        kind = b.kind
        if kind == PARAM:
            return (Hazard(PARAM_H, use, (b.scope, b.value.arg)),)
        if kind in (IMPORT, DEF, OPAQUE) or b.value is None:
            return ()
        if kind == SHUFFLE:
            return (Hazard(VOLATILE, b.node, f"`{short(b.node)}` (random order)"),)
        value = b.value
        hs = self.hazards(value, b.scope)
        if kind == ITER:
            extra: list[Hazard] = []
            if self.is_set(value, b.scope):
                extra.append(Hazard(SET, value, f"iterating the set `{short(value)}`"))
            else:
                why = self.input_dict(value, b.scope)
                if why:
                    extra.append(Hazard(VIEW, value, why))
            hs = tuple(extra) + hs
        if kind in (ASSIGN, UNPACK, WITH) and not _is_template(value):
            # A value computed whole (``now = datetime.now()``) is reported where it is used.
            name = use.id if type(use) is ast.Name else short(use)
            hs = tuple(
                Hazard(VOLATILE, use, f"`{name}`, set from {h.detail} on line {b.line},")
                if h.kind == VOLATILE else h
                for h in hs)
        return hs

    def _h_attribute(self, node: ast.Attribute, scope: Scope) -> list[Hazard] | tuple:
        if tables.REQUEST_ID_RE.match(node.attr):
            return (Hazard(VOLATILE, node, f"`{short(node)}` (a per-request id)"),)
        base = node.value
        if type(base) is ast.Name and base.id == "self":
            s = scope
            while s is not None and s.cls is None:
                s = s.parent
            if s is not None:
                out: list[Hazard] = []
                for b in s.cls.self_attrs.get(node.attr, ()):
                    out.extend(self._h_binding(b, node))
                return out
            return ()
        return self.hazards(base, scope)

    def _h_call(self, node: ast.Call, scope: Scope) -> list[Hazard] | tuple:
        why = self.volatile_call(node)
        if why:
            return (Hazard(VOLATILE, node, why),)
        func = node.func
        args = node.args
        q = self.facts.qualname(func)
        if q is not None:
            if q in tables.SANITIZING_CALLS:
                return ()
            if q in tables.ORDERING_CALLS:
                return [h for a in args for h in self.hazards(a, scope) if h.kind not in (SET, VIEW)]
            mode = tables.JSON_DUMPS.get(q)
            if mode is not None:
                return self._h_json(node, q, mode, scope)
        out: list[Hazard] = []
        if q in tables.ITERATING_CALLS and args:
            a0 = args[0]
            if self.is_set(a0, scope):
                out.append(Hazard(SET, node, f"`{short(node)}` iterates a set"))
            else:
                why = self.input_dict(a0, scope)
                if why:
                    out.append(Hazard(VIEW, node, why))
        if type(func) is ast.Attribute:
            attr = func.attr
            if attr == "join" and args:
                if self.is_set(args[0], scope):
                    out.append(Hazard(SET, node, f"`{short(node)}` joins a set"))
                else:
                    why = self.input_dict(args[0], scope)
                    if why:
                        out.append(Hazard(VIEW, node, why))
            elif attr in ("values", "keys", "items") and not args:
                why = self.input_dict(func.value, scope, iterated=False)
                if why:
                    out.append(Hazard(VIEW, node, why))
            elif attr == "get" and args and self._request_id_key(args[0]):
                return (Hazard(VOLATILE, node, f"`{short(node)}` (a per-request id)"),)
        fs, bound = self.callee(node, scope)
        if fs is not None:
            out.extend(self._h_local_call(node, fs, bound, scope))
            return out
        if type(func) is ast.Attribute:
            out.extend(self.hazards(func.value, scope))
        for a in args:
            out.extend(self.hazards(a, scope))
        for kw in node.keywords:
            out.extend(self.hazards(kw.value, scope))
        return out

    def _h_local_call(self, node, fs: Scope, bound: bool, scope: Scope) -> list[Hazard]:
        out: list[Hazard] = []
        for r in fs.returns:
            for h in self.hazards(r, fs):
                if h.kind == PARAM_H and h.detail[0] is fs:
                    arg = self.arg_for(node, fs, h.detail[1], bound)
                    if arg is not None:
                        out.extend(self.hazards(arg, scope))
                else:
                    out.append(h)
        return out

    def _h_json(self, node: ast.Call, q: str, mode: str, scope: Scope) -> list[Hazard]:
        out: list[Hazard] = []
        if node.args:
            out.extend(self.hazards(node.args[0], scope))
        kws = {}
        for kw in node.keywords:
            if kw.arg is None:
                return out  # **kwargs may carry sort_keys
            kws[kw.arg] = kw.value
        if mode == "sort_keys":
            sk = kws.get("sort_keys")
            if sk is not None and not (type(sk) is ast.Constant and sk.value is False):
                return out
            if len(node.args) > 6:  # positional sort_keys (json.dumps' 10th parameter)
                return out
        else:
            opt = kws.get("option")
            if opt is not None and "OPT_SORT_KEYS" in short(opt, 400):
                return out
        if node.args and self.deterministic_order(node.args[0], scope, 0):
            return out
        fixable = mode == "sort_keys" and "sort_keys" not in kws
        out.append(Hazard(JSON, node, f"`{short(node.func)}(...)` without sorted keys", fixable))
        return out

    def deterministic_order(self, node, scope: Scope, depth: int) -> bool:
        """True when serialising ``node`` gives the same key order on every run: literals
        whose nested values are not mappings built at run time."""
        if depth > 8:
            return False
        t = type(node)
        if t is ast.Constant:
            return True
        if t in (ast.List, ast.Tuple):
            return all(self.deterministic_order(e, scope, depth + 1) for e in node.elts)
        if t is ast.Dict:
            if any(k is None for k in node.keys):
                return False
            return all(self._not_runtime_mapping(v, scope, depth + 1) for v in node.values)
        if t is ast.Name:
            bl = self.resolve(node.id, scope, node.lineno)
            if len(bl) == 1 and bl[0].kind == ASSIGN and type(bl[0].value) in (ast.Dict, ast.List, ast.Tuple, ast.Constant):
                return self.deterministic_order(bl[0].value, bl[0].scope, depth + 1)
        return False

    def _not_runtime_mapping(self, node, scope, depth) -> bool:
        t = type(node)
        if t in (ast.Constant, ast.List, ast.Tuple, ast.Dict):
            return self.deterministic_order(node, scope, depth)
        if t is ast.DictComp:
            return False
        if t is ast.Call:
            q = self.facts.qualname(node.func) or ""
            if q in tables.DICT_CONSTRUCTORS or q.endswith(("json.loads", "json.load")):
                return False
            if type(node.func) is ast.Attribute and node.func.attr in (
                    "model_dump", "dict", "to_dict", "json", "asdict", "copy"):
                return False
            return True
        if t is ast.Name:
            for b in self.resolve(node.id, scope, node.lineno):
                if b.kind in (SETITEM, UPDATE):
                    return False
                if b.kind == ASSIGN and not self._not_runtime_mapping(b.value, b.scope, depth + 1):
                    return False
                if b.kind == PARAM and _annotation_is(b.scope.param_notes.get(node.id),
                                                      ("dict", "Dict", "Mapping", "MutableMapping")):
                    return False
            return True
        return True

    # -- types -----------------------------------------------------------------------
    def is_set(self, node, scope: Scope, depth: int = 0) -> bool:
        """True when ``node`` evaluates to a ``set``/``frozenset`` (unordered)."""
        key = id(node)
        got = self._set.get(key)
        if got is not None:
            return got
        self._set[key] = False  # cycle guard
        res = self._is_set(node, scope, depth)
        self._set[key] = res
        return res

    def _is_set(self, node, scope, depth) -> bool:
        if depth > _MAX_DEPTH:
            return False
        t = type(node)
        if t is ast.Set or t is ast.SetComp:
            return True
        if t is ast.Call:
            func = node.func
            q = self.facts.qualname(func)
            if q in tables.SET_CONSTRUCTORS:
                return True
            if type(func) is ast.Attribute and func.attr in tables.SET_METHODS:
                return self.is_set(func.value, scope, depth + 1)
            return False
        if t is ast.BinOp and type(node.op) in (ast.BitOr, ast.BitAnd, ast.Sub, ast.BitXor):
            return (self.is_set(node.left, scope, depth + 1) or self.is_set(node.right, scope, depth + 1)
                    or _is_keys_view(node.left) or _is_keys_view(node.right))
        if t is ast.Name:
            for b in self.resolve(node.id, scope, node.lineno):
                if b.kind == ASSIGN and self.is_set(b.value, b.scope, depth + 1):
                    return True
                if b.kind == PARAM and _annotation_is(
                        b.scope.param_notes.get(node.id),
                        ("set", "frozenset", "Set", "FrozenSet", "AbstractSet", "MutableSet")):
                    return True
            return False
        if t is ast.Attribute and type(node.value) is ast.Name and node.value.id == "self":
            s = scope
            while s is not None and s.cls is None:
                s = s.parent
            if s is not None:
                return any(b.kind == ASSIGN and self.is_set(b.value, b.scope, depth + 1)
                           for b in s.cls.self_attrs.get(node.attr, ()))
        return False

    def input_dict(self, node, scope: Scope, iterated: bool = True) -> str | None:
        """Why a mapping's insertion order depends on input (None if it does not, or if
        that cannot be told): a parameter, a comprehension over per-request data, or a dict
        filled at run time (in a loop or from another function).

        ``iterated``: ``node`` is iterated directly (``for k in node``), so it must be known
        to be a mapping; False for the receiver of ``.keys()/.values()/.items()``.
        """
        key = (id(node), iterated)
        if key in self._dict:
            return self._dict[key]
        self._dict[key] = None
        if iterated and not self.is_mapping(node, scope):
            return None
        res = self._input_dict(node, scope, 0)
        self._dict[key] = res
        return res

    def is_mapping(self, node, scope: Scope, depth: int = 0) -> bool:
        """True when ``node`` is known to be a dict (literal, comprehension, ``dict()``, a
        parameter annotated as a mapping)."""
        if depth > 6:
            return False
        t = type(node)
        if t is ast.Dict or t is ast.DictComp:
            return True
        if t is ast.Call:
            return self.facts.qualname(node.func) in tables.DICT_CONSTRUCTORS
        if t is ast.Name:
            for b in self.resolve(node.id, scope, node.lineno):
                if b.kind == ASSIGN and self.is_mapping(b.value, b.scope, depth + 1):
                    return True
                if b.kind == PARAM and _annotation_is(b.scope.param_notes.get(node.id), _MAPPINGS):
                    return True
            return False
        if t is ast.Attribute and type(node.value) is ast.Name and node.value.id == "self":
            s = scope
            while s is not None and s.cls is None:
                s = s.parent
            return s is not None and any(
                b.kind == ASSIGN and self.is_mapping(b.value, b.scope, depth + 1)
                for b in s.cls.self_attrs.get(node.attr, ()))
        return False

    def _input_dict(self, node, scope, depth) -> str | None:
        if depth > 8:
            return None
        t = type(node)
        if t is ast.DictComp:
            for gen in node.generators:
                if classify(self.segments(gen.iter, scope)) == DYNAMIC:
                    return f"a dict comprehension over `{short(gen.iter)}` (per-request order)"
            return None
        if t is ast.Call:
            q = self.facts.qualname(node.func)
            if q in tables.DICT_CONSTRUCTORS and node.args:
                return self._input_dict(node.args[0], scope, depth + 1)
            return None
        if t is ast.Name or (t is ast.Attribute and type(node.value) is ast.Name
                             and node.value.id == "self"):
            if t is ast.Name:
                bindings = self.resolve(node.id, scope, node.lineno)
                label = node.id
            else:
                s = scope
                while s is not None and s.cls is None:
                    s = s.parent
                bindings = s.cls.self_attrs.get(node.attr, []) if s is not None else []
                label = short(node)
            home = None
            for b in bindings:
                if b.kind == ASSIGN and home is None:
                    home = b.scope
            for b in bindings:
                if b.kind == PARAM:
                    note = b.scope.param_notes.get(b.value.arg)
                    if note is None or _annotation_is(note, _MAPPINGS):
                        return f"`{label}` is a parameter, so its key order is the caller's"
                elif b.kind == ASSIGN:
                    why = self._input_dict(b.value, b.scope, depth + 1)
                    if why:
                        return f"`{label}` is {why}"
                elif b.kind in (SETITEM, UPDATE):
                    loop = next((it for it in b.in_loop if it is not None and classify(
                        self.segments(it, b.scope)) == DYNAMIC), None)
                    if loop is not None:
                        return (f"`{label}` is filled in a loop over `{short(loop)}` (line {b.line}), "
                                "so its order is the input's")
                    if home is not None and b.scope is not home and b.scope.kind == "function":
                        return (f"`{label}` is filled by `{b.scope.name}()` at run time (line "
                                f"{b.line}), so its order is the order of the calls")
        return None

    # -- segments --------------------------------------------------------------------
    def segments(self, node, scope: Scope) -> tuple:
        """``node``'s text as ordered parts: ("s", chars), ("d", node, why), ("v", node,
        why), ("u",)."""
        key = id(node)
        got = self._seg.get(key)
        if got is not None:
            return got
        if key in self._active or len(self._active) > _MAX_DEPTH * 4:
            return _U
        self._active.add(key)
        try:
            res = tuple(self._segments(node, scope))
        finally:
            self._active.discard(key)
        self._seg[key] = res
        return res

    def _segments(self, node, scope):
        t = type(node)
        if t is ast.Constant:
            v = node.value
            if v is None:
                return ()
            return ((STATIC, len(v) if type(v) is str else len(str(v))),)
        if t is ast.JoinedStr:
            out = []
            for v in node.values:
                if type(v) is ast.Constant:
                    out.append((STATIC, len(v.value)))
                else:
                    out.extend(self.segments(v.value, scope))
            return out
        if t is ast.BinOp:
            op = type(node.op)
            if op is ast.Add:
                return self.segments(node.left, scope) + self.segments(node.right, scope)
            if op is ast.Mod:
                return self._seg_percent(node, scope)
            if op is ast.Mult:
                text = self.literal_str(node, scope)
                if text is not None:
                    return ((STATIC, len(text)),)
            return _U
        if t is ast.Name:
            return self._seg_name(node, scope)
        if t is ast.Attribute:
            return self._seg_attribute(node, scope)
        if t is ast.Subscript:
            if self._request_id_key(node.slice):
                return ((VOLAT, node, f"`{short(node)}` (a per-request id)"),)
            if classify(self.segments(node.value, scope)) == DYNAMIC:
                return ((DYNAMIC, node, f"`{short(node)}`"),)
            return _U
        if t is ast.Call:
            return self._seg_call(node, scope)
        if t is ast.IfExp:
            a = self.segments(node.body, scope)
            b = self.segments(node.orelse, scope)
            ka, kb = classify(a), classify(b)
            if ka == STATIC and kb == STATIC:
                na, nb = static_chars(a), static_chars(b)
                return ((STATIC, None if na is None or nb is None else min(na, nb)),)
            if DYNAMIC in (ka, kb):
                return ((DYNAMIC, node, f"`{short(node)}`"),)
            return _U
        if t in (ast.Await, ast.FormattedValue, ast.NamedExpr):
            return self.segments(node.value, scope)
        if t in (ast.List, ast.Tuple):
            out = []
            for e in node.elts:
                out.extend(self.text_segments(e, scope))
            return out
        return _U

    def text_segments(self, node, scope: Scope) -> tuple:
        """Segments of a piece of prompt text that may be a content block (``{"type":
        "text", "text": ...}``) or a list of blocks."""
        t = type(node)
        if t is ast.Dict:
            for k, v in zip(node.keys, node.values):
                if type(k) is ast.Constant and k.value in ("text", "content"):
                    return self.text_segments(v, scope)
            return _U
        return self.segments(node, scope)

    def _collapse(self, segs, use: ast.AST, label: str) -> tuple:
        kind = classify(segs)
        if kind == STATIC:
            return ((STATIC, static_chars(segs)),)
        if kind == DYNAMIC:
            for s in segs:
                if s[0] == VOLAT:
                    return ((VOLAT, use, f"{label}, set from {s[2]},"),)
            why = next(s[2] for s in segs if s[0] == DYNAMIC)
            return ((DYNAMIC, use, f"{label} ({why})" if why != label else label),)
        return _U

    def _seg_name(self, node: ast.Name, scope: Scope):
        name = node.id
        bindings = self.resolve(name, scope, node.lineno)
        if tables.REQUEST_ID_RE.match(name) and not any(b.kind in (ASSIGN, AUG) for b in bindings):
            return ((VOLAT, node, f"`{name}` (a per-request id)"),)
        if not bindings:
            return _U
        kinds = {b.kind for b in bindings}
        if PARAM in kinds:
            b = bindings[0]
            if self.param_is_dynamic(b.scope, name):
                return ((DYNAMIC, node, f"`{name}` (a parameter)"),)
            return _U
        if kinds <= {ASSIGN, AUG}:
            assigns = [b for b in bindings if b.kind == ASSIGN]
            if len(assigns) == 1:
                a = assigns[0]
                augs = sorted((b for b in bindings if b.kind == AUG and b.line >= a.line),
                              key=lambda b: (b.line, b.col))
                if _is_template(a.value) or augs:
                    out = list(self.segments(a.value, a.scope))
                    for b in augs:
                        out.extend(self.segments(b.value, b.scope))
                    return out
                return self._collapse(self.segments(a.value, a.scope), node, f"`{name}`")
            if assigns:
                parts = [self.segments(b.value, b.scope) for b in assigns]
                kinds2 = [classify(p) for p in parts]
                if all(k == STATIC for k in kinds2):
                    lens = [static_chars(p) for p in parts]
                    return ((STATIC, None if None in lens else min(lens)),)
                if DYNAMIC in kinds2:
                    return self._collapse(parts[kinds2.index(DYNAMIC)], node, f"`{name}`")
            return _U
        if ITER in kinds or UNPACK in kinds or WITH in kinds:
            for b in bindings:
                if b.kind in (ITER, UNPACK, WITH) and classify(self.segments(b.value, b.scope)) == DYNAMIC:
                    return ((DYNAMIC, node, f"`{name}` (from `{short(b.value)}`)"),)
        return _U

    def _seg_attribute(self, node: ast.Attribute, scope: Scope):
        if tables.REQUEST_ID_RE.match(node.attr):
            return ((VOLAT, node, f"`{short(node)}` (a per-request id)"),)
        base = node.value
        if type(base) is ast.Name and base.id == "self":
            s = scope
            while s is not None and s.cls is None:
                s = s.parent
            if s is None:
                return _U
            bl = [b for b in s.cls.self_attrs.get(node.attr, ()) if b.kind == ASSIGN]
            if len(bl) == 1:
                return self._collapse(self.segments(bl[0].value, bl[0].scope), node, f"`{short(node)}`")
            return _U
        k = classify(self.segments(base, scope))
        if k == DYNAMIC:
            segs = self.segments(base, scope)
            for s in segs:
                if s[0] == VOLAT:
                    return ((VOLAT, node, s[2]),)
            return ((DYNAMIC, node, f"`{short(node)}`"),)
        return _U

    def _seg_call(self, node: ast.Call, scope: Scope):
        why = self.volatile_call(node)
        if why:
            return ((VOLAT, node, why),)
        func = node.func
        args = node.args
        q = self.facts.qualname(func)
        if type(func) is ast.Attribute:
            attr = func.attr
            recv = func.value
            if attr == "format":
                template = self.literal_str(recv, scope)
                if template is not None:
                    return self._seg_format(template, node, scope)
            elif attr == "join" and len(args) == 1 and type(args[0]) in (ast.List, ast.Tuple):
                sep = self.literal_str(recv, scope)
                if sep is not None:
                    out = []
                    for i, e in enumerate(args[0].elts):
                        if i and sep:
                            out.append((STATIC, len(sep)))
                        out.extend(self.segments(e, scope))
                    return out
            elif attr == "replace" and len(args) >= 2:
                text = self.literal_str(recv, scope)
                old = self.literal_str(args[0], scope)
                if text is not None and old:
                    pieces = text.split(old)
                    new = self.segments(args[1], scope)
                    out = []
                    for i, p in enumerate(pieces):
                        if i:
                            out.extend(new)
                        if p:
                            out.append((STATIC, len(p)))
                    return out
            elif attr in tables.TEXT_PASSTHROUGH_METHODS:
                return self.segments(recv, scope)
            elif attr in tables.FILE_READ_METHODS and not args:
                if classify(self.segments(recv, scope)) == DYNAMIC:
                    return ((DYNAMIC, node, f"`{short(node)}`"),)
                return ((STATIC, None),)
        if q in tables.TEXT_PASSTHROUGH_CALLS and len(args) == 1:
            return self.segments(args[0], scope)
        fs, _bound = self.callee(node, scope)
        if fs is not None and len(fs.returns) == 1:
            # A module function that assembles text: its parameters count as per-request
            # when some call passes per-request text (see param_is_dynamic).
            return self.segments(fs.returns[0], fs)
        parts = list(args) + [kw.value for kw in node.keywords]
        if type(func) is ast.Attribute:
            parts.append(func.value)
        for p in parts:
            segs = self.segments(p, scope)
            if classify(segs) == DYNAMIC:
                for s in segs:
                    if s[0] == VOLAT:
                        return ((VOLAT, node, s[2]),)
                return ((DYNAMIC, node, f"`{short(node)}`"),)
        if q is not None and q.startswith("builtins.") and parts and all(
                classify(self.segments(p, scope)) == STATIC for p in parts):
            return ((STATIC, 0),)
        return _U

    def _seg_format(self, template: str, node: ast.Call, scope: Scope):
        try:
            parsed = list(_FORMATTER.parse(template))
        except ValueError:
            return _U
        kws = {kw.arg: kw.value for kw in node.keywords if kw.arg}
        args = node.args
        auto = 0
        out = []
        for literal, field, _spec, _conv in parsed:
            if literal:
                out.append((STATIC, len(literal)))
            if field is None:
                continue
            head = field.split(".", 1)[0].split("[", 1)[0]
            if head == "":
                value = args[auto] if auto < len(args) else None
                auto += 1
            elif head.isdigit():
                i = int(head)
                value = args[i] if i < len(args) else None
            else:
                value = kws.get(head)
            if value is None or type(value) is ast.Starred:
                out.append(_U)
            else:
                out.extend(self.segments(value, scope))
        return out

    def _seg_percent(self, node: ast.BinOp, scope: Scope):
        template = self.literal_str(node.left, scope)
        if template is None:
            return _U
        right = node.right
        values = list(right.elts) if type(right) is ast.Tuple else [right]
        out = []
        pos = 0
        i = 0
        for m in _PERCENT_RE.finditer(template):
            if m.start() > pos:
                out.append((STATIC, m.start() - pos))
            pos = m.end()
            if m.group(0) == "%%":
                out.append((STATIC, 1))
                continue
            if m.group(1) and type(right) is ast.Dict:
                value = None
                for k, v in zip(right.keys, right.values):
                    if type(k) is ast.Constant and k.value == m.group(1)[1:-1]:
                        value = v
                out.extend(self.segments(value, scope) if value is not None else _U)
            elif i < len(values):
                out.extend(self.segments(values[i], scope))
                i += 1
            else:
                out.append(_U)
        if pos < len(template):
            out.append((STATIC, len(template) - pos))
        return out

    def param_is_dynamic(self, fs: Scope, name: str) -> bool:
        """A parameter counts as per-request unless every call in this module passes static
        text for it (or leaves the default). ``self``/``cls`` never count."""
        if fs.kind != "function" or (fs.cls is not None and fs.params and fs.params[0] == name
                                     and name in ("self", "cls")):
            return False
        if tables.PREFIX_NAME_RE.search(name) or tables.STRONG_PREFIX_NAME_RE.search(name):
            return False  # prompt text handed down (``system``, ``system_prompt``): not per-request
        key = (id(fs), name)
        got = self._param_static.get(key)
        if got is not None:
            return not got
        self._param_static[key] = True  # cycle guard
        sites = list(self.facts.calls.get(fs.name, ()))
        if fs.cls is not None:
            sites += self.facts.calls.get("self." + fs.name, [])
        static = bool(sites)
        for call, cscope in sites:
            target, bound = self.callee(call, cscope)
            if target is not fs:
                continue
            arg = self.arg_for(call, fs, name, bound)
            if arg is not None and classify(self.segments(arg, cscope)) != STATIC:
                static = False
                break
        self._param_static[key] = static
        return not static

    # -- literal values ----------------------------------------------------------------
    def literal_str(self, node, scope: Scope, depth: int = 0) -> str | None:
        """The exact text of a string built only from literals and module constants."""
        if depth > _MAX_DEPTH:
            return None
        t = type(node)
        if t is ast.Constant:
            return node.value if type(node.value) is str else None
        if t is ast.JoinedStr:
            parts = []
            for v in node.values:
                if type(v) is ast.Constant:
                    parts.append(v.value)
                else:
                    inner = self.literal_str(v.value, scope, depth + 1)
                    if inner is None:
                        return None
                    parts.append(inner)
            return "".join(parts)
        if t is ast.BinOp:
            if type(node.op) is ast.Add:
                a = self.literal_str(node.left, scope, depth + 1)
                b = self.literal_str(node.right, scope, depth + 1) if a is not None else None
                return None if b is None else a + b
            if type(node.op) is ast.Mult:
                for s_node, n_node in ((node.left, node.right), (node.right, node.left)):
                    if type(n_node) is ast.Constant and type(n_node.value) is int:
                        s = self.literal_str(s_node, scope, depth + 1)
                        if s is not None and len(s) * max(n_node.value, 0) <= _STATIC_LITERAL_MAX:
                            return s * max(n_node.value, 0)
            return None
        if t is ast.Name:
            bl = self.resolve(node.id, scope, node.lineno)
            if len(bl) == 1 and bl[0].kind == ASSIGN:
                return self.literal_str(bl[0].value, bl[0].scope, depth + 1)
            return None
        if t is ast.Call:
            func = node.func
            if type(func) is ast.Attribute and func.attr in ("strip", "lstrip", "rstrip") and not node.args:
                s = self.literal_str(func.value, scope, depth + 1)
                return None if s is None else getattr(s, func.attr)()
            q = self.facts.qualname(func)
            if q in ("textwrap.dedent", "inspect.cleandoc") and len(node.args) == 1:
                s = self.literal_str(node.args[0], scope, depth + 1)
                if s is None:
                    return None
                import inspect
                import textwrap
                return textwrap.dedent(s) if q == "textwrap.dedent" else inspect.cleandoc(s)
        return None

    def literal_obj(self, node, scope: Scope, depth: int = 0):
        """The Python value of a literal (dicts, lists, strings, numbers) with module
        constants followed; raises ``LookupError`` when any part is not literal."""
        if depth > _MAX_DEPTH:
            raise LookupError
        t = type(node)
        if t is ast.Constant:
            return node.value
        if t in (ast.List, ast.Tuple):
            out = []
            for e in node.elts:
                if type(e) is ast.Starred:
                    out.extend(self.literal_obj(e.value, scope, depth + 1))
                else:
                    out.append(self.literal_obj(e, scope, depth + 1))
            return out
        if t is ast.Dict:
            out = {}
            for k, v in zip(node.keys, node.values):
                if k is None:
                    out.update(self.literal_obj(v, scope, depth + 1))
                else:
                    out[self.literal_obj(k, scope, depth + 1)] = self.literal_obj(v, scope, depth + 1)
            return out
        if t is ast.Name:
            bl = self.resolve(node.id, scope, node.lineno)
            if len(bl) == 1 and bl[0].kind == ASSIGN:
                return self.literal_obj(bl[0].value, bl[0].scope, depth + 1)
            raise LookupError
        s = self.literal_str(node, scope, depth + 1)
        if s is not None:
            return s
        raise LookupError

    # -- message lists -----------------------------------------------------------------
    def message_items(self, node, scope: Scope, line: int | None = None, depth: int = 0):
        """The elements of a message list in order, as ``[(expr, scope, repeats)]``;
        ``repeats`` marks items appended inside a loop (they also sit before the last)."""
        if depth > 8:
            return []
        t = type(node)
        if t in (ast.List, ast.Tuple):
            return [(e, scope, False) for e in node.elts]
        if t is ast.BinOp and type(node.op) is ast.Add:
            return (self.message_items(node.left, scope, line, depth + 1)
                    + self.message_items(node.right, scope, line, depth + 1))
        if t is ast.Call:
            func = node.func
            q = self.facts.qualname(func)
            if q in ("builtins.list", "copy.copy", "copy.deepcopy") and len(node.args) == 1:
                return self.message_items(node.args[0], scope, line, depth + 1)
            if type(func) is ast.Attribute and func.attr == "copy" and not node.args:
                return self.message_items(func.value, scope, line, depth + 1)
            return []
        if t is ast.Name:
            bindings = self.resolve(node.id, scope, line or node.lineno)
            bindings = sorted(bindings, key=lambda b: (b.line, b.col))
            items = []
            for b in bindings:
                if b.kind == ASSIGN:
                    items.extend(self.message_items(b.value, b.scope, b.line, depth + 1))
                elif b.kind == APPEND:
                    items.append((b.value, b.scope, b.in_loop))
                elif b.kind in (EXTEND, AUG):
                    items.extend((e, s, b.in_loop or r) for e, s, r in
                                 self.message_items(b.value, b.scope, b.line, depth + 1))
            return items
        return []


_MAPPINGS = ("dict", "Dict", "Mapping", "MutableMapping", "OrderedDict", "defaultdict")
_PERCENT_RE = __import__("re").compile(r"%%|%(\([^)]*\))?[-#0 +]*(\*|\d+)?(\.(\*|\d+))?[hlL]?[diouxXeEfFgGcrsa]")


def _is_template(value) -> bool:
    """True for expressions that assemble text around their parts (f-strings, ``+``,
    ``.format``, ``.join``, ``%``, literals, containers), whose hazards are reported where
    they sit rather than where the assembled value is used."""
    t = type(value)
    if t in (ast.JoinedStr, ast.BinOp, ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set,
             ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp, ast.IfExp):
        return True
    if t is ast.Call and type(value.func) is ast.Attribute and value.func.attr in (
            "format", "join", "replace", "format_map", "substitute", "safe_substitute", "render"):
        return True
    return False


def _is_keys_view(node) -> bool:
    return (type(node) is ast.Call and type(node.func) is ast.Attribute
            and node.func.attr in ("keys", "items") and not node.args)


def _annotation_is(note, names: tuple[str, ...]) -> bool:
    if note is None:
        return False
    if type(note) is ast.Subscript:
        note = note.value
    if type(note) is ast.Attribute:
        return note.attr in names
    if type(note) is ast.Name:
        return note.id in names
    if type(note) is ast.Constant and type(note.value) is str:
        return note.value.split("[", 1)[0].split(".")[-1] in names
    return False
