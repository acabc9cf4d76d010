"""promptcache: structure LLM prompts so provider prompt caches hit, and measure what they did.

Public names (contracts in DESIGN.md):

- ``build(...) -> Prompt``, ``Prompt``, ``VolatilePrefixError``, ``PromptCacheWarning``,
  ``EmptyRequestError`` (a renderer given a prompt with nothing to send)
- ``normalize_usage(provider, usage) -> Usage``, ``Usage``
- ``cost(usage, model=None, price=None) -> Cost``, ``Cost``, ``Price``
- ``check(payload, provider)``, ``Conversation``, ``PrefixMonitor``
- ``Tracker(path=None)``, ``wrap(client, tracker=None)``
- ``litellm_callback(tracker)`` (LiteLLM traffic into the ledger), ``CAUSES`` (the miss
  causes a ``Record.miss_cause`` takes)

The SDK never imports torch or ``local_engine``; attributes are resolved lazily so that
``import promptcache`` stays light.

The layout, one subpackage per capability, lowest floor first (``docs/DESIGN.md`` says why):
``prompt`` (the prompt model), ``providers`` (renderers and usage parsers), ``misses`` (miss
attribution), ``compose`` (``build``, ``check``), ``ledger`` (pricing, storage, queries),
``reports``, ``simulation``, ``integrations`` (``wrap``, LiteLLM, the pytest plugin, the demo),
then ``cli``. The 0.1 module paths (``promptcache.pricing``, ``promptcache.testing``, ...) still
import, with a ``DeprecationWarning``, until 0.3 (:mod:`promptcache._compat`).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "build": "promptcache.compose.build",
    "Prompt": "promptcache.compose.build",
    "VolatilePrefixError": "promptcache.errors",
    "PromptCacheWarning": "promptcache.errors",
    "EmptyRequestError": "promptcache.errors",
    "normalize_usage": "promptcache.providers.usage",
    "Usage": "promptcache.providers.usage_record",
    "cost": "promptcache.ledger.pricing",
    "Cost": "promptcache.ledger.pricing",
    "Price": "promptcache.ledger.pricing",
    "check": "promptcache.compose.check",
    "Conversation": "promptcache.compose.conversation",
    "PrefixMonitor": "promptcache.compose.monitor",
    "Tracker": "promptcache.ledger.tracker",
    "wrap": "promptcache.integrations.clients",
    "litellm_callback": "promptcache.integrations.litellm",
    "CAUSES": "promptcache.misses.cause",
}

__all__ = [
    "CAUSES",
    "Cost",
    "Conversation",
    "EmptyRequestError",
    "PrefixMonitor",
    "Price",
    "Prompt",
    "PromptCacheWarning",
    "Tracker",
    "Usage",
    "VolatilePrefixError",
    "build",
    "check",
    "cost",
    "litellm_callback",
    "normalize_usage",
    "wrap",
    "__version__",
]

# ``build`` and ``check`` name both a public function and a 0.1 module path. The modules are
# registered under their old names (a later ``import promptcache.build`` finds them in
# sys.modules and does not rebind the package attribute), then the functions are bound.
import sys as _sys  # noqa: E402

from promptcache import _compat  # noqa: E402
from promptcache.compose import build as _build_module  # noqa: E402
from promptcache.compose import check as _check_module  # noqa: E402

_sys.modules.setdefault("promptcache.build", _build_module)
_sys.modules.setdefault("promptcache.check", _check_module)
_compat.install()

from promptcache.compose.build import Prompt, build  # noqa: E402, F401
from promptcache.compose.check import check  # noqa: E402, F401


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'promptcache' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
