"""Which bindings of a name are real alternatives to a volatile one at a use.

A clock on one code path only (``if update: stamp = now() else: stamp = agent.created_at``)
is reported at info: the code is built to avoid it. A binding is no alternative when a later
assignment that always runs after it replaces it before the use: in

    def fmt_system_prompt(self, prompt):
        now = datetime.now().strftime("%H:%M:%S")
        prompt = prompt.format(now=now)
        return prompt

the parameter's own value never reaches the ``return`` (aider, fixed in 36663cf04,
2024-08-21: the clock to the second under a ``cache_control`` breakpoint, reported at info
as "one code path only" before this module existed).

An alternative is either stable (the caller's argument, a value read from somewhere) or a
value that changes more slowly (``if cache: day = today() else: stamp = now()``): the path
with the faster value is then the one the code chose to take only sometimes.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

from linters.flow import tables
from linters.flow.facts import ASSIGN, PARAM, UNPACK, Binding

_REPLACING = (ASSIGN, UNPACK)
_BLOCK_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")
_OPAQUE = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _statement_list(root: Any, stmt: Any) -> list | None:
    """The statement list (``body``/``orelse``/...) of ``root`` that holds ``stmt``
    directly, nested blocks searched, nested functions and classes not; None if none."""
    todo = [root]
    while todo:
        node = todo.pop()
        for f in _BLOCK_FIELDS:
            block = getattr(node, f, None)
            if type(block) is not list:
                continue
            for s in block:
                if s is stmt:
                    return block
                if not isinstance(s, _OPAQUE):
                    todo.append(s)
    return None


def overwritten(b: Binding, bindings: Sequence[Binding]) -> bool:
    """True when a later assignment in ``bindings`` (the name's bindings visible at one use,
    all before it) replaces ``b`` on every path from ``b`` to the use: it sits at the top
    level of the function (or module) body, or in the same statement list as ``b``."""
    root = b.scope.node
    top = getattr(root, "body", None)
    mine = None if b.kind == PARAM else _statement_list(root, b.node)
    for v in bindings:
        if v is b or v.kind not in _REPLACING or v.scope is not b.scope or v.line <= b.line:
            continue
        if type(top) is list and any(s is v.node for s in top):
            return True
        if mine is not None and any(s is v.node for s in mine):
            return True
    return False


def _fastest(hs: Sequence[Any], volatile: str) -> int | None:
    """Index in :data:`tables.RATE_ORDER` of the fastest volatile rate among ``hs``."""
    ranks = [tables.RATE_ORDER.index(h.rate) for h in hs if h.kind == volatile]
    return min(ranks) if ranks else None


def one_path_only(
    bindings: Sequence[Binding], per: Sequence[Sequence[Any]], volatile: str, stable: Any
) -> bool:
    """Whether the volatile value a name carries is taken on one code path only: a binding
    that assigns it has a live alternative (not :func:`overwritten`), either ``stable(b)``
    with no volatile hazard or an assignment whose volatile hazards all change more slowly.

    ``per``: the hazards of each binding, in the order of ``bindings``; ``volatile``: the
    hazard kind of a volatile value."""
    ranks = [_fastest(hs, volatile) for hs in per]
    for i, (b, rank) in enumerate(zip(bindings, ranks)):
        if rank is None or b.kind != ASSIGN:
            continue
        for j, (a, other) in enumerate(zip(bindings, ranks)):
            if j == i or overwritten(a, bindings):
                continue
            if other is None and stable(a):
                return True
            if other is not None and other > rank and a.kind == ASSIGN:
                return True
    return False
