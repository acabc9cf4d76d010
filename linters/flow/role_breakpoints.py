"""Rolling breakpoints placed only on user-role messages, in a project whose agent turns are
tool-role messages (the facts of PC013).

The shape (SWE-agent/SWE-agent, fixed in 3f35533a, 2025-01-09, "Finally fix cache control
with anthropic")::

    n_tagged = 0
    for entry in reversed(history):                        # newest first
        self._clear_cache_control(entry)
        if n_tagged < self.last_n_messages and entry["role"] == "user":
            self._set_cache_control(entry)                 # entry["content"][0]["cache_control"] = ...
            n_tagged += 1

and elsewhere in the project ``history_item["role"] = "tool"``. In the OpenAI / litellm
message format a tool result is a ``{"role": "tool"}`` message, not a user message: an agent
step adds an assistant message and a tool message and no user message, so the rolling
breakpoints stay on the old user messages at the start of the conversation and the growing
tool-call history after them is written to the cache on every step and never read. (In
Anthropic's own format tool results *are* user messages carrying ``tool_result`` blocks: a
project that builds such blocks is not reported, whichever format this loop sees.)

Found per function, calls followed one level into the module's functions and ``self.``
methods (and the project's, through :meth:`linters.flow.resolve.Resolver.callee_any`):

- a loop over a message list **newest first**: ``reversed(E)``, ``E[::-1]``, ``E[-k:]``,
  ``range(len(E) - 1, stop, -1)`` (index form), through ``enumerate``/``list``;
- a **role filter** on the loop's entry: ``if ... and entry["role"] == "user"`` (also
  ``.get("role")``, ``.role``, ``in ("user",)``, a local ``role = entry["role"]``, and the
  ``if entry["role"] != "user": continue`` form), the roles resolved to literals (module
  and class constants followed) and all of them user-side (``user``, ``system``,
  ``developer``), ``user`` among them;
- a **breakpoint** on the entry under that filter: ``entry...["cache_control"] = v``
  (``v`` not ``None``), ``entry[k] = [{..., "cache_control": ...}]``, or a call that passes
  the entry to a function doing so on its parameter;
- the **project** builds a tool-role message (``{"role": "tool"}``, ``dict(role="tool")``,
  ``Message(role="tool")``, ``item["role"] = "tool"``, the value resolved, constants
  followed) and builds no Anthropic ``{"type": "tool_result"}`` block.
"""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass
from typing import Any

from linters.flow import tables
from linters.flow.facts import ASSIGN, Scope
from linters.flow.nodes import FUNCS, own_nodes

KEY = tables.CACHE_CONTROL
# Roles whose messages a tool call never produces: a filter on these alone skips the turns an
# agent adds in the OpenAI message format (assistant + tool).
USER_SIDE = frozenset({"user", "system", "developer"})
_PASS_THROUGH = frozenset({"list", "enumerate", "tuple"})


@dataclass(frozen=True, slots=True)
class UserOnlyBreakpoint:
    """A role test ``node`` that lets only ``roles`` get the rolling breakpoint set at
    ``mark_line`` (in function ``marker``) while walking ``collection`` (source text) newest
    first in ``function``."""

    node: ast.expr
    roles: tuple[str, ...]
    collection: str
    function: str
    marker: str
    mark_line: int


@dataclass(frozen=True, slots=True)
class RoleSites:
    """Where the project builds a tool-role message and an Anthropic ``tool_result`` block:
    ``(path, line)`` of the first found, or None."""

    tool_message: tuple[str, int] | None
    tool_result: tuple[str, int] | None


def _str(ev: Any, node: Any, scope: Scope) -> str | None:
    """The literal text of ``node`` (constants followed), or None."""
    if type(node) not in (ast.Constant, ast.Name, ast.Attribute):
        return None
    got: str | None = ev.literal_str(node, scope)
    return got


