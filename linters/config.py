"""``[tool.promptcache.lint]`` in ``pyproject.toml``, merged with the command line.

Keys (all optional)::

    [tool.promptcache.lint]
    select = ["PC"]                  # codes or prefixes to run (default: all)
    ignore = ["PC007"]               # codes or prefixes to skip (applied after select)
    exclude = ["migrations/", "*_pb2.py"]     # gitignore-style, relative to this file
    per-file-ignores = { "tests/**" = ["PC001"] }
    respect-gitignore = true         # skip what .gitignore files ignore when recursing
    include-tests = false            # also lint tests/, examples/, docs/, eval/ folders
    min-static-chars = 40            # PC004: static text that must follow to report
    long-constant-chars = 1000       # PC007: what counts as a long constant
    extra-volatile-calls = ["myapp.clock.now"]   # more calls whose value changes per request
    provider = "anthropic"           # provider of .json/.jsonl request payloads

An unknown key, a wrong type or an unknown code is a :class:`ConfigError` (exit status 2),
never a silent fallback to defaults.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

import pathspec

from linters.rules import RULES

PROVIDERS = ("anthropic", "openai", "openai_compatible", "bedrock", "gemini")

_TYPES = {
    "select": list,
    "ignore": list,
    "exclude": list,
    "extend-exclude": list,
    "per-file-ignores": dict,
    "respect-gitignore": bool,
    "include-tests": bool,
    "min-static-chars": int,
    "long-constant-chars": int,
    "extra-volatile-calls": list,
    "provider": str,
}


class ConfigError(ValueError):
    """A configuration or command-line value that cannot be used; the message is one line
    saying what to fix."""


@dataclass(frozen=True)
class LintConfig:
    """Effective settings for one run (see the module docstring for the keys).

    ``root`` is the directory patterns are relative to (the pyproject's, else the current
    directory); ``source`` the pyproject it came from, if any.
    """

    select: frozenset[str] = frozenset()
    ignore: frozenset[str] = frozenset()
    exclude: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, frozenset[str]], ...] = ()
    respect_gitignore: bool = True
    include_tests: bool = False
    min_static_chars: int = 40
    long_constant_chars: int = 1000
    extra_volatile_calls: frozenset[str] = frozenset()
    provider: str | None = None
    root: Path = field(default_factory=Path.cwd)
    source: Path | None = None

    @property
    def enabled(self) -> frozenset[str]:
        """Codes that run: ``select`` (all when empty) minus ``ignore``."""

        base = self.select or frozenset(RULES)
        return frozenset(base - self.ignore)

    def exclude_spec(self) -> pathspec.GitIgnoreSpec | None:
        """The ``exclude`` patterns as one gitignore-style spec (None when empty)."""
        if not self.exclude:
            return None
        return pathspec.GitIgnoreSpec.from_lines(self.exclude)

    def codes_for(self, rel_path: str) -> frozenset[str]:
        """Enabled codes for a file at ``rel_path`` (posix, relative to ``root``)."""
        codes = self.enabled
        for pattern, ignored in self.per_file_ignores:
            if pathspec.GitIgnoreSpec.from_lines([pattern]).match_file(rel_path):
                codes = codes - ignored
        return codes


def expand_codes(items: Iterable[Any], what: str) -> frozenset[str]:
    """Codes named by ``items`` (codes, prefixes like ``PC00``, or ``ALL``), comma lists
    allowed; raises :class:`ConfigError` for a name that matches no rule."""

    out: set[str] = set()
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"{what}: expected rule codes as strings, got {item!r}")
        for part in item.split(","):
            code = part.strip().upper()
            if not code:
                continue
            if code == "ALL":
                out.update(RULES)
                continue
            matched = [c for c in RULES if c.startswith(code)]
            if not matched:
                raise ConfigError(
                    f"{what}: unknown rule code {part.strip()!r} (known: {', '.join(RULES)})"
                )
            out.update(matched)
    return frozenset(out)


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` at or above ``start`` holding
    ``[tool.promptcache.lint]``."""
    start = start.resolve()
    for d in (start, *start.parents):
        p = d / "pyproject.toml"
        if p.is_file():
            try:
                data = tomllib.loads(p.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                continue
            if isinstance(data.get("tool", {}).get("promptcache", {}).get("lint"), dict):
                return p
    return None


def load_config(
    path: Path | None = None, *, isolated: bool = False, cwd: Path | None = None
) -> LintConfig:
    """Read the settings: from ``path`` if given, else the nearest pyproject with a
    ``[tool.promptcache.lint]`` table above ``cwd``; defaults when ``isolated`` or none.

    Raises:
        ConfigError: unreadable TOML, an unknown key, a wrong type or an unknown code.
    """
    cwd = cwd or Path.cwd()
    if isolated:
        return LintConfig(root=cwd)
    if path is None:
        path = find_pyproject(cwd)
        if path is None:
            return LintConfig(root=cwd)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    table = data.get("tool", {}).get("promptcache", {}).get("lint", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.promptcache.lint] must be a table")
    return from_table(table, root=Path(path).resolve().parent, source=Path(path))


def from_table(table: dict, *, root: Path, source: Path | None = None) -> LintConfig:
    """Validate a ``[tool.promptcache.lint]`` table; raises :class:`ConfigError`."""
    where = f"{source}: [tool.promptcache.lint]" if source else "[tool.promptcache.lint]"
    for key, value in table.items():
        want = _TYPES.get(key)
        if want is None:
            raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(_TYPES)})")
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise ConfigError(f"{where}: {key} must be a {want.__name__}, got {value!r}")
    cfg = LintConfig(root=root, source=source)
    changes: dict = {}
    if "select" in table:
        changes["select"] = expand_codes(table["select"], f"{where} select")
    if "ignore" in table:
        changes["ignore"] = expand_codes(table["ignore"], f"{where} ignore")
    excl = [*table.get("exclude", []), *table.get("extend-exclude", [])]
    for p in excl:
        if not isinstance(p, str):
            raise ConfigError(f"{where}: exclude patterns must be strings, got {p!r}")
    changes["exclude"] = tuple(excl)
    pfi = []
    for pattern, codes in table.get("per-file-ignores", {}).items():
        if not isinstance(codes, list):
            raise ConfigError(f"{where}: per-file-ignores[{pattern!r}] must be a list of codes")
        pfi.append((pattern, expand_codes(codes, f"{where} per-file-ignores")))
    changes["per_file_ignores"] = tuple(pfi)
    if "respect-gitignore" in table:
        changes["respect_gitignore"] = table["respect-gitignore"]
    if "include-tests" in table:
        changes["include_tests"] = table["include-tests"]
    for key in ("min-static-chars", "long-constant-chars"):
        if key in table:
            if table[key] < 0:
                raise ConfigError(f"{where}: {key} must be >= 0, got {table[key]}")
            changes[key.replace("-", "_")] = table[key]
    if "extra-volatile-calls" in table:
        names = table["extra-volatile-calls"]
        if not all(isinstance(n, str) and n and " " not in n for n in names):
            raise ConfigError(
                f"{where}: extra-volatile-calls must be dotted names like 'myapp.clock.now'"
            )
        changes["extra_volatile_calls"] = frozenset(names)
    if "provider" in table:
        if table["provider"] not in PROVIDERS:
            raise ConfigError(f"{where}: provider must be one of {', '.join(PROVIDERS)}")
        changes["provider"] = table["provider"]
    return replace(cfg, **changes)


def with_cli(
    cfg: LintConfig,
    *,
    select: Any = None,
    ignore: Any = None,
    exclude: Any = None,
    provider: Any = None,
) -> LintConfig:
    """Command-line overrides: ``--select`` replaces the configured selection, ``--ignore``
    and ``--exclude`` add to the configured lists, ``--provider`` replaces."""
    changes: dict = {}
    if select:
        changes["select"] = expand_codes(select, "--select")
    if ignore:
        changes["ignore"] = cfg.ignore | expand_codes(ignore, "--ignore")
    if exclude:
        changes["exclude"] = cfg.exclude + tuple(exclude)
    if provider:
        changes["provider"] = provider
    return replace(cfg, **changes) if changes else cfg
