"""The project-wide index: which module of the linted project a dotted name refers to, so
that a call to a function or method defined in another module is followed (issue 28).

Each linted file registers its evaluator under every dotted suffix of its path of two or
more parts (``src/pkg/a/b.py`` -> ``pkg.a.b``, ``a.b``; ``pkg/a/__init__.py`` -> ``pkg.a``)
and under its full dotted path; a suffix two files share is dropped, so a lookup never
guesses between them. Single-part names (``utils``) are registered only when unique.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from linters.flow.facts import Scope


def module_names(rel_path: str) -> list[str]:
    """Dotted names a file may be imported as, longest first: ``src/pkg/a.py`` ->
    ``["src.pkg.a", "pkg.a", "a"]``."""
    parts = list(PurePosixPath(rel_path).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    parts = [p for p in parts if p not in (".", "")]
    return [".".join(parts[i:]) for i in range(len(parts))]


def absolute(qual: str, rel_path: str) -> str:
    """A relative import's dotted name made absolute for the file at ``rel_path`` (its
    path from the lint root): in ``pkg/models/google.py``, ``._choice.pick`` ->
    ``pkg.models._choice.pick`` and ``..tools.Tool`` -> ``pkg.tools.Tool``; in
    ``pkg/models/__init__.py`` ``.google.X`` -> ``pkg.models.google.X`` (PEP 328). Names
    without a leading dot, and those reaching above the root, come back unchanged."""
    level = len(qual) - len(qual.lstrip("."))
    if not level or not rel_path:
        return qual
    path = PurePosixPath(rel_path)
    package = [p for p in path.parent.parts if p not in (".", "")]
    if level - 1 > len(package):
        return qual
    base = package[: len(package) - (level - 1)]
    rest = qual[level:]
    return ".".join([*base, rest] if rest else base)


class Project:
    """Evaluators of every module of one lint run, by dotted module name."""

    def __init__(self) -> None:
        self.modules: dict[str, Any] = {}
        self._shared: set[str] = set()
        self._paths: dict[int, str] = {}
        self._made: dict[int, Any] = {}
        self.depth = 0  # calls being followed into other modules, nested
        self._entries: list[tuple[Any, bytes]] = []  # (evaluator or maker, source)
        self.store_index: Any = None  # linters.flow.stores.StoreIndex, made on first use
        self.sentinels: frozenset[str] | None = None  # split markers (linters.flow.sentinels)
        self._methods: dict[str, list[tuple[Any, Scope]]] | None = None
        # dotted name -> what lookup() found: every call site of the project asks again
        # (``logger.info``, ``os.path.join``); emptied when a module is added
        self._found: dict[str, tuple[Any, Scope] | None] = {}

    def add(self, rel_path: str, ev: Any, source: bytes = b"") -> None:
        """Register ``ev`` (a :class:`linters.flow.values.Evaluator`, or a function of no
        arguments that makes one: a module no rule reads is analysed only when a call
        reaches it) for ``rel_path``; ``source`` (its bytes) lets
        :meth:`evaluators` skip modules without a word."""
        self._entries.append((ev, source))
        self._found.clear()
        if not callable(ev):
            ev.path = rel_path
            ev.project = self
        else:
            self._paths[id(ev)] = rel_path
        for name in module_names(rel_path):
            if name in self._shared:
                continue
            if name in self.modules and self.modules[name] is not ev:
                del self.modules[name]
                self._shared.add(name)
                continue
            self.modules[name] = ev

    def lookup(self, qual: str) -> tuple[Any, Scope] | None:
        """The evaluator and the scope (function or class) a dotted name defines, e.g.
        ``pkg.helpers.now_text`` or ``pkg.prompts.Generator.build``; None if not in the
        project. Kept per name until the next :meth:`add`; raises what making a lazy
        module raises."""
        if qual in self._found:
            return self._found[qual]
        found = self._found[qual] = self._lookup(qual)
        return found

    def _lookup(self, qual: str) -> tuple[Any, Scope] | None:
        """:meth:`lookup` without the memo."""
        parts = qual.split(".")
        for i in range(len(parts) - 1, 0, -1):
            ev = self.modules.get(".".join(parts[:i]))
            if ev is None:
                continue
            if callable(ev):
                ev = self._make(ev)
            scope: Scope | None = ev.facts.module
            for name in parts[i:]:
                scope = scope.funcs.get(name) if scope is not None else None
            if scope is not None:
                return ev, scope
            return None
        return None

    def methods(self, name: str) -> list[tuple[Any, Scope]]:
        """``(evaluator, method scope)`` of every method called ``name`` that a top-level
        class of an analysed module defines (modules made lazily are not indexed: a module
        that sends a request always has the words that get it analysed)."""
        if self._methods is None:
            index: dict[str, list[tuple[Any, Scope]]] = {}
            for ev, _source in self._entries:
                if callable(ev):
                    continue
                for cls in ev.facts.module.funcs.values():
                    if cls.kind != "class":
                        continue
                    for m in cls.funcs.values():
                        if m.kind == "function":
                            index.setdefault(m.name, []).append((ev, m))
            self._methods = index
        return self._methods.get(name, [])

    def module(self, name: str) -> Any:
        """The evaluator of the module registered as ``name`` (made when lazy), or None."""
        ev = self.modules.get(name)
        return self._make(ev) if callable(ev) else ev

    def evaluators(self, word: bytes) -> Any:
        """The evaluator of every module whose source contains ``word`` (any case), made
        when lazy; every module when sources were not given."""
        for ev, source in self._entries:
            if source and word.lower() not in source.lower():
                continue
            yield self._make(ev) if callable(ev) else ev

    def make(self, maker: Any) -> Any:
        """The evaluator a lazy entry makes (made once, registered with its path)."""
        return self._make(maker)

    def _make(self, maker: Any) -> Any:
        ev = self._made.get(id(maker))
        if ev is None:
            ev = self._made[id(maker)] = maker()
            ev.path = self._paths[id(maker)]
            ev.project = self
        return ev
