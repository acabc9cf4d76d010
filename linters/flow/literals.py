"""Exact values of literals: strings built from constants and module constants (with
``+``, ``*``, f-strings, ``dedent``), and dict/list literals (for ``cache_control`` checks)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from linters.flow.facts import ASSIGN, DEF, IMPORT, Scope
from linters.flow.resolve import Resolver, class_of

_MAX_DEPTH = 24
_STATIC_LITERAL_MAX = 200_000


class LiteralMixin(Resolver):
    """Literal questions; mixed into :class:`linters.flow.values.Evaluator`."""

    def literal_str(self, node: Any, scope: Scope, depth: int = 0) -> str | None:
        """The exact text of a string built only from literals and module constants."""
        if depth > _MAX_DEPTH:
            return None
        t = type(node)
        if t is ast.Constant:
            return node.value if type(node.value) is str else None
        if t is ast.JoinedStr:
            parts: list[str] = []
            for v in node.values:
                if type(v) is ast.Constant:
                    parts.append(str(v.value))  # the literal parts of an f-string are str
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
                return None if a is None or b is None else a + b
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
            if len(bl) == 1 and bl[0].kind == IMPORT and type(bl[0].value) is str:
                return self._imported_str(bl[0].value, depth)
            return None
        if t is ast.Attribute and type(node.value) is ast.Name:
            # a class constant: ``self.MARK`` / ``cls.MARK`` in a method, ``Cls.MARK``
            base = node.value.id
            cls = class_of(scope) if base in ("self", "cls") else None
            if cls is None:
                for cb in self.resolve(base, scope, node.lineno):
                    if cb.kind == DEF and type(cb.value) is ast.ClassDef:
                        cls = cb.scope.funcs.get(base)
            found = cls.bindings.get(node.attr, []) if cls is not None else []
            if cls is not None and len(found) == 1 and found[0].kind == ASSIGN:
                return self.literal_str(found[0].value, cls, depth + 1)
            return None
        if t is ast.Call:
            func = node.func
            if (
                type(func) is ast.Attribute
                and func.attr in ("strip", "lstrip", "rstrip")
                and not node.args
            ):
                s = self.literal_str(func.value, scope, depth + 1)
                return None if s is None else getattr(s, func.attr)()
            q = self.facts.qualname(func)
            if q in ("textwrap.dedent", "inspect.cleandoc") and len(node.args) == 1:
                s = self.literal_str(node.args[0], scope, depth + 1)
                if s is None:
                    return None
                return textwrap.dedent(s) if q == "textwrap.dedent" else inspect.cleandoc(s)
        return None

    def _imported_str(self, qual: str, depth: int) -> str | None:
        """The text of a module constant of another module of the project, imported by
        name (``from app.llm import MARK``: ``qual`` is ``app.llm.MARK``)."""
        project = getattr(self, "project", None)
        mod, _, name = qual.rpartition(".")
        owner = project.modules.get(mod) if project is not None and mod else None
        if owner is None or project is None:
            return None
        if callable(owner):
            owner = project.make(owner)
        bl = owner.facts.module.bindings.get(name, [])
        if len(bl) == 1 and bl[0].kind == ASSIGN:
            got: str | None = owner.literal_str(bl[0].value, bl[0].scope, depth + 1)
            return got
        return None

    def literal_obj(self, node: Any, scope: Scope, depth: int = 0) -> Any:
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
            out_d: dict[Any, Any] = {}
            for k, v in zip(node.keys, node.values):
                if k is None:
                    out_d.update(self.literal_obj(v, scope, depth + 1))
                else:
                    out_d[self.literal_obj(k, scope, depth + 1)] = self.literal_obj(
                        v, scope, depth + 1
                    )
            return out_d
        if t is ast.Name:
            bl = self.resolve(node.id, scope, node.lineno)
            if len(bl) == 1 and bl[0].kind == ASSIGN:
                return self.literal_obj(bl[0].value, bl[0].scope, depth + 1)
            raise LookupError
        s = self.literal_str(node, scope, depth + 1)
        if s is not None:
            return s
        raise LookupError
