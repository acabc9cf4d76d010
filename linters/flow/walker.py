"""One walk over a module's syntax tree, collecting :class:`~linters.flow.facts.ModuleFacts`.

The walk is iterative (no recursion limit on deep expressions) and visits each node once.
Only the node types that bind names, open scopes or can be sinks have handlers; every other
node just has its children pushed.
"""

from __future__ import annotations

import ast
from functools import cache
from typing import Any

from linters.flow import tables
from linters.flow.breakpoints import cleared_breakpoints
from linters.flow.cache_keys import conversation_keys
from linters.flow.facts import (
    APPEND,
    ASSIGN,
    AUG,
    DEEPSET,
    DEF,
    EXTEND,
    IMPORT,
    ITER,
    MESSAGES,
    OPAQUE,
    PARAM,
    PREFIX,
    PROMPT,
    ROLE,
    SETITEM,
    SHUFFLE,
    TOOLS,
    UNPACK,
    UPDATE,
    WITH,
    Binding,
    ModuleFacts,
    Request,
    Scope,
    Sink,
)
from linters.flow.loop_marks import loop_marks
from linters.flow.shared_marks import shared_marks

_SCALAR_FIELDS = frozenset(
    {
        "ctx",
        "id",
        "attr",
        "arg",
        "name",
        "names",
        "module",
        "level",
        "kind",
        "type_comment",
        "conversion",
        "is_async",
        "n",
        "s",
        "asname",
        "lineno",
        "col_offset",
    }
)
_AST = ast.AST
_MUTATORS = {
    "append": APPEND,
    "insert": APPEND,
    "extend": EXTEND,
    "update": UPDATE,
    "setdefault": SETITEM,
    "appendleft": APPEND,
}
_SPECIAL_CALL_NAMES = (
    tables.SYSTEM_MESSAGE_CALLS
    | tables.TOOLS_METHODS
    | tables.RESPONSES_METHODS
    | {"shuffle", "seed"}
)
_SINK_KEYWORDS = (
    set(tables.PREFIX_KEYWORDS)
    | set(tables.TOOLS_KEYWORDS)
    | set(tables.PROMPT_KEYWORDS)
    | set(tables.MESSAGES_KEYWORDS)
    | set(tables.BUILD_PREFIX_LAYERS)
    | {"role"}
)
_MUTATION_KINDS = frozenset({APPEND, EXTEND, SETITEM, UPDATE, SHUFFLE, DEEPSET})
_FILL_METHODS = frozenset(
    {
        "partial",
        "invoke",
        "ainvoke",
        "format_messages",
        "format_prompt",
        "stream",
        "astream",
        "batch",
        "abatch",
    }
)
_BODY_KEYS = frozenset({"messages", "contents"})
_REQUEST_KEYS = ("tools", "system", "messages", "model")


@cache
def _fields(t: Any) -> tuple[str, ...]:
    """The child-node fields of AST type ``t`` (scalar fields dropped), memoized."""
    return tuple(x for x in t._fields if x not in _SCALAR_FIELDS)


def _const_str(node: Any) -> str | None:
    """The value of a string literal node, else None."""
    if type(node) is ast.Constant and type(node.value) is str:
        return node.value
    return None


def _call_name(func: Any) -> str:
    """``SystemMessage`` for ``SystemMessage(...)``, ``from_template`` for ``X.from_template``."""
    if type(func) is ast.Name:
        return func.id
    if type(func) is ast.Attribute:
        return func.attr
    return ""


def _dynamic(decorator: Any) -> bool:
    """Whether a ``@agent.system_prompt(...)`` decorator asks for re-evaluation on every run:
    ``dynamic=`` given as anything but a literal False (a variable may be True)."""
    if type(decorator) is not ast.Call:
        return False
    return any(
        kw.arg == "dynamic" and not (type(kw.value) is ast.Constant and kw.value.value is False)
        for kw in decorator.keywords
    )


