"""Export usage to Prometheus and OpenTelemetry (optional extras).

``pip install 'promptcache[prometheus]'`` for :class:`PrometheusExporter`,
``pip install 'promptcache[otel]'`` (plus an OpenTelemetry SDK you configure) for
:class:`OpenTelemetryExporter`. Both are callables that fit ``promptcache.wrap(client,
tracker, callbacks=[exporter])`` and can also be called directly with a
:class:`~promptcache.Usage`.

OpenTelemetry attribute names follow the GenAI semantic conventions
(opentelemetry.io/docs/specs/semconv/gen-ai/, "Semantic conventions for generative client
AI spans" and "... metrics", checked 2026-11-29):

- ``gen_ai.usage.input_tokens``: ALL prompt tokens, cached ones included (the spec: "SHOULD
  include all types of input tokens, including cached tokens");
- ``gen_ai.usage.cache_read.input_tokens``, ``gen_ai.usage.cache_creation.input_tokens``;
- ``gen_ai.usage.output_tokens``; ``gen_ai.provider.name``, ``gen_ai.operation.name``,
  ``gen_ai.request.model``, ``gen_ai.response.model``;
- metrics ``gen_ai.client.token.usage`` (histogram, ``{token}``, with ``gen_ai.token.type``
  = ``input``/``output``) and ``gen_ai.client.operation.duration`` (histogram, seconds).

promptcache adds ``promptcache.*`` attributes and metrics for what the spec has no name for
(prefix hash, cost and saving in USD, uncached/cache-write token counters).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from promptcache import __version__
from promptcache.errors import PromptCacheError
from promptcache.ledger.pricing import cost
from promptcache.providers.usage_record import Usage

__all__ = ["genai_attributes", "PrometheusExporter", "OpenTelemetryExporter", "GENAI_PROVIDER"]

log = logging.getLogger("promptcache.reports.export")

#: promptcache provider label -> ``gen_ai.provider.name`` well-known value
GENAI_PROVIDER = {
    "anthropic": "anthropic",
    "openai": "openai",
    "azure_openai": "azure.ai.openai",
    "gemini": "gcp.gemini",
    "vertex": "gcp.vertex_ai",
    "bedrock": "aws.bedrock",
    "deepseek": "deepseek",
}

_OPERATION = {
    "chat.completions": "chat",
    "messages": "chat",
    "responses": "chat",
    "completions": "text_completion",
}


def _cost(usage: Usage, model: str | None, price: Any = None) -> Any:

    try:
        return cost(usage, model=model, price=price)
    except PromptCacheError:
        return None


def genai_attributes(
    usage: Usage,
    *,
    model: str | None = None,
    provider: str | None = None,
    api: str | None = None,
    request_model: str | None = None,
    prefix_hash: str | None = None,
    price: Any = None,
) -> dict[str, Any]:
    """Span attributes for one request, GenAI semantic-convention names first.

    Token attributes are ints; ``promptcache.cost_usd``/``promptcache.saving_usd`` are
    floats (USD) and only present when a price is known; ``promptcache.hit_rate`` only when
    the provider reported caching."""
    model = model or usage.model
    provider = provider or usage.provider
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": _OPERATION.get(api or "", "chat"),
        "gen_ai.usage.input_tokens": usage.prompt_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
    }
    if usage.cache_reported:
        attrs["gen_ai.usage.cache_read.input_tokens"] = usage.cache_read_tokens
        attrs["gen_ai.usage.cache_creation.input_tokens"] = usage.cache_write_tokens
    if provider:
        attrs["gen_ai.provider.name"] = GENAI_PROVIDER.get(provider, provider)
    if request_model or model:
        attrs["gen_ai.request.model"] = request_model or model
    if model:
        attrs["gen_ai.response.model"] = model
    if prefix_hash:
        attrs["promptcache.prefix_hash"] = prefix_hash
    if usage.hit_rate is not None:
        attrs["promptcache.hit_rate"] = usage.hit_rate
    attrs["promptcache.cache_reported"] = usage.cache_reported
    c = _cost(usage, model, price)
    if c is not None:
        attrs["promptcache.cost_usd"] = float(c.total)
        attrs["promptcache.saving_usd"] = float(c.saving)
    return attrs


class PrometheusExporter:
    """Prometheus metrics for every recorded request (needs ``prometheus-client``).

    Metrics (``namespace`` prefix, default ``promptcache``), labels ``provider``, ``model``:

    - ``promptcache_requests_total``
    - ``promptcache_tokens_total{kind=uncached|cache_read|cache_write|output}``
    - ``promptcache_cost_usd_total`` and ``promptcache_saving_usd_total`` (priced requests)
    - ``promptcache_unreported_requests_total`` (caching not reported by the server)
    - ``promptcache_request_latency_seconds`` and ``promptcache_ttft_seconds`` histograms

    Hit rate in PromQL: ``rate(promptcache_tokens_total{kind="cache_read"}[5m]) /
    ignoring(kind) sum without(kind) (rate(promptcache_tokens_total{kind!="output"}[5m]))``.
    ``registry``: a ``prometheus_client.CollectorRegistry`` (default: the global one).
    """

    def __init__(self, registry: Any = None, namespace: str = "promptcache") -> None:
        try:
            # lazy import of an optional dependency: prometheus-client (the prometheus extra)
            import prometheus_client as pc
        except ImportError:  # pragma: no cover - exercised only without the extra
            raise ImportError(
                "PrometheusExporter needs prometheus-client: pip install 'promptcache[prometheus]'"
            ) from None
        kw: dict[str, Any] = {"namespace": namespace}
        if registry is not None:
            kw["registry"] = registry
        labels = ["provider", "model"]
        self.requests = pc.Counter("requests", "Requests recorded", labels, **kw)
        self.tokens = pc.Counter("tokens", "Tokens by kind", labels + ["kind"], **kw)
        self.cost = pc.Counter("cost_usd", "Cost in USD", labels, **kw)
        self.saving = pc.Counter("saving_usd", "Saving vs. no cache in USD", labels, **kw)
        self.unreported = pc.Counter(
            "unreported_requests", "Requests whose server did not report caching", labels, **kw
        )
        buckets = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)
        self.latency = pc.Histogram(
            "request_latency_seconds", "Request latency", labels, buckets=buckets, **kw
        )
        self.ttft = pc.Histogram(
            "ttft_seconds", "Time to first token (streams)", labels, buckets=buckets, **kw
        )

    def __call__(
        self,
        usage: Usage,
        *,
        model: str | None = None,
        provider: str | None = None,
        latency_ms: float | None = None,
        ttft_ms: float | None = None,
        price: Any = None,
        **_: Any,
    ) -> None:
        """Count one request (signature of a ``wrap(..., callbacks=[...])`` callback)."""
        model = model or usage.model or "unknown"
        provider = provider or usage.provider or "unknown"
        lab = {"provider": provider, "model": model}
        self.requests.labels(**lab).inc()
        for kind, n in (
            ("uncached", usage.uncached_input_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
            ("output", usage.output_tokens),
        ):
            self.tokens.labels(kind=kind, **lab).inc(n)
        if not usage.cache_reported:
            self.unreported.labels(**lab).inc()
        c = _cost(usage, model, price)
        if c is not None:
            self.cost.labels(**lab).inc(float(c.total))
            if c.saving > 0:
                self.saving.labels(**lab).inc(float(c.saving))
        if latency_ms is not None:
            self.latency.labels(**lab).observe(latency_ms / 1000.0)
        if ttft_ms is not None:
            self.ttft.labels(**lab).observe(ttft_ms / 1000.0)


class OpenTelemetryExporter:
    """One span and GenAI metrics per request (needs ``opentelemetry-api``; spans and
    metrics go wherever the configured SDK providers send them).

    ``tracer_provider`` / ``meter_provider``: explicit providers (default: the global
    ones). The span is named ``"{operation} {model}"`` as the GenAI conventions ask, with
    kind CLIENT, spanning the request's latency, and :func:`genai_attributes`.
    """

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        try:
            # lazy import of an optional dependency: opentelemetry-api (the otel extra)
            from opentelemetry import metrics, trace
        except ImportError:  # pragma: no cover
            raise ImportError(
                "OpenTelemetryExporter needs opentelemetry-api: pip install 'promptcache[otel]'"
            ) from None

        self._trace = trace
        self.tracer = trace.get_tracer("promptcache", __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter("promptcache", __version__, meter_provider=meter_provider)
        self.token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Measures number of input and output tokens used",
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration"
        )
        self.tokens = meter.create_counter(
            "promptcache.prompt.tokens",
            unit="{token}",
            description="Tokens by kind: uncached, cache_read, cache_write, output",
        )
        self.cost = meter.create_counter(
            "promptcache.cost", unit="USD", description="Cost of the requests"
        )

    def __call__(
        self,
        usage: Usage,
        *,
        model: str | None = None,
        provider: str | None = None,
        api: str | None = None,
        prefix_hash: str | None = None,
        latency_ms: float | None = None,
        ttft_ms: float | None = None,
        price: Any = None,
        **_: Any,
    ) -> None:
        """Emit one span and the metrics (signature of a ``wrap`` callback)."""
        attrs = genai_attributes(
            usage, model=model, provider=provider, api=api, prefix_hash=prefix_hash, price=price
        )
        if ttft_ms is not None:
            attrs["promptcache.ttft_ms"] = float(ttft_ms)
        end_ns = time.time_ns()
        start_ns = end_ns - int((latency_ms or 0.0) * 1e6)
        name = f"{attrs['gen_ai.operation.name']} {attrs.get('gen_ai.request.model', '')}".strip()
        span = self.tracer.start_span(
            name, kind=self._trace.SpanKind.CLIENT, attributes=attrs, start_time=start_ns
        )
        span.end(end_time=end_ns)
        base: dict[str, Any] = {
            k: attrs[k]
            for k in (
                "gen_ai.operation.name",
                "gen_ai.provider.name",
                "gen_ai.request.model",
                "gen_ai.response.model",
            )
            if k in attrs
        }
        self.token_usage.record(usage.prompt_tokens, {**base, "gen_ai.token.type": "input"})
        self.token_usage.record(usage.output_tokens, {**base, "gen_ai.token.type": "output"})
        if latency_ms is not None:
            self.duration.record(latency_ms / 1000.0, base)
        for kind, n in (
            ("uncached", usage.uncached_input_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
            ("output", usage.output_tokens),
        ):
            self.tokens.add(n, {**base, "promptcache.token.kind": kind})
        if "promptcache.cost_usd" in attrs:
            self.cost.add(attrs["promptcache.cost_usd"], base)
