"""Record LiteLLM traffic in a :class:`~promptcache.Tracker`.

::

    import litellm, promptcache
    litellm.callbacks = [promptcache.litellm_callback(promptcache.Tracker())]

LiteLLM calls a custom logger's ``log_success_event(kwargs, response_obj, start_time,
end_time)`` (and ``async_log_success_event`` for ``acompletion``) after each call, streamed
or not, with the assembled ``ModelResponse`` (litellm 1.110.2,
``litellm/integrations/custom_logger.py``). The same object also works as a function in
``litellm.success_callback`` (called ``fn(kwargs, completion_response, start_time,
end_time)``). Each call becomes one ledger record: the usage
(:mod:`promptcache.providers.litellm`), the provider LiteLLM routed to
(``kwargs["litellm_params"]["custom_llm_provider"]``), the model, the latency and, when the
request's messages are in ``kwargs``, the request itself for miss attribution. The
record id is LiteLLM's ``litellm_call_id``, so a call logged twice is stored once. Nothing
is ever raised into LiteLLM: failures are logged on ``promptcache.litellm``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from promptcache.providers.usage import normalize_usage

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


class PromptCacheCallback:
    """A LiteLLM success callback that records each call (see the module docstring).

    Args:
        tracker: the ledger (default: ``Tracker()`` at the default path, opened on the
            first record).
        metadata: a JSON-able dict stored with each record.
        session: a lineage key for miss attribution (default: per model).
    """

    def __init__(
        self,
        tracker: Any = None,
        *,
        metadata: Mapping[str, Any] | None = None,
        session: str | None = None,
    ) -> None:
        self._tracker = tracker
        self.metadata = dict(metadata or {})
        self.session = session

    @property
    def tracker(self) -> Any:
        if self._tracker is None:
            from promptcache.ledger.tracker import Tracker

            self._tracker = Tracker()
        return self._tracker

    def fields(self, kwargs: Mapping[str, Any], response_obj: Any) -> dict[str, Any]:
        """The ``Tracker.record`` keywords for one LiteLLM call (without the usage)."""
        params = kwargs.get("litellm_params") or {}
        routed = params.get("custom_llm_provider") if isinstance(params, Mapping) else None
        model = kwargs.get("model")
        provider = _PROVIDERS.get(str(routed or "").lower(), str(routed) if routed else "litellm")
        out: dict[str, Any] = {
            "model": model,
            "provider": provider,
            "api": "chat.completions",
            "stream": bool(kwargs.get("stream")),
            "metadata": self.metadata or None,
        }
        call_id = kwargs.get("litellm_call_id")
        if isinstance(call_id, str) and call_id:
            out["record_id"] = call_id
        messages = kwargs.get("messages")
        if isinstance(messages, list):
            request: dict[str, Any] = {"model": model, "messages": messages}
            optional = kwargs.get("optional_params") or {}
            if isinstance(optional, Mapping):
                for k in ("tools", "tool_choice", "response_format", "prompt_cache_key"):
                    if optional.get(k) is not None:
                        request[k] = optional[k]
            out["request"] = request
            out["lineage"] = self.session or f"litellm:{model}"
        return out

    def record(self, kwargs: Mapping[str, Any], response_obj: Any, start: Any, end: Any) -> None:
        """Record one call; never raises."""
        try:
            usage = normalize_usage("litellm", response_obj)
            fields = self.fields(kwargs, response_obj)
            usage = usage.replace(provider=fields["provider"], model=usage.model or fields["model"])
            fields["model"] = usage.model
            secs = _seconds(start, end)
            if secs is not None:
                fields["latency_ms"] = secs * 1000.0
            record = self.tracker.record
            try:
                record(usage, **fields)
            except TypeError:  # a Tracker without attribution keywords
                fields.pop("request", None)
                fields.pop("lineage", None)
                record(usage, **fields)
        except Exception:
            log.exception("promptcache: could not record a LiteLLM call")

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
