"""Providers: render a prompt into each provider's request, and read each provider's usage back.

One module per provider and direction: ``anthropic``, ``openai``, ``openai_compatible``,
``gemini``, ``bedrock`` render a :class:`~promptcache.prompt.layers.PromptLayers` into the keyword
arguments of that provider's official client (cache markers placed); the ``*_usage`` modules
parse a response's usage (objects, dicts, streams) into the one :class:`Usage` record
(:mod:`~promptcache.providers.usage_record`), :mod:`~promptcache.providers.usage` dispatches
``normalize_usage(provider, usage)`` and :mod:`~promptcache.providers.usage_reconcile` cross-checks
OpenAI-style usage fields. May import the prompt model (``promptcache.prompt``) and the top-level
``errors``, ``limits`` and ``memo``; nothing that records, reports or simulates.
"""

from __future__ import annotations

from promptcache.errors import EmptyRequestError


def empty_request(provider: str, needs: str) -> EmptyRequestError:
    """The :class:`~promptcache.errors.EmptyRequestError` a renderer raises when the Prompt
    gives ``provider`` nothing to send; ``needs`` says what the provider requires (e.g.
    ``"at least one message"``)."""
    return EmptyRequestError(
        f"nothing to send: the {provider} API needs {needs}, and this Prompt has no history "
        "and no dynamic part; pass messages=[...] (the conversation so far) or dynamic=... "
        "(this request's question) to promptcache.build(...)"
    )
