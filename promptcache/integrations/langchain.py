"""Record LangChain chat-model calls in a :class:`~promptcache.Tracker`: a callback handler.

::

    from promptcache.integrations.langchain import PromptCacheHandler

    handler = PromptCacheHandler(tracker)
    llm = ChatOpenAI(model="gpt-4.1", callbacks=[handler])       # or ChatAnthropic(...)
    llm.invoke(messages)                                          # or config={"callbacks": [handler]}

LangChain builds its own SDK client inside each chat model (``ChatOpenAI(client=...)`` is not
the official client; ``ChatAnthropic`` takes none), so the handler listens where LangChain
reports: ``on_chat_model_start`` (the messages, the bound tools in ``invocation_params``, the
model's constructor arguments in ``serialized``: its base URL) and ``on_llm_end`` (the
generation's ``usage_metadata``, or the provider's raw usage in ``response_metadata``). The
request is rebuilt in the provider's wire shape -- Chat Completions for ``ChatOpenAI``
(``langchain_core.messages.convert_to_openai_messages``), Messages for ``ChatAnthropic``
(``langchain_anthropic``'s own formatter, so ``cache_control`` blocks stay where LangChain
sends them) -- and attributed like a wrapped client's request. For the exact bytes instead,
hand the model a wrapped HTTP client: ``ChatOpenAI(http_client=promptcache.wrap(httpx.Client(),
tracker))``.

A stream that reports no usage (``ChatOpenAI(...).stream()`` without ``stream_usage=True``
against a custom base URL) is recorded with usage unknown, with one warning per handler.
Nothing is ever raised into LangChain: failures are logged on
``promptcache.integrations.langchain``. Versions: langchain-core 1.8, langchain-openai 1.8,
langchain-anthropic 1.7 (the ``[frameworks]`` extra).
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

from promptcache.errors import PromptCacheWarning
from promptcache.integrations.clients import provider_for_host, request_prefix_hash
from promptcache.integrations.usage_advice import no_usage_advice
from promptcache.providers.usage import normalize_usage
from promptcache.providers.usage_record import WRITE_TTL_ASSUMED, Usage, unknown_usage

__all__ = ["PromptCacheHandler", "usage_from_metadata"]

log = logging.getLogger("promptcache.integrations.langchain")

# serialized constructor kwargs naming the base URL, per chat model class
_BASE_URL_KEYS = ("openai_api_base", "base_url", "anthropic_api_url", "api_base")
_DEFAULT_HOST = {"anthropic": "api.anthropic.com", "openai": "api.openai.com"}


def usage_from_metadata(meta: Mapping[str, Any]) -> Usage:
    """A :class:`Usage` from LangChain's ``usage_metadata`` (``input_tokens`` counts every
    prompt token; ``input_token_details``: ``cache_read``, ``cache_creation`` and, for
    Anthropic, ``ephemeral_5m_input_tokens`` / ``ephemeral_1h_input_tokens``). Caching counts
    as reported when ``cache_read`` is present.

    Raises:
        ValueError: ``input_tokens`` or ``output_tokens`` is missing.
    """
    if "input_tokens" not in meta or "output_tokens" not in meta:
        raise ValueError("usage_metadata without input_tokens/output_tokens")
    details = meta.get("input_token_details") or {}
    prompt = int(meta["input_tokens"])
    output = int(meta["output_tokens"])
    reasoning = (meta.get("output_token_details") or {}).get("reasoning")
    if "cache_read" not in details:
        return Usage(
            uncached_input_tokens=prompt,
            output_tokens=output,
            cache_reported=False,
            reasoning_tokens=int(reasoning) if reasoning else None,
        )
    read = int(details.get("cache_read") or 0)
    write = int(details.get("cache_creation") or 0)
    by_ttl = {
        "5m": int(details.get("ephemeral_5m_input_tokens") or 0),
        "1h": int(details.get("ephemeral_1h_input_tokens") or 0),
    }
    flags: tuple[str, ...] = ()
    split = by_ttl["5m"] + by_ttl["1h"]
    if not write and split:
        # langchain-anthropic 1.7 streams: cache_creation stays 0 while the TTL split
        # carries the writes (seen against the local engine, 2026-12-03)
        write = split
    if write and split != write:
        by_ttl, flags = {"5m": write}, (WRITE_TTL_ASSUMED,)
    return Usage(
        uncached_input_tokens=max(prompt - read - write, 0),
        cache_read_tokens=read,
        cache_write_tokens=write,
        output_tokens=output,
        cache_write_by_ttl={k: v for k, v in by_ttl.items() if v},
        reasoning_tokens=int(reasoning) if reasoning else None,
        flags=flags,
    )


def _kind(serialized: Mapping[str, Any] | None, metadata: Mapping[str, Any] | None) -> str:
    """``"anthropic"`` for ChatAnthropic, else ``"openai"`` (Chat Completions shape)."""
    ident = (serialized or {}).get("id") or []
    if any("anthropic" in str(x).lower() for x in ident):
        return "anthropic"
    if str((metadata or {}).get("ls_provider") or "").lower() == "anthropic":
        return "anthropic"
    return "openai"


def _host(serialized: Mapping[str, Any] | None, kind: str) -> str:
    kwargs = (serialized or {}).get("kwargs") or {}
    for key in _BASE_URL_KEYS:
        url = kwargs.get(key)
        if isinstance(url, str) and url:
            return urlsplit(url).hostname or ""
    return _DEFAULT_HOST[kind]


def build_request(
    kind: str, messages: Sequence[Any], params: Mapping[str, Any]
) -> tuple[str, dict[str, Any]]:
    """``(api, body)``: the request a LangChain chat model sends for ``messages`` with
    ``invocation_params`` ``params``, in the provider's wire shape."""
    model = params.get("model") or params.get("model_name")
    tools = params.get("tools")
    if kind == "anthropic":
        from langchain_anthropic.chat_models import _format_messages

        system, msgs = _format_messages(list(messages), model=model)
        body: dict[str, Any] = {"model": model}
        if tools:
            body["tools"] = list(tools)
        if system:
            body["system"] = system
        body["messages"] = msgs
        return "messages", body
    from langchain_core.messages import convert_to_openai_messages

    body = {"messages": convert_to_openai_messages(list(messages)), "model": model}
    if tools:
        body["tools"] = list(tools)
    for key in ("tool_choice", "response_format", "prompt_cache_key"):
        if params.get(key) is not None:
            body[key] = params[key]
    return "chat.completions", body