def _system_role_content(call: ast.Call) -> ast.expr | None:
    """The content of a framework message built with a system role:
    ``Message(role="system", content=...)``, ``ChatMessage(role=MessageRole.SYSTEM, ...)``."""
    role = content = None
    for kw in call.keywords:
        if kw.arg == "role":
            role = kw.value
        elif kw.arg in ("content", "text"):
            content = kw.value
    if role is None or content is None:
        return None
    rs = _const_str(role)
    if rs is None and type(role) is ast.Attribute:
        # MessageRole.SYSTEM, or a config field holding the system role (agent.system_role)
        rs = role.attr.lower()
        if rs in tables.SYSTEM_ROLE_FIELDS:
            rs = "system"
    return content if rs in tables.SYSTEM_ROLES else None


def _dotted_tail(func: Any) -> str:
    """The last two parts of an attribute chain: ``ChatMessage.system``."""
    if type(func) is ast.Attribute:
        base = func.value
        if type(base) is ast.Name:
            return f"{base.id}.{func.attr}"
        if type(base) is ast.Attribute:
            return f"{base.attr}.{func.attr}"
        return func.attr
    if type(func) is ast.Name:
        return func.id
    return ""


class _Walker:
    """One pass over a module: scopes, bindings (where values flow), sinks (where they reach
    a prompt). A handler returning True has pushed the children it wants walked itself."""

    def __init__(self, tree: ast.Module, source: bytes) -> None:
        module = Scope("module", "<module>", tree, None)
        self.facts = ModuleFacts(module=module)
        self.facts.has_cache_control = b"cache_control" in source
        self.pending_calls: list[tuple[ast.Call, Scope]] = []
        self.pending_returns: list[tuple[Scope, str, bool, str | None]] = []
        self.strong = False  # saw a sink that only LLM code has (role dict, messages=...)
        self.scopes: list[Scope] = []
        self.body_dicts: set[int] = set()  # dict literals already read as request bodies

    # -- bindings ---------------------------------------------------------------------
    def add(self, scope: Scope, name: str, b: Binding) -> None:
        """Append binding ``b`` of ``name`` to ``scope`` (to the module's if ``name`` is global)."""
        if name in scope.globals:
            scope = self.facts.module
        lst = scope.bindings.get(name)
        if lst is None:
            scope.bindings[name] = [b]
        else:
            lst.append(b)

    def bind(self, target: Any, value: Any, kind: str, scope: Scope, loops: Any, node: Any) -> None:
        """Flow ``value`` into ``target``: a name, tuples pairwise, ``self.a``, ``x[k]``."""
        t = type(target)
        if t is ast.Name:
            self.add(
                scope,
                target.id,
                Binding(kind, value, scope, node.lineno, node.col_offset, loops, node),
            )
        elif t is ast.Tuple or t is ast.List:
            vt = type(value)
            if (
                kind == ASSIGN
                and (vt is ast.Tuple or vt is ast.List)
                and len(value.elts) == len(target.elts)
                and not any(type(e) is ast.Starred for e in value.elts)
            ):
                for a, b in zip(target.elts, value.elts):
                    self.bind(a, b, ASSIGN, scope, loops, node)
            else:
                sub = UNPACK if kind == ASSIGN else kind
                for elt in target.elts:
                    self.bind(elt, value, sub, scope, loops, node)
        elif t is ast.Starred:
            self.bind(target.value, value, kind, scope, loops, node)
        elif t is ast.Attribute:
            base = target.value
            if type(base) is ast.Name and base.id == "self" and scope.cls is not None:
                b = Binding(kind, value, scope, node.lineno, node.col_offset, loops, node)
                scope.cls.self_attrs.setdefault(target.attr, []).append(b)
            elif type(base) is ast.Name and base.id != "self":
                # ``obj.field = v``: a field of a local object (linters.flow.fields)
                self.add(
                    scope,
                    f"{base.id}.{target.attr}",
                    Binding(kind, value, scope, node.lineno, node.col_offset, loops, node),
                )
            if type(base) is ast.Name and kind in (ASSIGN, AUG) and scope.kind == "function":
                self.facts.attr_writes.append((node, target, value, kind, scope))
        elif t is ast.Subscript:
            base = target.value
            k = SETITEM if kind in (ASSIGN, AUG) else kind
            if type(base) in (ast.Subscript, ast.Attribute) and kind in (ASSIGN, AUG):
                root = base
                while type(root) in (ast.Subscript, ast.Attribute):
                    root = root.value
                if type(root) is ast.Name and root.id != "self":
                    self.add(
                        scope,
                        root.id,
                        Binding(DEEPSET, value, scope, node.lineno, node.col_offset, loops, node),
                    )
                    return
            if type(base) is ast.Name:
                self.add(
                    scope,
                    base.id,
                    Binding(k, value, scope, node.lineno, node.col_offset, loops, node),
                )
            elif (
                type(base) is ast.Attribute
                and type(base.value) is ast.Name
                and base.value.id == "self"
                and scope.cls is not None
            ):
                scope.cls.self_attrs.setdefault(base.attr, []).append(
                    Binding(k, value, scope, node.lineno, node.col_offset, loops, node)
                )

    # -- the walk ------------------------------------------------------------------------
    def run(self, tree: ast.Module) -> ModuleFacts:
        """Walk iteratively: run a node's handler or push its children, then :meth:`finish`."""
        facts = self.facts
        stack: list[tuple] = [(n, facts.module, ()) for n in reversed(tree.body)]
        pop = stack.pop
        push = stack.append
        Constant, Name = ast.Constant, ast.Name
        handlers = _HANDLERS
        longest = 0
        while stack:
            node, scope, loops = pop()
            t: Any = type(node)
            if t is Name:
                continue
            if t is Constant:
                v = node.value
                if type(v) is str and len(v) > longest:
                    longest = len(v)
                continue
            h = handlers.get(t)
            if h is not None and h(self, node, scope, loops, push):
                continue
            for f in _fields(t):
                v = getattr(node, f, None)
                if v is None:
                    continue
                if type(v) is list:
                    for x in v:
                        if isinstance(x, _AST):
                            push((x, scope, loops))
                elif isinstance(v, _AST):
                    push((v, scope, loops))
        facts.longest_constant = longest
        self.finish()
        return facts

    # -- statements ----------------------------------------------------------------------
    def function(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``def``: bind the name; open a PARAM-bound scope; sink a prompt builder's returns."""
        self.add(
            scope, node.name, Binding(DEF, node, scope, node.lineno, node.col_offset, loops, node)
        )
        cls = scope if scope.kind == "class" else None
        parent = scope.parent if scope.kind == "class" else scope
        fs = Scope("function", node.name, node, parent, cls)
        scope.funcs[node.name] = fs
        self.scopes.append(fs)
        a = node.args
        for arg in (*a.posonlyargs, *a.args, a.vararg, *a.kwonlyargs, a.kwarg):
            if arg is None:
                continue
            fs.params.append(arg.arg)
            fs.param_notes[arg.arg] = arg.annotation
            fs.bindings[arg.arg] = [Binding(PARAM, arg, fs, arg.lineno, arg.col_offset, False, arg)]
        for d in node.decorator_list:
            push((d, scope, loops))
            f = d.func if type(d) is ast.Call else d
            if type(f) is ast.Attribute and f.attr in tables.PREFIX_DECORATOR_ATTRS:
                once = f.attr in tables.ONCE_PER_CONVERSATION_DECORATORS and not _dynamic(d)
                cap = tables.RATE_CONVERSATION if once else None
                self.pending_returns.append((fs, f"the `@{f.attr}` function's result", False, cap))
                self.strong = True
        for d in a.defaults:
            push((d, scope, loops))
        for d in a.kw_defaults:
            if d is not None:
                push((d, scope, loops))
        for s in reversed(node.body):
            push((s, fs, ()))
        return True

    def classdef(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``class``: bind the name, open a scope whose methods share ``self.attr`` bindings."""
        self.add(
            scope, node.name, Binding(DEF, node, scope, node.lineno, node.col_offset, loops, node)
        )
        parent = scope.parent if scope.kind == "class" else scope
        cs = Scope("class", node.name, node, parent)
        scope.funcs[node.name] = cs
        for d in (*node.decorator_list, *node.bases, *(k.value for k in node.keywords)):
            push((d, scope, loops))
        for s in reversed(node.body):
            push((s, cs, ()))
        return True

    def assign(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``x = v``: ``v`` flows into each target (ASSIGN)."""
        value = node.value
        for target in node.targets:
            self.bind(target, value, ASSIGN, scope, loops, node)
        push((value, scope, loops))
        return True

    def annassign(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``x: T = v``: ``v`` flows into ``x`` as in ``x = v``; a bare annotation binds nothing."""
        if node.value is not None:
            self.bind(node.target, node.value, ASSIGN, scope, loops, node)
            push((node.value, scope, loops))
        return True

    def augassign(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``x += v``: ``v`` is appended to ``x`` (AUG); other operators make ``x`` OPAQUE."""
        kind = AUG if type(node.op) is ast.Add else OPAQUE
        self.bind(node.target, node.value, kind, scope, loops, node)
        push((node.value, scope, loops))
        if type(node.target) is ast.Subscript:
            push((node.target.slice, scope, loops))
        return True

    def for_(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``for x in it``: each item of ``it`` flows into ``x`` (ITER); the body is in the loop."""
        inner = loops + (node.iter,)
        self.bind(node.target, node.iter, ITER, scope, inner, node)
        push((node.iter, scope, loops))
        for s in (*node.body, *node.orelse):
            push((s, scope, inner))
        return True

    def while_(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``while``: the body is walked as inside a loop of unknown iterable (``None``)."""
        push((node.test, scope, loops))
        for s in (*node.body, *node.orelse):
            push((s, scope, loops + (None,)))
        return True

    def with_(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``with v as x``: ``v`` flows into ``x`` (WITH); then the body is walked."""
        for item in node.items:
            if item.optional_vars is not None:
                self.bind(item.optional_vars, item.context_expr, WITH, scope, loops, node)
            push((item.context_expr, scope, loops))
        for s in node.body:
            push((s, scope, loops))
        return True

    def import_(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``import m as a``: ``a`` is bound to the name ``m`` (IMPORT); LLM SDKs are noted."""
        imports = self.facts.imports
        for alias in node.names:
            if alias.asname:
                local, qual = alias.asname, alias.name
            else:
                local = alias.name.partition(".")[0]
                qual = local
            imports[local] = qual
            self.add(
                scope,
                local,
                Binding(IMPORT, qual, scope, node.lineno, node.col_offset, loops, node),
            )
            self.note_module(alias.name)
        return True

    def importfrom(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``from m import n as a``: ``a`` is bound to ``m.n`` (IMPORT); LLM SDKs are noted."""
        mod = ("." * node.level) + (node.module or "")
        imports = self.facts.imports
        for alias in node.names:
            if alias.name == "*":
                continue
            local = alias.asname or alias.name
            qual = f"{mod}.{alias.name}" if mod else alias.name
            imports[local] = qual
            self.add(
                scope,
                local,
                Binding(IMPORT, qual, scope, node.lineno, node.col_offset, loops, node),
            )
        if node.level == 0 and node.module:
            self.note_module(node.module)
        return True

    def note_module(self, name: str) -> None:
        """Mark the module as LLM code when ``name`` is an LLM SDK (``tables.LLM_MODULES``)."""
        if self.facts.llm_context:
            return
        top = name.partition(".")[0]
        two = ".".join(name.split(".")[:2])
        if top in tables.LLM_MODULES or two in tables.LLM_MODULES or top.startswith("langchain"):
            self.facts.llm_context = True

    def return_(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``return v``: ``v`` becomes a result of the function, flowing to each caller."""
        if node.value is not None:
            scope.returns.append(node.value)
            push((node.value, scope, loops))
        return True

    def yield_(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``yield v`` / ``yield from it``: ``v`` (the items of ``it``) flow to the loops
        over the generator's result, as a return value does to a caller."""
        if node.value is not None:
            scope.yields.append(node.value)
        return False

    def global_(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``global n``: bindings of ``n`` in this function go to the module scope instead."""
        scope.globals.update(node.names)
        return True

    def nonlocal_(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``nonlocal n``: ignored, so a rebinding stays in the inner scope (not seen outside)."""
        return True

    def handler(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``except E as x``: ``x`` is OPAQUE (an exception, not prompt text); walk the body."""
        if node.name:
            self.add(
                scope,
                node.name,
                Binding(OPAQUE, None, scope, node.lineno, node.col_offset, loops, node),
            )
        if node.type is not None:
            push((node.type, scope, loops))
        for s in node.body:
            push((s, scope, loops))
        return True

    # -- expressions ---------------------------------------------------------------------
    def call(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """A call: index it for argument flow; ``x.append(v)``-style calls flow ``v`` into ``x``."""
        func = node.func
        ft = type(func)
        calls = self.facts.calls
        if ft is ast.Name:
            lst = calls.get(func.id)
            if lst is None:
                calls[func.id] = [(node, scope)]
            else:
                lst.append((node, scope))
            if func.id in _SPECIAL_CALL_NAMES:
                self.pending_calls.append((node, scope))
        elif ft is ast.Attribute:
            attr = func.attr
            recv = func.value
            kind = _MUTATORS.get(attr)
            if kind is not None and node.args:
                value = node.args[-1]
                rt = type(recv)
                if rt is ast.Name:
                    self.add(
                        scope,
                        recv.id,
                        Binding(kind, value, scope, node.lineno, node.col_offset, loops, node),
                    )
                elif (
                    rt is ast.Attribute
                    and type(recv.value) is ast.Name
                    and recv.value.id == "self"
                    and scope.cls is not None
                ):
                    scope.cls.self_attrs.setdefault(recv.attr, []).append(
                        Binding(kind, value, scope, node.lineno, node.col_offset, loops, node)
                    )
                elif rt is ast.Attribute and type(recv.value) is ast.Name:
                    self.add(  # ``obj.field.append(v)`` (linters.flow.fields)
                        scope,
                        f"{recv.value.id}.{recv.attr}",
                        Binding(kind, value, scope, node.lineno, node.col_offset, loops, node),
                    )
            if type(recv) is ast.Name:  # self.m(...), Cls.m(...), module.f(...)
                key = ("self." if recv.id == "self" else recv.id + ".") + attr
                lst = calls.get(key)
                if lst is None:
                    calls[key] = [(node, scope)]
                else:
                    lst.append((node, scope))
            if attr in _SPECIAL_CALL_NAMES or _dotted_tail(func) in tables.SYSTEM_MESSAGE_CALLS:
                self.pending_calls.append((node, scope))
            elif attr in tables.FILE_READ_METHODS:
                self.facts.has_file_read = True
            elif attr == "format":
                self.facts.strings.append((node, scope))
            elif attr in _FILL_METHODS:
                self.facts.template_fills.append((node, scope))
        for kw in node.keywords:
            if kw.arg in _SINK_KEYWORDS or kw.arg is None:
                self.pending_calls.append((node, scope))
                break
        return False

    def dict_(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """A dict: a system-role message is a ROLE sink; a request body's fields are sinks."""
        keys = node.keys
        if not keys:
            return False
        role = None
        body = False
        prompt = None
        hinted = False
        for k, v in zip(keys, node.values):
            ks = _const_str(k)
            if ks is None:
                continue
            if ks == "role":
                rs = _const_str(v)
                if rs in tables.SYSTEM_ROLES:
                    role = rs
            elif ks in _BODY_KEYS:
                body = True
            elif ks in tables.PROMPT_KEYWORDS:
                prompt = v
            elif ks in tables.BODY_HINT_KEYS:
                hinted = True
        if prompt is not None and hinted:
            self.facts.sinks.append(Sink(PROMPT, prompt, scope, "the prompt"))
        if role is not None:
            content = next(
                (v for k, v in zip(keys, node.values) if _const_str(k) in ("content", "text")),
                None,
            )
            if content is not None:
                self.facts.sinks.append(
                    Sink(ROLE, content, scope, f"a `{role}` message", node=node)
                )
            self.strong = True
        if body and any(_const_str(k) == "model" for k in keys):
            self.body_dict(node, scope)
            self.body_dicts.add(id(node))
        return False

    def body_dict(self, node: Any, scope: Scope) -> None:
        """A request body written as a dict literal: ``{"model": ..., "messages": [...]}``."""
        parts: dict[str, ast.expr] = {}
        for k, v in zip(node.keys, node.values):
            ks = _const_str(k)
            if ks is None:
                continue
            parts[ks] = v
            if ks in tables.PREFIX_KEYWORDS:
                self.facts.sinks.append(Sink(PREFIX, v, scope, tables.PREFIX_KEYWORDS[ks]))
            elif ks in tables.TOOLS_KEYWORDS:
                self.facts.sinks.append(Sink(TOOLS, v, scope, tables.TOOLS_KEYWORDS[ks]))
            elif ks in tables.MESSAGES_KEYWORDS:
                self.facts.sinks.append(Sink(MESSAGES, v, scope, tables.MESSAGES_KEYWORDS[ks]))
        if self.facts.has_cache_control:
            self.facts.requests.append(
                Request({k: parts[k] for k in _REQUEST_KEYS if k in parts}, scope, node)
            )

    def tuple_(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``("system", text)``: a LangChain-style system message, so a ROLE sink."""
        elts = node.elts
        if len(elts) == 2 and _const_str(elts[0]) in tables.SYSTEM_ROLES:
            self.facts.sinks.append(Sink(ROLE, node, scope, f"a `{elts[0].value}` message"))
        return False

    def comprehension(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """A comprehension: each generator's items flow into its target (ITER, in a loop)."""
        for gen in node.generators:
            self.bind(gen.target, gen.iter, ITER, scope, loops + (gen.iter,), node)
            push((gen.iter, scope, loops))
            for cond in gen.ifs:
                push((cond, scope, loops))
        if type(node) is ast.DictComp:
            push((node.key, scope, loops))
            push((node.value, scope, loops))
        else:
            push((node.elt, scope, loops))
        return True

    def namedexpr(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``(x := v)``: ``v`` flows into ``x`` (ASSIGN)."""
        self.bind(node.target, node.value, ASSIGN, scope, loops, node)
        push((node.value, scope, loops))
        return True

    def string(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """An f-string: kept for PC007 (a per-request value ahead of a long constant)."""
        self.facts.strings.append((node, scope))
        return False

    def binop(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``a + b`` / ``a % b``: a possible concatenation or %-format, kept for PC007."""
        op = type(node.op)
        if op is ast.Add or op is ast.Mod:
            self.facts.strings.append((node, scope))
        return False

    def lambda_(self, node: Any, scope: Scope, loops: Any, push: Any) -> bool:
        """``lambda``: its body is not walked, so nothing inside it binds or sinks."""
        return True

    # -- after the walk ------------------------------------------------------------------
    def finish(self) -> None:
        """After the walk: turn pending calls into sinks, add the returns of functions that
        a framework decorator makes a system prompt (``@agent.system_prompt``)."""
        facts = self.facts
        self.hoist_mutations()
        sinks = facts.sinks
        for node, scope in self.pending_calls:
            self.classify_call(node, scope)
        if self.strong:
            facts.llm_context = True
        for fs, label, hint, cap in self.pending_returns:
            if hint and not facts.llm_context:
                continue
            for r in fs.returns:
                sinks.append(Sink(PREFIX, r, fs, label, hint, rate_cap=cap))

    def hoist_mutations(self) -> None:
        """``REGISTRY[name] = fn`` or ``TOOLS.append(t)`` inside a function mutates the
        enclosing scope's object when the function never binds the name itself: move those
        bindings to the scope that owns the name."""
        for fs in self.scopes:
            for name, bl in list(fs.bindings.items()):
                if "." in name or any(b.kind not in _MUTATION_KINDS for b in bl):
                    continue
                owner = fs.parent
                while owner is not None and name not in owner.bindings:
                    owner = owner.parent
                if owner is None:
                    owner = self.facts.module
                owner.bindings.setdefault(name, []).extend(bl)
                del fs.bindings[name]

    def classify_call(self, node: ast.Call, scope: Scope) -> None:
        """Turn a call into sinks: system messages, tool methods, ``build`` layers, SDK kwargs."""
        facts = self.facts
        sinks = facts.sinks
        func = node.func
        name = _call_name(func)
        qual = facts.qualname(func) or ""
        if qual in ("random.seed", "numpy.random.seed") and node.args:
            key = (id(scope), qual.rpartition(".")[0])
            facts.seeds[key] = min(facts.seeds.get(key, node.lineno), node.lineno)
            return
        if qual in tables.SHUFFLE_CALLS and node.args and type(node.args[0]) is ast.Name:
            self.add(
                scope,
                node.args[0].id,
                Binding(SHUFFLE, node, scope, node.lineno, node.col_offset, False, node),
            )
            return
        if name in tables.SYSTEM_MESSAGE_CALLS or _dotted_tail(func) in tables.SYSTEM_MESSAGE_CALLS:
            # its text only: ``SystemMessage(id=new_id(), content=...)`` (AG-UI) carries an
            # id the model never reads
            # (a template keeps the whole call: its variables are filled through it)
            content = None if name == "from_template" else _message_text(node)
            if content is None:
                sinks.append(Sink(ROLE, node, scope, "a system message"))
            else:
                sinks.append(Sink(ROLE, content, scope, "a system message", node=node))
            self.strong = True
            return
        if name in tables.TOOLS_METHODS and node.args:
            sinks.append(Sink(TOOLS, node.args[0], scope, "the tool definitions"))
            self.strong = True
        role_content = _system_role_content(node)
        if role_content is not None:
            sinks.append(Sink(ROLE, role_content, scope, "a system message", node=node))
            self.strong = True
            return
        is_build = qual in tables.BUILD_CALLS
        if not is_build and not tables.is_request_call(func, qual):
            return  # a sink the linter cannot resolve is not a sink (issue 28)
        responses = (
            name in tables.RESPONSES_METHODS
            and type(func) is ast.Attribute
            and type(func.value) is ast.Attribute
            and func.value.attr == "responses"
        )
        parts: dict[str, ast.expr] = {}
        for arg, value in self.keyword_pairs(node, scope):
            if is_build:
                if arg in tables.BUILD_PREFIX_LAYERS:
                    sinks.append(
                        Sink(
                            TOOLS if arg == "tools" else PREFIX,
                            value,
                            scope,
                            tables.BUILD_PREFIX_LAYERS[arg],
                        )
                    )
                elif arg == "messages":
                    sinks.append(Sink(MESSAGES, value, scope, "the `messages` layer"))
                continue
            if arg in tables.CREWAI_PREFIX_KEYWORDS and qual.startswith("crewai"):
                sinks.append(Sink(PREFIX, value, scope, tables.CREWAI_PREFIX_KEYWORDS[arg]))
            elif arg in tables.ONCE_PER_CONVERSATION_KEYWORDS and qual.startswith("pydantic_ai"):
                cap = tables.RATE_CONVERSATION
                label = tables.PREFIX_KEYWORDS[arg]
                sinks.append(Sink(PREFIX, value, scope, label, rate_cap=cap))
            elif arg in tables.PREFIX_KEYWORDS:
                sinks.append(Sink(PREFIX, value, scope, tables.PREFIX_KEYWORDS[arg]))
                parts[arg] = value
            elif arg in tables.TOOLS_KEYWORDS:
                sinks.append(Sink(TOOLS, value, scope, tables.TOOLS_KEYWORDS[arg]))
                parts[arg] = value
            elif arg in tables.PROMPT_KEYWORDS:
                sinks.append(Sink(PROMPT, value, scope, tables.PROMPT_KEYWORDS[arg]))
            elif arg in tables.MESSAGES_KEYWORDS:
                sinks.append(Sink(MESSAGES, value, scope, tables.MESSAGES_KEYWORDS[arg]))
                parts[arg] = value
            elif arg == "input" and responses:
                sinks.append(Sink(MESSAGES, value, scope, "the input list"))
                self.strong = True
            elif arg == "model":
                parts[arg] = value
        if is_build:
            self.strong = True
        elif facts.has_cache_control and (
            "messages" in parts or "system" in parts or "tools" in parts
        ):
            facts.requests.append(
                Request({k: parts[k] for k in _REQUEST_KEYS if k in parts}, scope, node)
            )

    def keyword_pairs(self, node: ast.Call, scope: Scope) -> list[tuple[str, ast.expr]]:
        """The keyword arguments of a call as ``(name, value)``, with those a ``**m`` splat
        passes where ``m`` is a mapping the same function builds (:func:`splat_pairs`)."""
        out: list[tuple[str, ast.expr]] = []
        for kw in node.keywords:
            if kw.arg is not None:
                out.append((kw.arg, kw.value))
            elif type(kw.value) is ast.Name:
                out.extend(
                    splat_pairs(self.facts, kw.value.id, scope, node.lineno, self.body_dicts)
                )
        return out


def splat_pairs(
    facts: ModuleFacts, name: str, scope: Scope, line: int, skip: set[int]
) -> list[tuple[str, ast.expr]]:
    """The ``(key, value)`` pairs of the mapping that the local ``name`` holds at ``line``
    when the function ``scope`` builds it itself: ``m = {"k": v}`` / ``m = dict(k=v)``, then
    ``m["k"] = v`` and ``m.update({"k": v})``, in source order (a later assignment of ``m``
    starts over). String keys only; a dict literal in ``skip`` (already read as a request
    body) gives none. Empty when ``name`` is a parameter or built elsewhere."""
    pairs: dict[str, ast.expr] = {}
    bl = [b for b in scope.bindings.get(name, ()) if b.line <= line]
    for b in sorted(bl, key=lambda b: (b.line, b.col)):
        v = b.value
        if b.kind == ASSIGN:
            pairs = {}
            if type(v) is ast.Call and facts.qualname(v.func) == "builtins.dict":
                pairs.update((kw.arg, kw.value) for kw in v.keywords if kw.arg is not None)
                v = v.args[0] if len(v.args) == 1 else None
            if type(v) is ast.Dict and id(v) not in skip:
                pairs.update(_str_items(v))
        elif b.kind == SETITEM and type(b.node) is ast.Assign:
            key = _const_str(getattr(b.node.targets[0], "slice", None))
            if key is not None:
                pairs[key] = v
        elif b.kind == UPDATE and type(v) is ast.Dict:
            pairs.update(_str_items(v))
        elif b.kind in (PARAM, OPAQUE, UNPACK, ITER, WITH):
            return []
    return list(pairs.items())


def _str_items(d: ast.Dict) -> list[tuple[str, ast.expr]]:
    """The string-keyed items of a dict literal, in order."""
    out = []
    for k, v in zip(d.keys, d.values):
        ks = _const_str(k)
        if ks is not None:
            out.append((ks, v))
    return out


_HANDLERS = {
    ast.FunctionDef: _Walker.function,
    ast.AsyncFunctionDef: _Walker.function,
    ast.ClassDef: _Walker.classdef,
    ast.Assign: _Walker.assign,
    ast.AnnAssign: _Walker.annassign,
    ast.AugAssign: _Walker.augassign,
    ast.For: _Walker.for_,
    ast.AsyncFor: _Walker.for_,
    ast.While: _Walker.while_,
    ast.With: _Walker.with_,
    ast.AsyncWith: _Walker.with_,
    ast.Import: _Walker.import_,
    ast.ImportFrom: _Walker.importfrom,
    ast.Return: _Walker.return_,
    ast.Global: _Walker.global_,
    ast.Yield: _Walker.yield_,
    ast.YieldFrom: _Walker.yield_,
    ast.Nonlocal: _Walker.nonlocal_,
    ast.ExceptHandler: _Walker.handler,
    ast.Call: _Walker.call,
    ast.Dict: _Walker.dict_,
    ast.Tuple: _Walker.tuple_,
    ast.ListComp: _Walker.comprehension,
    ast.SetComp: _Walker.comprehension,
    ast.GeneratorExp: _Walker.comprehension,
    ast.DictComp: _Walker.comprehension,
    ast.NamedExpr: _Walker.namedexpr,
    ast.JoinedStr: _Walker.string,
    ast.BinOp: _Walker.binop,
    ast.Lambda: _Walker.lambda_,
}


_TEXT_KEYWORDS = ("content", "template", "text")


def _message_text(call: ast.Call) -> ast.expr | None:
    """The text argument of a system-message constructor: the first positional argument or
    ``content=`` / ``template=`` / ``text=``; None when it has none of them (``**kw``)."""
    if call.args and type(call.args[0]) is not ast.Starred:
        return call.args[0]
    for kw in call.keywords:
        if kw.arg in _TEXT_KEYWORDS:
            return kw.value
    return None


def collect(tree: ast.Module, source: bytes) -> ModuleFacts:
    """Walk ``tree`` once and return its :class:`ModuleFacts`.

    ``source`` is the file's bytes (used only for cheap substring checks). Never raises on
    valid syntax trees.
    """
    facts = _Walker(tree, source).run(tree)
    if facts.has_cache_control:
        facts.cleared_breakpoints = cleared_breakpoints(tree)
        facts.loop_breakpoints = loop_marks(tree)
        facts.shared_marks = shared_marks(tree)
    if b"prompt_cache_key" in source:
        facts.conversation_keys = conversation_keys(tree)
    return facts
