"""Exceptions and warnings raised by the SDK."""

from __future__ import annotations


class PromptCacheError(Exception):
    """Base class of every error the SDK raises."""


class VolatilePrefixError(PromptCacheError, ValueError):
    """A volatile value (timestamp, date, UUID, request id) was found in a frozen or
    semi-stable layer under ``strict=True``; the message names the layer, the character
    offset and the matched text."""


class PromptCacheWarning(UserWarning):
    """Warned instead of raising :class:`VolatilePrefixError` when ``strict=False``, and for
    other cache-hostile structure the SDK can still render."""


class UsageError(PromptCacheError, ValueError):
    """A usage payload is malformed or inconsistent (negative counts, cached > total)."""


class PricingError(PromptCacheError, LookupError):
    """No price is known for a model, or a needed price (such as a 1h write) is missing."""


class EmptyRequestError(PromptCacheError, ValueError):
    """A renderer (``Prompt.to_anthropic``, ``to_bedrock``, ``to_gemini``, ``to_openai``,
    ``to_openai_compatible``) was asked for a request with nothing to send: the Prompt has no
    history and no ``dynamic`` part, and the provider needs a message (Anthropic, Bedrock,
    Gemini: at least one; OpenAI: a non-empty ``messages``/``input``). The message names the
    provider and what to add (``messages=`` or ``dynamic=`` in ``promptcache.build``).
    Building such a prefix-only Prompt is not an error: ``prefix_hash``, ``explain()`` and
    Gemini's ``cached_content_config`` use the frozen layers alone."""
