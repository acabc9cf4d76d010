"""``promptcache.wrap(boto3.client("bedrock-runtime"), tracker)``: record every ``converse``,
``converse_stream`` and ``invoke_model`` call a boto3 Bedrock Runtime client makes.

Tracking uses botocore's public event system (``client.meta.events``, botocore 1.44):
``before-parameter-build`` sees the call's parameters (``modelId``, ``messages``,
``system``, ``toolConfig``; ``body`` for ``invoke_model``), ``before-call`` starts the clock
and ``after-call`` sees the parsed response. The response the caller gets is the same:

- ``converse``: the usage is in the parsed dict (``usage.inputTokens``,
  ``cacheReadInputTokens``, ``cacheWriteInputTokens``), recorded at once;
- ``invoke_model``: the ``body`` stream is read once and handed back as an equal
  ``StreamingBody`` over the same bytes; its JSON is the model's (Anthropic Messages for
  Claude: ``usage.cache_read_input_tokens``...);
- ``converse_stream``: the ``stream`` is handed back as an iterable over the same events;
  the record is written when the caller has read the ``metadata`` event (the usage) or the
  stream ends (time to first token: the first ``contentBlockDelta``).

Records carry ``provider="bedrock"``, ``api`` the operation (``"converse"``,
``"converse_stream"``, ``"invoke_model"``) and the request for miss attribution. Nothing in
tracking is ever raised into the caller (failures are logged on ``promptcache.integrations.clients``).
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from promptcache.providers.usage import normalize_usage

__all__ = ["wrap_bedrock"]

log = logging.getLogger("promptcache.integrations.clients")

_OPS = {"Converse": "converse", "ConverseStream": "converse_stream", "InvokeModel": "invoke_model"}
_MARK = "_promptcache_bedrock"
_KEY = "promptcache"


class _StreamProxy:
    """Iterates a botocore EventStream unchanged, seeing each event."""

    def __init__(
        self, inner: Any, on_event: Callable[[dict[str, Any]], None], done: Callable[[], None]
    ):
        self._inner = inner
        self._on_event = on_event
        self._done = done

    def __iter__(self) -> Iterator[Any]:
        try:
            for ev in self._inner:
                try:
                    self._on_event(ev)
                except Exception:
                    log.exception("promptcache: could not read a Bedrock stream event")
                yield ev
        finally:
            self._done()

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._done()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def wrap_bedrock(client: Any, rec: Any) -> Any:
    """Register the tracking handlers on a boto3 ``bedrock-runtime`` client and return it
    (see the module docstring). ``rec``: the recorder :func:`promptcache.wrap` made (it
    writes the records, as for the other clients). Wrapping twice is a no-op. Raises
    ``TypeError`` for a client of another service."""
    service = getattr(getattr(client.meta, "service_model", None), "service_name", None)
    if service != "bedrock-runtime":
        raise TypeError(f"promptcache.wrap() takes a bedrock-runtime client, got {service!r}")
    if getattr(client.meta, _MARK, None) is not None:
        return client
    hooks = _Hooks(rec)
    for name in _OPS:
        client.meta.events.register(
            f"before-parameter-build.bedrock-runtime.{name}", hooks.params_hook
        )
        client.meta.events.register(f"before-call.bedrock-runtime.{name}", hooks.before_call)
        client.meta.events.register(f"after-call.bedrock-runtime.{name}", hooks.after_call)
    setattr(client.meta, _MARK, rec)
    return client


class _Hooks:
    """botocore event handlers that carry one call's state in its ``context`` (under
    ``_KEY``: the operation, body, model, start time) and record it through ``rec``.
    Nothing raised here reaches the caller: failures are logged."""

    def __init__(self, rec: Any) -> None:
        self.rec = rec

    def params_hook(
        self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        try:
            op = _OPS.get(model.name)
            if op is None:
                return
            body: dict[str, Any]
            if op == "invoke_model":
                raw: Any = params.get("body")
                raw = raw.read() if hasattr(raw, "read") else raw
                parsed = json.loads(raw) if raw else {}
                body = parsed if isinstance(parsed, dict) else {}
                if hasattr(params.get("body"), "read"):
                    params["body"] = raw  # what was read is sent as bytes
            else:
                body = {k: v for k, v in params.items() if k != "modelId"}
                body["modelId"] = params.get("modelId")
            context[_KEY] = {"op": op, "body": body, "model": params.get("modelId")}
        except Exception:
            log.exception("promptcache: could not inspect a Bedrock request for tracking")

    def before_call(self, context: dict[str, Any], **_: Any) -> None:
        st = context.get(_KEY)
        if st is not None:
            st["t0"] = time.perf_counter()

    def after_call(
        self,
        http_response: Any,
        parsed: dict[str, Any],
        model: Any,
        context: dict[str, Any],
        **_: Any,
    ) -> None:
        st = context.get(_KEY)
        if st is None or "t0" not in st:
            return
        try:
            status = getattr(http_response, "status_code", 200)
            if not 200 <= int(status) < 300 or "Error" in parsed:
                return
            op = st["op"]
            if op == "converse":
                self.finish(st, parsed, stream=False)
            elif op == "invoke_model":
                self._after_invoke(st, parsed)
            else:
                self._after_stream(st, parsed)
        except Exception:
            log.exception("promptcache: could not attach tracking to a Bedrock response")

    def _after_invoke(self, st: dict[str, Any], parsed: dict[str, Any]) -> None:
        """Read ``invoke_model``'s body, record it, and give the caller a fresh body."""
        stream_body: Any = parsed.get("body")
        data = stream_body.read() if hasattr(stream_body, "read") else stream_body
        if isinstance(data, (bytes, bytearray)):
            # botocore is there: this is its client (an optional dependency)
            from botocore.response import StreamingBody  # type: ignore[import-untyped]

            parsed["body"] = StreamingBody(io.BytesIO(data), len(data))
            self.finish(st, json.loads(data), stream=False)

    def _after_stream(self, st: dict[str, Any], parsed: dict[str, Any]) -> None:
        """Put a proxy around the event stream that records the call at its metadata event
        (or when the caller closes or drains it)."""
        inner = parsed.get("stream")
        if inner is None:
            return
        seen: list[dict[str, Any]] = []

        def on_event(ev: dict[str, Any]) -> None:
            if "contentBlockDelta" in ev and "t_first" not in st:
                st["t_first"] = time.perf_counter()
            seen.append(ev)
            if "metadata" in ev:
                self.finish(st, seen, stream=True)

        parsed["stream"] = _StreamProxy(inner, on_event, lambda: self.finish(st, seen, stream=True))

    def finish(self, st: dict[str, Any], payload: Any, *, stream: bool) -> None:
        """Record the call once (its usage normalized from ``payload``)."""
        if st.get("done") or (stream and not payload):
            return
        st["done"] = True
        try:
            usage = normalize_usage("bedrock", payload)
        except Exception as e:
            log.warning("promptcache: no usage recorded for a Bedrock %s call: %s", st["op"], e)
            return
        if st["model"]:  # the modelId called (an inference profile or a model id)
            usage = usage.replace(model=st["model"])
        t_end = time.perf_counter()
        t_first = st.get("t_first")
        try:
            self.rec.store(
                usage,
                api=st["op"],
                body=st["body"],
                latency_ms=(t_end - st["t0"]) * 1000.0,
                ttft_ms=None if t_first is None else (t_first - st["t0"]) * 1000.0,
                stream=stream,
                model=st["model"],
            )
        except Exception:
            log.exception("promptcache: could not record a Bedrock call in the ledger")
