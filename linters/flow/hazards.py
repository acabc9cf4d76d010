"""Hazards: what flows into a value that makes a cached prefix differ between requests.

A volatile source (clock, UUID, random, pid, hostname, request id), ``json.dumps`` without
sorted keys, iteration over a set, a dict view whose order depends on input, or a function
parameter (so that a caller's argument can be substituted later). Memoised per node.
"""

from __future__ import annotations

import ast
from typing import Any, NamedTuple

from linters.flow import tables
from linters.flow.alternatives import one_path_only, overwritten
from linters.flow.dispatch import dispatch_targets
from linters.flow.facts import (
    ASSIGN,
    AUG,
    DEF,
    IMPORT,
    ITER,
    OPAQUE,
    PARAM,
    SETITEM,
    SHUFFLE,
    UNPACK,
    UPDATE,
    WITH,
    Binding,
    Scope,
)
from linters.flow.resolve import is_template, short
from linters.flow.segments import SEG_DYNAMIC, SegmentMixin, classify
from linters.flow.sentinels import after_marker, has_mark
from linters.flow.stores import conversation_write

# Hazard kinds: what flows into a value (a per-request id, json.dumps without sort_keys, a
# set, a dict view, a function parameter). Not the segment kinds (SEG_*) of
# linters.flow.segments.
HAZARD_VOLATILE = "volatile"
HAZARD_JSON = "json"
HAZARD_SET = "set"
HAZARD_VIEW = "view"
HAZARD_PARAM = "param"
# kinds that carry a rate: a volatile value, and a parameter (the cap on its argument's rate)
_RATED = (HAZARD_VOLATILE, HAZARD_PARAM)

_MAX_DEPTH = 24
_MAX_MODULE_HOPS = 12  # calls followed into other modules, nested
# json.dumps of values whose text names one of these is never re-sorted by --fix: the
# field order of a schema (or a function's parameters) is meaningful to the model.
_SCHEMA_WORDS = ("schema", "parameters", "properties", "json_schema", "input_schema")
_MAPPINGS = ("dict", "Dict", "Mapping", "MutableMapping", "OrderedDict", "defaultdict")


class Hazard(NamedTuple):
    """A hazard flowing into a value: ``node`` is where it enters (what a finding points
    at), ``detail`` a human description (for PARAM: ``(function scope, parameter name)``),
    ``fixable`` whether an automatic fix exists (PC002), ``rate`` how often a volatile value
    changes (``tables.RATE_*``), ``origin`` the node where the value is made (its root
    cause: one finding per origin), ``partial`` the value is volatile on one code path only
    (another live binding of the name is stable or slower: a stored timestamp, the caller's
    argument, a date where this path has the clock; :mod:`linters.flow.alternatives`),
    ``past_mark`` a builder placed it after a marker string at which a function of the
    project splits the text, the breakpoint on the part before only
    (:mod:`linters.flow.sentinels`)."""

    kind: str
    node: ast.AST
    detail: Any
    fixable: bool = False
    rate: str = tables.RATE_REQUEST
    origin: Any = None
    partial: bool = False  # volatile on one code path only (another binding is stable)
    past_mark: bool = False  # placed after a marker the project splits its cached block at
    unordered: bool = False  # PARAM: reaches the value only through a set or sorted(...)


def _past_mark(hs: Any) -> tuple[Hazard, ...]:
    """``hs`` with every volatile hazard marked as placed after a split marker."""
    return tuple(h._replace(past_mark=True) if h.kind == HAZARD_VOLATILE else h for h in hs)


def unordered(hs: Any) -> list[Hazard]:
    """``hs`` of a value that reaches a prefix only through ``set(...)``/``sorted(...)``
    (or a number): its iteration order does not (set and view hazards dropped), and a
    parameter among them is marked so that a caller's argument is read the same way."""
    return [
        h._replace(unordered=True) if h.kind == HAZARD_PARAM else h
        for h in hs
        if h.kind not in (HAZARD_SET, HAZARD_VIEW)
    ]


def rerate(hs: Any, rate: str) -> tuple[Hazard, ...]:
    """``hs`` with every volatile hazard slowed to at most ``rate`` (``now.date()``); a
    parameter's hazard keeps the cap for the argument a caller passes (``def day(d): return
    d.strftime("%Y-%m-%d")`` called with ``datetime.now()`` is per day)."""
    return tuple(
        h._replace(rate=tables.slower(h.rate, rate)) if h.kind in _RATED else h for h in hs
    )


def partial(hs: Any) -> tuple[Hazard, ...]:
    """``hs`` with every volatile (or parameter) hazard marked as on one code path only."""
    return tuple(h._replace(partial=True) if h.kind in _RATED else h for h in hs)


def _is_id_call(node: Any) -> bool:
    return (
        type(node) is ast.Call
        and type(node.func) is ast.Name
        and node.func.id == "id"
        and len(node.args) == 1
    )


def _id_hazard(node: Any) -> Hazard:
    return Hazard(
        HAZARD_VOLATILE,
        node,
        f"`{short(node)}` (an object address)",
        False,
        tables.RATE_REQUEST,
        node,
    )


