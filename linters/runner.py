"""Run the rules over sources and files: one parse and at most one walk per file.

A file whose bytes hold none of the words any rule needs (``system``, ``tools``,
``messages``, ``prompt``, ``cache_control``, ...) is parsed for PC900 and not walked.
"""

from __future__ import annotations

import ast
import gc
import io
import re
import tokenize
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from linters.analysis import Analysis
from linters.config import LintConfig
from linters.files import Target
from linters.flow.project import Project
from linters.flow.tables import gate
from linters.model import Finding
from linters.noqa import NoqaMap
from linters.payloads import lint_payload
from linters.rules import FAMILIES, PARSE_ERROR, family_codes

_LINE_SPLIT = re.compile(r"\r\n|\r|\n")
_FAMILY_CODES = [(fam, family_codes(fam)) for fam in FAMILIES]


@dataclass
class Report:
    """What a run found: ``findings`` (sorted), how many files were read, and how many
    findings ``--fix`` repaired."""

    findings: list[Finding] = field(default_factory=list)
    files: int = 0
    fixed: int = 0


def decode(source: bytes) -> str:
    """Source text, decoded the way Python does (PEP 263 cookie, BOM, else UTF-8)."""
    try:
        enc, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    except SyntaxError:
        enc = "utf-8"
    try:
        return source.decode(enc if enc != "utf-8-sig" else "utf-8-sig", errors="replace")
    except LookupError:
        return source.decode("utf-8", errors="replace")


def _char_col(line: str, byte_col: int) -> int:
    """1-based character column for the parser's 0-based UTF-8 byte offset."""
    if line.isascii():
        return byte_col + 1
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore")) + 1


def newer_grammar(source: bytes) -> bool:
    """True when ``source`` is valid Python of a grammar newer than the running interpreter
    knows (PEP 701 f-strings or PEP 695 type parameters on 3.11): libcst's parser knows
    3.0-3.13 grammar whatever Python runs it. Such a file is not a syntax error; it is left
    unanalysed (the flow analysis needs the running Python's ``ast``)."""
    import libcst

    try:
        libcst.parse_module(source)
    except Exception:  # libcst.ParserSyntaxError, or anything its native parser raises
        return False
    return True


def parse(source: bytes, path: str, codes: frozenset[str]) -> ast.Module | list[Finding]:
    """The syntax tree of ``source``, or the PC900 finding saying the file was not checked
    (empty for valid Python of a grammar newer than this interpreter's, see
    :func:`newer_grammar`, or when PC900 is not selected).

    The finding is ``info``: a file the linter cannot parse is not a cache-busting
    finding (issue 28: project templates such as ``class {{name}}():`` were five of seven
    warnings on the projects kept aside); it stays visible in the output and the summary
    counts it, while the interpreter, ruff or the tests fail on a real syntax error."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return cast(
                ast.Module,
                compile(source, path, "exec", ast.PyCF_ONLY_AST, dont_inherit=True),
            )
    except SyntaxError as exc:
        if PARSE_ERROR.code not in codes or newer_grammar(source):
            return []
        line = exc.lineno or 1
        col = max(exc.offset or 1, 1)
        why = f" (syntax error: {exc.msg or 'invalid syntax'})"
        if _template_line(source, line):
            why = "; it is a template (`{{...}}` or `{%...%}` placeholders), not Python" + why
        return [_not_checked(why, line, col, path)]
    except (ValueError, RecursionError, MemoryError) as exc:
        if PARSE_ERROR.code not in codes:
            return []
        why = "too deeply nested" if isinstance(exc, (RecursionError, MemoryError)) else str(exc)
        return [_not_checked(f" ({why})", 1, 1, path)]


# Jinja2 / Django / cookiecutter / copier placeholders: ``{{ name }}``, ``{% if x %}``.
# In valid Python ``{{`` only appears inside strings, so a line that fails to parse and
# holds one is a template's line.
_TEMPLATE_RE = re.compile(rb"\{\{.*?\}\}|\{%.*?%\}")


def _template_line(source: bytes, line: int) -> bool:
    """Whether 1-based ``line`` of ``source`` holds a template placeholder."""
    lines = source.splitlines()
    return 0 < line <= len(lines) and _TEMPLATE_RE.search(lines[line - 1]) is not None


def _not_checked(why: str, line: int, col: int, path: str) -> Finding:
    """The PC900 (info) finding for a Python file that does not parse; ``why`` follows
    "the file does not parse"."""
    return Finding(
        PARSE_ERROR.code,
        f"not checked: the file does not parse{why}",
        line,
        col,
        line,
        col,
        path,
        severity="info",
    )


def run_rules(an: Analysis, source: bytes, path: str, codes: frozenset[str]) -> list[Finding]:
    """The rule families over one analysed module; columns converted to characters,
    ``# noqa`` applied, duplicates dropped, sorted."""
    raw: list[Finding] = []
    for fam, fcodes in _FAMILY_CODES:
        if fcodes & codes:
            raw.extend(f for f in fam.check(an) if f.code in codes)
    if not raw:
        return []
    text = decode(source)
    lines = _LINE_SPLIT.split(text)
    noqa = NoqaMap(text) if "noqa" in text.lower() else None
    out = []
    seen = set()
    for f in raw:
        if noqa is not None and noqa.silences(f.code, f.line):
            continue
        start = lines[f.line - 1] if 0 < f.line <= len(lines) else ""
        end = lines[f.end_line - 1] if 0 < f.end_line <= len(lines) else ""
        f.col = _char_col(start, f.col)
        f.end_col = _char_col(end, f.end_col)
        f.path = path
        key = (f.code, f.line, f.col)
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    out.sort(key=Finding.sort_key)
    return out


