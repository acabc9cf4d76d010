"""Tracking installed on an httpx client: the one place every wrapped client is hooked.

``promptcache.wrap()`` hooks the ``httpx.Client`` / ``httpx.AsyncClient`` (or ``httpx2``'s)
an SDK sends with; it also takes such a client directly, which is the injection point most
frameworks and both official SDKs offer::

    http = promptcache.wrap(httpx.Client(), tracker)
    client = openai.OpenAI(http_client=http)            # or anthropic.Anthropic(http_client=...)
    llm = ChatOpenAI(model=..., http_client=http)         # LangChain

A request hook and a response hook are appended to the client's public ``event_hooks``
(once: wrapping a client again for the same tracker is a no-op). The provider label is
taken per request from its host (:func:`~promptcache.integrations.clients.provider_for_host`)
and its path (``/messages`` is Anthropic's API), since one httpx client may talk to several.

**One client, one ledger.** Wrapping a client already wrapped for *another* tracker raises
:class:`WrapConflictError` instead of silently keeping the first: frameworks share one
httpx client between models (LangChain shares one per base URL), so a second ledger would
otherwise get nothing and the first would get calls nobody asked it to record. Give each
model its own ``http_client=`` (or use one tracker) instead; fanning one call out to two
ledgers was rejected because it would record a model in a ledger it was not wrapped for.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = [
    "MARK",
    "WrapConflictError",
    "check_tracker",
    "is_httpx_client",
    "install",
    "recorder_of",
]

#: Attribute set on a hooked httpx client: the recorder its hooks feed.
MARK = "_promptcache_wrapped"


class WrapConflictError(ValueError):
    """The httpx client is already tracked for another tracker (see the module docstring)."""


def is_httpx_client(obj: Any) -> bool:
    """Is ``obj`` an ``httpx``/``httpx2`` ``Client`` or ``AsyncClient`` (or a subclass)?"""
    for cls in type(obj).__mro__:
        root = cls.__module__.split(".")[0]
        if root in ("httpx", "httpx2") and cls.__name__ in ("Client", "AsyncClient"):
            return True
    return False


def recorder_of(http: Any) -> Any:
    """The recorder already hooked into ``http``, or None."""
    return getattr(http, MARK, None)


def check_tracker(http: Any, tracker: Any) -> bool:
    """True when ``http`` is already tracked for ``tracker`` (or ``tracker`` is None: the
    caller accepts the existing one); False when it is not tracked at all.

    Raises:
        WrapConflictError: it is tracked for another tracker.
    """
    rec = recorder_of(http)
    if rec is None:
        return False
    current = getattr(rec, "_tracker", None)
    if tracker is None or current is tracker:
        return True
    held = repr(current) if current is not None else "the default Tracker()"
    raise WrapConflictError(
        f"this {type(http).__module__}.{type(http).__name__} is already tracked for "
        f"{held}; promptcache will not record its calls in {tracker!r} too. Frameworks "
        "share one HTTP client between models (LangChain: one per base URL): give each "
        "model its own http_client=promptcache.wrap(httpx.Client(), tracker), or use one "
        "tracker for both"
    )


def install(
    http: Any, on_request: Callable[[Any], None], on_response: Callable[[Any], None]
) -> None:
    """Append the two hooks to ``http.event_hooks`` (as coroutines for an async client)."""
    is_async = inspect.iscoroutinefunction(getattr(http, "send", None))
    req: Callable[[Any], Any] = on_request
    resp: Callable[[Any], Any] = on_response
    if is_async:

        async def on_request_async(request: Any) -> None:
            on_request(request)

        async def on_response_async(response: Any) -> None:
            on_response(response)

        req, resp = on_request_async, on_response_async
    hooks = http.event_hooks
    hooks.setdefault("request", []).append(req)
    hooks.setdefault("response", []).append(resp)
    http.event_hooks = hooks
