"""Which class of the linted project a name holds or an annotation names, resolved through
the project index (:class:`linters.flow.project.Project`), never guessed from names.

A class is a ``(evaluator of its module, class scope)`` pair (:data:`ClassRef`). What is
followed:

- annotations ``T``, ``"T"`` (a forward reference), ``Optional[T]``, ``T | None``,
  ``Annotated[T, ...]``, where ``T`` is a class of the module or a name imported from the
  project: absolute or relative imports (``from ..agent import Agent``, also under
  ``if TYPE_CHECKING:``), through re-exports (``pkg/__init__.py`` doing
  ``from .agent import Agent``);
- the object a name holds: ``self`` in a method; a name bound once, as a parameter or
  ``x: T = ...`` annotated with a project class, by a call of a project class
  (:meth:`linters.flow.resolve.Resolver.instance_class`), or as ``x = y.attr`` where the class
  of ``y`` (or one of its project bases) declares ``attr: T`` in its body or in a method
  (``self.attr: T = ...``).

Anything else (several bindings, a union of two classes, a name from outside the project)
resolves to None.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from linters.flow.facts import ASSIGN, DEF, IMPORT, PARAM, Scope
from linters.flow.project import absolute
from linters.flow.resolve import class_of, unwrap_optional

ClassRef = tuple[Any, Scope]  # (linters.flow.values.Evaluator of the module, class scope)

_DEPTH = 6  # imports, re-exports and attribute hops followed, nested
_ALL_LINES = 1 << 30  # a module-level lookup sees every binding (forward references)
_WRAPPERS = frozenset({"Optional", "Annotated", "ClassVar", "Final"})


def absolute_module(node: ast.ImportFrom, rel_path: str) -> str | None:
    """The dotted module ``from ... import`` names, relative imports made absolute against
    the importing file's path (``from ..agent import x`` in ``src/pkg/hooks/registry.py`` ->
    ``src.pkg.agent``, :func:`linters.flow.project.absolute`); None when the dots climb
    above the lint root."""
    if not node.level:
        return node.module
    got = absolute("." * node.level + (node.module or ""), rel_path)
    return None if not got or got.startswith(".") else got


def class_named(ev: Any, note: Any, scope: Scope, depth: int = 0) -> ClassRef | None:
    """The project class an annotation (or a class reference) names, seen from ``scope`` of
    ``ev``'s module; None when it names anything else or several classes."""
    if note is None or depth > _DEPTH:
        return None
    t = type(note)
    if t is ast.Constant and isinstance(note.value, str):
        try:
            parsed = ast.parse(note.value, mode="eval").body
        except SyntaxError:  # a string annotation that is not an expression
            return None
        return class_named(ev, parsed, ev.facts.module, depth + 1)
    if t is ast.BinOp and type(note.op) is ast.BitOr:
        return class_named(ev, unwrap_optional(note), scope, depth)
    if t is ast.Subscript:
        head = note.value
        name = head.attr if type(head) is ast.Attribute else getattr(head, "id", "")
        if name not in _WRAPPERS:
            return None
        inner = note.slice
        first = inner.elts[0] if type(inner) is ast.Tuple and inner.elts else inner
        return class_named(ev, first, scope, depth)
    if t is ast.Name:
        line = _ALL_LINES if scope.kind == "module" else note.lineno
        for b in ev.resolve(note.id, scope, line):
            if b.kind == DEF and type(b.value) is ast.ClassDef:
                cls = ev.function_scope(b.value)
                return (ev, cls) if cls is not None else None
            if b.kind == IMPORT and type(b.node) is ast.ImportFrom:
                return imported_class(ev, b.node, note.id, depth + 1)
        return None
    if t is ast.Attribute and ev.project is not None:
        found = ev.project_def(note, "class")
        return (found[0], found[1]) if found is not None else None
    return None


def imported_class(ev: Any, node: ast.ImportFrom, local: str, depth: int) -> ClassRef | None:
    """The project class that ``local``, bound by ``node`` in ``ev``'s module, names."""
    if ev.project is None or depth > _DEPTH:
        return None
    module = absolute_module(node, ev.path)
    alias = next((a for a in node.names if (a.asname or a.name) == local), None)
    if module is None or alias is None:
        return None
    target = ev.project.module(module)
    if target is None:
        return None
    return class_named(target, ast.Name(alias.name, lineno=_ALL_LINES), target.facts.module, depth)


def class_bases(ref: ClassRef, depth: int = 0) -> Iterator[ClassRef]:
    """``ref`` and its project base classes, nearest first (each at most once)."""
    seen: set[int] = set()
    todo = [(ref, depth)]
    while todo:
        (ev, cls), d = todo.pop(0)
        if id(cls) in seen or d > _DEPTH:
            continue
        seen.add(id(cls))
        yield ev, cls
        for base in cls.node.bases:
            found = class_named(ev, base, cls.parent or ev.facts.module, d + 1)
            if found is not None:
                todo.append((found, d + 1))


def attribute_note(ref: ClassRef, attr: str) -> tuple[Any, ast.expr, Scope] | None:
    """The annotation the class (or a project base) declares for ``attr``: ``attr: T`` in
    its body or ``self.attr: T = ...`` in a method; with the evaluator and scope to resolve
    it in."""
    for ev, cls in class_bases(ref):
        for stmt in cls.node.body:
            if type(stmt) is ast.AnnAssign and _target_is(stmt.target, attr, None):
                return ev, stmt.annotation, ev.facts.module
        for fs in cls.funcs.values():
            if fs.kind != "function":
                continue
            for node in ast.walk(fs.node):
                if type(node) is ast.AnnAssign and _target_is(node.target, attr, "self"):
                    return ev, node.annotation, ev.facts.module
    return None


def held_class(ev: Any, name: ast.Name, scope: Scope, depth: int = 0) -> ClassRef | None:
    """The project class whose instance ``name`` (a use in function ``scope``) holds."""
    if depth > _DEPTH:
        return None
    if name.id == "self":
        cls = class_of(scope)
        return (ev, cls) if cls is not None else None
    bl = ev.resolve(name.id, scope, name.lineno)
    if len(bl) != 1:
        return None
    b = bl[0]
    if b.kind == PARAM:
        return class_named(ev, b.value.annotation, b.scope, depth + 1)
    if b.kind != ASSIGN:
        return None
    if type(b.node) is ast.AnnAssign:
        return class_named(ev, b.node.annotation, b.scope, depth + 1)
    value = b.value
    if type(value) is ast.Call:
        cls, owner = ev.instance_class(name, scope, name.lineno)
        return (owner, cls) if cls is not None else None
    if type(value) is ast.Attribute and type(value.value) is ast.Name:
        holder = held_class(ev, value.value, b.scope, depth + 1)
        found = attribute_note(holder, value.attr) if holder is not None else None
        if found is not None:
            return class_named(found[0], found[1], found[2], depth + 1)
    return None


def _target_is(target: ast.expr, attr: str, owner: str | None) -> bool:
    if owner is None:
        return type(target) is ast.Name and target.id == attr
    return (
        type(target) is ast.Attribute
        and target.attr == attr
        and type(target.value) is ast.Name
        and target.value.id == owner
    )