def lint_source(
    source: bytes | str,
    path: str = "<string>",
    config: LintConfig | None = None,
    codes: frozenset[str] | None = None,
) -> list[Finding]:
    """Findings for one Python source (bytes as read from disk, or text), on its own (calls
    into other modules are not followed; :func:`lint_targets` follows them).

    ``codes`` restricts the rules (default: ``config.enabled``). Never raises for bad input:
    a file that does not parse is one PC900 finding (info: the file was not checked).
    """
    config = config or LintConfig()
    if isinstance(source, str):
        source = source.encode("utf-8")
    codes = config.enabled if codes is None else codes
    tree = parse(source, path, codes)
    if isinstance(tree, list):
        return tree
    if not gate(source):
        return []
    return run_rules(Analysis(tree, source, config), source, path, codes)


def lint_target(target: Target, config: LintConfig) -> list[Finding]:
    """Findings for one discovered file (Python or request payload)."""
    rel = _rel(target.path, config.root)
    codes = config.codes_for(rel)
    try:
        data = target.path.read_bytes()
    except OSError as exc:
        return [
            Finding(
                PARSE_ERROR.code,
                f"cannot read file: {exc.strerror or exc}",
                1,
                1,
                1,
                1,
                target.display,
            )
        ]
    if target.kind == "payload":
        return [f for f in lint_payload(data, target.display, config) if f.code in codes]
    return lint_source(data, target.display, config, codes)


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.name


def lint_targets(targets: list[Target], config: LintConfig, jobs: int = 1) -> Report:
    """Lint every target. With ``jobs`` = 1 (the default) the Python files are analysed as
    one project: calls into other modules of the run are followed (issue 28) and a root
    cause reaching prefixes in several files is one finding. ``jobs`` > 1 spreads files over
    worker processes, each file on its own."""
    report = Report(files=len(targets))
    gc_was = gc.isenabled()
    gc.disable()  # syntax trees are acyclic; collection passes only cost time here
    try:
        if jobs > 1 and len(targets) > 1:
            chunk = max(1, len(targets) // (jobs * 8))
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                for found in pool.map(_lint_one, [(t, config) for t in targets], chunksize=chunk):
                    report.findings.extend(found)
        else:
            report.findings.extend(lint_project(targets, config))
    finally:
        if gc_was:
            gc.enable()
    report.findings.sort(key=Finding.sort_key)
    return report


def lint_project(targets: list[Target], config: LintConfig) -> list[Finding]:
    """Findings for ``targets`` analysed together (see :func:`lint_targets`).

    A file without any word a rule looks for (:func:`linters.flow.tables.gate`) is only
    parsed; it is analysed when a call reaches into it, or when it names a function whose
    parameter reaches a cached prefix in another module (it may pass a clock to it)."""
    project = Project()
    found: list[Finding] = []
    analysed: list[tuple[Analysis, bytes, str, frozenset[str]]] = []
    lazy: list[tuple[_Lazy, bytes, str, frozenset[str]]] = []
    for t in targets:
        if t.kind != "python":
            found.extend(lint_target(t, config))
            continue
        rel = _rel(t.path, config.root)
        codes = config.codes_for(rel)
        try:
            source = t.path.read_bytes()
        except OSError:
            found.extend(lint_target(t, config))  # reports the read error
            continue
        tree = parse(source, t.display, codes)
        if isinstance(tree, list):
            found.extend(tree)
            continue
        if not gate(source):
            maker = _Lazy(tree, source, config)
            project.add(rel, maker, source)
            lazy.append((maker, source, t.display, codes))
            continue
        an = Analysis(tree, source, config)
        project.add(rel, an.ev, source)
        analysed.append((an, source, t.display, codes))
    for an, source, display, codes in analysed:
        found.extend(run_rules(an, source, display, codes))
    # (function name, its module's name): a file naming both may import and call it
    names = {
        (name.encode(), _module_word(an.ev.path))
        for an, *_ in analysed
        for name in an.ev.param_sink_names
    }
    for maker, source, display, codes in lazy:
        if names and any(n in source and m in source for n, m in names):
            project.make(maker)
            found.extend(run_rules(maker.analysis, source, display, codes))
    return merge_root_causes(found)


def _module_word(rel_path: str) -> bytes:
    """The name a module is imported by: ``pkg/llm.py`` -> ``llm``, ``pkg/__init__.py`` ->
    ``pkg``."""
    p = Path(rel_path)
    return (p.parent.name if p.stem == "__init__" else p.stem).encode()


class _Lazy:
    """Makes the analysis of a module only when it is needed (a call reaches into it)."""

    def __init__(self, tree: ast.Module, source: bytes, config: LintConfig) -> None:
        self.args = (tree, source, config)
        self.analysis: Any = None

    def __call__(self) -> Any:
        if self.analysis is None:
            self.analysis = Analysis(*self.args)
        return self.analysis.ev


def merge_root_causes(findings: list[Finding]) -> list[Finding]:
    """One finding per root cause across files: findings sharing an ``origin`` (the node
    that makes a volatile value) keep the first in path/line order; its message lists the
    other places."""
    groups: dict[int, list[Finding]] = {}
    out = []
    for f in sorted(findings, key=Finding.sort_key):
        if f.origin is None:
            out.append(f)
        else:
            groups.setdefault(f.origin, []).append(f)
    for same in groups.values():
        first = same[0]
        if len(same) > 1:
            where = ", ".join(f"{f.path}:{f.line}" for f in same[1:6])
            more = f" and {len(same) - 6} more" if len(same) > 6 else ""
            first.message += f" (the same value also reaches prefixes at {where}{more})"
        out.append(first)
    return out


def _lint_one(arg: Any) -> list[Finding]:
    target, config = arg
    return lint_target(target, config)
