"""Stored data the conversation itself rewrites: an ORM column that a tool the model calls,
or a step of the agent's turn, writes, read back into a prompt on every turn (issue 28,
"per conversation write").

An agent's memory / notes / profile store is often written BY THE AGENT: a function exposed
to the model as a tool saves a note, or a compaction step rewrites the memory after a turn,
and the prompt builder reads the same store into the system prompt on every turn. Each such
write is caused by the conversation itself, so the prefix from the store's text onwards is
written anew on the next turn, and again after the next write. A store nothing in the
conversation writes (an admin command, a migration, a settings page) changes "only when the
store does" and is not reported.

The store is resolved, never guessed from names: a row is a value loaded through
SQLAlchemy (``session.query(Model)...``, ``session.get(Model, key)``,
``session.execute(select(Model))...``, a project function annotated to return ``Model`` or
returning such a query) or made by ``Model(...)``, where ``Model`` is a class of the project
with ``__tablename__`` (SQLAlchemy declarative) or ``table=True`` (SQLModel). A write is
``row.column = ...`` (or ``+=``), ``setattr(row, "column", ...)`` (a computed column name
writes every column), ``query(Model)....update({Model.column: ...})``,
``update(Model)....values(column=...)``, or ``Model(column=...)``. A write counts when its
function is reached, through calls and functions passed as arguments
(``asyncio.to_thread(write, ...)``), from

- a tool: a project function passed as ``function=``/``func=``/``fn=``/``coroutine=`` to a
  call that also gives a ``description=`` (a tool definition), put in a ``tools=[...]`` list,
  passed to a tool factory or decorated by a tool decorator (``tables.TOOL_FACTORIES`` /
  ``TOOL_DECORATORS``); or
- the turn: a function up to six calls above the function that reads the column (the agent
  loop that builds the prompt), which also runs the write (updates only: ``Model(...)``, a
  row made once by a get-or-create, is not a change per turn).
"""

from __future__ import annotations

import ast
from typing import Any, NamedTuple

from linters.flow import tables
from linters.flow.facts import ASSIGN, DEF, IMPORT, ITER, WITH, Scope

_MAX_ROW_DEPTH = 6  # names / calls followed to decide that a value is a row
_MAX_REACH = 2000  # functions visited from the tools (or from one turn), at most
_MAX_TURN_UP = 6  # callers above a reading function searched for the turn that runs it
_ANY_COLUMN = "*"
# SQLAlchemy result and query methods that keep the rows of the query they are called on.
_ROW_METHODS = frozenset(
    {
        "first",
        "one",
        "one_or_none",
        "scalar",
        "scalar_one",
        "scalar_one_or_none",
        "scalars",
        "all",
        "unique",
        "filter",
        "filter_by",
        "where",
        "order_by",
        "limit",
        "offset",
        "options",
        "with_for_update",
        "join",
        "execution_options",
    }
)
# Session methods whose first argument is a statement: their result holds its rows.
_STATEMENT_RUNNERS = frozenset({"execute", "scalars", "scalar", "exec"})


class Write(NamedTuple):
    """A write of a stored column made during the conversation: ``path``/``line`` where the
    value is written; ``tool`` the name of the tool that reaches it (``turn``: of the
    function that runs both the write and the prompt's read, one turn), ``tool_path`` /
    ``tool_line`` its definition."""

    path: str
    line: int
    tool: str
    tool_path: str
    tool_line: int
    turn: bool = False


def _is_orm_class(cls: Scope) -> bool:
    node = cls.node
    if type(node) is not ast.ClassDef:
        return False
    if any(
        kw.arg == "table" and type(kw.value) is ast.Constant and kw.value.value is True
        for kw in node.keywords
    ):
        return True
    for stmt in node.body:
        targets = (
            stmt.targets
            if type(stmt) is ast.Assign
            else [stmt.target]
            if type(stmt) is ast.AnnAssign
            else []
        )
        if any(type(t) is ast.Name and t.id == "__tablename__" for t in targets):
            return True
    return False


