"""Properties with a lossy text view of structured content blocks (the facts behind PC012).

The shape (strands-agents/sdk-python, ``Agent.system_prompt`` before 2eaff9c2, 2026-04-23)::

    @property
    def system_prompt(self) -> str | None:          # the blocks' text, joined
        return self._system_prompt

    @system_prompt.setter
    def system_prompt(self, value: str | list[SystemContentBlock] | None) -> None:
        self._system_prompt, self._system_prompt_content = self._initialize_system_prompt(value)

    def _initialize_system_prompt(self, system_prompt):
        if isinstance(system_prompt, str):
            return system_prompt, [{"text": system_prompt}]     # one text block
        ...

    class SystemContentBlock(TypedDict, total=False):
        cachePoint: CachePoint
        text: str

A property of a project class is such a *text setter* when all of this is resolved:

- its getter is annotated to return text (``str``, ``str | None``, ``Optional[str]``);
- its setter stores, into ``self.<blocks>``, a list of one text block made from the value
  (``[{"text": value}]`` or ``[TextBlock(text=value)]``), directly or through a method of the
  class it passes the value to (the list returned, alone or at the tuple position the setter
  unpacks into ``self.<blocks>``), on a path whose ``if`` tests do not read ``self`` (so the
  blocks are replaced whatever they held: a setter that keeps or checks them is not one);
- the value's annotation (the setter's or that method's parameter) admits a list of a
  project class that declares a cache-marker key (:data:`linters.flow.tables.CACHE_MARKER_KEYS`):
  the blocks can carry a breakpoint;
- ``<blocks>`` is read somewhere else in the project (the blocks are used, here by the
  request-building code; that the read reaches a request is not proven).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from linters.flow.classes import ClassRef, class_bases, class_named
from linters.flow.resolve import unwrap_optional
from linters.flow.tables import CACHE_MARKER_KEYS

_LIST_HEADS = frozenset({"list", "List", "Sequence", "MutableSequence", "Iterable"})
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True, slots=True)
class TextSetter:
    """``cls.prop``'s setter replaces the blocks in ``self.<blocks>`` by one text block.

    ``setter_line`` and ``block_line`` are lines of ``path`` (the class's module): the setter
    and the one-block list; ``block`` the list's source text; ``element`` the block class that
    declares ``marker`` at ``element_path:marker_line``; ``views`` the names that read the
    blocks (``blocks`` and the class's properties returning them); ``read`` where the blocks
    are read outside the setter, as ``(path, line)``."""

    cls: str
    prop: str
    path: str
    setter_line: int
    blocks: str
    block: str
    block_line: int
    element: str
    element_path: str
    marker: str
    marker_line: int
    views: frozenset[str]
    read: tuple[str, int]


def text_setter(ref: ClassRef, prop: str) -> TextSetter | None:
    """The text setter ``prop`` of the class ``ref`` (or of the nearest project base that
    defines ``prop``), or None when ``prop`` is anything else."""
    for ev, cls in class_bases(ref):
        getter, setter = _accessors(cls.node, prop)
        if getter is None and setter is None:
            continue
        if getter is None or setter is None or not _is_text_note(getter.returns):
            return None
        return _analyse(ev, cls, prop, setter)
    return None


def _analyse(ev: Any, cls: Any, prop: str, setter: Any) -> TextSetter | None:
    """The :class:`TextSetter` of ``setter`` (of ``prop`` in class scope ``cls`` of ``ev``'s
    module) when its stored list, marker-carrying element class and a read of the blocks
    are all found."""
    args = setter.args.args
    if len(args) < 2:
        return None
    store = _block_store(cls, setter, args[1])
    if store is None:
        return None
    blocks, block, notes, helper = store
    marked = None
    for note in notes:
        marked = marked or _marked_element(ev, note)
    if marked is None:
        return None
    element, owner, marker = marked
    getter = _accessors(cls.node, prop)[0]
    views = dict(_views(cls.node, blocks))
    skip = {id(setter), id(getter), id(helper), *(id(v) for v in views.values())}
    read = _blocks_read(ev, blocks, skip)
    if read is None:
        return None
    return TextSetter(
        cls.name,
        prop,
        ev.path,
        setter.lineno,
        blocks,
        ast.unparse(block),
        block.lineno,
        element[1].name,
        owner[0].path,
        marker.target.id if type(marker.target) is ast.Name else "",
        marker.lineno,
        frozenset({blocks, *views}),
        read,
    )


def _accessors(node: Any, prop: str) -> tuple[Any, Any]:
    """The ``@property`` getter and the ``@prop.setter`` of ``prop`` in a class body."""
    getter = setter = None
    stmt: Any
    for stmt in node.body:
        if type(stmt) not in _FUNCS or stmt.name != prop:
            continue
        for d in stmt.decorator_list:
            if type(d) is ast.Name and d.id == "property":
                getter = stmt
            elif (
                type(d) is ast.Attribute
                and d.attr == "setter"
                and type(d.value) is ast.Name
                and d.value.id == prop
            ):
                setter = stmt
    return getter, setter


def _is_text_note(note: Any) -> bool:
    """``str``, ``str | None``, ``Optional[str]`` (also as a string annotation)."""
    if type(note) is ast.Constant and isinstance(note.value, str):
        try:
            note = ast.parse(note.value, mode="eval").body
        except SyntaxError:
            return False
    if type(note) is ast.Name:
        return note.id == "str"
    if type(note) in (ast.BinOp, ast.Subscript):
        inner = unwrap_optional(note)  # None for a union of two types
        return inner is not note and _is_text_note(inner)
    return False


def _block_store(cls: Any, setter: Any, value: ast.arg) -> tuple[Any, ast.expr, list, Any] | None:
    """``(blocks attribute, the one-block list, annotations of the value, the method that
    makes the list or None)`` when the setter stores a one-text-block list made from
    ``value`` into ``self.<blocks>`` whatever the blocks hold (no ``if`` on the way reads
    ``self``); None otherwise."""
    for stmt, guards in _statements(setter.body, []):
        if type(stmt) is not ast.Assign or len(stmt.targets) != 1 or _reads_self(guards):
            continue
        target, rhs = stmt.targets[0], stmt.value
        block = _one_text_block(rhs, value.arg)
        if _self_attr(target) and block is not None:
            return _self_attr(target), block, [value.annotation], None
        helper, param = _helper_param(cls, rhs, setter, value.arg)
        if helper is None:
            continue
        for ret, ret_guards in _statements(helper.body, []):
            if type(ret) is not ast.Return or ret.value is None or _reads_self(ret_guards):
                continue
            pairs = [(target, ret.value)]
            if type(target) is ast.Tuple and type(ret.value) is ast.Tuple:
                pairs = list(zip(target.elts, ret.value.elts))
            for t, v in pairs:
                block = _one_text_block(v, param.arg)
                if _self_attr(t) and block is not None:
                    return _self_attr(t), block, [value.annotation, param.annotation], helper
    return None


def _helper_param(cls: Any, rhs: ast.expr, setter: Any, value: str) -> tuple[Any, Any]:
    """The method ``self.m(...)`` that ``rhs`` calls with ``value``, and its parameter."""
    if type(rhs) is not ast.Call or not _self_attr(rhs.func):
        return None, None
    fs = cls.funcs.get(_self_attr(rhs.func))
    if fs is None or fs.kind != "function" or fs.node is setter:
        return None, None
    params = fs.node.args.args[1:]
    for i, a in enumerate(rhs.args):
        if type(a) is ast.Name and a.id == value and i < len(params):
            return fs.node, params[i]
    for kw in rhs.keywords:
        if type(kw.value) is ast.Name and kw.value.id == value:
            p = next((p for p in params if p.arg == kw.arg), None)
            return (fs.node, p) if p is not None else (None, None)
    return None, None


def _one_text_block(node: Any, value: str) -> ast.List | None:
    """``[{"text": value}]`` (a ``"type": "text"`` key allowed) or ``[Block(text=value)]``,
    also as a branch of ``a if test else b`` whose test does not read ``self``: the list."""
    if type(node) is ast.IfExp:
        if _reads_self([node.test]):
            return None
        return _one_text_block(node.body, value) or _one_text_block(node.orelse, value)
    if type(node) is not ast.List or len(node.elts) != 1:
        return None
    e = node.elts[0]
    ok = False
    if type(e) is ast.Dict:
        keys = {k.value: v for k, v in zip(e.keys, e.values) if type(k) is ast.Constant}
        ok = len(keys) == len(e.keys) and set(keys) <= {"text", "type"}
        ok = ok and _is_name(keys.get("text"), value)
    elif type(e) is ast.Call:
        ok = any(kw.arg == "text" and _is_name(kw.value, value) for kw in e.keywords)
    return node if ok else None


def _marked_element(ev: Any, note: Any) -> tuple[Any, ClassRef, ast.AnnAssign] | None:
    """The list element class that ``note`` admits and that declares a cache-marker key
    (itself or a project base: the second class), and the key's declaration."""
    if type(note) is ast.Constant and isinstance(note.value, str):
        try:
            note = ast.parse(note.value, mode="eval").body
        except SyntaxError:
            return None
    for sub in ast.walk(note) if note is not None else ():
        if type(sub) is not ast.Subscript:
            continue
        head = sub.value.attr if type(sub.value) is ast.Attribute else getattr(sub.value, "id", "")
        if head not in _LIST_HEADS:
            continue
        ref = class_named(ev, sub.slice, ev.facts.module)
        for owner in class_bases(ref) if ref is not None else ():
            for stmt in owner[1].node.body:
                if (
                    type(stmt) is ast.AnnAssign
                    and type(stmt.target) is ast.Name
                    and stmt.target.id in CACHE_MARKER_KEYS
                ):
                    return ref, owner, stmt
    return None


def _blocks_read(ev: Any, blocks: str, skip: set[int]) -> tuple[str, int] | None:
    """Where ``<x>.<blocks>`` is read outside the functions ``skip`` (the property's own
    accessors and helper, the properties returning the blocks; a read in another module
    first), as ``(path, line)``; None when
    nothing reads the blocks."""
    project = ev.project
    modules = [ev] if project is None else [ev, *project.evaluators(blocks.encode())]
    found = None
    for m in modules:
        tree = m.facts.module.node
        inside: set[int] = set()
        for node in ast.walk(tree):
            if type(node) in _FUNCS and id(node) in skip:
                inside.update(id(n) for n in ast.walk(node))
        for node in ast.walk(tree):
            if (
                type(node) is ast.Attribute
                and node.attr == blocks
                and type(node.ctx) is ast.Load
                and id(node) not in inside
            ):
                if m is not ev:
                    return m.path, node.lineno
                found = found or (m.path, node.lineno)
                break
    return found


def _views(node: Any, blocks: str) -> Iterator[tuple[str, ast.AST]]:
    """Properties of the class whose getter returns an expression reading ``self.<blocks>``,
    as ``(name, getter)``."""
    stmt: Any
    for stmt in node.body:
        if type(stmt) not in _FUNCS or not any(
            type(d) is ast.Name and d.id == "property" for d in stmt.decorator_list
        ):
            continue
        for sub in ast.walk(stmt):
            if type(sub) is ast.Return and sub.value is not None:
                if any(_self_attr(n) == blocks for n in ast.walk(sub.value)):
                    yield stmt.name, stmt
                    break


def _statements(body: list, guards: list) -> Iterator[tuple[ast.stmt, list]]:
    """Every statement of a function body (nested functions and classes left out), with the
    tests of the ``if`` statements it sits in."""
    for s in body:
        yield s, guards
        if type(s) is ast.If:
            yield from _statements(s.body, [*guards, s.test])
            yield from _statements(s.orelse, [*guards, s.test])
        elif type(s) not in (*_FUNCS, ast.ClassDef):
            for name in ("body", "orelse", "finalbody"):
                yield from _statements(getattr(s, name, None) or [], guards)
            for h in getattr(s, "handlers", None) or []:
                yield from _statements(h.body, guards)
            for case in getattr(s, "cases", None) or []:
                yield from _statements(case.body, [*guards, case.pattern])


def _reads_self(guards: list) -> bool:
    return any(type(n) is ast.Name and n.id == "self" for g in guards for n in ast.walk(g))


def _self_attr(node: Any) -> str | None:
    if type(node) is ast.Attribute and type(node.value) is ast.Name and node.value.id == "self":
        return node.attr
    return None


def _is_name(node: Any, name: str) -> bool:
    return type(node) is ast.Name and node.id == name
