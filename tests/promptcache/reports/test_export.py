"""Prometheus and OpenTelemetry export: metric values and GenAI attribute names."""

from __future__ import annotations

import pytest

import promptcache
from promptcache import Price, Usage
from promptcache.reports.export import OpenTelemetryExporter, PrometheusExporter, genai_attributes

prometheus_client = pytest.importorskip(
    "prometheus_client", reason="prometheus extra not installed"
)
sdk_trace = pytest.importorskip("opentelemetry.sdk.trace", reason="opentelemetry-sdk not installed")

PRICE = Price(input="3", output="15", cache_read="0.30", cache_write_5m="3.75", cache_write_1h="6")
# 50 uncached + 1000 read + 200 written (5m), 40 out
USAGE = Usage(
    uncached_input_tokens=50,
    cache_read_tokens=1000,
    cache_write_tokens=200,
    cache_write_by_ttl={"5m": 200},
    output_tokens=40,
    provider="anthropic",
    model="claude-sonnet-4-5",
)
# cost: 50*3 + 1000*0.3 + 200*3.75 + 40*15 = 150 + 300 + 750 + 600 = 1800 micro-$
# no cache: 1250*3 + 600 = 4350 micro-$; saving 2550 micro-$


def test_genai_attribute_names_and_values():
    a = genai_attributes(USAGE, api="messages", prefix_hash="abc", price=PRICE)
    # input_tokens INCLUDES cached tokens: 50 + 1000 + 200 = 1250
    assert a["gen_ai.usage.input_tokens"] == 1250
    assert a["gen_ai.usage.cache_read.input_tokens"] == 1000
    assert a["gen_ai.usage.cache_creation.input_tokens"] == 200
    assert a["gen_ai.usage.output_tokens"] == 40
    assert a["gen_ai.provider.name"] == "anthropic" and a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.response.model"] == "claude-sonnet-4-5"
    assert a["promptcache.cost_usd"] == pytest.approx(0.0018)
    assert a["promptcache.saving_usd"] == pytest.approx(0.00255)
    assert a["promptcache.hit_rate"] == pytest.approx(1000 / 1250)
    unknown = genai_attributes(Usage(uncached_input_tokens=9, cache_reported=False))
    assert "gen_ai.usage.cache_read.input_tokens" not in unknown  # unknown, not 0
    assert "promptcache.cost_usd" not in unknown


def test_prometheus_counters():
    reg = prometheus_client.CollectorRegistry()
    exp = PrometheusExporter(registry=reg)
    exp(USAGE, price=PRICE, latency_ms=250.0, ttft_ms=80.0)
    exp(USAGE, price=PRICE, latency_ms=750.0)
    lab = {"provider": "anthropic", "model": "claude-sonnet-4-5"}
    assert reg.get_sample_value("promptcache_requests_total", lab) == 2
    assert reg.get_sample_value("promptcache_tokens_total", {**lab, "kind": "cache_read"}) == 2000
    assert reg.get_sample_value("promptcache_tokens_total", {**lab, "kind": "uncached"}) == 100
    assert reg.get_sample_value("promptcache_tokens_total", {**lab, "kind": "cache_write"}) == 400
    assert reg.get_sample_value("promptcache_cost_usd_total", lab) == pytest.approx(0.0036)
    assert reg.get_sample_value("promptcache_saving_usd_total", lab) == pytest.approx(0.0051)
    assert reg.get_sample_value("promptcache_request_latency_seconds_sum", lab) == pytest.approx(
        1.0
    )
    assert reg.get_sample_value("promptcache_ttft_seconds_count", lab) == 1
    text = prometheus_client.generate_latest(reg).decode()
    assert (
        'promptcache_tokens_total{kind="output",model="claude-sonnet-4-5",provider="anthropic"} 80.0'
        in text
    )


def _otel():
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    return OpenTelemetryExporter(tracer_provider=tp, meter_provider=mp), spans, reader


def _metric_points(reader):
    out = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = list(m.data.data_points)
    return out


def test_opentelemetry_span_and_metrics():
    exp, spans, reader = _otel()
    exp(USAGE, api="messages", prefix_hash="p1", latency_ms=500.0, price=PRICE)
    (span,) = spans.get_finished_spans()
    assert span.name == "chat claude-sonnet-4-5"
    assert span.kind.name == "CLIENT"
    assert (span.end_time - span.start_time) == pytest.approx(500e6, rel=1e-3)
    at = dict(span.attributes)
    assert at["gen_ai.usage.input_tokens"] == 1250 and at["gen_ai.usage.output_tokens"] == 40
    assert at["gen_ai.usage.cache_read.input_tokens"] == 1000
    assert at["gen_ai.usage.cache_creation.input_tokens"] == 200
    assert at["promptcache.prefix_hash"] == "p1"
    pts = _metric_points(reader)
    usage_pts = {p.attributes["gen_ai.token.type"]: p.sum for p in pts["gen_ai.client.token.usage"]}
    assert usage_pts == {"input": 1250, "output": 40}
    assert pts["gen_ai.client.operation.duration"][0].sum == pytest.approx(0.5)
    kinds = {
        p.attributes["promptcache.token.kind"]: p.value for p in pts["promptcache.prompt.tokens"]
    }
    assert kinds == {"uncached": 50, "cache_read": 1000, "cache_write": 200, "output": 40}
    assert pts["promptcache.cost"][0].value == pytest.approx(0.0018)


def test_exporters_as_wrap_callbacks(tmp_path):
    import httpx
    import openai

    usage = {
        "prompt_tokens": 2006,
        "completion_tokens": 3,
        "total_tokens": 2009,
        "prompt_tokens_details": {"cached_tokens": 1920},
    }

    def handler(request):
        return httpx.Response(
            200,
            json={
                "id": "c",
                "object": "chat.completion",
                "created": 1,
                "model": "gpt-4o",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "x"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            },
        )

    reg = prometheus_client.CollectorRegistry()
    prom = PrometheusExporter(registry=reg)
    otel, spans, _ = _otel()
    client = openai.OpenAI(
        api_key="k", http_client=httpx.Client(transport=httpx.MockTransport(handler))
    )
    promptcache.wrap(client, promptcache.Tracker(tmp_path / "l.db"), callbacks=[prom, otel])
    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    lab = {"provider": "openai", "model": "gpt-4o"}
    assert reg.get_sample_value("promptcache_tokens_total", {**lab, "kind": "cache_read"}) == 1920
    # gpt-4o: 86*2.5 + 1920*1.25 + 3*10 = 215 + 2400 + 30 = 2645 micro-$
    assert reg.get_sample_value("promptcache_cost_usd_total", lab) == pytest.approx(0.002645)
    (span,) = spans.get_finished_spans()
    assert span.attributes["gen_ai.usage.input_tokens"] == 2006
    assert span.attributes["gen_ai.provider.name"] == "openai"
