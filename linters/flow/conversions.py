"""Message converters that rebuild messages without their message-level ``cache_control``
(the facts behind PC015).

The shape (All-Hands-AI/OpenHands, ``convert_fncall_messages_to_non_fncall_messages`` before
0c2924453f, 2025-05-25)::

    # openhands/core/message.py: a tool result's breakpoint sits on the message itself
    if self.role == 'tool' and item.cache_prompt:
        role_tool_with_prompt_caching = True
    ...
    message_dict = {'content': content, 'role': self.role}
    if role_tool_with_prompt_caching:
        message_dict['cache_control'] = {'type': 'ephemeral'}

    # openhands/llm/fn_call_converter.py: the converter rebuilds each message
    for message in messages:
        role = message['role']
        content = message['content']
        ...
        elif role == 'tool':
            ...
            converted_messages.append({'role': 'user', 'content': content})  # key dropped
    return converted_messages

Two resolved facts make a *dropping branch*:

- **the messages carry the key** (:func:`message_marks`): somewhere in the project a message
  dict (a dict display with ``role`` and ``content`` keys) gets a ``cache_control`` key, in
  the display or by ``d["cache_control"] = ...`` on the name bound to it. The roles it is set
  for are resolved from the display's ``role`` value (a constant) or from the ``if`` tests
  the write sits in: ``<role> == "tool"`` directly, or a flag tested there that is set to
  ``True`` only under such a test. Otherwise any role. Or: the converter itself reads
  ``cache_control`` from the loop's message on another branch (then any role).
- **a branch rebuilds a message without it** (:func:`dropping_branches`): a function loops
  ``for m in <list>`` (or ``for i, m in enumerate(<list>)``), and in that loop a dict display with ``role`` and ``content`` keys
  whose content is made from ``m``'s (it reads ``m["content"]``, ``m.get("content")`` or a
  name bound from them) is appended to a list the function returns. The branch is the ``if`` arm of a
  role test on ``m`` (``m["role"] == "tool"``, a name bound from ``m["role"]``, ``in`` a
  tuple of roles). It drops the key when nothing in that arm names ``cache_control`` and
  the display neither spreads ``**m`` nor has the key.

A branch is reported when its role is one the project sets the key for (a branch with no
role test only when the key is set for any role): that the returned list reaches a request
is not proven (the converters seen are called by request wrappers the flow does not
follow), so the role match stands in for it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from linters.flow import tables
from linters.flow.nodes import FUNCS, const_str

KEY = tables.CACHE_CONTROL


@dataclass(frozen=True, slots=True)
class MessageMark:
    """A message-level ``cache_control`` written at ``path:line`` in function ``func``, for
    the roles ``roles`` (None: any role)."""

    path: str
    line: int
    func: str
    roles: frozenset[str] | None


@dataclass(frozen=True, slots=True)
class DroppingBranch:
    """In function ``func``, the loop over ``loop_var`` rebuilds a message of role ``role``
    (None: every message reaching the display) as ``node`` (a dict display) without its
    ``cache_control``; ``returned`` is the list the display is appended to."""

    node: ast.Dict
    func: str
    loop_var: str
    role: str | None
    returned: str
    reads_key: bool  # the loop reads the key from the message on another branch


def message_marks(ev: Any) -> list[MessageMark]:
    """Every message-level ``cache_control`` write in the project of ``ev`` (in its module
    alone without a project), made once per project; empty when none. Never raises on a
    valid syntax tree."""
    project = ev.project
    cached = getattr(project, "_message_marks", None) if project is not None else None
    if cached is not None:
        return list(cached)
    modules = [ev] if project is None else list(project.evaluators(KEY.encode()))
    out: list[MessageMark] = []
    for m in modules:
        tree = m.facts.module.node
        for fn in ast.walk(tree):
            if type(fn) in FUNCS:
                out.extend(_marks_in(getattr(m, "path", ""), fn))
    if project is not None:
        project._message_marks = tuple(out)
    return out


def _marks_in(path: str, fn: Any) -> Iterator[MessageMark]:
    """Message-level ``cache_control`` writes in one function body."""
    msgs: dict[str, ast.Dict] = {}
    stmts = list(_statements(fn.body, []))  # walked twice: message names first, then writes
    for stmt, _ in stmts:
        if type(stmt) in (ast.Assign, ast.AnnAssign) and type(stmt.value) is ast.Dict:
            targets = stmt.targets if type(stmt) is ast.Assign else [stmt.target]
            if _is_message(stmt.value):
                for t in targets:
                    if type(t) is ast.Name:
                        msgs[t.id] = stmt.value
    for stmt, guards in stmts:
        for d in _displays(stmt):
            if _is_message(d) and KEY in _keys(d):
                yield MessageMark(path, d.lineno, fn.name, _display_roles(d, guards, fn))
        if type(stmt) is not ast.Assign:
            continue
        for t in stmt.targets:
            if (
                type(t) is ast.Subscript
                and type(t.value) is ast.Name
                and t.value.id in msgs
                and const_str(t.slice) == KEY
            ):
                d = msgs[t.value.id]
                yield MessageMark(path, stmt.lineno, fn.name, _display_roles(d, guards, fn))


def _display_roles(d: ast.Dict, guards: list, fn: Any) -> frozenset[str] | None:
    """The roles a message display with a marker is made for: its constant ``role``, or
    those its guards (or the flags they test) compare the display's role value with."""
    role = _keys(d).get("role")
    if (name := const_str(role)) is not None:
        return frozenset({name})
    if role is None:
        return None
    want = ast.unparse(role)
    for g in guards:
        got = _role_test(g, want)
        if got:
            return got
        if type(g) is ast.Name:
            got = _flag_roles(fn, g.id, want)
            if got:
                return got
    return None


