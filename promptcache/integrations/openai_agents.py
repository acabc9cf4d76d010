"""Record the OpenAI Agents SDK's model calls: its client setting, with a wrapped client.

::

    from promptcache.integrations.openai_agents import track_agents

    track_agents(tracker, base_url=..., api_key=...)   # before Runner.run(...)

The Agents SDK (``openai-agents`` 0.24) sends every model call through one default
``openai.AsyncOpenAI`` (``agents.set_default_openai_client``). :func:`track_agents` wraps
that client (:func:`promptcache.wrap`) and installs it, so every agent, handoff and
sub-agent run is recorded -- ``Runner.run``, ``run_sync`` and ``run_streamed`` alike -- with
the lineage found by shared prefix (an agent's turns, its parallel tool calls and its
sub-agents each continue their own conversation). It also picks the API the models speak:
the SDK's default is the Responses API; ``api="chat_completions"`` is needed for servers that
serve only Chat Completions (the local engine, most OpenAI-compatible servers).

Streams: the SDK asks for usage in streamed Chat Completions only for OpenAI's own host
(``agents/models/chatcmpl_helpers.py``: ``include_usage`` defaults to True only when the
client is OpenAI's). Against another base URL pass ``ModelSettings(include_usage=True)``, or
the calls are recorded with usage unknown (and one warning says so).

Tracing: the client is installed with ``use_for_tracing=False``: the SDK's trace export
keeps its own key, and trace spans never reach the ledger twice.
"""

from __future__ import annotations

from typing import Any

__all__ = ["track_agents"]


def track_agents(
    tracker: Any = None,
    *,
    client: Any = None,
    api: str = "chat_completions",
    base_url: str | None = None,
    api_key: str | None = None,
    **wrap_options: Any,
) -> Any:
    """Make the Agents SDK send through a tracked ``AsyncOpenAI``; returns that client.

    Args:
        tracker: the ledger (:func:`promptcache.wrap`'s ``tracker``).
        client: an ``openai.AsyncOpenAI`` to use (default: a new one with ``base_url`` and
            ``api_key``, else the environment's ``OPENAI_BASE_URL``/``OPENAI_API_KEY``).
        api: ``"chat_completions"`` (default) or ``"responses"`` (the SDK's own default;
            OpenAI's hosted API serves both).
        base_url, api_key: for the new client when ``client`` is None.
        **wrap_options: more :func:`promptcache.wrap` keywords (``rules``, ``session``,
            ``price``, ``metadata``, ...).

    Raises:
        ValueError: ``api`` is neither value.
        ImportError: ``openai-agents`` is not installed (the ``[frameworks]`` extra).
    """
    if api not in ("chat_completions", "responses"):
        raise ValueError(f"api={api!r}: use 'chat_completions' or 'responses'")
    import agents
    import openai

    from promptcache.integrations.clients import wrap

    if client is None:
        client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key)
    wrap(client, tracker, **wrap_options)
    agents.set_default_openai_client(client, use_for_tracing=False)
    agents.set_default_openai_api(api)  # type: ignore[arg-type]
    return client
