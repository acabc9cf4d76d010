"""Request rendering for OpenAI-compatible servers (vLLM, SGLang, the local engine): a :class:`promptcache.prompt.layers.PromptLayers` -> the keyword
arguments of the official client's call. Usage parsing is in :mod:`promptcache.providers.openai_compatible_usage`.
"""

from __future__ import annotations

from typing import Any

from promptcache.prompt.layers import PromptLayers
from promptcache.providers import empty_request
from promptcache.providers.openai import chat_messages, chat_tool


def render(
    prompt: PromptLayers, model: str, *, cache_salt: str | None = None, api: str = "chat"
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
    if api != "chat":
        raise ValueError(f"OpenAI-compatible servers are rendered for api='chat', got {api!r}")
    kw: dict[str, Any] = {"model": model, "messages": chat_messages(prompt)}
    if not kw["messages"]:
        raise empty_request("OpenAI-compatible Chat Completions", "a non-empty messages list")
    if prompt.tools:
        kw["tools"] = [chat_tool(t) for t in prompt.tools]
    if cache_salt is not None:
        if not isinstance(cache_salt, str) or not cache_salt:
            raise ValueError("cache_salt must be a non-empty string")
        kw["extra_body"] = {"cache_salt": cache_salt}
    return kw
