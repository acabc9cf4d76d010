"""``/metrics``: Prometheus text format through ``prometheus_client``.

Server-side series (observed per request by the routes):

* ``promptcache_requests_total{endpoint,status}`` — requests by HTTP status.
* ``promptcache_time_to_first_token_seconds`` — histogram, request arrival to first token.
* ``promptcache_inter_token_latency_seconds`` — histogram, gap between streamed tokens.
* ``promptcache_request_duration_seconds`` — histogram, arrival to last byte.
* ``promptcache_prompt_tokens_total`` / ``promptcache_reported_cached_tokens_total`` /
  ``promptcache_reported_cache_write_tokens_total`` — usage as reported to clients
  (emulated in ``anthropic``/``openai`` modes).

Engine series (read from an engine snapshot at scrape time):

* ``promptcache_prefix_cache_queries_tokens_total``, ``..._hits_tokens_total`` and
  ``promptcache_prefix_cache_hit_rate`` (hits / queries, tokens; physical cache).
* ``promptcache_kv_cache_usage_ratio`` (0..1), ``promptcache_kv_cache_blocks_used``,
  ``promptcache_kv_cache_blocks_total``; ``promptcache_kv_cache_info{dtype,block_size}`` (always
  1: the KV storage format, ``auto``'s model dtype spelled out, e.g. ``bfloat16``/``fp8``/``int8``).
* ``promptcache_num_requests_running`` / ``..._waiting``.
* CPU tier (``--cpu-cache-memory``): ``promptcache_prefix_cache_tier_hits_tokens_total{tier}``
  (``tier="gpu"``: the device pool, ``"cpu"``: the CPU tier; they sum to
  ``..._hits_tokens_total``), ``promptcache_kv_cache_tier_blocks_resident{tier}`` (blocks holding
  cached content now), ``promptcache_kv_cache_tier_blocks_total{tier}`` (capacity; cpu: the
  tier's own share), ``promptcache_kv_tier_transfer_bytes_total{direction}`` and
  ``promptcache_kv_tier_transfer_seconds_total{direction}`` (``gpu_to_cpu`` offloads of evicted
  blocks, ``cpu_to_gpu`` restores; bandwidth = bytes / seconds),
  ``promptcache_cpu_cache_evictions_total``.
* Disk tier (``--disk-cache-dir``): ``tier="disk"`` samples of the tier series above
  (``direction`` ``to_disk`` and ``disk_to_gpu``), ``promptcache_disk_cache_bytes``,
  ``..._size_bytes``, ``promptcache_disk_cache_evictions_total``,
  ``promptcache_disk_cache_bad_files_total``.
* ``promptcache_spec_decode_draft_tokens_total``, ``..._accepted_tokens_total``,
  ``..._verify_steps_total``: speculative decoding (acceptance rate = accepted / draft; mean
  accepted length = 1 + accepted / verify steps).
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class _EngineCollector:
    def __init__(self, owner: ServerMetrics):
        self.owner = owner

    def collect(self):
        snap = self.owner.snapshot
        if snap is None:
            return
        q = CounterMetricFamily(
            "promptcache_prefix_cache_queries_tokens",
            "Prompt tokens looked up in the engine's prefix cache",
        )
        q.add_metric([], snap.prefix_cache_queries)
        yield q
        h = CounterMetricFamily(
            "promptcache_prefix_cache_hits_tokens",
            "Prompt tokens served from the engine's prefix cache",
        )
        h.add_metric([], snap.prefix_cache_hits)
        yield h
        yield GaugeMetricFamily(
            "promptcache_prefix_cache_hit_rate",
            "Engine prefix-cache hits / queries (tokens, cumulative)",
            value=snap.prefix_cache_hit_rate,
        )
        yield GaugeMetricFamily(
            "promptcache_kv_cache_usage_ratio",
            "Fraction of KV-cache blocks held by live sequences (0..1)",
            value=snap.kv_usage,
        )
        yield GaugeMetricFamily(
            "promptcache_kv_cache_blocks_used",
            "KV-cache blocks neither free nor evictable",
            value=snap.num_blocks - snap.num_free_blocks,
        )
        yield GaugeMetricFamily(
            "promptcache_kv_cache_blocks_total",
            "KV-cache pool size in blocks",
            value=snap.num_blocks,
        )
        info = GaugeMetricFamily(
            "promptcache_kv_cache_info",
            "KV-cache storage format (value always 1)",
            labels=["dtype", "block_size"],
        )
        info.add_metric([snap.kv_cache_dtype, str(snap.block_size)], 1)
        yield info
        yield GaugeMetricFamily(
            "promptcache_num_requests_running", "Sequences running", value=snap.num_running
        )
        yield GaugeMetricFamily(
            "promptcache_num_requests_waiting", "Sequences waiting", value=snap.num_waiting
        )
        p = CounterMetricFamily("promptcache_engine_preemptions", "Sequences preempted")
        p.add_metric([], snap.num_preemptions)
        yield p
        yield from self._tiers(snap)
        # speculative decoding (vLLM's spec_decode_num_* counters); 0 with speculation off
        for name, help_, value in (
            (
                "draft_tokens",
                "Tokens drafted by speculative decoding",
                getattr(snap, "spec_num_draft_tokens", 0),
            ),
            (
                "accepted_tokens",
                "Drafted tokens accepted by verification",
                getattr(snap, "spec_num_accepted_tokens", 0),
            ),
            (
                "verify_steps",
                "Sequence-steps that verified at least one drafted token",
                getattr(snap, "spec_num_verify_steps", 0),
            ),
        ):
            c = CounterMetricFamily(f"promptcache_spec_decode_{name}", help_)
            c.add_metric([], value)
            yield c

    @staticmethod
    def _tiers(snap):
        """The per-tier series of the prefix cache (CPU tier: ``--cpu-cache-memory``)."""

        def of(name: str, default=0):
            return getattr(snap, name, default)

        hits_cpu = of("prefix_cache_hits_cpu")
        # (family, name, help, label, {label value: sample})
        series = (
            (
                CounterMetricFamily,
                "promptcache_prefix_cache_tier_hits_tokens",
                "Prompt tokens served from the prefix cache, by tier (gpu: device pool, cpu: CPU "
                "tier)",
                "tier",
                {"gpu": snap.prefix_cache_hits - hits_cpu, "cpu": hits_cpu},
            ),
            (
                GaugeMetricFamily,
                "promptcache_kv_cache_tier_blocks_resident",
                "KV blocks holding cached content, by tier",
                "tier",
                {"gpu": of("gpu_cache_blocks_resident"), "cpu": of("cpu_cache_blocks_resident")},
            ),
            (
                GaugeMetricFamily,
                "promptcache_kv_cache_tier_blocks_total",
                "KV blocks of each tier (cpu: the tier's own share of host blocks; 0 = off)",
                "tier",
                {"gpu": snap.num_blocks, "cpu": of("cpu_cache_num_blocks")},
            ),
            (
                CounterMetricFamily,
                "promptcache_kv_tier_transfer_bytes",
                "Bytes of KV blocks copied between the tiers",
                "direction",
                {"gpu_to_cpu": of("kv_bytes_gpu_to_cpu"), "cpu_to_gpu": of("kv_bytes_cpu_to_gpu")},
            ),
            (
                CounterMetricFamily,
                "promptcache_kv_tier_transfer_seconds",
                "Time spent copying KV blocks between the tiers",
                "direction",
                {
                    "gpu_to_cpu": of("kv_transfer_seconds_gpu_to_cpu", 0.0),
                    "cpu_to_gpu": of("kv_transfer_seconds_cpu_to_gpu", 0.0),
                },
            ),
        )
        if of("disk_cache_size"):  # --disk-cache-dir: the disk tier's samples
            hits_disk = of("prefix_cache_hits_disk")
            series[0][4]["gpu"] -= hits_disk
            series[0][4]["disk"] = hits_disk
            series[1][4]["disk"] = of("disk_cache_blocks_resident")
            series[3][4]["to_disk"] = of("kv_bytes_to_disk")
            series[3][4]["disk_to_gpu"] = of("kv_bytes_from_disk")
            series[4][4]["disk_to_gpu"] = of("kv_disk_read_seconds", 0.0)
        for family, name, help_, label, samples in series:
            m = family(name, help_, labels=[label])
            for value, sample in samples.items():
                m.add_metric([value], sample)
            yield m
        ev = CounterMetricFamily(
            "promptcache_cpu_cache_evictions", "CPU-tier blocks dropped to make room"
        )
        ev.add_metric([], of("cpu_cache_evictions"))
        yield ev
        if of("disk_cache_size"):
            yield from _EngineCollector._disk(of)

    @staticmethod
    def _disk(of):
        """The disk tier's own series (``--disk-cache-dir``)."""
        for family, name, help_, value in (
            (
                GaugeMetricFamily,
                "promptcache_disk_cache_bytes",
                "Bytes of KV block files in the disk tier's folder (all models)",
                of("disk_cache_bytes"),
            ),
            (
                GaugeMetricFamily,
                "promptcache_disk_cache_size_bytes",
                "The disk tier's cap (--disk-cache-size)",
                of("disk_cache_size"),
            ),
            (
                CounterMetricFamily,
                "promptcache_disk_cache_evictions",
                "Disk-tier files deleted for the cap",
                of("disk_cache_evictions"),
            ),
            (
                CounterMetricFamily,
                "promptcache_disk_cache_bad_files",
                "Corrupt, truncated or foreign disk-tier files skipped (recomputed)",
                of("disk_cache_bad_files"),
            ),
        ):
            m = family(name, help_)
            m.add_metric([], value)
            yield m


