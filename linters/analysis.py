"""The per-module context every rule reads: facts from the walk, the evaluator, the config,
and the hazards that reach a cached prefix (computed once, on first use)."""

from __future__ import annotations

import ast

from linters.config import LintConfig
from linters.flow.reach import Reach, reaches_of
from linters.flow.values import Evaluator
from linters.flow.walker import collect
from linters.model import Finding


class Analysis:
    """Facts and answers about one parsed module.

    ``reported`` holds ``id()`` of the syntax nodes already reported, so that a later rule
    of the same family does not report the same spot twice.
    """

    def __init__(self, tree: ast.Module, source: bytes, config: LintConfig):
        self.tree = tree
        self.source = source
        self.config = config
        self.facts = collect(tree, source)
        self.ev = Evaluator(self.facts, config.extra_volatile_calls)
        self._reaches: list[Reach] | None = None
        self.reported: set[int] = set()

    @property
    def reaches(self) -> list[Reach]:
        """Hazards reaching a cached prefix (see :func:`linters.flow.reach.prefix_reaches`)."""
        if self._reaches is None:
            self._reaches = reaches_of(self.ev)
        return self._reaches

    def finding(
        self,
        code: str,
        node: ast.AST,
        message: str,
        fix: str | None = None,
        severity: str = "warning",
    ) -> Finding:
        """A finding at ``node`` (columns still UTF-8 byte offsets; the runner converts)."""
        self.reported.add(id(node))
        line = getattr(node, "lineno", 1)
        end_line = getattr(node, "end_lineno", None) or line
        return Finding(
            code,
            message,
            line,
            getattr(node, "col_offset", 0),
            end_line,
            getattr(node, "end_col_offset", None) or 0,
            fix=fix,
            severity=severity,
        )