def orm_class(ev: Any, node: Any, scope: Scope) -> tuple[str, Scope] | None:
    """The ORM model class a ``Name``/``Attribute`` refers to, as ``("path::Class", class
    scope)``; None when it is not a model class of the project."""
    if type(node) is ast.Name:
        for b in ev.resolve(node.id, scope, getattr(node, "lineno", 0)):
            if b.kind == DEF and type(b.value) is ast.ClassDef:
                cls = ev.function_scope(b.value)
                if cls is not None and _is_orm_class(cls):
                    return f"{ev.path}::{cls.name}", cls
                return None
            if b.kind != IMPORT:
                return None
    elif type(node) is not ast.Attribute:
        return None
    found = ev.project_def(node, "class")
    if found is None or not _is_orm_class(found[1]):
        return None
    return f"{found[0].path}::{found[1].name}", found[1]


def _annotation_model(ev: Any, note: Any, scope: Scope) -> tuple[str, Scope] | None:
    """A model class named anywhere in a return annotation (``Doc | None``,
    ``Select[tuple[Doc]]``, ``list[Doc]``)."""
    if note is None:
        return None
    for n in ast.walk(note):
        if type(n) in (ast.Name, ast.Attribute):
            got = orm_class(ev, n, scope)
            if got is not None:
                return got
    return None


def row_model(ev: Any, expr: Any, scope: Scope, depth: int = 0) -> tuple[str, Scope] | None:
    """The model class whose rows (one row, a list of them, or a query/statement yielding
    them) ``expr`` holds; None when it is not known to hold rows of a project model."""
    if depth > _MAX_ROW_DEPTH or expr is None:
        return None
    t = type(expr)
    if t is ast.Await:
        return row_model(ev, expr.value, scope, depth + 1)
    if t is ast.Name:
        for b in ev.resolve(expr.id, scope, expr.lineno):
            if b.kind in (ASSIGN, ITER, WITH) and b.value is not None:
                got = row_model(ev, b.value, b.scope, depth + 1)
                if got is not None:
                    return got
        return None
    if t is not ast.Call:
        return None
    func = expr.func
    model = orm_class(ev, func, scope)
    if model is not None:
        return model  # Model(...): a new row
    q = ev.facts.qualname(func) or ""
    if q in tables.SQL_SELECTS and expr.args:
        return orm_class(ev, expr.args[0], scope)
    if type(func) is ast.Attribute:
        attr = func.attr
        if attr in ("query", "get") and expr.args:
            model = orm_class(ev, expr.args[0], scope)
            if model is not None:
                return model
        if attr in _STATEMENT_RUNNERS and expr.args:
            got = row_model(ev, expr.args[0], scope, depth + 1)
            if got is not None:
                return got
        if attr in _ROW_METHODS:
            return row_model(ev, func.value, scope, depth + 1)
    return _returned_rows(ev, expr, scope, depth)


def _returned_rows(ev: Any, call: ast.Call, scope: Scope, depth: int) -> tuple[str, Scope] | None:
    """Rows a call to a project function gives back: by its return annotation, or by
    what it returns."""
    fs, _bound, owner = ev.callee_any(call, scope)
    if fs is None or owner is None:
        return None
    got = _annotation_model(owner, getattr(fs.node, "returns", None), fs)
    if got is not None:
        return got
    for r in fs.returns:
        got = row_model(owner, r, fs, depth + 1)
        if got is not None:
            return got
    return None