def _flag_roles(fn: Any, flag: str, want: str) -> frozenset[str] | None:
    """The roles under which ``flag`` is set to ``True`` when every such assignment sits
    under a role test of ``want``; None otherwise."""
    roles: set[str] = set()
    found = False
    for stmt, guards in _statements(fn.body, []):
        if type(stmt) is not ast.Assign or _const_value(stmt.value) is not True:
            continue
        if not any(type(t) is ast.Name and t.id == flag for t in stmt.targets):
            continue
        found = True
        got = None
        for g in guards:
            got = got or _role_test(g, want)
        if not got:
            return None
        roles |= got
    return frozenset(roles) if found else None


def _role_test(test: Any, want: str) -> frozenset[str] | None:
    """Roles ``test`` requires of the expression spelled ``want`` (``want == "tool"``,
    ``want in ("tool", "user")``, or one operand of an ``and``); None if it requires none."""
    if type(test) is ast.BoolOp and type(test.op) is ast.And:
        for v in test.values:
            got = _role_test(v, want)
            if got:
                return got
        return None
    if type(test) is not ast.Compare or len(test.ops) != 1:
        return None
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if type(op) is ast.Eq:
        for a, b in ((left, right), (right, left)):
            if ast.unparse(a) == want and (value := const_str(b)) is not None:
                return frozenset({value})
    if type(op) is ast.In and ast.unparse(left) == want and type(right) in (ast.Tuple, ast.List):
        vals = [const_str(e) for e in right.elts]  # type: ignore[attr-defined]
        if vals and all(v is not None for v in vals):
            return frozenset(v for v in vals if v is not None)
    return None


def dropping_branches(tree: Any) -> list[DroppingBranch]:
    """Every branch of a message loop in the module ``tree`` that rebuilds a message
    without its ``cache_control`` (see the module docstring); empty when none. Never raises
    on a valid syntax tree."""
    out: list[DroppingBranch] = []
    fn: Any
    for fn in ast.walk(tree):
        if type(fn) not in FUNCS:
            continue
        returned = {
            r.value.id for r in ast.walk(fn) if type(r) is ast.Return and type(r.value) is ast.Name
        }
        if not returned:
            continue
        for loop, _ in _statements(fn.body, []):
            if type(loop) in (ast.For, ast.AsyncFor) and _loop_var(loop) is not None:
                out.extend(_loop_branches(fn, loop, returned))
    return out


def _loop_branches(fn: Any, loop: Any, returned: set[str]) -> Iterator[DroppingBranch]:
    """Dropping branches of one ``for m in ...`` loop."""
    m = _loop_var(loop) or ""
    role_names: set[str] = {f"{m}['role']"}
    content_names: set[str] = set()
    stmts = [stmt for stmt, _ in _statements(loop.body, [])]  # walked twice: names, then appends
    for stmt in stmts:
        if (
            type(stmt) is ast.Assign
            and len(stmt.targets) == 1
            and type(stmt.targets[0]) is ast.Name
        ):
            field = _field_of(stmt.value, m)
            if field == "role":
                role_names.add(stmt.targets[0].id)
            elif field == "content":
                content_names.add(stmt.targets[0].id)
    reads_key = any(_names_key(s) for s in loop.body)
    for stmt in stmts:
        target = _appended_to(stmt)
        if target is None or target not in returned:
            continue
        d = stmt.value.args[0]
        if not _is_message(d) or None in d.keys or KEY in _keys(d):
            continue
        content = _keys(d)["content"]
        if not any(
            _field_of(n, m) == "content" or (type(n) is ast.Name and n.id in content_names)
            for n in ast.walk(content)
        ):
            continue
        arm, role = _role_arm(loop.body, stmt, role_names, m)
        if arm is not None and any(_names_key(s) for s in arm):
            continue
        yield DroppingBranch(d, fn.name, m, role, target, reads_key)


