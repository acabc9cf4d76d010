"""The prompt model: layers, canonical form, volatility, breakpoint plans and token estimates.

Owns what a prompt *is* before any provider sees it: the typed layers and blocks
(:mod:`~promptcache.prompt.layers`), RFC 8785 canonical JSON (:mod:`~promptcache.prompt.canonical`),
the detector of volatile values in frozen layers (:mod:`~promptcache.prompt.volatile`), where
cache breakpoints go and why (:mod:`~promptcache.prompt.breakpoints`) and token counts
(:mod:`~promptcache.prompt.tokens`). The bottom floor of the SDK: it may import only
``promptcache.errors``, ``promptcache.limits`` and ``promptcache.memo``.

``from promptcache.prompt import PromptLayers`` (the 0.1 module path) keeps working: the names of
the old ``promptcache/prompt.py`` are re-exported here.
"""

from __future__ import annotations

from promptcache.prompt.layers import (
    Document,
    ImageBlock,
    Message,
    NativeBlock,
    NativeTool,
    PromptLayers,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSchema,
    VolatileFinding,
)

__all__ = [
    "Document",
    "ImageBlock",
    "Message",
    "NativeBlock",
    "NativeTool",
    "PromptLayers",
    "TextBlock",
    "ToolCallBlock",
    "ToolResultBlock",
    "ToolSchema",
    "VolatileFinding",
]
