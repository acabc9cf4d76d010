"""Name resolution shared by the evaluators: bindings visible at a use, the module function
a call reaches, the argument it passes for a parameter, and volatile calls."""

from __future__ import annotations

import ast
from typing import Any

from linters.flow import tables
from linters.flow.facts import ASSIGN, DEF, ITER, PARAM, Binding, ModuleFacts, Scope
from linters.flow.project import absolute


def short(node: ast.AST, limit: int = 48) -> str:
    """Source text of ``node`` for a message, shortened to ``limit`` characters."""
    try:
        text = ast.unparse(node)
    except Exception:  # pragma: no cover - unparse handles every node the parser makes
        return "<expr>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def class_of(scope: Scope | None) -> Scope | None:
    """The class scope whose method ``scope`` (or a function nested in it) is."""
    s = scope
    while s is not None and s.cls is None:
        s = s.parent
    return s.cls if s is not None else None


class Resolver:
    """Name resolution and call targets for one module's facts: the bindings a name has at
    a line, the function (here or, through the project index, in another module) a call
    reaches, and the project class a name holds. Mixed into
    :class:`linters.flow.values.Evaluator`; methods return None (or ``(None, ...)``) for
    what they cannot tell and raise nothing."""

    # Memo tables of the evaluator (linters.flow.values.Evaluator sets them), declared here
    # so that the mixins built on this class see their types: node id -> hazards, node id ->
    # segments, node id -> "is a set", (node id, iterated) -> input-dict reason,
    # (scope id, parameter) -> "is static".
    _hz: dict[int, tuple[Any, ...]]
    _seg: dict[int, tuple[Any, ...]]
    _set: dict[int, bool]
    _dict: dict[tuple[int, bool], str | None]
    _param_static: dict[tuple[int, str], bool]

    """Follows names of one module (see :class:`linters.flow.values.Evaluator`).

    ``extra_volatile`` adds fully qualified call names to the volatile table.
    """

    def __init__(self, facts: ModuleFacts, extra_volatile: frozenset[str] = frozenset()) -> None:
        self.facts = facts
        self.extra_volatile = extra_volatile
        self.path = ""  # the file's path relative to the lint root (set by Project.add)
        self.project: Any = None  # linters.flow.project.Project, for calls into other modules
        # (function scope id, parameter) -> [(sink, hop)]: parameters that reach a cached
        # prefix of this module (set by linters.flow.reach.prefix_reaches)
        self.param_sinks: dict[tuple[int, str], list[Any]] | None = None
        # the same for parameters that are a message list sent in a request of this module
        self.param_msg_sinks: dict[tuple[int, str], list[Any]] = {}
        self.reaches_cache: list[Any] | None = None
        self.store_index: Any = None  # linters.flow.stores.StoreIndex of a lone module
        self.param_sink_names: set[str] = set()  # names of the functions in param_sinks
        # id(request field) -> the request's ``messages`` (linters.flow.reach.single_turn)
        self.request_fields: dict[int, Any] | None = None
        # id() of the next-to-last items of message-list literals (linters.flow.reach.last_cached)
        self.before_last: set[int] | None = None
        # split markers of this module (linters.flow.sentinels.module_sentinels)
        self.sentinels_cache: frozenset[str] | None = None
        self._fscopes: dict[int, Scope] | None = None
        self._active: set[int] = set()  # nodes whose hazards are being computed
        self._active_seg: set[int] = set()  # nodes whose segments are being computed
        self._instances_active: set[int] = set()  # calls whose made class is being read

    def resolve(self, name: str, scope: Scope, line: int) -> list[Binding]:
        """Bindings of ``name`` visible from ``scope`` at ``line``: the nearest scope that
        binds it; in the use's own scope, the target of the comprehension the use is in
        (Python 3 gives it its own scope), else only bindings on earlier lines (all if
        none), and of those a ``for`` loop's target only inside that loop where another
        binding remains (after it, the name holds one item,
        and code that reuses the name rebinds it: ``for k in d: ...`` then ``k = m.get(...)``)."""
        s: Scope | None = scope
        while s is not None:
            bl = s.bindings.get(name)
            if bl:
                if s is scope:
                    inner = _comprehension_target(bl, line)
                    if inner is not None:
                        return [inner]
                    before = [b for b in bl if b.line < line]
                    live = [b for b in before if not _loop_ended(b, line)]
                    return live or before or bl
                return bl
            s = s.parent
        return []

    def self_attr(self, attr: str, scope: Scope) -> list[Binding]:
        """Bindings of ``self.<attr>`` from any method of the class ``scope`` belongs to."""
        cls = class_of(scope)
        return cls.self_attrs.get(attr, []) if cls is not None else []

    def function_scope(self, node: ast.AST) -> Scope | None:
        """The scope of a ``def`` node of this module."""
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
        if type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id == "self":
            cls = class_of(scope)
            if cls is not None:
                fs = cls.funcs.get(func.attr)
                if fs is not None and fs.kind == "function":
                    return fs, True
        return None, False

    def callee_any(self, call: ast.Call, scope: Scope) -> tuple[Scope | None, bool, Any]:
        """The function a call reaches in this module or, through the project index, in
        another module of the project: ``(function scope, self bound, its evaluator)``.
        Follows ``f()``, ``self.m()``, ``Cls.m()`` for a class of this module, and imported
        names (``from pkg.mod import f``; ``Gen.build()`` after ``from pkg import Gen``;
        ``mod.f()`` after ``import pkg.mod as mod``)."""
        fs, bound = self.callee(call, scope)
        if fs is not None:
            return fs, bound, self
        func = call.func
        if type(func) is ast.Attribute and type(func.value) is ast.Name:
            for b in self.resolve(func.value.id, scope, call.lineno):
                if b.kind == DEF and type(b.value) is ast.ClassDef:
                    cls = self.function_scope(b.value)
                    m = cls.funcs.get(func.attr) if cls is not None else None
                    if m is not None and m.kind == "function":
                        return m, not _static(m), self
                    return None, False, None
        if type(func) is ast.Attribute and type(func.value) is ast.Name:
            cls, owner = self.instance_class(func.value, scope, call.lineno)
            m = cls.funcs.get(func.attr) if cls is not None else None
            if m is not None and m.kind == "function" and not _static(m):
                return m, True, owner
        found = self.project_def(func, "function")
        if found is None or found[0] is self:
            return None, False, None
        ev, target = found
        return target, target.cls is not None and not _static(target), ev

    def project_lookup(self, qual: str) -> tuple[Any, Scope] | None:
        """:meth:`linters.flow.project.Project.lookup` of a dotted name of this module, a
        relative one made absolute from this module's path
        (:func:`linters.flow.project.absolute`)."""
        found: tuple[Any, Scope] | None = self.project.lookup(absolute(qual, self.path))
        return found

    def project_def(self, ref: ast.AST, kind: str) -> tuple[Any, Scope] | None:
        """``(evaluator of its module, scope)`` of the class or function (``kind``: ``"class"``
        or ``"function"``) of another module of the project that the dotted name ``ref``
        (an imported ``Name`` or an ``Attribute``) refers to; None for builtins, names
        outside the project, or a definition of the other kind."""
        if self.project is None or type(ref) not in (ast.Name, ast.Attribute):
            return None
        qual = self.facts.qualname(ref)
        if not qual or "." not in qual or qual.startswith("builtins."):
            return None
        found = self.project.lookup(absolute(qual, self.path))
        if found is None or found[1].kind != kind:
            return None
        return found[0], found[1]

    def instance_class(self, name: ast.Name, scope: Scope, line: int) -> tuple[Any, Any]:
        """The class scope of the project that a local name holds an instance of, and the
        evaluator of its module: ``b = Builder()`` (one binding, a call of a class of this
        module or one imported from the project); ``(None, None)`` otherwise."""
        if name.id == "self":
            return None, None
        bl = self.resolve(name.id, scope, line)
        if len(bl) == 1 and bl[0].kind == PARAM:
            return self._annotated_param(bl[0].scope, name.id)
        if len(bl) != 1 or bl[0].kind != ASSIGN or type(bl[0].value) is not ast.Call:
            return None, None
        if bl[0].scope is scope and bl[0].line >= line:
            # ``actions = actions.Column(...)`` (a class body, the module ``actions``): the
            # name's own assignment is not what the call's receiver holds
            return None, None
        ctor = bl[0].value.func
        if type(ctor) is ast.Name:
            for b in self.resolve(ctor.id, scope, line):
                if b.kind == DEF and type(b.value) is ast.ClassDef:
                    return self.function_scope(b.value), self
                if b.kind == DEF:
                    break
        key = id(bl[0].value)
        if key in self._instances_active:  # ``x = x.make()``: the call reads its own name
            return None, None
        self._instances_active.add(key)
        try:
            made = self._annotated_instance(bl[0].value, bl[0].scope)
        finally:
            self._instances_active.discard(key)
        if made[0] is not None:
            return made
        found = self.project_def(ctor, "class")
        return (found[1], found[0]) if found is not None else (None, None)

    def _annotated_param(self, fs: Scope, pname: str) -> tuple[Any, Any]:
        """The project class a parameter is annotated with (``ctx: PromptContext``,
        ``ctx: PromptContext | None``, ``Optional[PromptContext]``, ``"PromptContext"``)
        and its module's evaluator; ``(None, None)`` for anything else (a protocol or
        base class of the project is taken as itself: its own methods are followed)."""
        note = unwrap_optional(fs.param_notes.get(pname))
        if type(note) is ast.Constant and type(note.value) is str and note.value.isidentifier():
            note = ast.Name(id=note.value, lineno=getattr(fs.node, "lineno", 0))
        if type(note) is ast.Name:
            for b in self.resolve(note.id, fs, getattr(fs.node, "lineno", 0)):
                if b.kind == DEF and type(b.value) is ast.ClassDef:
                    return self.function_scope(b.value), self
                if b.kind == DEF:
                    return None, None
        elif type(note) is not ast.Attribute:
            return None, None
        found = self.project_def(note, "class")
        return (found[1], found[0]) if found is not None else (None, None)

    def _annotated_instance(self, call: ast.Call, scope: Scope) -> tuple[Any, Any]:
        """The project class a project function returns by its annotation
        (``def get_store(uid) -> Store``), and its module's evaluator."""
        fs, _bound, owner = self.callee_any(call, scope)
        note = getattr(fs.node, "returns", None) if fs is not None else None
        if owner is None or type(note) not in (ast.Name, ast.Attribute):
            return None, None
        if type(note) is ast.Name:
            for b in owner.resolve(note.id, fs, note.lineno):
                if b.kind == DEF and type(b.value) is ast.ClassDef:
                    return owner.function_scope(b.value), owner
        found = owner.project_def(note, "class")
        return (found[1], found[0]) if found is not None else (None, None)

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

    def volatile_call(self, node: ast.Call, scope: Scope | None = None) -> tuple[str, str] | None:
        """Why a call's result changes between requests and how often, as ``(why, rate)``
        (rate: one of ``tables.RATE_ORDER``), or None. A ``random`` call after
        ``random.seed(...)`` in the same function (``scope``) is deterministic; ``id()``
        is handled where it is rendered into text (see ``hazards``)."""
        q = self.facts.qualname(node.func)
        if q is None:
            return None
        what, rate = tables.VOLATILE_CALLS.get(q, (None, tables.RATE_REQUEST))
        if what is None and q in self.extra_volatile:
            what = "a value configured as volatile"
        if what is None:
            n = tables.CLOCK_DEFAULT_CALLS.get(q)
            if n is not None and len(node.args) < n and not node.keywords:
                what = "the clock"
                if q == "time.strftime" and node.args:
                    fmt = node.args[0]
                    if type(fmt) is ast.Constant and type(fmt.value) is str:
                        rate = tables.strftime_rate(fmt.value)
        if what is None:
            mod, _, fn = q.rpartition(".")
            exc = tables.RANDOM_MODULES.get(mod)
            if exc is not None and fn not in exc:
                seeded = self.facts.seeds.get((id(scope), mod)) if scope is not None else None
                if seeded is None or seeded >= node.lineno:
                    what = "a random number generator"
        if what is None:
            return None
        return f"`{short(node.func, 40)}()` ({what})", rate

    @staticmethod
    def _request_id_key(node: Any) -> bool:
        return (
            type(node) is ast.Constant
            and type(node.value) is str
            and tables.REQUEST_ID_RE.match(node.value) is not None
        )