class HazardMixin(SegmentMixin):
    """Hazard questions; mixed into :class:`linters.flow.values.Evaluator`."""

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

    def _hazards(self, node: Any, scope: Scope) -> list[Hazard] | tuple:
        t = type(node)
        if t is ast.Constant:
            return ()
        if t is ast.Name:
            return self._h_name(node, scope)
        if t is ast.JoinedStr:
            out: list[Hazard] = []
            past = False  # a splitter's marker came earlier in the text
            for v in node.values:
                if not past and has_mark(self, v, scope):
                    past = True
                    if type(v) is ast.Constant:
                        continue
                if type(v) is ast.FormattedValue:
                    inner = self.hazards(v.value, scope)
                    if past:
                        inner = _past_mark(inner)
                    spec: Any = v.format_spec
                    if type(spec) is ast.JoinedStr and all(
                        type(x) is ast.Constant for x in spec.values
                    ):
                        # f"{now:%Y-%m-%d}": the format keeps only the fields it prints
                        fmt = "".join(str(getattr(x, "value", "")) for x in spec.values)
                        if "%" in fmt:
                            inner = rerate(inner, tables.strftime_rate(fmt))
                    out.extend(inner)
                    if _is_id_call(v.value):
                        out.append(_id_hazard(v.value))
                    if self.is_set(v.value, scope):
                        out.append(
                            Hazard(HAZARD_SET, v.value, f"formatting the set `{short(v.value)}`")
                        )
            return out
        if t is ast.Call:
            return self._h_call(node, scope)
        if t is ast.Attribute:
            return self._h_attribute(node, scope)
        if t is ast.Subscript:
            if self._request_id_key(node.slice):
                return (_request_id(node),)
            base = self.hazards(node.value, scope)
            if type(node.slice) is not ast.Slice:  # a lookup does not depend on key order
                base = tuple(h for h in base if h.kind not in (HAZARD_SET, HAZARD_VIEW))
            return base + self.hazards(node.slice, scope)
        if t is ast.BinOp:
            right = self.hazards(node.right, scope)
            if type(node.op) is ast.Add and has_mark(self, node.left, scope):
                right = _past_mark(right)
            return self.hazards(node.left, scope) + right
        if t is ast.BoolOp:
            return self._h_boolop(node, scope)
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
                out.append(Hazard(HAZARD_SET, node, f"unpacking the set `{short(node.value)}`"))
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

    def _h_boolop(self, node: Any, scope: Scope) -> list[Hazard]:
        """``a or b``: hazards of every operand; ``user_id or str(uuid4())`` is volatile
        on the fallback path only (``partial``) when another operand is volatile-free."""
        per = [self.hazards(v, scope) for v in node.values]
        volatile = [any(h.kind == HAZARD_VOLATILE for h in hs) for hs in per]
        out = [h for hs in per for h in hs]
        stable = [v for v, vol in zip(node.values, volatile) if not vol]
        if stable and all(self._optional_param(v, scope) for v in stable):
            # ``override or build_prompt()`` with ``override=None`` by default: the volatile
            # operand is what runs whenever a caller leaves the argument out
            return out
        if type(node.op) is ast.Or and volatile[0]:
            # ``doc.text or ""``: the volatile value whenever it is set; the constant only
            # stands in for an empty one
            return out
        if any(volatile) and not all(volatile):
            out = [h._replace(partial=True) if h.kind == HAZARD_VOLATILE else h for h in out]
        return out

    def _optional_param(self, node: Any, scope: Scope) -> bool:
        """``node`` is a parameter of the enclosing function whose default is ``None``."""
        if type(node) is not ast.Name:
            return False
        bl = self.resolve(node.id, scope, node.lineno)
        if len(bl) != 1 or bl[0].kind != PARAM:
            return False
        args = bl[0].scope.node.args
        positional = [*args.posonlyargs, *args.args]
        pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
        return any(
            a is bl[0].value and type(d) is ast.Constant and d.value is None for a, d in pairs
        )

    def _h_comprehension(self, node: Any, scope: Scope) -> list[Hazard]:
        out: list[Hazard] = []
        t = type(node)
        for gen in node.generators:
            out.extend(self.hazards(gen.iter, scope))
            if t is not ast.SetComp:
                if self.is_set(gen.iter, scope):
                    out.append(
                        Hazard(HAZARD_SET, gen.iter, f"iterating the set `{short(gen.iter)}`")
                    )
                else:
                    why = self.input_dict(gen.iter, scope)
                    if why:
                        out.append(Hazard(HAZARD_VIEW, gen.iter, why))
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
            b.kind in (ASSIGN, AUG) for b in bindings
        ):
            return [_request_id(node)]
        if len(bindings) > 1:  # those replaced before the use on every path do not reach it
            live = [b for b in bindings if b.scope is not scope or not overwritten(b, bindings)]
            bindings = live or bindings
        per = [self._h_binding(b, node, scope) for b in bindings]
        for hs in per:
            out.extend(hs)
        # alternatives: bindings that replace the value (not appends to it)
        if one_path_only(bindings, per, HAZARD_VOLATILE, _stable_alternative):
            # volatile on one path only: another binding that still reaches the use gives a
            # stable value (a stored timestamp, the caller's argument) or one that changes
            # more slowly; the code is built to avoid it
            out = [h._replace(partial=True) if h.kind == HAZARD_VOLATILE else h for h in out]
        return out

    def _h_binding(
        self, b: Binding, use: ast.AST, use_scope: Scope | None = None
    ) -> list[Hazard] | tuple:
        kind = b.kind
        if kind == PARAM:
            return (Hazard(HAZARD_PARAM, use, (b.scope, b.value.arg)),)
        if kind in (IMPORT, DEF, OPAQUE) or b.value is None:
            return ()
        if kind == SHUFFLE:
            mod = (self.facts.qualname(b.node.func) or "").rpartition(".")[0]
            seeded = self.facts.seeds.get((id(b.scope), mod))
            if seeded is not None and seeded < b.line:
                return ()
            return (
                Hazard(
                    HAZARD_VOLATILE,
                    b.node,
                    f"`{short(b.node)}` (random order)",
                    False,
                    tables.RATE_REQUEST,
                    b.node,
                ),
            )
        value = b.value
        got = self.unpacked_call(b, use.id) if kind == UNPACK and type(use) is ast.Name else None
        if got is not None and got[-1]:  # only the returned element this name takes
            call, cscope, fs, bound, owner, pos, _tuples, _exact = got
            hs = tuple(self._h_local_call(call, fs, bound, cscope, owner, pos))
        else:
            hs = self.hazards(value, b.scope)
        if kind == ITER:
            extra: list[Hazard] = []
            if self.is_set(value, b.scope):
                extra.append(Hazard(HAZARD_SET, value, f"iterating the set `{short(value)}`"))
            else:
                why = self.input_dict(value, b.scope)
                if why:
                    extra.append(Hazard(HAZARD_VIEW, value, why))
            hs = tuple(extra) + hs
        if b.scope.kind == "module" and not b.in_loop and use_scope is not None:
            if use_scope.kind != "module":  # computed once at import, used per call
                hs = rerate(hs, tables.RATE_PROCESS)
        if kind in (ASSIGN, UNPACK, WITH) and not is_template(value):
            # A value computed whole (``now = datetime.now()``) is reported where it is used.
            name = use.id if type(use) is ast.Name else short(use)
            hs = tuple(
                h._replace(
                    node=use,
                    detail=f"`{name}` (set on line {b.line}) from {h.detail}",
                )
                if h.kind == HAZARD_VOLATILE
                else h
                for h in hs
            )
        return hs

    def _h_attribute(self, node: ast.Attribute, scope: Scope) -> list[Hazard] | tuple:
        if tables.REQUEST_ID_RE.match(node.attr):
            return (_request_id(node),)
        base = node.value
        if type(base) is ast.Name and base.id == "self":
            out: list[Hazard] = []
            for b in self.self_attr(node.attr, scope):
                out.extend(self._h_binding(b, node))
            return out
        rate = tables.CLOCK_ATTRS.get(node.attr)
        if rate is not None:
            return rerate(self.hazards(base, scope), rate)
        why = conversation_write(self, node, scope)
        if why is not None:
            return (Hazard(HAZARD_VOLATILE, node, why, False, tables.RATE_WRITE, node),)
        field = self._record_field(node, scope)
        if field is not None:
            return field
        return self.hazards(base, scope)

    def _record_field(self, node: ast.Attribute, scope: Scope) -> list[Hazard] | None:
        """``p.instructions`` after ``p = build(...)`` (awaited too), where every ``return``
        of ``build`` (a function of the project) is a constructor call by keywords that
        passes ``instructions=``: the hazards of that keyword only, not of the whole record
        (a set in ``tool_choice=`` does not build the instructions). None otherwise."""
        base = node.value
        if type(base) is not ast.Name:
            return None
        bl = self.resolve(base.id, scope, node.lineno)
        if len(bl) != 1 or bl[0].kind != ASSIGN:
            return None
        if bl[0].scope is scope and bl[0].line >= node.lineno:
            return None  # ``actions = actions.Column(...)``: not the receiver's value
        value = bl[0].value
        if type(value) is ast.Await:
            value = value.value
        if type(value) is not ast.Call:
            return None
        fs, bound, owner = self.callee_any(value, bl[0].scope)
        if fs is None or not fs.returns:
            return None
        for r in fs.returns:
            if type(r) is not ast.Call or r.args or any(kw.arg is None for kw in r.keywords):
                return None
            if not any(kw.arg == node.attr for kw in r.keywords):
                return None
        return self._h_local_call(value, fs, bound, bl[0].scope, owner, node.attr)

    def _h_call(self, node: ast.Call, scope: Scope) -> list[Hazard] | tuple:
        got = self.volatile_call(node, scope)
        if got:
            return (Hazard(HAZARD_VOLATILE, node, got[0], False, got[1], node),)
        func = node.func
        args = node.args
        if type(func) is ast.Attribute and func.attr in tables.ZONE_METHODS:
            zone = [h for n in (func.value, *args) for h in self.hazards(n, scope)]
            return rerate(zone, tables.RATE_PROCESS)
        if type(func) is ast.Attribute and func.attr in ("strftime", "date"):
            hs = self.hazards(func.value, scope)
            fmt = args[0] if args else None
            if func.attr == "date":
                return rerate(hs, tables.RATE_DAY)
            rates = self._format_rates(fmt, scope, 0) if fmt is not None else None
            if not rates:
                return hs
            hs = rerate(hs, min(rates, key=tables.RATE_ORDER.index))
            if len(set(rates)) > 1:
                # ``fmt = FULL if include_time else DAY``: fast on one code path only
                hs = partial(hs)
            return hs
        q = self.facts.qualname(func)
        if q in ("builtins.str", "builtins.repr") and args and _is_id_call(args[0]):
            return (_id_hazard(args[0]),)
        if q is not None:
            if q in tables.SANITIZING_CALLS:
                return ()
            if (
                q in tables.ORDERING_CALLS
                or q in tables.SET_CONSTRUCTORS
                or (q in tables.ORDER_FREE_CALLS)
            ):
                # sorted(...) fixes the order; set(...) has its own, whatever its input's
                # (reported where the set is iterated); max(...), commonpath(...) have none
                return unordered(h for a in args for h in self.hazards(a, scope))
            mode = tables.JSON_DUMPS.get(q)
            if mode is not None:
                return self._h_json(node, q, mode, scope)
        out: list[Hazard] = []
        if q in tables.ITERATING_CALLS and args:
            a0 = args[0]
            if self.is_set(a0, scope) and not _one_element(a0, node, scope):
                out.append(Hazard(HAZARD_SET, node, f"`{short(node)}` iterates a set"))
            else:
                why = self.input_dict(a0, scope)
                if why:
                    out.append(Hazard(HAZARD_VIEW, node, why))
        if type(func) is ast.Attribute:
            attr = func.attr
            if attr == "join" and args and type(args[0]) is ast.List:
                items = self._joined_items(args[0], scope)
                if items is not None:
                    return out + list(self.hazards(func.value, scope)) + items
            if attr == "join" and args:
                if self.is_set(args[0], scope):
                    out.append(Hazard(HAZARD_SET, node, f"`{short(node)}` joins a set"))
                else:
                    why = self.input_dict(args[0], scope)
                    if why:
                        out.append(Hazard(HAZARD_VIEW, node, why))
            elif attr in ("values", "keys", "items") and not args:
                why = self.input_dict(func.value, scope, iterated=False)
                if why:
                    out.append(Hazard(HAZARD_VIEW, node, why))
            elif attr == "get" and args and self._request_id_key(args[0]):
                return (_request_id(node),)
            elif attr == "get" and args and not _is_self(func.value):  # a lookup: no order
                base = self.hazards(func.value, scope)
                return [h for h in base if h.kind not in (HAZARD_SET, HAZARD_VIEW)] + [
                    h for a in args for h in self.hazards(a, scope)
                ]
        if tables.is_model_reply_call(func, q or ""):
            # the model's reply is generated text: the prompt's hazards are not in it
            return out
        fs, bound, owner = self.callee_any(node, scope)
        if fs is not None:
            out.extend(self._h_local_call(node, fs, bound, scope, owner))
            return out
        if type(func) in (ast.Name, ast.Subscript, ast.Call):
            # ``factory()`` over a table of the project's functions: each may run
            table = dispatch_targets(self, node, scope)
            for fs, bound, owner in table:
                out.extend(self._h_local_call(node, fs, bound, scope, owner))
            if table:
                return out
        if type(func) is ast.Attribute:
            out.extend(self.hazards(func.value, scope))
        for a in args:
            out.extend(self.hazards(a, scope))
        # a keyword of a method the linter cannot see into selects or configures
        # (``client.search(q, user_id=uid)``): its value is not text of the result, unless
        # the method builds text (``tpl.render(now=...)``, ``.format(...)``)
        opaque = type(func) is ast.Attribute and func.attr not in tables.TEXT_BUILDING_METHODS
        for kw in node.keywords:
            hs = self.hazards(kw.value, scope)
            if opaque and kw.arg is not None:
                hs = tuple(h for h in hs if h.kind != HAZARD_VOLATILE)
            out.extend(hs)
        return out

    def _format_rates(self, fmt: Any, scope: Scope, depth: int) -> list[str] | None:
        """The rates of the ``strftime`` formats ``fmt`` can be: a literal, ``A if c else
        B`` of literals, or a local name assigned only such values; None when any
        alternative is not a literal."""
        t = type(fmt)
        if t is ast.Constant and type(fmt.value) is str:
            return [tables.strftime_rate(fmt.value)]
        if depth > 4:
            return None
        if t is ast.IfExp:
            yes = self._format_rates(fmt.body, scope, depth + 1)
            no = self._format_rates(fmt.orelse, scope, depth + 1)
            return yes + no if yes is not None and no is not None else None
        if t is not ast.Name:
            return None
        out: list[str] = []
        for b in self.resolve(fmt.id, scope, fmt.lineno):
            got = self._format_rates(b.value, b.scope, depth + 1) if b.kind == ASSIGN else None
            if got is None:
                return None
            out.extend(got)
        return out or None

    def _joined_items(self, items: ast.List, scope: Scope) -> list[Hazard] | None:
        """Hazards of ``sep.join([a, MARK, b])`` when an item is a splitter's marker: those
        of the items after it carry ``past_mark``; None when no item is one."""
        out: list[Hazard] = []
        past = False
        for e in items.elts:
            hs = self.hazards(e, scope)
            out.extend(_past_mark(hs) if past else hs)
            past = past or has_mark(self, e, scope)
        return out if past else None

    def _h_local_call(
        self,
        node: Any,
        fs: Scope,
        bound: bool,
        scope: Scope,
        owner: Any = None,
        pick: int | str | None = None,
    ) -> list[Hazard]:
        """Hazards of a call to a function of the project: those of its return values (of
        item ``pick`` of each returned tuple when given), with its parameters replaced by the
        arguments of this call. ``owner`` is the
        evaluator of the function's module (``self`` for this module); a volatile value
        made in another module carries its place (``path:line``) and the call into it.
        ``pick``: only element ``pick`` of returned tuple literals (a tuple unpacked into
        names, see :meth:`unpacked_call`), or only keyword ``pick`` of returned constructor
        calls (a field of a returned record, see :meth:`_record_field`); other returns are
        skipped."""
        owner = owner or self
        out: list[Hazard] = []
        project = self.project
        func = node.func
        recv = (
            func.value.id
            if bound
            and type(func) is ast.Attribute
            and type(func.value) is ast.Name
            and func.value.id != "self"
            else None
        )
        if owner is not self:
            if project is None or getattr(project, "depth", 0) > _MAX_MODULE_HOPS:
                return out
            project.depth = getattr(project, "depth", 0) + 1
        scalar = _returns_scalar(fs)
        try:
            for r in (*fs.returns, *fs.yields) if pick is None else fs.returns:
                if type(pick) is int:
                    if type(r) is not ast.Tuple or len(r.elts) <= pick:
                        continue
                    r = r.elts[pick]
                elif type(pick) is str:
                    kw = next((k for k in getattr(r, "keywords", ()) if k.arg == pick), None)
                    if kw is None:
                        continue
                    r = kw.value
                for h in owner.hazards(r, fs):
                    if scalar and h.kind in (HAZARD_SET, HAZARD_VIEW):
                        continue  # an int/float/bool result renders no iteration order
                    if h.kind == HAZARD_PARAM and h.detail[0] is fs:
                        arg = self.arg_for(node, fs, h.detail[1], bound)
                        if arg is not None:
                            sub = rerate(self.hazards(arg, scope), h.rate)
                            sub = partial(sub) if h.partial else sub
                            out.extend(unordered(sub) if h.unordered or scalar else sub)
                    elif (
                        h.kind == HAZARD_PARAM
                        and recv is not None
                        and fs.cls is not None
                        and h.detail[0].cls is fs.cls
                    ):
                        out.extend(self._receiver_args(node, recv, h.detail, scope, (owner, fs)))
                    elif owner is not self and h.kind != HAZARD_PARAM:
                        out.append(_hop(h, owner, node))
                    else:
                        out.append(h)
        finally:
            if owner is not self:
                project.depth -= 1
        return out

    def _receiver_args(
        self,
        node: Any,
        recv: str,
        param: tuple[Scope, str],
        scope: Scope,
        reader: tuple[Any, Scope],
    ) -> list[Hazard]:
        """Hazards of what earlier calls on the same instance stored in it: a value the
        method called at ``node`` reads from ``self`` came in as parameter ``param`` of a
        sibling method (``b.add_section("Time", now)`` ... ``b.build()``), so the arguments
        of the calls ``recv.<that method>(...)`` made in ``scope`` up to ``node``'s line.
        ``reader`` is (its module's evaluator, the method called at ``node``): an item it
        places after a marker that the project splits its cached block at is past that
        block's breakpoint: its hazards carry ``past_mark`` (:mod:`linters.flow.sentinels`)."""
        method, pname = param
        out: list[Hazard] = []
        calls = [
            call
            for call, s in self.facts.calls.get(f"{recv}.{method.name}", ())
            if s is scope and call.lineno <= node.lineno
        ]
        past = after_marker(reader[0], reader[1], method, calls) if calls else set()
        for call in calls:
            arg = self.arg_for(call, method, pname, True)
            if arg is None:
                continue
            hop = f" (stored on line {call.lineno} by `{recv}.{method.name}()`)"
            mark = id(call) in past
            out.extend(
                h._replace(detail=f"{h.detail}{hop}", past_mark=mark or h.past_mark)
                if h.kind == HAZARD_VOLATILE
                else h
                for h in self.hazards(arg, scope)
            )
        return out

    def _h_json(self, node: ast.Call, q: str, mode: str, scope: Scope) -> list[Hazard]:
        out: list[Hazard] = []
        if node.args:
            # the set order of a dict's keys is what PC002 reports (or sort_keys removes):
            # one root cause, one finding
            out.extend(h for h in self.hazards(node.args[0], scope) if h.kind != HAZARD_SET)
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
        why = self.key_order_varies(node.args[0], scope, 0) if node.args else None
        if why is None:
            return out  # key order fixed by the code that builds the dict (issue 28)
        # never reorder a schema: its field order is what the model reads
        schema = any(w in short(node.args[0], 200).lower() for w in _SCHEMA_WORDS)
        fixable = mode == "sort_keys" and "sort_keys" not in kws and not schema
        out.append(
            Hazard(
                HAZARD_JSON,
                node,
                f"`{short(node.func)}(...)` without sorted keys, of {why},",
                fixable,
            )
        )
        return out

    def key_order_varies(self, node: Any, scope: Scope, depth: int) -> str | None:
        """Why the key order of the dict ``node`` evaluates to can differ between requests
        with equal data, or None when the code that builds it fixes the order (a literal,
        a schema, a file read from disk). Differs: built by iterating a set, merged from a
        caller's ``**kwargs``, a network payload (``resp.json()``)."""
        if depth > 8:
            return None
        t = type(node)
        if t is ast.DictComp or t is ast.SetComp:
            for gen in node.generators:
                if self.is_set(gen.iter, scope):
                    return f"a dict built by iterating the set `{short(gen.iter)}`"
            return None
        if t is ast.Dict:
            for k, v in zip(node.keys, node.values):
                why = (
                    self._kwargs_param(v, scope)
                    if k is None
                    else self.key_order_varies(v, scope, depth + 1)
                )
                if why:
                    return why
            return None
        if t in (ast.List, ast.Tuple):
            for e in node.elts:
                why = self.key_order_varies(e, scope, depth + 1)
                if why:
                    return why
            return None
        if t is ast.Call:
            func = node.func
            if type(func) is ast.Attribute and func.attr == "json" and not node.args:
                return f"a network payload (`{short(node)}`)"
            if self.facts.qualname(func) in tables.DICT_CONSTRUCTORS:
                for kw in node.keywords:
                    why = self._kwargs_param(kw.value, scope) if kw.arg is None else None
                    if why:
                        return why
                if node.args:
                    return self.key_order_varies(node.args[0], scope, depth + 1)
            return None
        if t is ast.Name:
            why = self._kwargs_param(node, scope)
            if why:
                return why
            for b in self.resolve(node.id, scope, node.lineno):
                if b.kind == ASSIGN:
                    why = self.key_order_varies(b.value, b.scope, depth + 1)
                elif b.kind in (SETITEM, UPDATE):
                    loop = next(
                        (it for it in b.in_loop if it is not None and self.is_set(it, b.scope)),
                        None,
                    )
                    why = f"a dict filled in a loop over the set `{short(loop)}`" if loop else None
                    if why is None and b.kind == UPDATE:
                        why = self._kwargs_param(b.value, b.scope)
                else:
                    why = None
                if why:
                    return why
        return None

    def _kwargs_param(self, node: Any, scope: Scope) -> str | None:
        """``node`` is the ``**kwargs`` parameter of its function: its key order is the
        order of each caller's keyword arguments."""
        if type(node) is not ast.Name:
            return None
        for b in self.resolve(node.id, scope, node.lineno):
            if b.kind == PARAM:
                fn = b.scope.node
                kwarg = getattr(getattr(fn, "args", None), "kwarg", None)
                if kwarg is not None and kwarg.arg == node.id:
                    return f"`**{node.id}` (ordered as each caller passes them)"
        return None

    def is_set(self, node: Any, scope: Scope, depth: int = 0) -> bool:
        """True when ``node`` evaluates to a ``set``/``frozenset`` (unordered)."""
        key = id(node)
        got = self._set.get(key)
        if got is not None:
            return got
        self._set[key] = False  # cycle guard
        res = self._is_set(node, scope, depth)
        self._set[key] = res
        return res

    def _is_set(self, node: Any, scope: Scope, depth: int) -> bool:
        if depth > _MAX_DEPTH:
            return False
        t = type(node)
        if t is ast.SetComp:
            return True
        if t is ast.Set:
            # a set display of one item (``{"id"}``) has one order in every process
            return len(node.elts) > 1 or any(type(e) is ast.Starred for e in node.elts)
        if t is ast.Call:
            func = node.func
            q = self.facts.qualname(func)
            if q in tables.SET_CONSTRUCTORS:
                return True
            if type(func) is ast.Attribute and func.attr in tables.SET_METHODS:
                return self.is_set(func.value, scope, depth + 1)
            return False
        if t is ast.BinOp and type(node.op) in (ast.BitOr, ast.BitAnd, ast.Sub, ast.BitXor):
            return (
                self.is_set(node.left, scope, depth + 1)
                or self.is_set(node.right, scope, depth + 1)
                or _is_keys_view(node.left)
                or _is_keys_view(node.right)
            )
        if t is ast.Name:
            for b in self.resolve(node.id, scope, node.lineno):
                if b.kind == ASSIGN and self.is_set(b.value, b.scope, depth + 1):
                    return True
                if b.kind == UNPACK and self._unpacked_set(b, node.id, depth + 1):
                    return True
                if b.kind == PARAM and _annotation_is(
                    b.scope.param_notes.get(node.id),
                    ("set", "frozenset", "Set", "FrozenSet", "AbstractSet", "MutableSet"),
                ):
                    return True
            return False
        if t is ast.Attribute and type(node.value) is ast.Name and node.value.id == "self":
            return any(
                b.kind == ASSIGN and self.is_set(b.value, b.scope, depth + 1)
                for b in self.self_attr(node.attr, scope)
            )
        return False

    def unpacked_call(self, b: Binding, name: str) -> Any:
        """For ``mode, names = pick(...)`` (or ``= picked`` after ``picked = pick(...)``):
        ``(call, its scope, callee scope, self bound, callee's evaluator, position of
        name, the callee's returns that are tuple literals as long as the target, exact)``
        when the called function (of this module or, through the project index, another)
        returns such a tuple; ``exact`` when every other return is one that unpacking
        cannot have come from (a constant). None otherwise."""
        target: Any = b.node.targets[0] if type(b.node) is ast.Assign else None
        if type(target) not in (ast.Tuple, ast.List) or any(
            type(e) is not ast.Name for e in target.elts
        ):
            return None
        pos = next((i for i, e in enumerate(target.elts) if e.id == name), None)
        value, scope = b.value, b.scope
        for _ in range(4):  # ``picked = pick(...)``: follow a name bound once
            if type(value) is not ast.Name:
                break
            bl = self.resolve(value.id, scope, b.line)
            if len(bl) != 1 or bl[0].kind != ASSIGN or bl[0] is b:
                return None
            if bl[0].scope is scope and bl[0].line >= b.line:
                return None
            value, scope = bl[0].value, bl[0].scope
        if type(value) is ast.Await:
            value = value.value
        if pos is None or type(value) is not ast.Call:
            return None
        fs, bound, owner = self.callee_any(value, scope)
        if fs is None:
            return None
        n = len(target.elts)
        tuples = [r for r in fs.returns if type(r) is ast.Tuple and len(r.elts) == n]
        if not tuples:
            return None
        exact = all(r in tuples or _not_unpackable(r) for r in fs.returns)
        return value, scope, fs, bound, owner, pos, tuples, exact

    def _unpacked_set(self, b: Binding, name: str, depth: int) -> bool:
        """True when the element ``name`` takes of an unpacked returned tuple is a set in
        some ``return`` (see :meth:`unpacked_call`)."""
        got = self.unpacked_call(b, name)
        if got is None:
            return False
        _call, _scope, fs, _bound, owner, pos, tuples, _exact = got
        return any(owner.is_set(r.elts[pos], fs, depth + 1) for r in tuples)

    def input_dict(self, node: Any, scope: Scope, iterated: bool = True) -> str | None:
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

    def is_mapping(self, node: Any, scope: Scope, depth: int = 0) -> bool:
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
            return any(
                b.kind == ASSIGN and self.is_mapping(b.value, b.scope, depth + 1)
                for b in self.self_attr(node.attr, scope)
            )
        return False

    def _input_dict(self, node: Any, scope: Scope, depth: int) -> str | None:
        if depth > 8:
            return None
        t = type(node)
        if t is ast.DictComp:
            # an order-preserving filter of a dict keeps that dict's order (issue 28)
            for gen in node.generators:
                if self.is_set(gen.iter, scope):
                    return f"a dict comprehension over the set `{short(gen.iter)}`"
                if not _is_view(gen.iter) and classify(self.segments(gen.iter, scope)) == (
                    SEG_DYNAMIC
                ):
                    return f"a dict comprehension over `{short(gen.iter)}` (per-request order)"
            return None
        if t is ast.Call:
            q = self.facts.qualname(node.func)
            if q in tables.DICT_CONSTRUCTORS and node.args:
                return self._input_dict(node.args[0], scope, depth + 1)
            return None
        if t is ast.Name or (
            t is ast.Attribute and type(node.value) is ast.Name and node.value.id == "self"
        ):
            if t is ast.Name:
                bindings = self.resolve(node.id, scope, node.lineno)
                label = node.id
            else:
                bindings = self.self_attr(node.attr, scope)
                label = short(node)
            home = None
            for b in bindings:
                if b.kind == ASSIGN and home is None:
                    home = b.scope
            for b in bindings:
                if b.kind == ASSIGN:
                    why = self._input_dict(b.value, b.scope, depth + 1)
                    if why:
                        return f"`{label}` is {why}"
                elif b.kind in (SETITEM, UPDATE):
                    loop = next(
                        (
                            it
                            for it in b.in_loop
                            if it is not None
                            and not _is_view(it)
                            and (
                                self.is_set(it, b.scope)
                                or classify(self.segments(it, b.scope)) == SEG_DYNAMIC
                            )
                        ),
                        None,
                    )
                    if loop is not None:
                        return (
                            f"`{label}` is filled in a loop over `{short(loop)}` (line "
                            f"{b.line}), so its order is the input's"
                        )
                    if home is not None and b.scope is not home and b.scope.kind == "function":
                        return (
                            f"`{label}` is filled by `{b.scope.name}()` at run time (line "
                            f"{b.line}), so its order is the order of the calls"
                        )
        return None


