"""Message lists kept in an object's fields and summed by one of its methods.

A dataclass (or any class of the project) holds the parts of a request in list fields; the
code that makes the object fills them (``chunks = Chunks()``, ``chunks.system = [...]``,
``chunks.files = self.files_messages()``), possibly in a function that returns it to the
caller, and a method returns their sum (``return self.system + self.files + self.cur``).
The walk records ``obj.field = value`` (and ``obj.field += ...``, ``obj.field.append(...)``)
as bindings of the name ``"obj.field"`` in the function that does it
(:mod:`linters.flow.walker`); this module maps the method's ``self.<field>`` reads to them.
"""

from __future__ import annotations

import ast
from typing import Any

from linters.flow.facts import ASSIGN, DEEPSET, DEF, Scope

_MAX_RETURNS = 4  # functions followed back to where the object is made


def object_of(
    ev: Any, name: ast.Name, scope: Scope, line: int, depth: int = 0
) -> tuple[Scope, Any, list[tuple[Scope, str, int]]] | None:
    """``(class scope, evaluator of its module, holders)`` for the object the local ``name``
    holds at ``line``: bound once, to a call of a class of the project (``Chunks()``), or to
    a call of a function of this module that makes one and returns it (followed up to
    ``_MAX_RETURNS`` functions deep). ``holders`` are ``(scope, local name, line)`` of each
    function that handles the object, the maker first: their ``name.field = ...`` bindings
    before ``line`` set its fields. None when the object cannot be told."""
    if depth > _MAX_RETURNS or name.id == "self":
        return None
    # writes into its fields' elements (``obj.cur[-1] = ...``) do not rebind the name
    bl = [b for b in ev.resolve(name.id, scope, line) if b.kind != DEEPSET]
    if len(bl) != 1 or bl[0].kind != ASSIGN or type(bl[0].value) is not ast.Call:
        return None
    b = bl[0]
    here = (b.scope, name.id, line)
    made = _class_called(ev, b.value, b.scope)
    if made is not None:
        return made[0], made[1], [here]
    fs, _bound, fowner = ev.callee_any(b.value, b.scope)
    if fs is None or fowner is not ev:
        return None
    for r in fs.returns:
        if type(r) is ast.Name:
            got = object_of(ev, r, fs, r.lineno, depth + 1)
            if got is not None:
                return got[0], got[1], got[2] + [here]
    return None


def _class_called(ev: Any, call: ast.Call, scope: Scope) -> tuple[Scope, Any] | None:
    """``(class scope, its module's evaluator)`` when ``call`` makes an instance of a class
    of this module or one imported from the project."""
    ctor = call.func
    if type(ctor) is ast.Name:
        for b in ev.resolve(ctor.id, scope, call.lineno):
            if b.kind == DEF and type(b.value) is ast.ClassDef:
                cls = ev.function_scope(b.value)
                return (cls, ev) if cls is not None else None
    found = ev.project_def(ctor, "class")
    return (found[1], found[0]) if found is not None else None


def method_items(ev: Any, call: ast.Call, scope: Scope, depth: int) -> list[Any] | None:
    """The messages ``obj.method()`` returns when ``method`` sums fields of ``obj``
    (``self.a + self.b``): each field's items from the bindings its holders made, as
    :meth:`linters.flow.values.Evaluator.message_items` gives them; None when the call is
    not a method of an object :func:`object_of` can tell."""
    func = call.func
    if type(func) is not ast.Attribute or type(func.value) is not ast.Name:
        return None
    got = object_of(ev, func.value, scope, call.lineno)
    if got is None:
        return None
    cls, owner, holders = got
    method = cls.funcs.get(func.attr)
    if method is None or method.kind != "function" or not _reads_fields(method):
        return None
    items: list[Any] = []
    for r in method.returns:
        items.extend(_field_items(ev, r, holders, depth + 1))
    return items


def _reads_fields(method: Scope) -> bool:
    """Every return of ``method`` is a sum of ``self.<field>`` reads."""
    return bool(method.returns) and all(_fields_of(r) is not None for r in method.returns)


def _fields_of(node: Any) -> list[str] | None:
    """``["a", "b"]`` for ``self.a + self.b`` (or ``self.a``); None for anything else."""
    t = type(node)
    if t is ast.BinOp and type(node.op) is ast.Add:
        left, right = _fields_of(node.left), _fields_of(node.right)
        return left + right if left is not None and right is not None else None
    if t is ast.Attribute and type(node.value) is ast.Name and node.value.id == "self":
        return [node.attr]
    return None


def _field_items(ev: Any, node: Any, holders: list[tuple[Scope, str, int]], depth: int) -> Any:
    items: list[Any] = []
    for field in _fields_of(node) or ():
        for hscope, hname, hline in holders:
            bl = hscope.bindings.get(f"{hname}.{field}", ())
            items.extend(ev.binding_items([b for b in bl if b.line <= hline], depth))
    return items
