"""Normalized token usage across providers: what was read from the cache, written to it,
and processed uncached.

Every provider counts differently; :func:`normalize_usage` maps each one's own usage report
onto one :class:`Usage` so that hit rate and cost mean the same thing everywhere:

==================  =========================================  =============================
provider            its input count                            source
==================  =========================================  =============================
anthropic           ``input_tokens`` EXCLUDES cache reads and  docs.anthropic.com, "Prompt
                    writes (total = input + read + creation)   caching" (checked 2026-11)
bedrock (Converse)  ``inputTokens`` EXCLUDES cacheRead/Write   docs.aws.amazon.com bedrock
                                                               "Prompt caching" (2026-11)
openai (chat)       ``prompt_tokens`` INCLUDES ``cached_tokens`` platform.openai.com, "Prompt
openai (responses)  ``input_tokens`` INCLUDES ``cached_tokens``  caching" (2026-11)
gemini              ``promptTokenCount`` INCLUDES               ai.google.dev "Context
                    ``cachedContentTokenCount``                caching" (2026-11)
deepseek            ``prompt_tokens`` = hit + miss             api-docs.deepseek.com "Context
                                                               caching" (2026-11)
openai_compatible   like openai chat; cached reported only     docs.vllm.ai (``--enable-
(vLLM, SGLang,      when the server is started with the flag   prompt-tokens-details``);
local engine)       for it: a missing field means UNKNOWN      SGLang ``--enable-cache-report``
==================  =========================================  =============================

The parsers live in ``promptcache.providers.<provider>_usage`` (one module per provider);
this module converts SDK objects to plain data and dispatches through :data:`PARSERS`, a
registry of the parser callables. The record itself is :mod:`promptcache.providers.usage_record`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from promptcache.errors import UsageError
from promptcache.providers import (
    anthropic_usage,
    bedrock_usage,
    gemini_usage,
    litellm_usage,
    openai_compatible_usage,
    openai_usage,
    selfhosted_usage,
)
from promptcache.providers.usage_record import CACHE_NOT_REPORTED, WRITE_TTL_ASSUMED, Usage

__all__ = [
    "Usage",
    "normalize_usage",
    "PARSERS",
    "PROVIDERS",
    "UsageParser",
    "to_plain",
    "CACHE_NOT_REPORTED",
    "WRITE_TTL_ASSUMED",
]


class UsageParser(NamedTuple):
    """One provider's parsers: ``parse(data, provider=...)`` for a response or usage dict,
    ``parse_stream(events, provider=...)`` for a list of stream events (plain data)."""

    parse: Callable[..., Usage]
    parse_stream: Callable[..., Usage]


def _parser(module: Any) -> UsageParser:
    return UsageParser(module.parse_usage, module.parse_usage_stream)


_ANTHROPIC = _parser(anthropic_usage)
_BEDROCK = _parser(bedrock_usage)
_OPENAI = _parser(openai_usage)
_GEMINI = _parser(gemini_usage)
_OPENAI_COMPATIBLE = _parser(openai_compatible_usage)
_SELFHOSTED = _parser(selfhosted_usage)
_LITELLM = _parser(litellm_usage)

#: provider name (as accepted by :func:`normalize_usage`) -> its parsers
PARSERS: Mapping[str, UsageParser] = {
    "anthropic": _ANTHROPIC,
    "bedrock": _BEDROCK,
    "openai": _OPENAI,
    "azure_openai": _OPENAI,
    "gemini": _GEMINI,
    "vertex": _GEMINI,
    "deepseek": _OPENAI_COMPATIBLE,
    # the self-hosted parser reads the chat fields first, then each server's own
    "openai_compatible": _SELFHOSTED,
    "local": _SELFHOSTED,
    "vllm": _SELFHOSTED,
    "sglang": _SELFHOSTED,
    "llamacpp": _SELFHOSTED,
    "ollama": _SELFHOSTED,
    "tgi": _SELFHOSTED,
    "litellm": _LITELLM,
}
#: the provider names :func:`normalize_usage` accepts
PROVIDERS: tuple[str, ...] = tuple(PARSERS)


# --- conversion of SDK objects to plain data ------------------------------------------


def to_plain(obj: Any) -> Any:
    """Convert a provider SDK object (pydantic v2/v1 model, dataclass, object with
    ``__dict__``) to plain dicts/lists, recursively. Dicts and scalars pass through."""
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if isinstance(obj, Mapping):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    dump = getattr(obj, "model_dump", None)
    if callable(dump):  # pydantic v2 (openai, anthropic, google-genai)
        try:
            return to_plain(dump(mode="python", by_alias=False, exclude_none=False))
        except TypeError:
            return to_plain(dump())
    legacy = getattr(obj, "dict", None)
    if callable(legacy) and hasattr(obj, "__fields__"):  # pydantic v1
        return to_plain(legacy())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_plain(dataclasses.asdict(obj))
    to_dict = getattr(obj, "to_dict", None)  # google protobuf-style wrappers
    if callable(to_dict):
        return to_plain(to_dict())
    if hasattr(obj, "__dict__"):
        return {k: to_plain(v) for k, v in vars(obj).items() if not k.startswith("_")}
    raise UsageError(f"cannot read a usage from a {type(obj).__name__}")


def _is_stream(obj: Any) -> bool:
    """A list/tuple/iterator of events, as opposed to one response or usage object
    (pydantic models are iterable over their fields, so they are excluded)."""
    if isinstance(obj, (str, bytes, Mapping)) or hasattr(obj, "model_dump"):
        return False
    return isinstance(obj, (list, tuple)) or hasattr(obj, "__iter__")


def normalize_usage(
    provider: str, usage: Any, *, model: str | None = None, prompt_tokens: int | None = None
) -> Usage:
    """Normalize one request's usage as reported by ``provider``.

    ``provider``: one of ``"anthropic"``, ``"openai"`` (Chat Completions or Responses,
    told apart by their fields), ``"azure_openai"``, ``"gemini"``/``"vertex"``,
    ``"bedrock"`` (Converse, ConverseStream, or InvokeModel with an Anthropic body),
    ``"deepseek"``, ``"openai_compatible"``/``"local"``/``"vllm"``/``"sglang"``.

    ``usage``: the official client's response object or its usage object (pydantic models
    are read through ``model_dump``), the same as a JSON dict, a ``Usage`` (returned
    as is), or a stream: a list/iterable of events or chunks (Anthropic ``message_start``
    + ``message_delta``; OpenAI chunks where the last carries ``usage`` with
    ``stream_options={"include_usage": True}``; Responses ``response.completed``; Gemini
    chunks; Bedrock ConverseStream ``metadata``). A stream iterator is consumed. Also
    ``"litellm"`` (its ``ModelResponse`` for any underlying provider,
    :mod:`promptcache.providers.litellm_usage`) and the self-hosted servers ``"llamacpp"``,
    ``"ollama"``, ``"tgi"`` (:mod:`promptcache.providers.selfhosted_usage`).

    ``prompt_tokens``: the prompt length when the caller knows it, for servers that report
    only the tokens they evaluated (Ollama's native API); ignored by the others.

    Returns a :class:`Usage` (``model`` filled from the response when present).
    Raises :class:`~promptcache.errors.UsageError` for an unknown provider, a payload
    with no usage in it, or inconsistent counts (negative, cached more than the total).
    """
    if isinstance(usage, Usage):
        return usage
    key = (provider or "").lower().replace("-", "_")
    parser = PARSERS.get(key)
    if parser is None:
        raise UsageError(
            f"unknown provider {provider!r}; expected one of {', '.join(sorted(PARSERS))}"
        )
    if usage is None:
        raise UsageError(f"no usage given for provider {provider!r}")
    extra: dict[str, Any] = {}
    if prompt_tokens is not None and parser is _SELFHOSTED:
        extra["prompt_tokens"] = prompt_tokens
    if _is_stream(usage):
        events = [to_plain(e) for e in usage]
        if not events:
            raise UsageError("empty stream: no events to read a usage from")
        result = parser.parse_stream(events, provider=key, **extra)
    else:
        result = parser.parse(to_plain(usage), provider=key, **extra)
    if model is not None and result.model is None:
        result = result.replace(model=model)
    return result
