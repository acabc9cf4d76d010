"""One module per provider: request rendering and usage parsing."""

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
