"""``promptcache serve --cpu-cache-memory``: the usage extension field ``promptcache_cache_tiers``
(``{"gpu": n, "cpu": m}``) read through the official ``openai`` and ``anthropic`` clients, and
the per-tier ``/metrics`` series, on a server whose device pool holds 12 blocks (192 tokens).

Expected counts: a rerun's cached tokens are its prompt length minus one, rounded down to
whole 16-token blocks (the engine always computes the last token); all of them come from the
CPU tier when the four 81-140-token prompts after it pushed its blocks out of the 12-block
pool (at least 5 cached blocks each: 25 or more through 12 slots, least recently used first,
and the first prompt's are the least recently used)."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

BLOCK = 16


@pytest.fixture(scope="module")
def server(server_factory):
    return server_factory(
        extra_args=["--num-kv-blocks", "12", "--cpu-cache-memory", "64MiB", "--max-num-seqs", "1"]
    )


@pytest.fixture(scope="module")
def client(server):
    return server.openai_client(max_retries=0, timeout=120)


def prompt(i: int) -> str:
    return (
        f"Ticket {i}: the customer writes that the kettle bought on the {i}th of March stopped "
        "heating after a week; the light comes on, the water stays cold, the fuse is fine, and "
        "the receipt is attached. They ask for a replacement or a refund and want to know how "
        "long the courier takes, whether they must pay for postage, and if the warranty covers "
        "the limescale filter too. Summary:"
    )


def metrics(server) -> dict[tuple[str, tuple], float]:
    text = httpx.get(server.base_url + "/metrics", timeout=30).text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_usage_splits_cached_tokens_by_tier_and_metrics_count_them(server, client):
    before = metrics(server)
    firsts = [
        client.completions.create(model="local", prompt=prompt(i), max_tokens=2, temperature=0)
        for i in range(5)
    ]
    n = firsts[0].usage.prompt_tokens
    assert 81 <= n <= 140 and all(f.usage.prompt_tokens_details.cached_tokens == 0 for f in firsts)
    again = client.completions.create(model="local", prompt=prompt(0), max_tokens=2, temperature=0)
    expected = (n - 1) // BLOCK * BLOCK
    u = again.usage
    assert u.prompt_tokens_details.cached_tokens == expected  # the provider's field: the total
    assert u.promptcache_cache_tiers == {"gpu": 0, "cpu": expected}  # the extension field
    assert again.choices[0].text == firsts[0].choices[0].text
    after = metrics(server)

    def delta(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("promptcache_prefix_cache_tier_hits_tokens_total", tier="cpu") == expected
    assert delta("promptcache_prefix_cache_tier_hits_tokens_total", tier="gpu") == 0
    block_bytes = 2 * 30 * 3 * 64 * 4 * BLOCK  # SmolLM2-135M, float32: 737,280 bytes a block
    moved_back = delta("promptcache_kv_tier_transfer_bytes_total", direction="cpu_to_gpu")
    assert moved_back == expected // BLOCK * block_bytes
    assert delta("promptcache_kv_tier_transfer_bytes_total", direction="gpu_to_cpu") > 0
    assert delta("promptcache_kv_tier_transfer_seconds_total", direction="cpu_to_gpu") > 0
    tier_blocks = 64 * 2**20 // block_bytes
    assert after[("promptcache_kv_cache_tier_blocks_total", (("tier", "cpu"),))] == tier_blocks
    assert after[("promptcache_kv_cache_tier_blocks_total", (("tier", "gpu"),))] == 12
    assert after[("promptcache_kv_cache_tier_blocks_resident", (("tier", "cpu"),))] > 0


def test_anthropic_client_parses_the_extension_field(server):
    c = server.anthropic_client(max_retries=0, timeout=120)
    msgs = [{"role": "user", "content": prompt(77)}]
    c.messages.create(model="local", max_tokens=1, messages=msgs)
    r = c.messages.create(model="local", max_tokens=1, messages=msgs)
    cached = r.usage.cache_read_input_tokens
    assert cached > 0 and cached % BLOCK == 0
    assert r.usage.promptcache_cache_tiers == {"gpu": cached, "cpu": 0}