class StoreIndex:
    """Columns of ORM models written from a tool of ``evaluators`` (the project's modules),
    built once per project on first use: ``written[("path::Class", column)]`` -> the first such :class:`Write`
    (column ``"*"``: a write of a computed column, or of the whole row)."""

    def __init__(self, evaluators: list[Any]) -> None:
        self.written: dict[tuple[str, str], Write] = {}
        self.made: dict[tuple[str, str], Write] = {}  # rows made by ``Model(column=...)``
        self._turns: dict[int, dict[tuple[str, str], Write]] = {}
        reached = self._reached(self._tools(evaluators))
        for ev, fs, tool_ev, tool in reached.values():
            self._writes(ev, fs, tool_ev, tool)

    def write_of(self, model: str, column: str) -> Write | None:
        """The tool write of ``model``'s ``column`` (or of every column), if any."""
        return (
            self.written.get((model, column))
            or self.written.get((model, _ANY_COLUMN))
            or self.made.get((model, column))
        )

    def turn_write(self, model: str, column: str, ev: Any, reader: Scope) -> Write | None:
        """A write of ``model``'s ``column`` made in the same turn as the read in
        ``reader`` (a function of ``ev``'s module): by a function that a caller of the
        reader (up to :data:`_MAX_TURN_UP` calls above it) also runs, such as a
        compaction or memory-extraction step of the agent loop. Updates only: a row made
        by ``Model(...)`` once is not a change per turn."""
        key = id(reader.node)
        writes = self._turns.get(key)
        if writes is None:
            writes = self._turns[key] = self._turn_writes(ev, reader)
        return writes.get((model, column)) or writes.get((model, _ANY_COLUMN))

    def _turn_writes(self, ev: Any, reader: Scope) -> dict[tuple[str, str], Write]:
        out: dict[tuple[str, str], Write] = {}
        if ev.project is None or reader.kind != "function":
            return out
        level = [(ev, reader)]
        seen = {id(reader.node)}
        turns: list[tuple[Any, Scope]] = []  # callers, nearest first
        for _ in range(_MAX_TURN_UP):
            callers: list[tuple[Any, Scope]] = []
            for cev, fs in level:
                for got in _callers(cev, fs):
                    if id(got[1].node) not in seen:
                        seen.add(id(got[1].node))
                        callers.append(got)
            turns.extend(callers)
            level = callers
        for wev, wfs, tev, turn in self._reached(turns).values():
            for node, scope in _nodes(wev, wfs):
                for pair in _written_columns(wev, node, scope, updates_only=True):
                    out.setdefault(
                        pair,
                        Write(wev.path, node.lineno, turn.name, tev.path, turn.node.lineno, True),
                    )
        return out

    # -- tools ---------------------------------------------------------------------------

    def _tools(self, evs: list[Any]) -> list[tuple[Any, Scope]]:
        """Project functions exposed to a model as tools: ``(evaluator, function scope)``."""
        out: list[tuple[Any, Scope]] = []
        for ev in evs:
            for node, scope in _nodes(ev):
                if type(node) in (ast.FunctionDef, ast.AsyncFunctionDef):
                    for d in node.decorator_list:
                        target = d.func if type(d) is ast.Call else d
                        if (ev.facts.qualname(target) or "") in tables.TOOL_DECORATORS:
                            fs = ev.function_scope(node)
                            if fs is not None:
                                out.append((ev, fs))
                if type(node) is not ast.Call:
                    continue
                for ref in _tool_refs(ev, node):
                    got = _function_ref(ev, ref, scope)
                    if got is not None:
                        out.append(got)
        return out

    def _reached(self, roots: list[tuple[Any, Scope]]) -> dict[int, tuple[Any, ...]]:
        """Functions reached from each tool (calls, and functions passed as arguments):
        ``id(function node)`` -> ``(evaluator, function scope, tool evaluator, tool
        scope)``."""
        reached: dict[int, tuple[Any, ...]] = {}
        for root_ev, root in roots:
            todo = [(root_ev, root)]
            while todo and len(reached) < _MAX_REACH:
                ev, fs = todo.pop()
                if id(fs.node) in reached:
                    continue
                reached[id(fs.node)] = (ev, fs, root_ev, root)
                for node, scope in _nodes(ev, fs):
                    if type(node) is not ast.Call:
                        continue
                    callee, _bound, owner = ev.callee_any(node, scope)
                    if callee is not None and owner is not None:
                        todo.append((owner, callee))
                    for a in node.args:
                        got = _function_ref(ev, a, scope)
                        if got is not None:
                            todo.append(got)
        return reached

    # -- writes --------------------------------------------------------------------------

    def _writes(self, ev: Any, fs: Scope, tool_ev: Any, tool: Scope) -> None:
        updates = {
            id(node): set(_written_columns(ev, node, scope, updates_only=True))
            for node, scope in _nodes(ev, fs)
        }
        for node, scope in _nodes(ev, fs):
            for pair in _written_columns(ev, node, scope):
                w = Write(ev.path, node.lineno, tool.name, tool_ev.path, tool.node.lineno)
                if pair in updates[id(node)]:
                    self.written.setdefault(pair, w)
                else:  # a new row: named only when no update of the column is known
                    self.made.setdefault(pair, w)


