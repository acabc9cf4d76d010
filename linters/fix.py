"""Safe automatic fixes, applied with libcst so that comments and formatting survive.

PC002: add ``sort_keys=True`` to the ``json.dumps(...)`` call a finding points at. A call
that spans lines and ends with a trailing comma gets the new argument on its own line with
the same indentation; a one-line call gets ``, sort_keys=True``.
"""

from __future__ import annotations

import difflib
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from linters.model import Finding


def _sort_keys_arg(comma: Any = cst.MaybeSentinel.DEFAULT) -> cst.Arg:
    return cst.Arg(
        keyword=cst.Name("sort_keys"),
        value=cst.Name("True"),
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
        comma=comma,
    )


def add_sort_keys(call: cst.Call) -> cst.Call:
    """``call`` with ``sort_keys=True`` appended, following the call's own layout."""
    args = list(call.args)
    if not args:
        return call.with_changes(args=[_sort_keys_arg()])
    last = args[-1]
    if not isinstance(last.comma, cst.Comma):
        args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(_sort_keys_arg())
    else:
        trailing = last.comma
        if len(args) >= 2 and isinstance(args[-2].comma, cst.Comma):
            sep = args[-2].comma
        elif isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
            sep = cst.Comma(whitespace_after=call.whitespace_before_args)
        else:
            sep = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        tw, sw = trailing.whitespace_after, sep.whitespace_after
        if isinstance(tw, cst.ParenthesizedWhitespace) and isinstance(
            sw, cst.ParenthesizedWhitespace
        ):
            # keep a comment after the old last argument on its line, continue with the
            # indentation of the other arguments, and close as before
            sep = trailing.with_changes(
                whitespace_after=sw.with_changes(
                    first_line=tw.first_line, empty_lines=tw.empty_lines
                )
            )
            trailing = trailing.with_changes(
                whitespace_after=tw.with_changes(
                    first_line=cst.TrailingWhitespace(), empty_lines=[]
                )
            )
        args[-1] = last.with_changes(comma=sep)
        args.append(_sort_keys_arg(trailing))
    return call.with_changes(args=args)


class _SortKeys(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, targets: set[tuple[int, int]]) -> None:
        super().__init__()
        self.targets = targets
        self.applied = 0

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
        pos = self.get_metadata(PositionProvider, original).start
        if (pos.line, pos.column + 1) in self.targets:
            self.applied += 1
            return add_sort_keys(updated)
        return updated


def fix_source(source: bytes, findings: list[Finding]) -> tuple[bytes, int]:
    """Apply the fixes of ``findings`` (those with ``fix == "sort_keys"``) to ``source``.

    Returns the new bytes and how many fixes were applied (0 and the input unchanged when
    none applies or libcst cannot parse the file).
    """
    targets = {(f.line, f.col) for f in findings if f.fix == "sort_keys"}
    if not targets:
        return source, 0
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return source, 0
    transformer = _SortKeys(targets)
    new = MetadataWrapper(module).visit(transformer)
    if not transformer.applied:
        return source, 0
    return new.bytes, transformer.applied


def unified_diff(path: str, before: bytes, after: bytes) -> str:
    """A unified diff of one file's fix, ``a/``/``b/`` prefixed like ``git diff``."""
    a = before.decode("utf-8", errors="replace").splitlines(keepends=True)
    b = after.decode("utf-8", errors="replace").splitlines(keepends=True)
    return "".join(difflib.unified_diff(a, b, f"a/{path}", f"b/{path}"))