def _loop_var(loop: Any) -> str | None:
    """The message name of ``for m in ...`` or ``for i, m in enumerate(...)``."""
    t = loop.target
    if type(t) is ast.Name:
        return t.id
    it = loop.iter
    if (
        type(t) is ast.Tuple
        and len(t.elts) == 2
        and type(t.elts[1]) is ast.Name
        and type(it) is ast.Call
        and getattr(it.func, "id", "") == "enumerate"
    ):
        return t.elts[1].id
    return None


def _role_arm(
    body: list, stmt: ast.stmt, role_names: set[str], m: str
) -> tuple[list | None, str | None]:
    """The innermost ``if`` arm holding ``stmt`` whose test requires one role of the message
    (its statements, the role); ``(None, None)`` when no arm tests the role."""
    best: tuple[list | None, str | None] = (None, None)
    for s in body:
        if type(s) is ast.If:
            for arm, test in ((s.body, s.test), (s.orelse, None)):
                if not _holds(arm, stmt):
                    continue
                role = None
                if test is not None:
                    for want in role_names | {f"{m}.get('role')"}:
                        got = _role_test(test, want)
                        if got and len(got) == 1:
                            role = next(iter(got))
                if role is not None:
                    best = (arm, role)
                inner = _role_arm(arm, stmt, role_names, m)
                return inner if inner[0] is not None else best
        elif type(s) not in (*FUNCS, ast.ClassDef) and _holds([s], stmt):
            for name in ("body", "orelse", "finalbody"):
                sub = getattr(s, name, None) or []
                if _holds(sub, stmt):
                    inner = _role_arm(sub, stmt, role_names, m)
                    return inner if inner[0] is not None else best
    return best


def _holds(body: list, stmt: ast.stmt) -> bool:
    return any(n is stmt for s in body for n in ast.walk(s))


def _appended_to(stmt: Any) -> str | None:
    """``name`` when ``stmt`` is ``name.append(<dict display>)``."""
    if type(stmt) is not ast.Expr or type(stmt.value) is not ast.Call:
        return None
    call = stmt.value
    f = call.func
    if (
        type(f) is ast.Attribute
        and f.attr == "append"
        and type(f.value) is ast.Name
        and len(call.args) == 1
        and type(call.args[0]) is ast.Dict
    ):
        return f.value.id
    return None


def _field_of(node: Any, m: str) -> str | None:
    """``"role"`` for ``m["role"]``/``m.get("role")`` (likewise any constant key), else None."""
    if type(node) is ast.Subscript and type(node.value) is ast.Name and node.value.id == m:
        return const_str(node.slice)
    if (
        type(node) is ast.Call
        and type(node.func) is ast.Attribute
        and node.func.attr == "get"
        and type(node.func.value) is ast.Name
        and node.func.value.id == m
        and node.args
    ):
        return const_str(node.args[0])
    return None


def _names_key(node: Any) -> bool:
    return any(const_str(n) == KEY for n in ast.walk(node))


def _is_message(d: Any) -> bool:
    keys = _keys(d)
    return type(d) is ast.Dict and "role" in keys and "content" in keys


def _keys(d: ast.Dict) -> dict[str, Any]:
    return {const_str(k): v for k, v in zip(d.keys, d.values) if const_str(k) is not None}  # type: ignore[misc]


def _displays(stmt: ast.stmt) -> Iterator[ast.Dict]:
    """Dict displays of one statement (not of the statements nested in it)."""
    todo: list[Any] = [
        c for c in ast.iter_child_nodes(stmt) if not isinstance(c, (ast.stmt, ast.excepthandler))
    ]
    while todo:
        n = todo.pop()
        if type(n) is ast.Dict:
            yield n
        if not isinstance(n, ast.Lambda):
            todo.extend(ast.iter_child_nodes(n))


def _statements(body: list, guards: list) -> Iterator[tuple[Any, list]]:
    """Every statement of a body (nested functions and classes left out), with the tests of
    the ``if`` statements it sits in (an ``else`` arm's test included: it is not required)."""
    for s in body:
        yield s, guards
        if type(s) is ast.If:
            yield from _statements(s.body, [*guards, s.test])
            yield from _statements(s.orelse, guards)
        elif type(s) not in (*FUNCS, ast.ClassDef):
            for name in ("body", "orelse", "finalbody"):
                yield from _statements(getattr(s, name, None) or [], guards)
            for h in getattr(s, "handlers", None) or []:
                yield from _statements(h.body, guards)


def _const_value(node: Any) -> Any:
    return node.value if type(node) is ast.Constant else None