class ServerMetrics:
    """The server's registry (one per app, so several apps can live in one process)."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.snapshot: Any | None = None
        r = self.registry
        self.requests = Counter(
            "promptcache_requests",
            "HTTP requests by endpoint and status",
            ["endpoint", "status"],
            registry=r,
        )
        self.ttft = Histogram(
            "promptcache_time_to_first_token_seconds",
            "Request arrival to first output token",
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.itl = Histogram(
            "promptcache_inter_token_latency_seconds",
            "Time between consecutive output tokens",
            buckets=ITL_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            "promptcache_request_duration_seconds",
            "Request arrival to the last byte of the response",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.prompt_tokens = Counter(
            "promptcache_prompt_tokens", "Prompt tokens served", registry=r
        )
        self.cached_tokens = Counter(
            "promptcache_reported_cached_tokens",
            "Cached prompt tokens reported to clients",
            registry=r,
        )
        self.write_tokens = Counter(
            "promptcache_reported_cache_write_tokens",
            "Cache-write prompt tokens reported to clients",
            registry=r,
        )
        self.output_tokens = Counter(
            "promptcache_generation_tokens", "Output tokens served", registry=r
        )
        r.register(_EngineCollector(self))

    def render(self, snapshot: Any) -> bytes:
        """The exposition text with the engine series taken from ``snapshot``."""
        self.snapshot = snapshot
        return generate_latest(self.registry)
