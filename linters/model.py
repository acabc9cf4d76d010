"""Findings and rule metadata shared by the rules, the runner and the output formats."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DOCS_BASE = "linters/rule_pages"
# Severities, most severe first. ``error``: the API rejects the request; ``warning``: the
# cached prefix changes on every request (or every hour); ``info``: it changes once a day.
SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True, slots=True)
class Rule:
    """A lint rule: ``code`` (``PC001``), kebab-case ``name``, one-line ``summary``, whether
    ``--fix`` can repair it, and the documentation page's path in the repository."""

    code: str
    name: str
    summary: str
    fixable: bool = False
    severity: str = "warning"

    @property
    def doc(self) -> str:
        """Path of the rule's documentation page inside the ``linters`` package."""
        return f"{DOCS_BASE}/{self.code}.md"


@dataclass(slots=True)
class Finding:
    """One problem at one place.

    ``line``/``end_line`` are 1-based; ``col``/``end_col`` are 1-based character columns
    (the runner converts the parser's UTF-8 byte offsets). ``fix`` names an available
    automatic fix (``"sort_keys"``) or is None. ``severity`` is one of :data:`SEVERITIES`.
    """

    code: str
    message: str
    line: int
    col: int
    end_line: int
    end_col: int
    path: str = ""
    fix: str | None = None
    severity: str = "warning"
    # id() of the syntax node that makes the value (one finding per root cause across
    # files); None when the finding has no separate origin. Not part of any output.
    origin: int | None = None

    def sort_key(self) -> Any:
        return (self.path, self.line, self.col, self.code)