def _loop_ended(b: Binding, line: int) -> bool:
    """``b`` binds a ``for`` loop's target and ``line`` comes after that loop."""
    node = b.node
    return b.kind == ITER and type(node) in (ast.For, ast.AsyncFor) and line > node.end_lineno


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _comprehension_target(bl: list[Binding], line: int) -> Binding | None:
    """The binding of a comprehension's own target when ``line`` lies inside that
    comprehension (the innermost one): there the name is the comprehension's variable,
    whatever the enclosing function bound to it before (Python 3 comprehensions have their
    own scope). None when no comprehension binding the name spans ``line``."""
    best = None
    for b in bl:
        n = b.node
        if b.kind != ITER or type(n) not in _COMPREHENSIONS:
            continue
        end = getattr(n, "end_lineno", None) or n.lineno
        if n.lineno <= line <= end and (
            best is None or end - n.lineno < (best.node.end_lineno or 0) - best.node.lineno
        ):
            best = b
    return best


def is_static(fs: Scope) -> bool:
    """A ``@staticmethod`` (no ``self``/``cls`` bound when called)."""
    return _static(fs)


def unwrap_optional(note: Any) -> Any:
    """``X`` of the annotation ``X | None``, ``None | X``, ``Optional[X]`` or
    ``typing.Optional[X]``; None for a union of two or more other types (``A | B``);
    ``note`` itself for anything else. Raises nothing."""
    if type(note) is ast.BinOp and type(note.op) is ast.BitOr:
        sides = [s for s in (note.left, note.right) if not _is_none(s)]
        return sides[0] if len(sides) == 1 else None
    if type(note) is ast.Subscript and getattr(note.value, "id", None) == "Optional":
        return note.slice
    if type(note) is ast.Subscript and getattr(note.value, "attr", None) == "Optional":
        return note.slice
    return note


def _is_none(node: Any) -> bool:
    return type(node) is ast.Constant and node.value is None


def _static(fs: Scope) -> bool:
    """A ``@staticmethod`` (no ``self``/``cls`` bound when called)."""
    return any(
        type(d) is ast.Name and d.id == "staticmethod"
        for d in getattr(fs.node, "decorator_list", ())
    )


def is_template(value: Any) -> bool:
    """True for expressions that assemble text around their parts (f-strings, ``+``,
    ``.format``, ``.join``, ``%``, literals, containers), whose hazards are reported where
    they sit rather than where the assembled value is used."""
    t = type(value)
    if t in (
        ast.JoinedStr,
        ast.BinOp,
        ast.Constant,
        ast.List,
        ast.Tuple,
        ast.Dict,
        ast.Set,
        ast.ListComp,
        ast.GeneratorExp,
        ast.DictComp,
        ast.SetComp,
        ast.IfExp,
    ):
        return True
    if (
        t is ast.Call
        and type(value.func) is ast.Attribute
        and value.func.attr
        in ("format", "join", "replace", "format_map", "substitute", "safe_substitute", "render")
    ):
        return True
    return False
