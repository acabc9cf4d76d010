"""Usage parsing for Gemini: the provider's usage report -> :class:`promptcache.Usage`.

Registered with :func:`promptcache.normalize_usage` in :mod:`promptcache.providers.usage`.
"""

from __future__ import annotations

from promptcache.errors import UsageError
from promptcache.providers.usage_record import Usage, check_part, read_count, subpart

# Gemini ``usageMetadata`` (ai.google.dev API reference "GenerateContentResponse" >
# UsageMetadata, and "Context caching", checked 2026-11): ``promptTokenCount`` INCLUDES
# ``cachedContentTokenCount`` ("when cached_content is set, this is still the total
# effective prompt size"); implicit and explicit cache hits both land in
# ``cachedContentTokenCount``. ``toolUsePromptTokenCount`` (tool-use prompts) is separate
# and billed as input; ``thoughtsTokenCount`` is billed as output, so output =
# candidates + thoughts. Gemini has no per-request cache write: explicit caches are
# created with ``caches.create`` and billed by storage time (see pricing). The REST API
# uses camelCase, the ``google-genai`` SDK snake_case; both are read. In a stream every
# chunk carries the running ``usageMetadata``; the last one is the total.


def _metadata(data: dict) -> tuple[dict, str | None]:
    for key in ("usageMetadata", "usage_metadata"):
        meta = subpart(data, key)
        if meta is not None:
            return dict(meta), data.get("modelVersion") or data.get("model_version")
    if any(k in data for k in ("promptTokenCount", "prompt_token_count")):
        return dict(data), None
    raise UsageError(
        "no Gemini usage found: expected a GenerateContentResponse with "
        "usageMetadata / usage_metadata, or the usage metadata itself"
    )


def parse_usage(data: dict, *, provider: str = "gemini") -> Usage:
    """Normalize a Gemini GenerateContentResponse / usage metadata (dict) to ``Usage``."""
    meta, model = _metadata(data)
    w = "usageMetadata"
    prompt = read_count(meta, "promptTokenCount", "prompt_token_count", where=w) or 0
    cached = read_count(meta, "cachedContentTokenCount", "cached_content_token_count", where=w) or 0
    tool = read_count(meta, "toolUsePromptTokenCount", "tool_use_prompt_token_count", where=w) or 0
    cand = read_count(meta, "candidatesTokenCount", "candidates_token_count", where=w) or 0
    thoughts = read_count(meta, "thoughtsTokenCount", "thoughts_token_count", where=w)
    check_part(cached, prompt, "cachedContentTokenCount", "promptTokenCount")
    return Usage(
        uncached_input_tokens=prompt - cached + tool,
        cache_read_tokens=cached,
        output_tokens=cand + (thoughts or 0),
        reasoning_tokens=thoughts,
        provider=provider,
        model=model,
    )


def parse_usage_stream(events: list, *, provider: str = "gemini") -> Usage:
    """Normalize a streamed generateContent: the last chunk with usage metadata wins."""
    for ev in reversed(events):
        if isinstance(ev, dict) and any(
            isinstance(ev.get(k), dict) for k in ("usageMetadata", "usage_metadata")
        ):
            return parse_usage(ev, provider=provider)
    raise UsageError("no chunk in the Gemini stream carries usageMetadata")