#: return annotations whose values cannot carry an iteration order into a prompt
_SCALAR_NOTES = frozenset({"int", "float", "bool", "complex"})


def _returns_scalar(fs: Scope) -> bool:
    """Whether ``fs`` is annotated to return a number or a bool (``def n(...) -> int``): the
    order of a set or dict view it walked (a longest-prefix match, a count) does not reach
    the caller's text; a clock or random value still does, so only order hazards stop."""
    note = getattr(fs.node, "returns", None)
    return type(note) is ast.Name and note.id in _SCALAR_NOTES


def _hop(h: Hazard, owner: Any, call: Any) -> Hazard:
    """A hazard from another module, moved to the call into it, its place named:
    "`datetime.now()` (the clock) at pkg/time.py:24, returned by `now_text()`"."""
    origin = h.origin if h.origin is not None else h.node
    at = getattr(origin, "lineno", 0)
    # lines named so far without a file are lines of the owner's module
    detail = (
        str(h.detail)
        .replace("(set on line ", f"(set on {owner.path}:")
        .replace("(stored on line ", f"(stored on {owner.path}:")
    )
    if " at " not in detail:
        detail += f" at {owner.path}:{at}"
    return h._replace(
        node=call,
        detail=f"`{short(call.func, 48)}()` returning {detail}",
        origin=origin,
        fixable=False,  # the fix would land in another file
    )


