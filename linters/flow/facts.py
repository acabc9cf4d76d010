"""The facts one walk over a module's syntax tree collects: scopes, bindings, sinks.

Rules never walk the tree themselves; they ask :mod:`linters.flow.values` about the
expressions that reach the sinks recorded here.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from typing import Any

BUILTIN_NAMES = frozenset(dir(builtins))

# Binding kinds.
ASSIGN = "assign"  # x = value
AUG = "aug"  # x += value
APPEND = "append"  # x.append(value) / x.insert(i, value)
EXTEND = "extend"  # x.extend(value)
SETITEM = "setitem"  # x[k] = value
DEEPSET = "deepset"  # x[i][k] = value / x[i].attr = value: changes an element of x
UPDATE = "update"  # x.update(value)
ITER = "iter"  # for x in value / comprehension target
UNPACK = "unpack"  # a, b = value (value is the whole right-hand side)
WITH = "with"  # with value as x
PARAM = "param"  # a function parameter
IMPORT = "import"  # import / from-import (value is the qualified name, a str)
DEF = "def"  # def / class
SHUFFLE = "shuffle"  # random.shuffle(x)
OPAQUE = "opaque"  # except ... as x, match captures, anything else


class Binding:
    """One place that gives a name (or ``self.attr``) a value.

    ``line`` is the 1-based line of the binding statement, ``in_loop`` the iterables of the
    enclosing ``for`` loops and comprehensions, innermost last (``None`` for a ``while``;
    empty when not in a loop), ``node`` the statement or call that binds.
    """

    __slots__ = ("kind", "value", "scope", "line", "col", "in_loop", "node")

    def __init__(
        self,
        kind: str,
        value: Any,
        scope: Scope,
        line: int,
        col: int,
        in_loop: Any,
        node: Any,
    ) -> None:
        self.kind = kind
        self.value = value
        self.scope = scope
        self.line = line
        self.col = col
        self.in_loop = in_loop
        self.node = node


class Scope:
    """A module, function or class body.

    Attributes: ``bindings`` name (or ``"obj.field"`` for a local object's field,
    :mod:`linters.flow.fields`) -> bindings in source order; ``params`` parameter names
    in order (functions); ``param_notes`` name -> annotation node; ``returns`` return
    expressions; ``yields`` what a generator yields (``yield v``, ``yield from it``); ``funcs`` functions defined directly in this body (methods for a class);
    ``self_attrs`` (class scopes) ``self.attr`` -> bindings from any method; ``cls`` the class
    a method belongs to; ``parent`` the enclosing scope used for name lookup (class bodies
    are skipped, as Python does).
    """

    __slots__ = (
        "kind",
        "name",
        "node",
        "parent",
        "cls",
        "bindings",
        "params",
        "param_notes",
        "returns",
        "yields",
        "funcs",
        "self_attrs",
        "globals",
    )

    def __init__(
        self, kind: str, name: str, node: Any, parent: Scope | None, cls: Scope | None = None
    ) -> None:
        self.kind = kind
        self.name = name
        self.node = node
        self.parent = parent
        self.cls = cls
        self.bindings: dict[str, list[Binding]] = {}
        self.params: list[str] = []
        self.param_notes: dict[str, ast.expr | None] = {}
        self.returns: list[ast.expr] = []
        self.yields: list[ast.expr] = []
        self.funcs: dict[str, Scope] = {}
        self.self_attrs: dict[str, list[Binding]] = {}
        self.globals: set[str] = set()

    def __repr__(self) -> str:
        return f"<Scope {self.kind} {self.name}>"


# Sink kinds.
PREFIX = "prefix"  # text that is part of the cached prefix (system prompt, instructions)
TOOLS = "tools"  # tool definitions
MESSAGES = "messages"  # a message list: every message but the last is prefix
ROLE = "role"  # a message with role system/developer, wherever it sits
PROMPT = "prompt"  # a whole prompt string: its beginning is the cached prefix


@dataclass(slots=True)
class Sink:
    """An expression whose value reaches a prompt: ``kind`` (PREFIX/TOOLS/MESSAGES/ROLE),
    ``label`` for messages ("the system prompt"), ``hint`` when only a name suggested it,
    ``node`` the whole message (a dict or call) when ``expr`` is only its content,
    ``rate_cap`` the fastest rate a value reaching it changes at (None: no cap)."""

    kind: str
    expr: ast.expr
    scope: Scope
    label: str
    hint: bool = False
    node: ast.AST | None = None
    # the fastest a value can change here (``tables.RATE_*``): a prompt evaluated once per
    # conversation caps a clock read in it; None: as fast as the value itself
    rate_cap: str | None = None


@dataclass(slots=True)
class Request:
    """A literal request (call keywords or a body dict) that may carry ``cache_control``:
    ``parts`` maps ``tools``/``system``/``messages``/``model`` to their expressions."""

    parts: dict[str, ast.expr]
    scope: Scope
    node: ast.AST


@dataclass(slots=True)
class ModuleFacts:
    """Everything one walk learned about a module."""

    module: Scope
    imports: dict[str, str] = field(default_factory=dict)
    sinks: list[Sink] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    # local function name -> call sites (call node, calling scope); "self.m" for methods
    calls: dict[str, list[tuple[ast.Call, Scope]]] = field(default_factory=dict)
    strings: list[tuple[ast.expr, Scope]] = field(default_factory=list)
    # calls that fill prompt-template variables: ``prompt.partial(date=...)``, ``.invoke({...})``
    template_fills: list[tuple[ast.Call, Scope]] = field(default_factory=list)
    # (id(scope), "random" | "numpy.random") -> first line where that scope seeds the module
    seeds: dict[tuple[int, str], int] = field(default_factory=dict)
    # cache_control markers set on every item of an unbounded loop
    # (:class:`linters.flow.loop_marks.LoopMark`)
    loop_breakpoints: list[Any] = field(default_factory=list)
    # breakpoints a function deletes after setting them
    # (:class:`linters.flow.breakpoints.ClearedBreakpoint`)
    cleared_breakpoints: list[Any] = field(default_factory=list)
    # breakpoints put in place on the caller's message dicts at a moving position
    # (:class:`linters.flow.shared_marks.SharedMark`)
    shared_marks: list[Any] = field(default_factory=list)
    # prompt cache keys computed from the whole message list
    # (:class:`linters.flow.cache_keys.ConversationKey`)
    conversation_keys: list[Any] = field(default_factory=list)
    # ``x.attr = v`` / ``x.attr += v`` in a function, ``x`` a name:
    # (statement, target, v, ASSIGN or AUG, scope) (read by linters.flow.lossy_writes)
    attr_writes: list[tuple[ast.stmt, ast.Attribute, ast.expr, str, Scope]] = field(
        default_factory=list
    )
    llm_context: bool = False
    longest_constant: int = 0
    has_file_read: bool = False
    has_cache_control: bool = False

    def qualname(self, node: ast.AST) -> str | None:
        """The dotted name a ``Name``/``Attribute`` chain refers to, import aliases resolved
        (``dt.now`` after ``from datetime import datetime as dt`` -> ``datetime.datetime.now``);
        builtins come back as ``builtins.<name>``; None for anything else."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        base = self.imports.get(node.id)
        if base is None:
            if node.id in BUILTIN_NAMES and node.id not in self.module.bindings:
                base = "builtins." + node.id
            else:
                base = node.id
        if parts:
            parts.reverse()
            return base + "." + ".".join(parts)
        return base
