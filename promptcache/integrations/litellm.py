"""Record LiteLLM traffic in a :class:`~promptcache.Tracker`, scored as what was sent.

::

    import litellm, promptcache
    litellm.callbacks = [promptcache.litellm_callback(promptcache.Tracker())]

LiteLLM calls a custom logger's ``log_pre_api_call(model, messages, kwargs)`` just before it
sends, and ``log_success_event(kwargs, response_obj, start_time, end_time)`` (and
``async_log_success_event`` for ``acompletion``) after each call, streamed or not, with the
assembled ``ModelResponse`` (litellm 1.110.2, ``litellm/integrations/custom_logger.py`` and
``litellm/litellm_core_utils/litellm_logging.py``: ``pre_call``). The same object also works
as a function in ``litellm.success_callback`` (called ``fn(kwargs, completion_response,
start_time, end_time)``).

Each call becomes one ledger record scored as *what LiteLLM sent*, so that it gets the cause
the wrapped official client gives for the same traffic:

- the request is the body LiteLLM sent to the provider (``kwargs["additional_args"]
  ["complete_input_dict"]``, kept from the pre-call hook for streams, whose success kwargs
  no longer carry it): the provider's wire shape, with the ``cache_control`` breakpoints
  LiteLLM injected or translated; only without it is a Chat Completions body rebuilt from
  ``messages`` and ``optional_params``;
- the API is the one LiteLLM called: ``messages`` for Anthropic (``/v1/messages``),
  ``responses`` for ``litellm.responses``, else ``chat.completions``;
- the provider label comes from the base URL LiteLLM called
  (:func:`~promptcache.integrations.clients.provider_for_host`, a loopback host is
  ``local``), else from LiteLLM's ``custom_llm_provider``; the rules follow from it;
- the usage is the provider's own (``kwargs["original_response"]`` parsed with that API's
  parser) when the raw response is there, else LiteLLM's ``ModelResponse.usage``
  (:mod:`promptcache.providers.litellm_usage`); a call without usage is recorded with usage
  unknown;
- the local engine's ``X-Promptcache-Cache-Note`` (LiteLLM passes response headers on as
  ``llm_provider-<name>``) is handed to the attribution.

The record id is LiteLLM's ``litellm_call_id``, so a call logged twice (LiteLLM runs both its
sync and async handlers for some calls) is stored once; a stream is recorded once complete.
LiteLLM runs success callbacks on a background thread: a record lands shortly after the call
returns, not before.
Nothing is ever raised into LiteLLM: failures are logged on ``promptcache.litellm``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from promptcache.integrations.clients import CACHE_NOTE_HEADER, provider_for_host
from promptcache.providers.usage import normalize_usage
from promptcache.providers.usage_record import Usage, unknown_usage

__all__ = ["PromptCacheCallback", "litellm_callback"]

log = logging.getLogger("promptcache.litellm")

# LiteLLM's custom_llm_provider -> the ledger's provider label
_PROVIDERS = {
    "anthropic": "anthropic",
    "openai": "openai",
    "azure": "azure_openai",
    "bedrock": "bedrock",
    "bedrock_converse": "bedrock",
    "vertex_ai": "vertex",
    "vertex_ai_beta": "vertex",
    "gemini": "gemini",
    "deepseek": "deepseek",
    "hosted_vllm": "vllm",
    "ollama": "ollama",
    "ollama_chat": "ollama",
}


def _seconds(start: Any, end: Any) -> float | None:
    if isinstance(start, datetime) and isinstance(end, datetime):
        return (end - start).total_seconds()
    if isinstance(start, (int, float)) and isinstance(end, (int, float)):
        return float(end) - float(start)
    return None


def routed_api(routed: str | None, call_type: str | None, api_base: str | None) -> str:
    """The API LiteLLM called: ``messages`` (Anthropic's, or any ``/v1/messages`` URL),
    ``responses`` (``litellm.responses``), else ``chat.completions``."""
    path = urlsplit(api_base or "").path.rstrip("/")
    if (routed or "").lower() == "anthropic" or path.endswith("/messages"):
        return "messages"
    if (call_type or "").startswith(("responses", "aresponses")) or path.endswith("/responses"):
        return "responses"
    return "chat.completions"


def _sent_body(kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
    """The body LiteLLM sent (``additional_args.complete_input_dict``), or None."""
    extra = kwargs.get("additional_args")
    body = extra.get("complete_input_dict") if isinstance(extra, Mapping) else None
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            return None
    return dict(body) if isinstance(body, Mapping) and body else None


def _rebuilt_body(kwargs: Mapping[str, Any], model: Any) -> dict[str, Any] | None:
    """A Chat Completions body from ``messages`` and ``optional_params`` (no wire body)."""
    messages = kwargs.get("messages")
    if not isinstance(messages, list):
        return None
    request: dict[str, Any] = {"model": model, "messages": messages}
    optional = kwargs.get("optional_params") or {}
    if isinstance(optional, Mapping):
        for k in ("tools", "tool_choice", "response_format", "prompt_cache_key"):
            if optional.get(k) is not None:
                request[k] = optional[k]
    return request


def _header(kwargs: Mapping[str, Any], name: str) -> str | None:
    """A response header LiteLLM passed on (``response_headers``, or ``llm_provider-<name>``
    in the hidden params' ``additional_headers``)."""
    headers = kwargs.get("response_headers")
    if isinstance(headers, Mapping):
        for k, v in headers.items():
            if str(k).lower() == name:
                return str(v)
    params = kwargs.get("litellm_params") or {}
    meta = params.get("metadata") if isinstance(params, Mapping) else None
    hidden = (meta or {}).get("hidden_params") if isinstance(meta, Mapping) else None
    extra = (hidden or {}).get("additional_headers") if isinstance(hidden, Mapping) else None
    if isinstance(extra, Mapping):
        for k, v in extra.items():
            if str(k).lower() in (name, f"llm_provider-{name}"):
                return str(v)
    return None


def _wire_usage(api: str, provider: str, raw: Any) -> Usage | None:
    """The provider's own usage from LiteLLM's ``original_response`` (a JSON text of the
    unstreamed response), or None when it is not there."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if not isinstance(raw, Mapping) or not isinstance(raw.get("usage"), Mapping):
        return None
    if api == "messages":
        fmt = "anthropic"
    elif api == "responses" or provider in ("openai", "azure_openai"):
        fmt = "openai"
    else:
        fmt = "deepseek" if provider == "deepseek" else "openai_compatible"
    try:
        return normalize_usage(fmt, dict(raw))
    except Exception:
        return None


class PromptCacheCallback:
    """A LiteLLM callback that records each call (see the module docstring).

    Args:
        tracker: the ledger (default: ``Tracker()`` at the default path, opened on the
            first record).
        metadata: a JSON-able dict stored with each record.
        session: a lineage key for miss attribution (default: the predecessor is found by
            shared prefix).
        rules: :class:`~promptcache.limits.CacheLimits` to attribute with (default: the
            model's row; e.g. OpenAI's rules for a local server emulating them).
    """

    #: sent bodies kept from the pre-call hook until the call's success (streams)
    MAX_PENDING = 1024

    def __init__(
        self,
        tracker: Any = None,
        *,
        metadata: Mapping[str, Any] | None = None,
        session: str | None = None,
        rules: Any = None,
    ) -> None:
        self._tracker = tracker
        self.metadata = dict(metadata or {})
        self.session = session
        self.rules = rules
        #: LiteLLM keeps one custom logger per class name and public scalar attributes
        #: (litellm_core_utils/logging_callback_manager.py, ``_get_custom_logger_key``): a
        #: second callback for another tracker would be dropped silently without this
        self.instance_key = os.urandom(8).hex()
        self._sent: OrderedDict[str, tuple[dict[str, Any], str | None]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def tracker(self) -> Any:
        """The :class:`~promptcache.Tracker` records go to (the default ledger, opened on first
        use, when none was given)."""
        if self._tracker is None:
            from promptcache.ledger.tracker import Tracker

            self._tracker = Tracker()
        return self._tracker

    def remember(self, kwargs: Mapping[str, Any]) -> None:
        """Keep the body about to be sent (the pre-call hook), by ``litellm_call_id``."""
        body = _sent_body(kwargs)
        call_id = kwargs.get("litellm_call_id")
        if body is None or not isinstance(call_id, str):
            return
        extra = kwargs.get("additional_args") or {}
        api_base = extra.get("api_base") if isinstance(extra, Mapping) else None
        with self._lock:
            self._sent[call_id] = (body, str(api_base) if api_base else None)
            while len(self._sent) > self.MAX_PENDING:
                self._sent.popitem(last=False)

    def fields(self, kwargs: Mapping[str, Any], response_obj: Any) -> dict[str, Any]:
        """The ``Tracker.record`` keywords for one LiteLLM call (without the usage)."""
        params = kwargs.get("litellm_params") or {}
        routed = params.get("custom_llm_provider") if isinstance(params, Mapping) else None
        model = kwargs.get("model")
        call_id = kwargs.get("litellm_call_id")
        with self._lock:
            # kept, not popped: LiteLLM may log one call twice (sync and async handlers)
            kept = self._sent.get(call_id) if isinstance(call_id, str) else None
        body = _sent_body(kwargs) or (kept[0] if kept else None)
        api_base = (params.get("api_base") if isinstance(params, Mapping) else None) or (
            kept[1] if kept else None
        )
        api = routed_api(routed, kwargs.get("call_type"), api_base)
        host = urlsplit(str(api_base or "")).hostname
        if host:
            provider = provider_for_host(host, "anthropic" if api == "messages" else "openai")
        else:
            provider = _PROVIDERS.get(str(routed or "").lower(), str(routed or "litellm"))
        out: dict[str, Any] = {
            "model": model,
            "provider": provider,
            "api": api,
            "stream": bool(kwargs.get("stream")),
            "metadata": self.metadata or None,
        }
        if isinstance(call_id, str) and call_id:
            out["record_id"] = call_id
        if body is None:
            body = _rebuilt_body(kwargs, model)
            out["api"] = "chat.completions" if body is not None else api
        if body is not None:
            out["request"] = body
            out["lineage"] = f"session:{self.session}" if self.session else None
            out["cache_note"] = _header(kwargs, CACHE_NOTE_HEADER)
            if self.rules is not None:
                out["rules"] = self.rules
        return out

    def usage(
        self, kwargs: Mapping[str, Any], response_obj: Any, fields: Mapping[str, Any]
    ) -> Usage:
        """The call's usage: the provider's own when the raw response is there, else
        LiteLLM's; usage unknown when neither is."""
        wire = None
        if not kwargs.get("stream"):
            wire = _wire_usage(fields["api"], fields["provider"], kwargs.get("original_response"))
        if wire is not None:
            return wire
        response_obj = kwargs.get("complete_streaming_response") or response_obj
        try:
            return normalize_usage("litellm", response_obj)
        except Exception as e:
            log.info("promptcache: a LiteLLM call recorded with usage unknown: %s", e)
            return unknown_usage()

    def record(self, kwargs: Mapping[str, Any], response_obj: Any, start: Any, end: Any) -> None:
        """Record one call; never raises. A stream is recorded once complete (LiteLLM's
        ``complete_streaming_response``)."""
        if kwargs.get("stream") and kwargs.get("complete_streaming_response") is None:
            return
        try:
            fields = self.fields(kwargs, response_obj)
            usage = self.usage(kwargs, response_obj, fields)
            usage = usage.replace(provider=fields["provider"], model=usage.model or fields["model"])
            fields["model"] = usage.model
            secs = _seconds(start, end)
            if secs is not None:
                fields["latency_ms"] = secs * 1000.0
            record = self.tracker.record
            try:
                record(usage, **fields)
            except TypeError:  # a Tracker without attribution keywords
                for k in ("request", "lineage", "cache_note", "rules"):
                    fields.pop(k, None)
                record(usage, **fields)
        except Exception:
            log.exception("promptcache: could not record a LiteLLM call")

    def log_pre_api_call(self, model: Any, messages: Any, kwargs: Any) -> None:
        """Called by LiteLLM just before it sends: keep the body it sends."""
        try:
            self.remember(kwargs)
        except Exception:
            log.exception("promptcache: could not read a LiteLLM request")

    async def async_log_pre_api_call(self, model: Any, messages: Any, kwargs: Any) -> None:
        """The async twin of :meth:`log_pre_api_call`."""
        self.log_pre_api_call(model, messages, kwargs)

    # LiteLLM CustomLogger interface
    def log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        """Called by LiteLLM after a successful sync call."""
        self.record(kwargs, response_obj, start_time, end_time)

    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        """Called by LiteLLM after a successful async call."""
        self.record(kwargs, response_obj, start_time, end_time)

    # function-style success_callback
    def __call__(
        self, kwargs: Any, completion_response: Any, start_time: Any, end_time: Any
    ) -> None:
        self.record(kwargs, completion_response, start_time, end_time)


def litellm_callback(tracker: Any = None, **options: Any) -> Any:
    """A :class:`PromptCacheCallback`; when LiteLLM is importable, an instance of a
    subclass of ``litellm.integrations.custom_logger.CustomLogger`` too (LiteLLM dispatches
    ``litellm.callbacks`` entries by that type)."""
    try:
        from litellm.integrations.custom_logger import CustomLogger  # type: ignore[import-not-found,unused-ignore]
    except Exception:
        return PromptCacheCallback(tracker, **options)

    class _Logger(PromptCacheCallback, CustomLogger):  # type: ignore[misc,unused-ignore]
        def __init__(self) -> None:
            CustomLogger.__init__(self)
            PromptCacheCallback.__init__(self, tracker, **options)

    return _Logger()
