"""Old module paths (promptcache 0.1's flat layout) that still import, with a deprecation warning.

promptcache 0.2 groups the SDK into subpackages by capability (see ``docs/DESIGN.md``, "The SDK's
layout"). A user who imports an old path, e.g. ``from promptcache.pricing import Price``, gets the
module at its new path (the same module object, so classes and patches are shared) and one
``DeprecationWarning`` naming the new path. The old paths are removed in 0.3.

Two old paths are not listed here: ``promptcache.ledger`` and ``promptcache.prompt`` are now
packages that re-export what the old modules exported, so they keep working without a warning.
``promptcache.build`` and ``promptcache.check`` name both the public functions and the old
modules; ``promptcache/__init__.py`` registers them, without a warning, because the package
attribute must stay the function.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

# old module path -> new module path
MOVED: dict[str, str] = {
    "promptcache.canonical": "promptcache.prompt.canonical",
    "promptcache.volatile": "promptcache.prompt.volatile",
    "promptcache.breakpoints": "promptcache.prompt.breakpoints",
    "promptcache.tokens": "promptcache.prompt.tokens",
    "promptcache.usage": "promptcache.providers.usage",
    "promptcache.usage_record": "promptcache.providers.usage_record",
    "promptcache.usage_reconcile": "promptcache.providers.usage_reconcile",
    "promptcache.explain": "promptcache.compose.explain",
    "promptcache.conversation": "promptcache.compose.conversation",
    "promptcache.monitor": "promptcache.compose.monitor",
    "promptcache.digest_chain": "promptcache.misses.digest_chain",
    "promptcache.miss_locate": "promptcache.misses.locate",
    "promptcache.miss_cause": "promptcache.misses.cause",
    "promptcache.attribution": "promptcache.misses.attribution",
    "promptcache.pricing": "promptcache.ledger.pricing",
    "promptcache.summary_table": "promptcache.ledger.summary_table",
    "promptcache.reprice": "promptcache.reports.reprice",
    "promptcache.export": "promptcache.reports.export",
    "promptcache.report": "promptcache.reports.report",
    "promptcache.report_html": "promptcache.reports.html",
    "promptcache.report_misses": "promptcache.reports.misses",
    "promptcache.cache_emulation": "promptcache.simulation.emulation",
    "promptcache.simulate": "promptcache.simulation.simulate",
    "promptcache.simulate_ledger": "promptcache.simulation.from_ledger",
    "promptcache.clients": "promptcache.integrations.clients",
    "promptcache.clients_bedrock": "promptcache.integrations.bedrock",
    "promptcache.litellm_callback": "promptcache.integrations.litellm",
    "promptcache.testing": "promptcache.integrations.pytest_plugin",
    "promptcache.demo": "promptcache.integrations.demo",
    "promptcache.demo_workload": "promptcache.integrations.demo_workload",
}

REMOVED_IN = "0.3"


class _AliasLoader(importlib.abc.Loader):
    """Loads an old path as the already-imported module at its new path."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was executed under its new name. The import system has just
        set ``module.__spec__`` to the old path's spec; the module's own spec is put back."""
        module.__spec__ = self._spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old module paths of :data:`MOVED`; every other name is left to the next finder."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        warnings.warn(
            f"{fullname} moved to {new}; the old path is removed in promptcache {REMOVED_IN}",
            DeprecationWarning,
            stacklevel=_caller_level(),
        )
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


def _caller_level() -> int:
    """The stack level of the first frame outside importlib, so the warning names the importer."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and (
        frame.f_code.co_filename.startswith("<frozen importlib")
        or frame.f_code.co_filename == __file__
    ):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (idempotent)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
