"""Syntax-tree walks shared by the flow modules."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any

FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def own_nodes(nodes: Iterable[Any]) -> list[Any]:
    """Every node under ``nodes`` (``nodes`` included), not descending into nested functions,
    classes and lambdas, which are left out whole: a function body's own statements and
    expressions (typed ``Any``, as the flow modules read their fields). Order: depth
    first, last child first. Never raises."""
    out: list[Any] = []
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, (*FUNCS, ast.ClassDef, ast.Lambda)):
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def const_str(node: Any) -> str | None:
    """The text of a string literal node (``"role"``), else None (any other node, ``None``
    included). Never raises."""
    return node.value if type(node) is ast.Constant and isinstance(node.value, str) else None


def inside(node: Any, outer: Any) -> bool:
    """Whether ``node`` is ``outer`` or one of its descendants (by identity; nested functions
    included). Never raises."""
    return any(n is node for n in ast.walk(outer))