def _one_element(coll: Any, use: Any, scope: Scope) -> bool:
    """Whether ``use`` sits in the body of an ``if`` (of the function ``scope``) whose test
    requires ``len(coll) == 1``: a set of one element has one order
    (``if len(names) == 1: name = next(iter(names))``)."""
    text = ast.unparse(coll)
    line = getattr(use, "lineno", 0)
    for n in ast.walk(scope.node):
        if type(n) is not ast.If or not n.body:
            continue
        if not (n.body[0].lineno <= line <= (n.body[-1].end_lineno or n.body[-1].lineno)):
            continue
        for c in ast.walk(n.test):
            if (
                type(c) is ast.Compare
                and len(c.ops) == 1
                and type(c.ops[0]) is ast.Eq
                and _len_of(c.left) == text
                and type(c.comparators[0]) is ast.Constant
                and c.comparators[0].value == 1
            ):
                return True
    return False


def _len_of(node: Any) -> str | None:
    """``"names"`` for ``len(names)``; None for anything else."""
    if (
        type(node) is ast.Call
        and type(node.func) is ast.Name
        and node.func.id == "len"
        and len(node.args) == 1
    ):
        return ast.unparse(node.args[0])
    return None


def _not_unpackable(node: Any) -> bool:
    """A return value that unpacking into names cannot have come from: ``None``, a
    number, a bool, or a choice between such constants and strings (``"auto" if x else
    "none"``, returned on the paths where the caller does not unpack)."""
    t = type(node)
    if t is ast.Constant:
        return True
    return t is ast.IfExp and _not_unpackable(node.body) and _not_unpackable(node.orelse)


