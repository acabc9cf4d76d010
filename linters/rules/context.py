"""What a rule family's ``check(an)`` reads about one module: the interface that
:class:`linters.analysis.Analysis` implements.

A protocol rather than the class itself, so that the rules depend on the flow analysis
(:mod:`linters.flow`) and not on ``linters.analysis``, which depends on ``linters.config``,
which validates rule codes against :mod:`linters.rules` (that import would close a circle).
"""

from __future__ import annotations

import ast
from typing import Any, Protocol

from linters.flow.facts import ModuleFacts
from linters.flow.reach import Reach
from linters.flow.values import Evaluator
from linters.model import Finding

__all__ = ["RuleContext"]


class RuleContext(Protocol):
    """Facts and answers about one parsed module (see :class:`linters.analysis.Analysis`).

    Attributes:
        facts: what the walk collected (:class:`linters.flow.facts.ModuleFacts`).
        source: the module's bytes.
        ev: the evaluator of expressions (:class:`linters.flow.values.Evaluator`).
        config: the :class:`linters.config.LintConfig` in force (typed ``Any`` here: see the
            module docstring).
        reported: ``id()`` of the syntax nodes already reported.
    """

    facts: ModuleFacts
    source: bytes
    ev: Evaluator
    config: Any
    reported: set[int]

    @property
    def reaches(self) -> list[Reach]:
        """Hazards reaching a cached prefix."""
        ...

    def finding(
        self,
        code: str,
        node: ast.AST,
        message: str,
        fix: str | None = None,
        severity: str = "warning",
    ) -> Finding:
        """A finding at ``node``, recorded in :attr:`reported`."""
        ...