def _nodes(ev: Any, fs: Scope | None = None) -> Any:
    """``(node, innermost function or module scope)`` for every node of the module (or of
    function ``fs``'s body, nested functions left out)."""
    root = fs.node if fs is not None else ev.facts.module.node
    start = fs if fs is not None else ev.facts.module
    todo: list[tuple[Any, Scope]] = [(child, start) for child in ast.iter_child_nodes(root)]
    while todo:
        node, scope = todo.pop()
        yield node, scope
        inner = scope
        if type(node) in (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda):
            if fs is not None:
                continue  # a nested function runs only when called (followed as a call)
            got = ev.function_scope(node) if type(node) is not ast.Lambda else None
            inner = got if got is not None else scope
        elif type(node) is ast.ClassDef:
            got = ev.function_scope(node)
            inner = got if got is not None else scope
        todo.extend((child, inner) for child in ast.iter_child_nodes(node))


def _callers(ev: Any, fs: Scope) -> list[tuple[Any, Scope]]:
    """Functions of the project that call ``fs`` (a function of ``ev``'s module), found by
    its name among the indexed calls of the modules that name it, each call resolved."""
    out: list[tuple[Any, Scope]] = []
    name = fs.name
    tail = "." + name
    project = ev.project
    for cev in project.evaluators(name.encode()) if project is not None else [ev]:
        for key, sites in cev.facts.calls.items():
            if key != name and not key.endswith(tail):
                continue
            for call, scope in sites:
                if scope.kind != "function":
                    continue
                target, _bound, _owner = cev.callee_any(call, scope)
                if target is fs:
                    out.append((cev, scope))
    return out


def _tool_refs(ev: Any, call: ast.Call) -> list[Any]:
    """Expressions a call exposes to a model as tools (function references to check)."""
    refs: list[Any] = []
    kws = {kw.arg: kw.value for kw in call.keywords if kw.arg}
    if "description" in kws:
        refs.extend(v for k, v in kws.items() if k in tables.TOOL_FUNCTION_KEYWORDS)
    tools = kws.get("tools")
    if isinstance(tools, (ast.List, ast.Tuple)):
        refs.extend(tools.elts)
    if (ev.facts.qualname(call.func) or "") in tables.TOOL_FACTORIES:
        refs.extend(call.args[:1])
        refs.extend(v for k, v in kws.items() if k in tables.TOOL_FUNCTION_KEYWORDS)
    return refs


def _function_ref(ev: Any, ref: Any, scope: Scope) -> tuple[Any, Scope] | None:
    """The project function a ``Name``/``Attribute`` refers to (not a call of it)."""
    if type(ref) is ast.Name:
        for b in ev.resolve(ref.id, scope, ref.lineno):
            if b.kind == DEF and type(b.value) in (ast.FunctionDef, ast.AsyncFunctionDef):
                fs = ev.function_scope(b.value)
                return (ev, fs) if fs is not None else None
            if b.kind != IMPORT:
                return None
    elif type(ref) is not ast.Attribute:
        return None
    found: tuple[Any, Scope] | None = ev.project_def(ref, "function")
    return found