def _is_self(node: Any) -> bool:
    return type(node) is ast.Name and node.id == "self"


def _stable_alternative(b: Binding) -> bool:
    """A binding that gives a name a real stable value in place of a volatile one: the
    caller's argument, or a value read from somewhere (``msg.created_at``). A literal seed
    (``x = ""``, ``x = []``, ``x = None``) that code extends later is not an alternative."""
    if b.kind == PARAM:
        return True
    v = b.value
    return b.kind == ASSIGN and type(v) not in (ast.Constant, ast.List, ast.Dict, ast.Tuple)


def _request_id(node: Any) -> Hazard:
    return Hazard(
        HAZARD_VOLATILE,
        node,
        f"`{short(node)}` (a per-request id)",
        False,
        tables.RATE_REQUEST,
        node,
    )


def _is_view(node: Any) -> bool:
    """``d.items()`` / ``d.keys()`` / ``d.values()``, or a bare dict name in a loop: iterating
    a dict preserves its order (an order-preserving filter, issue 28)."""
    return (
        type(node) is ast.Call
        and type(node.func) is ast.Attribute
        and node.func.attr in ("items", "keys", "values")
        and not node.args
    )


def _is_keys_view(node: Any) -> bool:
    return (
        type(node) is ast.Call
        and type(node.func) is ast.Attribute
        and node.func.attr in ("keys", "items")
        and not node.args
    )


def _annotation_is(note: Any, names: tuple[str, ...]) -> bool:
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
