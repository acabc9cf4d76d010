"""promptcache lint: static checks for code that busts prompt caches.

Run it as ``promptcache lint PATH...`` (or ``python -m linters``), as the pre-commit hook
``promptcache-lint``, or from Python::

    from linters import lint_source
    for finding in lint_source(open("app.py", "rb").read(), "app.py"):
        print(finding.code, finding.line, finding.message)

Codes, each documented by a page shipped in the package (``linters/rule_pages/``; print one
with ``promptcache lint --explain PC001``): PC001 volatile value in a cached prefix,
PC002 ``json.dumps`` without ``sort_keys=True`` in a prompt, PC003 set iteration in a
prompt, PC004 dynamic before static content, PC005 ``cache_control`` misuse, PC006 tools
from an input-ordered dict view, PC007 per-request value ahead of a long constant, PC008
breakpoint below the minimum cacheable length, PC009 breakpoint deleted by a clean-up loop
after it is set, PC010 breakpoint written into the caller's history at a moving position, PC011
``prompt_cache_key`` computed from the whole message list, PC012 text read from a property's
``str`` view of content blocks and assigned back (the setter drops a breakpoint among them),
PC013 rolling breakpoints only on user messages while the agent's turns are tool-role
messages, PC014 ``prompt_cache_key`` made from a clock, UUID or random value on every
request, PC015 a message converter dropping the message-level ``cache_control`` of a role
the project marks,
PC900 parse error, PC901 payload not checked.
The linter never imports torch or ``local_engine``.
"""

from __future__ import annotations

from collections.abc import Iterable
from os import PathLike

from linters.config import LintConfig
from linters.files import discover
from linters.model import Finding
from linters.rules import RULES
from linters.runner import Report, lint_source, lint_targets

__all__ = ["lint_source", "lint_paths", "Finding", "LintConfig", "RULES"]


def lint_paths(
    paths: Iterable[str | PathLike[str]], config: LintConfig | None = None, jobs: int = 1
) -> Report:
    """Lint files and folders as the command line does (with ``jobs`` = 1 the files are
    analysed as one project, calls between them followed); returns a
    :class:`linters.runner.Report`. Raises ``linters.files.PathNotFound`` for a missing path."""
    config = config or LintConfig()
    return lint_targets(discover([str(p) for p in paths], config), config, jobs=jobs)
