"""Which files a run reads: recursion into folders, ``.gitignore``, excludes.

- A folder is walked recursively for ``*.py`` files. Folders named like tool caches and
  virtual environments (and any folder holding ``pyvenv.cfg``) are skipped, as are paths
  that the ``.gitignore`` files of the repository ignore (those above the folder, up to the
  repository root, and those inside it), unless ``respect-gitignore = false``.
- Tests, examples, docs scripts and evaluation harnesses (:data:`NON_RUNTIME_DIRS`, and
  ``test_*.py``/``*_test.py``/``conftest.py``) are skipped while recursing unless
  ``include-tests = true`` or ``--include-tests``.
- A file named on the command line is read unless the configured ``exclude`` matches it:
  ``.json``/``.jsonl`` as request payloads, ``.py``/``.pyi``/``.pyw`` and files with no
  suffix whose first line is a ``python`` shebang as Python. Any other file (``report.html``,
  ``notes.md``) is not parsed: it is listed in ``skipped`` with the reason, for the command
  line to say so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pathspec

from linters.config import LintConfig

SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".bzr",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".hypothesis",
        "node_modules",
        "site-packages",
        ".eggs",
        ".ipynb_checkpoints",
        "__pypackages__",
        "build",
        "dist",
    }
)
# Folders of code that is not the project's runtime: tests, examples, docs scripts and
# evaluation harnesses (issue 28: linted by default they drowned the real findings).
# Skipped while recursing unless ``include-tests`` / ``--include-tests``; a file named on
# the command line is always read.
NON_RUNTIME_DIRS = frozenset(
    {
        "tests",
        "test",
        "testing",
        "examples",
        "example",
        "cookbook",
        "cookbooks",
        "docs",
        "doc",
        "eval",
        "evals",
        "evaluation",
        "evaluations",
        "benchmark",
        "benchmarks",
        "notebooks",
    }
)
PAYLOAD_SUFFIXES = (".json", ".jsonl")
PYTHON_SUFFIXES = (".py", ".pyi", ".pyw")


def _named_kind(p: Path) -> str | None:
    """``"payload"``, ``"python"`` or None (not a file this linter reads) for a file named
    on the command line."""
    suffix = p.suffix.lower()
    if suffix in PAYLOAD_SUFFIXES:
        return "payload"
    if suffix in PYTHON_SUFFIXES:
        return "python"
    if suffix == "":
        try:
            with open(p, "rb") as f:
                first = f.readline(200)
        except OSError:
            return "python"  # let the reader report the error as it does for .py files
        if first.startswith(b"#!") and b"python" in first:
            return "python"
    return None


class PathNotFound(FileNotFoundError):
    """A path named on the command line does not exist."""


@dataclass(frozen=True, slots=True)
class Target:
    """A file to lint: ``kind`` is ``"python"`` or ``"payload"``; ``display`` the path as
    printed (relative to the current directory when under it)."""

    path: Path
    kind: str
    display: str


class _Ignores:
    """The ``.gitignore`` specs that apply under a folder, deepest last."""

    def __init__(self, specs: list[tuple[Path, pathspec.GitIgnoreSpec]]) -> None:
        self.specs = specs

    def child(self, directory: Path) -> _Ignores:
        spec = _read_ignore(directory / ".gitignore")
        return _Ignores(self.specs + [(directory, spec)]) if spec else self

    def ignored(self, path: Path, is_dir: bool) -> bool:
        for base, spec in reversed(self.specs):
            try:
                rel = path.relative_to(base).as_posix()
            except ValueError:
                continue
            if is_dir:
                rel += "/"
            res = spec.check_file(rel)
            if res.include is not None:
                return bool(res.include)
        return False


def _read_ignore(path: Path) -> pathspec.GitIgnoreSpec | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None


def _repo_root(directory: Path) -> Path | None:
    for d in (directory, *directory.parents):
        if (d / ".git").exists():
            return d
    return None


def _ignores_above(directory: Path) -> _Ignores:
    """Specs from the repository root down to ``directory``'s parent, plus
    ``.git/info/exclude``."""
    root = _repo_root(directory)
    specs: list[tuple[Path, pathspec.GitIgnoreSpec]] = []
    if root is None:
        return _Ignores(specs)
    info = _read_ignore(root / ".git" / "info" / "exclude")
    if info:
        specs.append((root, info))
    chain = [root] + [p for p in reversed(directory.parents) if root in p.parents]
    for d in chain:
        if d == directory:
            break
        spec = _read_ignore(d / ".gitignore")
        if spec:
            specs.append((d, spec))
    return _Ignores(specs)


def display_path(path: Path, cwd: Path) -> str:
    """``path`` relative to ``cwd`` when under it (posix separators), else absolute."""
    try:
        return path.relative_to(cwd).as_posix()
    except ValueError:
        return path.as_posix()


def discover(
    paths: list[str],
    config: LintConfig,
    cwd: Path | None = None,
    skipped: list[str] | None = None,
    force_exclude: bool = False,
) -> list[Target]:
    """The files to lint for ``paths``, in a stable order, without duplicates. A named
    file that is neither Python nor a request payload is left out and, when ``skipped``
    is given, appended to it as ``"PATH: why"``. ``force_exclude`` (ruff's flag of that
    name): a named file is also left out when a folder walk would leave it out (a test
    file or a file under a tests/examples/docs/... folder, unless ``include_tests``), as a
    pre-commit hook, which is handed file names, needs to agree with ``lint .``.

    Raises:
        PathNotFound: a path that does not exist (the message names it).
    """
    cwd = (cwd or Path.cwd()).resolve()
    exclude = config.exclude_spec()
    root = config.root.resolve()
    out: dict[Path, Target] = {}

    def excluded(p: Path, is_dir: bool) -> bool:
        if exclude is None:
            return False
        try:
            rel = p.relative_to(root).as_posix()
        except ValueError:
            rel = p.name
        return exclude.match_file(rel + ("/" if is_dir else ""))

    for raw in paths:
        p = Path(raw)
        if not p.is_absolute():
            p = cwd / p
        p = Path(os.path.normpath(p))
        if not p.exists():
            raise PathNotFound(f"no such file or directory: {raw}")
        if p.is_file():
            if excluded(p, False):
                continue
            if force_exclude and not config.include_tests and _not_runtime(p, root, cwd):
                continue
            kind = _named_kind(p)
            if kind is None:
                if skipped is not None:
                    skipped.append(
                        f"{display_path(p, cwd)}: not a Python file (.py, .pyi, .pyw or a "
                        "python shebang) or a request payload (.json, .jsonl)"
                    )
                continue
            out.setdefault(p, Target(p, kind, display_path(p, cwd)))
            continue
        ignores = _ignores_above(p) if config.respect_gitignore else _Ignores([])
        if ignores.ignored(p, True):
            ignores = _Ignores([])  # the folder itself was named: only its own rules apply
        before = len(out)
        _walk(p, ignores, config, excluded, out, cwd)
        if skipped is not None and len(out) == before:
            why = _why_empty(p, ignores, config, excluded, cwd)
            if why:
                skipped.append(f"{display_path(p, cwd)}: {why}")
    return sorted(out.values(), key=lambda t: t.display)


def _why_empty(p: Path, ignores: Any, config: LintConfig, excluded: Any, cwd: Path) -> str:
    """Why a named folder gave no file to lint, when files would be there without the
    default skips or the configured ``exclude`` (ruff warns likewise about a named path it
    force-excludes); "" when it simply holds no Python file."""
    everything = replace(config, include_tests=True)
    held: dict[Path, Target] = {}
    if not config.include_tests:
        _walk(p, ignores, everything, excluded, held, cwd)
        if held:
            n = len(held)
            return (
                f"its {n} Python file{'s are' if n > 1 else ' is'} tests, examples, docs or "
                "evaluation code, skipped by default; pass --include-tests to lint them"
            )
    _walk(p, ignores, everything, lambda _p, _d: False, held, cwd)
    if held:
        where = f" in {display_path(config.source, cwd)}" if config.source else ""
        return f"excluded by the `exclude` setting{where}"
    return ""


def _not_runtime(p: Path, root: Path, cwd: Path) -> bool:
    """A test file, or a file under a :data:`NON_RUNTIME_DIRS` folder (below ``root``, else
    below ``cwd``): what a folder walk skips by default."""
    if is_test_file(p.name):
        return True
    for base in (root, cwd):
        try:
            parts = p.parent.relative_to(base).parts
        except ValueError:
            continue
        return any(part in NON_RUNTIME_DIRS for part in parts)
    return False


def is_test_file(name: str) -> bool:
    """``test_x.py``, ``x_test.py`` and ``conftest.py``: pytest's files."""
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def _walk(
    directory: Path, ignores: _Ignores, config: LintConfig, excluded: Any, out: Any, cwd: Path
) -> None:
    gitignore = config.respect_gitignore
    skip_dirs = SKIP_DIRS if config.include_tests else SKIP_DIRS | NON_RUNTIME_DIRS
    stack = [(directory, ignores)]
    while stack:
        d, ign = stack.pop()
        if gitignore:
            ign = ign.child(d)
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        if any(e.name == "pyvenv.cfg" for e in entries) and d != directory:
            continue
        for e in entries:
            name = e.name
            try:
                is_dir = e.is_dir(follow_symlinks=False)  # no symlink cycles
            except OSError:
                continue
            path = Path(e.path)
            if is_dir:
                if name in skip_dirs or name.endswith(".egg-info"):
                    continue
                if (gitignore and ign.ignored(path, True)) or excluded(path, True):
                    continue
                stack.append((path, ign))
            elif name.endswith(".py"):
                if not config.include_tests and is_test_file(name):
                    continue
                if (gitignore and ign.ignored(path, False)) or excluded(path, False):
                    continue
                out.setdefault(path, Target(path, "python", display_path(path, cwd)))