def _written_columns(
    ev: Any, node: Any, scope: Scope, updates_only: bool = False
) -> list[tuple[str, str]]:
    """``(model, column)`` pairs a statement or call writes (see the module docstring);
    ``updates_only`` leaves out ``Model(...)`` (a row made once, as a get-or-create does)."""
    t = type(node)
    targets: list[Any] = []
    if t is ast.Assign:
        targets = node.targets
    elif t in (ast.AugAssign, ast.AnnAssign):
        targets = [node.target]
    out: list[tuple[str, str]] = []
    for tg in targets:
        if type(tg) is ast.Attribute:
            got = row_model(ev, tg.value, scope)
            if got is not None:
                out.append((got[0], tg.attr))
    if t is not ast.Call:
        return out
    func = node.func
    q = ev.facts.qualname(func) or ""
    if q == "builtins.setattr" and len(node.args) >= 2:
        got = row_model(ev, node.args[0], scope)
        if got is not None:
            name = node.args[1]
            col = name.value if type(name) is ast.Constant and type(name.value) is str else None
            out.append((got[0], col or _ANY_COLUMN))
    elif type(func) is ast.Attribute and func.attr == "values":
        got = _update_target(ev, func.value, scope)
        if got is not None:  # update(Model)....values(column=...)
            out.extend((got[0], kw.arg or _ANY_COLUMN) for kw in node.keywords)
            if node.args:
                out.extend((got[0], c) for c in _dict_columns(node.args[0]))
    elif type(func) is ast.Attribute and func.attr == "update" and type(func.value) is ast.Call:
        got = row_model(ev, func.value, scope)
        if got is not None:  # session.query(Model)....update({Model.column: ...})
            out.extend((got[0], c) for c in _dict_columns(node.args[0] if node.args else None))
    elif not updates_only:
        got = orm_class(ev, func, scope)
        if got is not None:
            out.extend((got[0], kw.arg) for kw in node.keywords if kw.arg)
    return out


def _update_target(ev: Any, expr: Any, scope: Scope) -> tuple[str, Scope] | None:
    """The model of an ``update(Model)`` statement, through ``.where(...)`` and the like."""
    while type(expr) is ast.Call:
        func = expr.func
        if (ev.facts.qualname(func) or "") in tables.SQL_UPDATES:
            return orm_class(ev, expr.args[0], scope) if expr.args else None
        if type(func) is not ast.Attribute:
            return None
        expr = func.value
    return None


def _dict_columns(node: Any) -> list[str]:
    """Columns a ``{Model.column: v, "column": v}`` literal names; every column (``"*"``)
    when it is not such a literal."""
    if type(node) is not ast.Dict or None in node.keys:
        return [_ANY_COLUMN]
    cols: list[str] = []
    for k in node.keys:
        if type(k) is ast.Attribute:
            cols.append(k.attr)
        elif type(k) is ast.Constant and type(k.value) is str:
            cols.append(k.value)
        else:
            return [_ANY_COLUMN]
    return cols


def conversation_write(ev: Any, node: ast.Attribute, scope: Scope) -> str | None:
    """Why ``row.column`` (``node``) changes during a conversation, or None: the column of
    a project model that a tool writes (the index is built on the first question)."""
    model = row_model(ev, node.value, scope)
    if model is None:
        return None
    # the project's modules that name a tool, or this module alone (``lint_source``)
    holder = ev.project if ev.project is not None else ev
    index = getattr(holder, "store_index", None)
    if index is None:
        evs = list(ev.project.evaluators(b"tool")) if ev.project is not None else [ev]
        index = holder.store_index = StoreIndex(evs)
    w = index.write_of(model[0], node.attr)
    if w is None:
        w = index.turn_write(model[0], node.attr, ev, _function_of(scope))
    if w is None:
        return None
    by = (
        f"by `{w.tool}()` at {_place(w.tool_path, w.tool_line)}, which also builds this "
        "prompt: the same turn"
        if w.turn
        else f"reached from the tool `{w.tool}` at {_place(w.tool_path, w.tool_line)}"
    )
    return (
        f"`{short_attr(node)}` (the stored `{model[1].name}.{node.attr}`, written during the "
        f"conversation at {_place(w.path, w.line)}, {by})"
    )


def _function_of(scope: Scope) -> Scope:
    """The innermost function around ``scope`` (a comprehension or class body lies in one)."""
    s: Scope | None = scope
    while s is not None and s.kind != "function":
        s = s.parent
    return s if s is not None else scope


def _place(path: str, line: int) -> str:
    return f"{path}:{line}" if path else f"line {line}"


def short_attr(node: ast.Attribute) -> str:
    """``doc.memory_text`` for a short receiver, ``….memory_text`` otherwise."""
    base = node.value
    return f"{base.id}.{node.attr}" if type(base) is ast.Name else f"….{node.attr}"
