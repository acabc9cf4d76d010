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
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "build": "promptcache.build",
    "Prompt": "promptcache.build",
    "VolatilePrefixError": "promptcache.errors",
    "PromptCacheWarning": "promptcache.errors",
    "EmptyRequestError": "promptcache.errors",
    "normalize_usage": "promptcache.usage",
    "Usage": "promptcache.usage_record",
    "cost": "promptcache.pricing",
    "Cost": "promptcache.pricing",
    "Price": "promptcache.pricing",
    "check": "promptcache.check",
    "Conversation": "promptcache.conversation",
    "PrefixMonitor": "promptcache.monitor",
    "Tracker": "promptcache.ledger",
    "wrap": "promptcache.clients",
    "litellm_callback": "promptcache.litellm_callback",
    "CAUSES": "promptcache.miss_cause",
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

# ``build`` and ``check`` name both a submodule and a function. Importing the functions here,
# eagerly, binds the package attributes to the functions once the submodules have loaded
# (a later ``import promptcache.build`` does not rebind them).
from promptcache.build import Prompt, build  # noqa: E402, F401
from promptcache.check import check  # noqa: E402, F401


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'promptcache' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