class _Entry:
    """Which expressions are one message: ``names`` (the loop variable or a parameter, and
    names bound from a part of it), or ``E[i]`` for an index loop."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.roles: set[str] = set()  # names bound from the entry's role
        self.index: tuple[str, str] | None = None  # (list text, index name)

    def aliases(self, body: list[Any]) -> None:
        """Names bound in ``body`` from (a part of) the entry (``msg = history[i]``,
        ``content = entry["content"]``, ``(content := entry["content"])``) and from its
        role (``role = entry["role"]``)."""
        binds = [n for n in own_nodes(body) if type(n) in (ast.Assign, ast.NamedExpr)]
        for n in sorted(binds, key=lambda a: (a.lineno, a.col_offset)):
            targets = n.targets if type(n) is ast.Assign else [n.target]
            names = {t.id for t in targets if type(t) is ast.Name}
            if self.role_of(n.value):
                self.roles |= names
            elif self.part(n.value):
                self.names |= names

    def entry(self, e: Any) -> bool:
        """Whether ``e`` is the entry itself."""
        if type(e) is ast.Name:
            return e.id in self.names
        if self.index is not None and type(e) is ast.Subscript and type(e.slice) is ast.Name:
            return e.slice.id == self.index[1] and ast.unparse(e.value) == self.index[0]
        return False

    def part(self, e: Any) -> bool:
        """Whether ``e`` is the entry or reached from it through subscripts, attributes,
        ``.get(...)`` and ``typing.cast(T, ...)``."""
        for _ in range(16):
            if self.entry(e):
                return True
            t = type(e)
            if t is ast.Subscript or t is ast.Attribute:
                e = e.value
            elif t is ast.Call and type(e.func) is ast.Attribute and e.func.attr == "get":
                e = e.func.value
            elif t is ast.Call and _cast(e.func) and len(e.args) == 2:
                e = e.args[1]
            else:
                return False
        return False

    def role_of(self, e: Any) -> bool:
        """Whether ``e`` reads the entry's role: ``m["role"]``, ``m.get("role")``,
        ``m.role``, or a name bound from one of those."""
        t = type(e)
        if t is ast.Name:
            return e.id in self.roles
        if t is ast.Attribute:
            return e.attr == "role" and self.entry(e.value)
        if t is ast.Subscript:
            key = e.slice
        elif t is ast.Call and type(e.func) is ast.Attribute and e.func.attr == "get" and e.args:
            key, e = e.args[0], e.func
        else:
            return False
        return type(key) is ast.Constant and key.value == "role" and self.entry(e.value)


def _cast(func: Any) -> bool:
    """``cast`` / ``typing.cast``: returns its second argument unchanged."""
    return (type(func) is ast.Name and func.id == "cast") or (
        type(func) is ast.Attribute and func.attr == "cast"
    )


class _Loop(_Entry):
    """One loop over the newest messages of a list (``ok`` False when it is not one).

    ``pre_filter``: the comprehension condition (and the entry it tests) when the loop walks
    a filtered list: ``for m in [m for m in msgs if m["role"] == "user"][-2:]``, or the
    indices ``[i for i, m in enumerate(msgs) if ...]`` (then the entries are ``msgs[i]``),
    the list given inline or bound once to a local name."""

    def __init__(self, loop: ast.For | ast.AsyncFor, ev: Any, scope: Scope) -> None:
        super().__init__(set())
        self.loop = loop
        self.ev, self.scope = ev, scope
        self.collection = ""
        self.pre_filter: tuple[_Entry, list[ast.expr]] | None = None
        self.newest = False
        self.ok = self._iteration(loop.iter, loop.target, 0)
        if self.ok:
            self.aliases(loop.body)

    def _iteration(self, it: Any, target: Any, depth: int) -> bool:
        it, pairs, newest = _strip(it)
        self.newest |= newest
        t = type(it)
        if t is ast.Call and type(it.func) is ast.Name and it.func.id == "range":
            if len(it.args) == 3 and _negative(it.args[2]):
                return self._range(it.args[0], target)
            return False
        if t is ast.Name and depth == 0:
            bl = self.ev.resolve(it.id, self.scope, self.loop.lineno)
            value = bl[0].value if len(bl) == 1 and bl[0].kind == ASSIGN else None
            if type(value) in (ast.ListComp, ast.GeneratorExp):
                it, t = value, type(value)
        if t in (ast.ListComp, ast.GeneratorExp) and depth == 0 and not pairs:
            return self._comprehension(it, target)
        if not self.newest:
            return False
        if pairs:
            if type(target) is not ast.Tuple or len(target.elts) != 2:
                return False
            target = target.elts[1]
        if type(target) is not ast.Name:
            return False
        self.names.add(target.id)
        self.collection = ast.unparse(it)
        return True

    def _comprehension(self, comp: Any, target: Any) -> bool:
        """A loop over a filtered list of messages (or of their indices)."""
        if len(comp.generators) != 1 or type(target) is not ast.Name:
            return False
        gen = comp.generators[0]
        src, pairs, newest = _strip(gen.iter)
        self.newest |= newest
        elt, tgt = comp.elt, gen.target
        if not self.newest or type(elt) is not ast.Name or not gen.ifs:
            return False
        if type(tgt) is ast.Name and elt.id == tgt.id and not pairs:
            self.names.add(target.id)
            entry = _Entry({tgt.id})
        elif pairs and type(tgt) is ast.Tuple and len(tgt.elts) == 2:
            i, m = tgt.elts
            if type(i) is not ast.Name or type(m) is not ast.Name or elt.id != i.id:
                return False
            self.index = (ast.unparse(src), target.id)
            entry = _Entry({m.id})
        else:
            return False
        self.collection = ast.unparse(src)
        self.pre_filter = (entry, list(gen.ifs))
        return True

    def _range(self, start: Any, target: Any) -> bool:
        """``range(len(E) - 1, stop, -1)``: entries are ``E[i]``."""
        lens = [
            n
            for n in ast.walk(start)
            if type(n) is ast.Call and type(n.func) is ast.Name and n.func.id == "len" and n.args
        ]
        if len(lens) != 1 or type(target) is not ast.Name:
            return False
        self.collection = ast.unparse(lens[0].args[0])
        self.index = (self.collection, target.id)
        return True


def _strip(it: Any) -> tuple[Any, bool, bool]:
    """``it`` without order-keeping wrappers (``reversed``, ``list``, ``enumerate``) and
    slices; whether one is ``enumerate``; whether one puts the newest first or keeps only
    the newest (``reversed``, ``[::-1]``, ``[-k:]``)."""
    pairs = newest = False
    for _ in range(8):
        t = type(it)
        if t is ast.Call and type(it.func) is ast.Name and len(it.args) == 1:
            name = it.func.id
            if name != "reversed" and name not in _PASS_THROUGH:
                break
            newest |= name == "reversed"
            pairs |= name == "enumerate"
            it = it.args[0]
        elif t is ast.Subscript and type(it.slice) is ast.Slice:
            s = it.slice
            tail = s.step is None and s.upper is None and _negative(s.lower)
            back = s.step is not None and _negative(s.step)
            head = s.step is None and s.lower is None
            if not (tail or back or head):
                break
            newest |= tail or back
            it = it.value
        else:
            break
    return it, pairs, newest


def _negative(node: Any) -> bool:
    """A negative number literal (``-1``, ``-n``)."""
    if type(node) is ast.UnaryOp and type(node.op) is ast.USub:
        return True
    return type(node) is ast.Constant and type(node.value) is int and node.value < 0


def _roles(ev: Any, node: Any, scope: Scope, many: bool) -> tuple[str, ...] | None:
    """The role(s) ``node`` names: one string, or (``many``) a literal tuple/list/set of
    strings or a constant naming one; None when any part is not literal."""
    if not many:
        s = _str(ev, node, scope)
        return None if s is None else (s,)
    if type(node) in (ast.Tuple, ast.List, ast.Set):
        got = [_str(ev, e, scope) for e in node.elts]
        return None if any(g is None for g in got) else tuple(g for g in got if g is not None)
    if type(node) not in (ast.Name, ast.Attribute):
        return None
    try:
        obj = ev.literal_obj(node, scope)
    except (LookupError, TypeError, ValueError):
        return None
    if type(obj) not in (list, tuple) or not all(type(x) is str for x in obj):
        return None
    return tuple(obj)


def _role_test(
    ev: Any, e: _Entry, test: Any, scope: Scope, negated: bool
) -> tuple[ast.expr, tuple[str, ...]] | None:
    """``(comparison, roles)`` when ``test`` requires the entry's role to be one of
    ``roles``: one comparison joined by ``and`` (``negated``: the test that *skips* the
    other roles, joined by ``or``: ``if role != "user": continue``)."""
    join = ast.Or if negated else ast.And
    parts = test.values if type(test) is ast.BoolOp and type(test.op) is join else [test]
    for c in parts:
        if type(c) is ast.UnaryOp and type(c.op) is ast.Not:
            c, flip = c.operand, True
        else:
            flip = False
        if type(c) is not ast.Compare or len(c.ops) != 1:
            continue
        op = type(c.ops[0])
        want_eq = negated == flip
        eq, member = (ast.Eq, ast.In) if want_eq else (ast.NotEq, ast.NotIn)
        left, right = c.left, c.comparators[0]
        if op is eq and e.role_of(right):
            left, right = right, left
        if op not in (eq, member) or not e.role_of(left):
            continue
        roles = _roles(ev, right, scope, op is member)
        if roles is not None:
            return c, roles
    return None


def _has_key_dict(node: Any, ev: Any, scope: Scope) -> bool:
    return any(
        type(d) is ast.Dict and any(k is not None and _str(ev, k, scope) == KEY for k in d.keys)
        for d in ast.walk(node)
    )


def _marks(
    ev: Any, e: _Entry, stmts: list[Any], scope: Scope, depth: int = 0
) -> list[tuple[int, str, int]]:
    """Breakpoints ``stmts`` put on the entry: ``(id(node), function, line)``, where node
    is the assignment or the call of a helper that does it (followed ``depth`` < 2 deep)."""
    out = []
    for n in own_nodes(stmts):
        t = type(n)
        if t is ast.Assign:
            for tgt in n.targets:
                if type(tgt) is not ast.Subscript:
                    continue
                none = type(n.value) is ast.Constant and n.value.value is None
                if _str(ev, tgt.slice, scope) == KEY and not none and e.part(tgt.value):
                    out.append((id(n), scope.name, n.lineno))
                elif e.part(tgt) and _has_key_dict(n.value, ev, scope):
                    out.append((id(n), scope.name, n.lineno))
        elif t is ast.Call and depth < 2:
            hit = _helper_mark(ev, e, n, scope, depth)
            if hit is not None:
                out.append((id(n), *hit))
    return out


def _helper_mark(
    ev: Any, e: _Entry, call: ast.Call, scope: Scope, depth: int
) -> tuple[str, int] | None:
    """``(function, line)`` when ``call`` passes the entry to a function of the project
    that puts a breakpoint on that parameter."""
    args = [*call.args, *(k.value for k in call.keywords)]
    if not any(e.part(a) for a in args):
        return None
    fs, bound, owner = ev.callee_any(call, scope)
    if fs is None or owner is None or not isinstance(fs.node, FUNCS):
        return None
    for p in fs.params[1:] if bound else fs.params:
        a = ev.arg_for(call, fs, p, bound)
        if a is None or not e.entry(a):
            continue
        inner = _Entry({p})
        inner.aliases(fs.node.body)
        found = _marks(owner, inner, fs.node.body, fs, depth + 1)
        if found:
            _, name, line = min(found, key=lambda m: m[2])
            return name, line
    return None


def _loop_breakpoint(ev: Any, lp: _Loop, scope: Scope) -> UserOnlyBreakpoint | None:
    """The user-only filter of one newest-first loop, when every breakpoint the loop sets
    on its entry lies under it."""
    every = _marks(ev, lp, lp.loop.body, scope)
    if not every:
        return None
    ids = {m[0] for m in every}
    candidates: list[tuple[Any, list[Any]]] = []
    if lp.pre_filter is not None:
        entry, ifs = lp.pre_filter
        for cond in ifs:
            candidates.append((_role_test(ev, entry, cond, scope, False), lp.loop.body))
    for n in own_nodes(lp.loop.body):
        if type(n) is ast.If:
            candidates.append((_role_test(ev, lp, n.test, scope, False), n.body))
    body = lp.loop.body
    for i, s in enumerate(body):
        if type(s) is ast.If and not s.orelse and [type(x) for x in s.body] == [ast.Continue]:
            candidates.append((_role_test(ev, lp, s.test, scope, True), body[i + 1 :]))
    for test, under in candidates:
        if test is None or "user" not in test[1] or not set(test[1]) <= USER_SIDE:
            continue
        marked = _marks(ev, lp, under, scope)
        if marked and {m[0] for m in marked} == ids:
            _, marker, line = min(marked, key=lambda m: m[2])
            fn = scope.name
            return UserOnlyBreakpoint(test[0], test[1], lp.collection, fn, marker, line)
    return None


def user_only_breakpoints(ev: Any) -> list[UserOnlyBreakpoint]:
    """Every newest-first loop of the module (``ev``: its
    :class:`linters.flow.values.Evaluator`) that puts ``cache_control`` only on user-side
    messages, in source order. Never raises on a valid syntax tree."""
    out = []
    for fn in ast.walk(ev.facts.module.node):
        if not isinstance(fn, FUNCS):
            continue
        scope = ev.function_scope(fn)
        if scope is None:
            continue
        for n in own_nodes(fn.body):
            if type(n) in (ast.For, ast.AsyncFor):
                lp = _Loop(n, ev, scope)
                hit = _loop_breakpoint(ev, lp, scope) if lp.ok else None
                if hit is not None:
                    out.append(hit)
    return sorted(out, key=lambda b: (b.node.lineno, b.node.col_offset))


# id(project or lone evaluator) -> its RoleSites; weak, so a finished run frees them
_SITES: weakref.WeakKeyDictionary[Any, RoleSites] = weakref.WeakKeyDictionary()


def role_sites(ev: Any) -> RoleSites:
    """Where the project of ``ev`` (every module of the run naming ``tool``, or ``ev``'s
    module alone under ``lint_source``) builds a tool-role message and an Anthropic
    ``tool_result`` block. Computed once per project."""
    holder = ev.project if ev.project is not None else ev
    got = _SITES.get(holder)
    if got is None:
        evs = list(ev.project.evaluators(b"tool")) if ev.project is not None else [ev]
        tool: tuple[str, int] | None = None
        result: tuple[str, int] | None = None
        for m in sorted(evs, key=lambda x: x.path):
            t, r = _module_sites(m)
            tool = tool or t
            result = result or r
            if tool is not None and result is not None:
                break
        got = _SITES[holder] = RoleSites(tool, result)
    return got


def _module_sites(ev: Any) -> tuple[tuple[str, int] | None, tuple[str, int] | None]:
    """The first tool-role message and the first ``tool_result`` block one module builds."""
    tool: tuple[str, int] | None = None
    result: tuple[str, int] | None = None
    stack: list[tuple[Any, Scope]] = [(ev.facts.module.node, ev.facts.module)]
    while stack and (tool is None or result is None):
        node, scope = stack.pop()
        for pair in _pairs(node):
            key, value = (_str(ev, x, scope) for x in pair)
            if tool is None and key == "role" and value == "tool":
                tool = (ev.path, pair[0].lineno)
            elif result is None and key == "type" and value == "tool_result":
                result = (ev.path, pair[0].lineno)
        for child in ast.iter_child_nodes(node):
            inner = ev.function_scope(child) if isinstance(child, (*FUNCS, ast.ClassDef)) else None
            stack.append((child, inner or scope))
    return tool, result


def _pairs(node: Any) -> list[tuple[Any, Any]]:
    """(key, value) pairs a node sets on a message: a dict literal's items, a call's
    keywords (``dict(role=...)``, ``Message(role=...)``), ``x["role"] = value``."""
    t = type(node)
    if t is ast.Dict:
        return [(k, v) for k, v in zip(node.keys, node.values) if k is not None]
    if t is ast.Call:
        return [
            (ast.Constant(k.arg, lineno=k.value.lineno), k.value) for k in node.keywords if k.arg
        ]
    if t is ast.Assign:
        return [(x.slice, node.value) for x in node.targets if type(x) is ast.Subscript]
    return []
