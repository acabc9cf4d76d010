"""The provider figures quoted in the rule pages (``linters/rule_pages/*.md``, shipped in the package), generated from
:mod:`promptcache.limits` so that a page cannot drift from the table the linter reads.

A page marks each generated part with a pair of HTML comments::

    <!-- limits:anthropic-misuse -->
    ...generated text...
    <!-- /limits:anthropic-misuse -->

``python -m linters.rule_docs [DOCS_DIR]`` rewrites those parts in place (default
``linters/rule_pages``); ``tests/linters/test_rule_docs.py`` fails when a page differs from what
this module would write.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from promptcache.limits import (
    ANTHROPIC_DEFAULT_MIN_TOKENS,
    ANTHROPIC_MAX_BREAKPOINTS,
    ANTHROPIC_TTLS,
    MODEL_LIMITS,
    READ_ON,
    SRC_ANTHROPIC,
)

__all__ = ["BLOCKS", "PAGES", "regenerate", "main", "page"]

#: the rule pages, package data of ``linters`` (``rule_pages/*.md``)
PAGES = Path(__file__).resolve().parent / "rule_pages"


def page(code: str) -> str:
    """The text of rule ``code``'s page as installed with the package.

    Raises:
        KeyError: no page for ``code``.
    """
    path = PAGES / f"{code.upper()}.md"
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        raise KeyError(code) from None


def _anthropic_misuse() -> str:
    """PC005's list of the rules a literal request breaks."""
    ttls = " or ".join(f'`"{t}"`' for t in ANTHROPIC_TTLS)
    return "\n".join(
        [
            f"- more than **{ANTHROPIC_MAX_BREAKPOINTS}** breakpoints, counted tools -> system "
            "-> messages;",
            f'- a `"ttl": "{ANTHROPIC_TTLS[1]}"` breakpoint **after** a 5-minute one (longer '
            "TTLs must come first);",
            f'- a TTL other than {ttls}, or a `type` other than `"ephemeral"`.',
        ]
    )


def _anthropic_minimums() -> str:
    """PC008's table: Anthropic model families by minimum cacheable length."""
    by_minimum: dict[int, list[str]] = {}
    for row in MODEL_LIMITS:
        if row.provider == "anthropic":
            by_minimum.setdefault(row.min_tokens, []).append(f"`{row.family}`")
    lines = ["| minimum (tokens) | Anthropic model families (name prefix) |", "|---:|---|"]
    for minimum in sorted(by_minimum):
        lines.append(f"| {minimum:,} | {', '.join(by_minimum[minimum])} |")
    lines.append("")
    notes = [
        f"`{row.family}`: {row.notes}"
        for row in MODEL_LIMITS
        if row.provider == "anthropic" and row.notes
    ]
    if notes:
        lines.append("Notes:")
        lines.append("")
        lines.extend(f"- {note}." for note in notes)
        lines.append("")
    lines.append(
        f"A model not in the table is held to at most {ANTHROPIC_DEFAULT_MIN_TOKENS:,} tokens. "
        f'Sources: Anthropic, "Prompt caching", <{SRC_ANTHROPIC}>, and the pages each row of '
        f"`promptcache.limits.MODEL_LIMITS` cites, read {READ_ON}."
    )
    return "\n".join(lines)


def _anthropic_max_breakpoints() -> str:
    """PC010's sentence on the breakpoint limit."""
    return (
        f"Anthropic accepts at most **{ANTHROPIC_MAX_BREAKPOINTS}** breakpoints in one request "
        f'(Anthropic, "Prompt caching", <{SRC_ANTHROPIC}>, read {READ_ON}).'
    )


#: block name -> function writing its text (without the marker comments)
BLOCKS: dict[str, Callable[[], str]] = {
    "anthropic-misuse": _anthropic_misuse,
    "anthropic-max-breakpoints": _anthropic_max_breakpoints,
    "anthropic-minimums": _anthropic_minimums,
}

_BLOCK = re.compile(r"(<!-- limits:([a-z-]+) -->\n)(.*?)(<!-- /limits:\2 -->)", re.DOTALL)


def regenerate(text: str) -> str:
    """``text`` (a rule page) with every generated block rewritten.

    Raises:
        KeyError: a marker names a block that :data:`BLOCKS` does not know.
    """

    def fill(m: re.Match[str]) -> str:
        return f"{m.group(1)}{BLOCKS[m.group(2)]()}\n{m.group(4)}"

    return _BLOCK.sub(fill, text)


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the generated blocks of every ``*.md`` under ``DOCS_DIR``; print the changed
    files. Exit code 0."""
    args = list(sys.argv[1:] if argv is None else argv)
    root = Path(args[0]) if args else PAGES
    for path in sorted(root.glob("*.md")):
        old = path.read_text(encoding="utf-8")
        new = regenerate(old)
        if new != old:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
