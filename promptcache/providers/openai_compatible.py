"""Provider module: openai_compatible — renders requests for its official client and parses its usage.

Two sections, owned by different parts of the SDK: request rendering (used by
`promptcache.build`) and usage parsing (used by `promptcache.usage`).
"""

from __future__ import annotations

# --- request rendering ---------------------------------------------------------------
#
# Owned by promptcache.build (SDK-BUILD): ``render(prompt, model, ...)`` for servers that speak
# the OpenAI Chat Completions API with automatic prefix caching (vLLM, SGLang, the local
# engine). They cache by token prefix in fixed blocks (vLLM and the local engine: 16 tokens),
# so no cache markers are needed; what matters is that the frozen layers render to the same
# bytes every time, which ``promptcache.build`` guarantees.
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from promptcache.build import Prompt


def render(
    prompt: Prompt, model: str, *, cache_salt: str | None = None, api: str = "chat"
) -> dict[str, Any]:
    """Keyword arguments for ``OpenAI(base_url=...).chat.completions.create(**kw)`` against
    an OpenAI-compatible server.

    Fields: ``model``; ``messages`` as :func:`promptcache.providers.openai.chat_messages`
    (frozen system text first, session, history, ``dynamic`` last); ``tools`` in OpenAI form;
    ``extra_body={"cache_salt": cache_salt}`` when a salt is given (vLLM and the local engine
    mix it into the first block's hash, isolating one tenant's cache from another's). No
    ``prompt_cache_key``: these servers do not route by it.

    Raises:
        EmptyRequestError: (a ``ValueError``) no frozen or session text, no history and no
            ``dynamic``: ``messages`` would be empty.
        ValueError: ``api`` other than ``"chat"``, an empty ``cache_salt``, or content with
            no Chat Completions form.
    """
    from promptcache.providers import empty_request
    from promptcache.providers.openai import _tool_chat, chat_messages

    if api != "chat":
        raise ValueError(f"OpenAI-compatible servers are rendered for api='chat', got {api!r}")
    kw: dict[str, Any] = {"model": model, "messages": chat_messages(prompt)}
    if not kw["messages"]:
        raise empty_request("OpenAI-compatible Chat Completions", "a non-empty messages list")
    if prompt.tools:
        kw["tools"] = [_tool_chat(t) for t in prompt.tools]
    if cache_salt is not None:
        if not isinstance(cache_salt, str) or not cache_salt:
            raise ValueError("cache_salt must be a non-empty string")
        kw["extra_body"] = {"cache_salt": cache_salt}
    return kw


# --- usage parsing -------------------------------------------------------------------
#
# OpenAI-compatible servers answer in the Chat Completions shape; whether they report
# cached tokens depends on the server (docs checked 2026-11):
# - vLLM: ``prompt_tokens_details.cached_tokens`` only with ``--enable-prompt-tokens-details``
#   (docs.vllm.ai, "OpenAI-compatible server");
# - SGLang: only with ``--enable-cache-report`` (docs.sglang.ai, server arguments);
# - the local engine (``promptcache serve``): always.
# A missing field therefore means UNKNOWN (``cache_reported=False``, hit_rate None), not a
# miss. DeepSeek (api-docs.deepseek.com "Context caching", checked 2026-11) reports
# ``prompt_cache_hit_tokens`` + ``prompt_cache_miss_tokens`` = ``prompt_tokens``.


def parse_usage(data: dict, *, provider: str = "openai_compatible"):
    """Normalize a chat completion / usage from an OpenAI-compatible server or DeepSeek."""
    from promptcache.providers.openai import _usage_and_model, usage_from_chat_fields
    from promptcache.usage import Usage, UsageError, read_count

    usage, model = _usage_and_model(data)
    hit = read_count(usage, "prompt_cache_hit_tokens", where="usage")
    miss = read_count(usage, "prompt_cache_miss_tokens", where="usage")
    if hit is None and miss is None:
        return usage_from_chat_fields(usage, provider=provider, model=model)
    prompt = read_count(usage, "prompt_tokens", where="usage")
    hit, miss = hit or 0, miss or 0
    if prompt is not None and hit + miss != prompt:
        raise UsageError(
            f"inconsistent usage: prompt_cache_hit_tokens={hit} + "
            f"prompt_cache_miss_tokens={miss} != prompt_tokens={prompt}"
        )
    output = read_count(usage, "completion_tokens", where="usage") or 0
    from promptcache.usage import subpart

    reasoning = read_count(
        subpart(usage, "completion_tokens_details"),
        "reasoning_tokens",
        where="usage.completion_tokens_details",
    )
    return Usage(
        uncached_input_tokens=miss,
        cache_read_tokens=hit,
        output_tokens=output,
        reasoning_tokens=reasoning,
        provider=provider,
        model=model,
    )


def parse_usage_stream(events: list, *, provider: str = "openai_compatible"):
    """Normalize a streamed chat completion (the final chunk carries the usage)."""
    from promptcache.providers.openai import last_usage_event

    return parse_usage(last_usage_event(events), provider=provider)
