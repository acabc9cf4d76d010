"""Record pydantic-ai's model calls: a provider whose SDK client is wrapped.

::

    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from promptcache.integrations.pydantic_ai import tracked_provider

    provider = tracked_provider("openai", tracker, base_url=..., api_key=...)
    agent = Agent(OpenAIChatModel("gpt-4.1", provider=provider))

pydantic-ai (``pydantic-ai-slim`` 2.68) takes the official SDK client through its providers
(``OpenAIProvider(openai_client=...)``, ``AnthropicProvider(anthropic_client=...)``), so a
client wrapped with :func:`promptcache.wrap` records every call the agent makes: runs,
streamed runs (pydantic-ai asks for ``include_usage`` in Chat Completions streams), tool
loops and agents delegating to other agents, with the lineage found by shared prefix.
"""

from __future__ import annotations

from typing import Any

__all__ = ["tracked_provider"]


def tracked_provider(
    kind: str,
    tracker: Any = None,
    *,
    client: Any = None,
    base_url: str | None = None,
    api_key: str | None = None,
    **wrap_options: Any,
) -> Any:
    """A pydantic-ai provider whose SDK client records into ``tracker``.

    Args:
        kind: ``"openai"`` (``OpenAIProvider``: OpenAI and compatible servers) or
            ``"anthropic"`` (``AnthropicProvider``).
        tracker: the ledger (:func:`promptcache.wrap`'s ``tracker``).
        client: an ``openai.AsyncOpenAI`` / ``anthropic.AsyncAnthropic`` to wrap (default: a
            new one with ``base_url`` and ``api_key``).
        base_url, api_key: for the new client when ``client`` is None.
        **wrap_options: more :func:`promptcache.wrap` keywords (``rules``, ``session``, ...).

    Raises:
        ValueError: an unknown ``kind``.
        ImportError: ``pydantic-ai-slim`` (with its ``openai``/``anthropic`` extra) is not
            installed (the ``[frameworks]`` extra).
    """
    from promptcache.integrations.clients import wrap

    if kind == "openai":
        import openai
        from pydantic_ai.providers.openai import OpenAIProvider

        sdk = client or openai.AsyncOpenAI(base_url=base_url, api_key=api_key)
        return OpenAIProvider(openai_client=wrap(sdk, tracker, **wrap_options))
    if kind == "anthropic":
        import anthropic
        from pydantic_ai.providers.anthropic import AnthropicProvider

        sdk = client or anthropic.AsyncAnthropic(base_url=base_url, api_key=api_key)
        return AnthropicProvider(anthropic_client=wrap(sdk, tracker, **wrap_options))
    raise ValueError(f"kind={kind!r}: use 'openai' or 'anthropic'")