class _Pending:
    __slots__ = ("t0", "ts", "api", "body", "provider", "model", "streamed")

    def __init__(self, ts: float, api: str, body: dict[str, Any], provider: str) -> None:
        self.t0 = time.perf_counter()
        self.ts, self.api, self.body, self.provider = ts, api, body, provider
        self.model = body.get("model")
        self.streamed = False


class PromptCacheHandler(BaseCallbackHandler):
    """A LangChain callback handler that records each chat-model call (module docstring).

    Args:
        tracker: the ledger (default: ``Tracker()`` at the default path, on first use).
        provider: the ledger's provider label (default: from the model's base URL host,
            :func:`~promptcache.integrations.clients.provider_for_host`).
        rules: :class:`~promptcache.limits.CacheLimits` to attribute with (default: the
            model's row; e.g. OpenAI's rules for a local server emulating them).
        session: one lineage key for every call (default: by shared prefix).
        price: a :class:`~promptcache.Price` for every call (default: the model's row).
        metadata: a JSON-able dict stored with each record.
        clock: seconds callable for the records' timestamps (default ``time.time``).
    """

    raise_error = False
    run_inline = True

    def __init__(
        self,
        tracker: Any = None,
        *,
        provider: str | None = None,
        rules: Any = None,
        session: str | None = None,
        price: Any = None,
        metadata: Mapping[str, Any] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__()
        self._tracker = tracker
        self.provider = provider
        self.rules = rules
        self.session = session
        self.price = price
        self.metadata = dict(metadata or {})
        self.clock = clock or time.time
        self._pending: dict[UUID, _Pending] = {}
        self._lock = threading.Lock()
        self._warned = False

    @property
    def tracker(self) -> Any:
        """The :class:`~promptcache.Tracker` records go to (the default ledger, opened on first
        use, when none was given)."""
        if self._tracker is None:
            from promptcache.ledger.tracker import Tracker

            self._tracker = Tracker()
        return self._tracker

    # -- LangChain callbacks -------------------------------------------------------

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        invocation_params: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Keep the request of run ``run_id`` until its end."""
        try:
            kind = _kind(serialized, metadata)
            api, body = build_request(
                kind, messages[0] if messages else [], invocation_params or {}
            )
            provider = self.provider or provider_for_host(_host(serialized, kind), kind)
            with self._lock:
                self._pending[run_id] = _Pending(self.clock(), api, body, provider)
        except Exception:
            log.exception("promptcache: could not read a LangChain call's request")

    def on_llm_new_token(self, token: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Mark run ``run_id`` as streamed."""
        pending = self._pending.get(run_id)
        if pending is not None:
            pending.streamed = True

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Forget a failed run (nothing was billed that the ledger could know of)."""
        with self._lock:
            self._pending.pop(run_id, None)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Record run ``run_id`` with the usage its generation reports."""
        with self._lock:
            pending = self._pending.pop(run_id, None)
        if pending is None:
            return
        try:
            self._record(pending, response)
        except Exception:
            log.exception("promptcache: could not record a LangChain call")

    # -- recording -------------------------------------------------------------------

    def _usage(self, pending: _Pending, response: Any) -> Usage:
        gens = getattr(response, "generations", None) or [[]]
        gen = gens[0][0] if gens and gens[0] else None
        message = getattr(gen, "message", None)
        if type(gen).__name__ == "ChatGenerationChunk":
            pending.streamed = True
        raw = (getattr(message, "response_metadata", None) or {}).get("usage")
        if pending.api == "messages" and isinstance(raw, Mapping):
            return normalize_usage("anthropic", dict(raw))  # the provider's own counts
        meta = getattr(message, "usage_metadata", None)
        if not meta:
            raise ValueError("the generation carries no usage_metadata")
        return usage_from_metadata(meta)

    def _record(self, pending: _Pending, response: Any) -> None:
        try:
            usage = self._usage(pending, response)
        except (ValueError, TypeError, KeyError) as e:
            usage = unknown_usage()
            log.info("promptcache: a LangChain call recorded with usage unknown: %s", e)
            if not self._warned:
                self._warned = True
                warnings.warn(
                    no_usage_advice(pending.api, pending.streamed), PromptCacheWarning, stacklevel=2
                )
        usage = usage.replace(provider=pending.provider, model=usage.model or pending.model)
        fields: dict[str, Any] = dict(
            model=usage.model,
            provider=pending.provider,
            api=pending.api,
            prefix_hash=request_prefix_hash(pending.api, pending.body),
            latency_ms=(time.perf_counter() - pending.t0) * 1000.0,
            stream=pending.streamed,
            metadata=self.metadata or None,
            price=self.price,
            ts=pending.ts,
            request=pending.body,
            lineage=f"session:{self.session}" if self.session else None,
        )
        if self.rules is not None:
            fields["rules"] = self.rules
        self.tracker.record(usage, **fields)
