"""What to tell a user whose calls come back without usage, so the ledger can count them.

A streamed Chat Completions response carries usage only when the request asked for it
(``stream_options={"include_usage": True}``: the last chunk then has ``usage`` and empty
``choices``; OpenAI API reference, "Create chat completion", ``stream_options``, read
2026-12-03). Anthropic's Messages stream always ends with ``message_delta`` usage, and the
Responses stream with ``response.completed``; a call without usage there is the server's
omission, which the client cannot ask for. The frameworks' own switches are named so the
warning can be acted on where the request is built.
"""

from __future__ import annotations

__all__ = ["no_usage_advice"]


def no_usage_advice(api: str, stream: bool) -> str:
    """One warning text for a call of ``api`` (``"chat.completions"``, ``"messages"``, ...)
    whose response carried no usage; ``stream``: it was streamed."""
    head = (
        "promptcache: a call came back without usage; it is recorded with usage unknown "
        "(no cost, no cause) and `promptcache report` counts it apart from the hit rate. "
    )
    if stream and api in ("chat.completions", "completions"):
        return head + (
            "Ask for usage in streams: stream_options={'include_usage': True} "
            "(openai client), ChatOpenAI(stream_usage=True) (LangChain), "
            "ModelSettings(include_usage=True) (OpenAI Agents SDK), "
            "litellm.completion(..., stream_options={'include_usage': True}). "
            "This warning is given once per wrapped client."
        )
    return head + (
        f"The {api} response should carry usage: the server omitted it, which the client "
        "cannot ask for. This warning is given once per wrapped client."
    )
