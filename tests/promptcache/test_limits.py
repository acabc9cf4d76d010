import pytest

from promptcache.limits import MODEL_LIMITS, cache_limits, provider_of


@pytest.mark.parametrize(
    "model,provider,minimum",
    [
        ("claude-sonnet-4-5-20250929", "anthropic", 1024),
        ("claude-opus-4-20250514", "anthropic", 1024),
        ("claude-opus-4-5", "anthropic", 4096),
        ("claude-haiku-4-5-20251001", "anthropic", 4096),
        ("claude-3-5-haiku-20241022", "anthropic", 2048),
        ("gpt-4o", "openai", 1024),
        ("us.anthropic.claude-3-7-sonnet-20250219-v1:0", "bedrock", 1024),
        ("anthropic.claude-3-5-haiku-20241022-v1:0", "bedrock", 2048),
        ("amazon.nova-pro-v1:0", "bedrock", 1000),
    ],
)
def test_documented_minimums(model, provider, minimum):
    r = cache_limits(model)
    assert (r.provider, r.min_tokens, r.known) == (provider, minimum, True)


def test_every_row_cites_a_source_and_date():
    for row in MODEL_LIMITS:
        assert row.source.startswith("http") or "http" in row.source, row
        assert row.read_on == "2026-11-29"


def test_anthropic_rules_shape():
    r = cache_limits("claude-sonnet-4-5")
    assert (r.max_breakpoints, r.lookback_blocks, r.ttls) == (4, 20, ("5m", "1h"))


def test_openai_retention_and_explicit_breakpoints():
    assert cache_limits("gpt-5.1").retention == ("in_memory", "24h")
    assert cache_limits("gpt-5.5").retention == ("24h",)
    assert cache_limits("gpt-4o").retention == ()
    assert cache_limits("gpt-5.6").explicit_breakpoints
    assert (cache_limits("gpt-4o").min_tokens, cache_limits("gpt-4o").increment) == (1024, 128)


def test_nova_cannot_cache_tools_and_bedrock_is_per_segment():
    r = cache_limits("amazon.nova-lite-v1:0", "bedrock")
    assert "tools" not in r.cacheable and r.min_per_segment


def test_unknown_models_get_flagged_defaults():
    assert not cache_limits("claude-future-9").known
    assert cache_limits("SmolLM2-135M-Instruct").provider == "local"
    assert provider_of("gemini-2.5-pro") == "gemini"
    with pytest.raises(ValueError):
        cache_limits("x", "nope")
