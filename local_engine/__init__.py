"""promptcache's local engine: a Llama-family model served with a paged KV cache, automatic
prefix caching and continuous batching (contracts: "Engine contracts" in ``docs/DESIGN.md``).

Public names::

    from local_engine import LLM, SamplingParams, RequestOutput, CompletionOutput, EngineConfig
    from local_engine.engine import LLMEngine
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "LLM": "local_engine.llm",
    "LLMEngine": "local_engine.engine",
    "SamplingParams": "local_engine.sampling",
    "RequestOutput": "local_engine.outputs",
    "CompletionOutput": "local_engine.outputs",
    "RequestMetrics": "local_engine.outputs",
    "EngineConfig": "local_engine.config",
    "EngineMetrics": "local_engine.metrics",
    "EngineError": "local_engine.errors",
    "RequestTooLongError": "local_engine.errors",
    "ModelNotFoundError": "local_engine.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'local_engine' has no attribute {name!r}")
