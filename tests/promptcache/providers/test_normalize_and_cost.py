"""normalize_usage + cost for every provider, with hand-computed expectations.

Every expected dollar figure is worked out in the comment above it from the bundled
price rows (USD per million tokens, promptcache/data/prices.toml) and compared EXACTLY
(Decimal equality, i.e. to the cent and every digit beyond).
"""

from __future__ import annotations

from decimal import Decimal as D

import anthropic.types as at
import openai.types.chat as oc
import openai.types.responses as orsp
import pytest

import promptcache
from promptcache import Price, Usage, cost, normalize_usage
from promptcache.errors import PricingError, UsageError
from promptcache.ledger.pricing import load_prices, price_for, register_price

# --- Anthropic Messages --------------------------------------------------------------

ANTHROPIC_MESSAGE = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [{"type": "text", "text": "Hello"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 50,
        "cache_read_input_tokens": 100_000,
        "cache_creation_input_tokens": 2_000,
        "cache_creation": {"ephemeral_5m_input_tokens": 1_500, "ephemeral_1h_input_tokens": 500},
        "output_tokens": 400,
    },
}


def test_anthropic_message_dict_counts_and_cost():
    u = normalize_usage("anthropic", ANTHROPIC_MESSAGE)
    # input_tokens EXCLUDES cached: prompt = 50 + 100,000 + 2,000 = 102,050
    assert (u.uncached_input_tokens, u.cache_read_tokens, u.cache_write_tokens) == (
        50,
        100_000,
        2_000,
    )
    assert u.cache_write_5m_tokens == 1_500 and u.cache_write_1h_tokens == 500
    assert u.prompt_tokens == 102_050 and u.output_tokens == 400
    assert u.hit_rate == pytest.approx(100_000 / 102_050, rel=1e-15)
    assert u.model == "claude-sonnet-4-5-20250929" and u.provider == "anthropic"
    c = cost(u)
    # claude-sonnet-4-5: input 3, 5m write 3.75, 1h write 6, read 0.30, output 15 ($/MTok)
    # input 50*3/1e6 = 0.00015; read 100,000*0.30/1e6 = 0.03
    # write 1,500*3.75/1e6 = 0.005625 + 500*6/1e6 = 0.003 -> 0.008625
    # output 400*15/1e6 = 0.006; total = 0.00015+0.03+0.008625+0.006 = 0.044775
    assert c.input == D("0.00015") and c.cache_read == D("0.03")
    assert c.cache_write_by_ttl == {"5m": D("0.005625"), "1h": D("0.003")}
    assert c.cache_write == D("0.008625") and c.output == D("0.006")
    assert c.total == D("0.044775")
    # no cache: 102,050*3/1e6 = 0.30615 + output 0.006 = 0.31215; saving 0.267375
    assert c.baseline == D("0.31215") and c.saving == D("0.267375")
    # break-even: 5m extra 0.75 / saving per read 2.70 -> 1 read; 1h extra 3 / 2.70 -> 2
    assert c.break_even == {"5m": 1, "1h": 2}


def test_anthropic_sdk_object_and_usage_object_give_the_same_answer():
    msg = at.Message.model_validate(ANTHROPIC_MESSAGE)
    from_dict = normalize_usage("anthropic", ANTHROPIC_MESSAGE)
    assert normalize_usage("anthropic", msg) == from_dict
    # the bare usage object carries no model
    assert normalize_usage("anthropic", msg.usage) == from_dict.replace(model=None)
    assert cost(normalize_usage("anthropic", msg)).total == D("0.044775")


def test_anthropic_stream_message_start_plus_delta():
    events = [
        {
            "type": "message_start",
            "message": {
                **ANTHROPIC_MESSAGE,
                "content": [],
                "usage": {**ANTHROPIC_MESSAGE["usage"], "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Hello"},
        },
        {"type": "content_block_stop", "index": 0},
        # message_delta carries the CUMULATIVE output count (400), not an increment
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 400},
        },
        {"type": "message_stop"},
    ]
    streamed = normalize_usage("anthropic", events)
    assert streamed == normalize_usage("anthropic", ANTHROPIC_MESSAGE)
    assert cost(streamed).total == D("0.044775")
    # the SDK's typed events (a generator of pydantic objects) give the same
    from anthropic.types import RawMessageDeltaEvent, RawMessageStartEvent

    sdk_events = iter(
        [
            RawMessageStartEvent.model_validate(events[0]),
            RawMessageDeltaEvent.model_validate(events[4]),
        ]
    )
    assert normalize_usage("anthropic", sdk_events) == streamed


def test_anthropic_creation_without_ttl_split_is_5m_and_flagged():
    u = normalize_usage(
        "anthropic", {"input_tokens": 10, "cache_creation_input_tokens": 1024, "output_tokens": 5}
    )
    assert u.cache_write_by_ttl == {"5m": 1024} and "write_ttl_assumed" in u.flags
    # claude-3-5-haiku: 10*0.80 + 1024*1 + 5*4 = 8 + 1024 + 20 = 1052 -> $0.001052
    assert cost(u, model="claude-3-5-haiku-20241022").total == D("0.001052")


# --- OpenAI Chat Completions / Responses -------------------------------------------

OPENAI_CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "hi"},
            "finish_reason": "stop",
            "logprobs": None,
        }
    ],
    "usage": {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    },
}


def test_openai_chat_dict_object_and_stream_agree():
    u = normalize_usage("openai", OPENAI_CHAT)
    # prompt_tokens INCLUDES cached: uncached = 2006 - 1920 = 86
    assert (u.uncached_input_tokens, u.cache_read_tokens, u.output_tokens) == (86, 1920, 300)
    assert u.prompt_tokens == 2006 and u.hit_rate == pytest.approx(1920 / 2006, rel=1e-15)
    obj = oc.ChatCompletion.model_validate(OPENAI_CHAT)
    assert normalize_usage("openai", obj) == u
    chunks = [
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4o-2024-08-06",
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": "hi"}, "finish_reason": None}
            ],
            "usage": None,
        },
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4o-2024-08-06",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            "usage": None,
        },
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-4o-2024-08-06",
            "choices": [],
            "usage": OPENAI_CHAT["usage"],
        },
    ]
    assert normalize_usage("openai", chunks) == u
    sdk_chunks = (oc.ChatCompletionChunk.model_validate(c) for c in chunks)
    assert normalize_usage("openai", sdk_chunks) == u
    c = cost(u)
    # gpt-4o: input 2.50, cached 1.25, output 10
    # 86*2.5/1e6 = 0.000215; 1920*1.25/1e6 = 0.0024; 300*10/1e6 = 0.003 -> 0.005615
    assert c.total == D("0.005615")
    # no cache: 2006*2.5/1e6 = 0.005015 + 0.003 = 0.008015; saving = 0.0024
    assert c.baseline == D("0.008015") and c.saving == D("0.0024")


def test_openai_stream_without_include_usage_is_a_clear_error():
    chunks = [
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}],
        }
    ]
    with pytest.raises(UsageError, match="include_usage"):
        normalize_usage("openai", chunks)


# The Responses example below is OpenAI's documented shape (usage with
# input_tokens_details.cached_tokens) with counts from a recorded gpt-4.1 response.
OPENAI_RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "status": "completed",
    "model": "gpt-4.1-2025-04-14",
    "output": [],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "usage": {
        "input_tokens": 12033,
        "input_tokens_details": {"cached_tokens": 11904, "cache_write_tokens": 0},
        "output_tokens": 44,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 12077,
    },
}


def test_openai_responses_response_and_completed_event():
    u = normalize_usage("openai", OPENAI_RESPONSE)
    assert (u.uncached_input_tokens, u.cache_read_tokens, u.output_tokens) == (129, 11904, 44)
    assert normalize_usage("openai", orsp.Response.model_validate(OPENAI_RESPONSE)) == u
    events = [
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": {**OPENAI_RESPONSE, "status": "in_progress", "usage": None},
        },
        {"type": "response.output_text.delta", "sequence_number": 1, "delta": "x"},
        {"type": "response.completed", "sequence_number": 2, "response": OPENAI_RESPONSE},
    ]
    assert normalize_usage("openai", events) == u
    # gpt-4.1: 129*2/1e6 = 0.000258; 11904*0.5/1e6 = 0.005952; 44*8/1e6 = 0.000352
    # total 0.006562; no cache 12033*2/1e6 = 0.024066 + 0.000352 = 0.024418
    c = cost(u)
    assert c.total == D("0.006562") and c.baseline == D("0.024418") and c.saving == D("0.017856")


def test_openai_responses_cache_writes_split_by_retention():
    usage = {
        "input_tokens": 5000,
        "output_tokens": 10,
        "input_tokens_details": {
            "cached_tokens": 1000,
            "cache_write_tokens": 3000,
            "cache_write_tokens_details": {"ttl_30m_tokens": 2000, "ttl_12h_tokens": 1000},
        },
        "output_tokens_details": {"reasoning_tokens": 4},
        "total_tokens": 5010,
    }
    u = normalize_usage("openai", usage)
    # input_tokens includes reads and writes: uncached = 5000 - 1000 - 3000 = 1000
    assert (u.uncached_input_tokens, u.cache_read_tokens, u.cache_write_tokens) == (
        1000,
        1000,
        3000,
    )
    assert u.cache_write_by_ttl == {"30m": 2000, "12h": 1000} and u.reasoning_tokens == 4
    # a custom price with write prices for both retentions (1.25x of input 2.00 = 2.50):
    p = Price(input="2", output="8", cache_read="0.2", cache_write={"30m": "2.5", "12h": "2.5"})
    # 1000*2 + 1000*0.2 + 3000*2.5 + 10*8 = 2000 + 200 + 7500 + 80 = 9780 -> $0.00978
    assert cost(u, price=p).total == D("0.00978")
    # the same price without a 12h write price must refuse, not fall back to 30m
    with pytest.raises(PricingError, match="12h"):
        cost(u, price=Price(input="2", output="8", cache_read="0.2", cache_write={"30m": "2.5"}))


# --- Gemini -------------------------------------------------------------------------


def test_gemini_rest_and_sdk_names_and_thoughts_billed_as_output():
    # promptTokenCount INCLUDES cachedContentTokenCount; thoughts are billed as output
    rest = {
        "candidates": [],
        "modelVersion": "gemini-2.5-pro",
        "usageMetadata": {
            "promptTokenCount": 11500,
            "cachedContentTokenCount": 10000,
            "candidatesTokenCount": 1000,
            "thoughtsTokenCount": 10000,
            "totalTokenCount": 22500,
        },
    }
    u = normalize_usage("gemini", rest)
    assert (u.uncached_input_tokens, u.cache_read_tokens, u.output_tokens) == (1500, 10000, 11000)
    assert u.reasoning_tokens == 10000
    sdk = {
        "usage_metadata": {
            "prompt_token_count": 11500,
            "cached_content_token_count": 10000,
            "candidates_token_count": 1000,
            "thoughts_token_count": 10000,
        },
        "model_version": "gemini-2.5-pro",
    }
    assert normalize_usage("gemini", sdk) == u
    c = cost(u)
    # gemini-2.5-pro (<= 200K prompt): input 1.25, cache 0.125, output 10
    # 1500*1.25/1e6 = 0.001875; 10000*0.125/1e6 = 0.00125; 11000*10/1e6 = 0.11
    assert c.total == D("0.113125")
    # no cache: 11500*1.25/1e6 = 0.014375 + 0.11 = 0.124375; saving 0.01125
    assert c.baseline == D("0.124375") and c.saving == D("0.01125")


def test_gemini_long_context_tier_and_stream():
    chunks = [
        {
            "usageMetadata": {
                "promptTokenCount": 250000,
                "cachedContentTokenCount": 200000,
                "candidatesTokenCount": n,
                "totalTokenCount": 250000 + n,
            },
            "modelVersion": "gemini-2.5-pro",
        }
        for n in (10, 500, 1000)
    ]
    u = normalize_usage("gemini", chunks)  # last chunk holds the totals
    assert u.output_tokens == 1000 and u.prompt_tokens == 250000
    c = cost(u)
    # > 200K prompt: input 2.50, cache 0.25, output 15
    # 50000*2.5/1e6 = 0.125; 200000*0.25/1e6 = 0.05; 1000*15/1e6 = 0.015 -> 0.19
    assert c.total == D("0.19")
    # no cache: 250000*2.5/1e6 = 0.625 + 0.015 = 0.64
    assert c.baseline == D("0.64")


# --- Bedrock ------------------------------------------------------------------------


def test_bedrock_converse_cache_details_and_stream_metadata():
    resp = {
        "output": {"message": {"role": "assistant", "content": [{"text": "x"}]}},
        "stopReason": "end_turn",
        "usage": {
            "inputTokens": 20,
            "outputTokens": 100,
            "totalTokens": 4164,
            "cacheReadInputTokens": 3000,
            "cacheWriteInputTokens": 1024,
            "cacheDetails": [{"ttl": "1h", "inputTokens": 1024}],
        },
        "metrics": {"latencyMs": 800},
    }
    u = normalize_usage("bedrock", resp, model="us.anthropic.claude-sonnet-4-5-20250929-v1:0")
    # inputTokens EXCLUDES cache reads and writes
    assert (u.uncached_input_tokens, u.cache_read_tokens, u.cache_write_1h_tokens) == (
        20,
        3000,
        1024,
    )
    assert u.prompt_tokens == 4044
    stream = [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"delta": {"text": "x"}, "contentBlockIndex": 0}},
        {"messageStop": {"stopReason": "end_turn"}},
        {"metadata": {"usage": resp["usage"], "metrics": {"latencyMs": 800}}},
    ]
    assert normalize_usage("bedrock", stream, model=u.model) == u
    c = cost(u)
    # claude-sonnet-4-5 prices: 20*3 = 60; 3000*0.3 = 900; 1024*6 = 6144; 100*15 = 1500
    # sum 8604 micro-dollars -> $0.008604; no cache 4044*3 + 1500 = 13632 -> $0.013632
    assert c.total == D("0.008604") and c.baseline == D("0.013632") and c.saving == D("0.005028")


def test_bedrock_invoke_model_anthropic_body_and_headers():
    body = {
        "id": "msg",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-3-5-haiku-20241022",
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": 7,
            "cache_read_input_tokens": 2048,
            "cache_creation_input_tokens": 0,
            "output_tokens": 12,
        },
    }
    u = normalize_usage("bedrock", body)
    assert (u.uncached_input_tokens, u.cache_read_tokens, u.output_tokens) == (7, 2048, 12)
    headers = {
        "ResponseMetadata": {
            "HTTPHeaders": {
                "x-amzn-bedrock-input-token-count": "7",
                "x-amzn-bedrock-output-token-count": "12",
                "x-amzn-bedrock-cache-read-input-token-count": "2048",
                "x-amzn-bedrock-cache-write-input-token-count": "0",
            }
        }
    }
    h = normalize_usage("bedrock", headers, model="claude-3-5-haiku-20241022")
    assert (h.uncached_input_tokens, h.cache_read_tokens, h.output_tokens) == (7, 2048, 12)
    # claude-3-5-haiku: 7*0.80 = 5.6; 2048*0.08 = 163.84; 12*4 = 48 -> 217.44 micro-$
    assert cost(u).total == cost(h).total == D("0.00021744")


# --- DeepSeek, OpenAI-compatible servers --------------------------------------------


def test_deepseek_hit_and_miss():
    resp = {
        "id": "x",
        "object": "chat.completion",
        "model": "deepseek-chat",
        "choices": [],
        "usage": {
            "prompt_tokens": 1500,
            "completion_tokens": 50,
            "total_tokens": 1550,
            "prompt_cache_hit_tokens": 1280,
            "prompt_cache_miss_tokens": 220,
        },
    }
    u = normalize_usage("deepseek", resp)
    assert (u.uncached_input_tokens, u.cache_read_tokens, u.output_tokens) == (220, 1280, 50)
    c = cost(u)
    # deepseek-chat: miss 0.28, hit 0.028, output 0.42
    # 220*0.28 = 61.6; 1280*0.028 = 35.84; 50*0.42 = 21 -> 118.44 micro-$
    assert c.total == D("0.00011844")
    # no cache: 1500*0.28 = 420 + 21 = 441 micro-$
    assert c.baseline == D("0.000441")
    bad = {**resp["usage"], "prompt_cache_miss_tokens": 219}
    with pytest.raises(UsageError, match="prompt_cache_hit_tokens"):
        normalize_usage("deepseek", bad)


@pytest.mark.parametrize("provider", ["local", "openai_compatible", "vllm", "sglang"])
def test_missing_cached_field_is_unknown_not_a_miss(provider):
    resp = {
        "id": "x",
        "object": "chat.completion",
        "model": "SmolLM2-135M-Instruct",
        "choices": [],
        "usage": {
            "prompt_tokens": 1200,
            "completion_tokens": 5,
            "total_tokens": 1205,
            "prompt_tokens_details": None,
        },
    }
    u = normalize_usage(provider, resp)
    assert u.cache_reported is False and u.hit_rate is None
    assert "cache_not_reported" in u.flags
    assert u.prompt_tokens == 1200
    c = cost(u, price=Price(input="1", output="2"))
    # priced as all-uncached and marked an upper bound: 1200*1 + 5*2 = 1210 micro-$
    assert c.total == D("0.00121") and c.upper_bound is True
    # when the server does report it (vLLM --enable-prompt-tokens-details), it is used
    resp["usage"]["prompt_tokens_details"] = {"cached_tokens": 1024}
    u2 = normalize_usage(provider, resp)
    assert u2.cache_reported and u2.cache_read_tokens == 1024 and u2.uncached_input_tokens == 176


# --- bad input ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "provider,payload,match",
    [
        (
            "openai",
            {
                "prompt_tokens": 100,
                "completion_tokens": 1,
                "prompt_tokens_details": {"cached_tokens": 101},
            },
            "more than",
        ),
        ("openai", {"prompt_tokens": -1, "completion_tokens": 1}, "negative"),
        ("openai", {"prompt_tokens": "12", "completion_tokens": 1}, "integer"),
        ("openai", {"prompt_tokens": 10.5, "completion_tokens": 1}, "integer"),
        (
            "anthropic",
            {
                "input_tokens": 5,
                "output_tokens": 1,
                "cache_creation_input_tokens": 10,
                "cache_creation": {"ephemeral_5m_input_tokens": 4, "ephemeral_1h_input_tokens": 4},
            },
            "cache_creation",
        ),
        ("anthropic", {"output_tokens": 3}, "input_tokens"),
        (
            "gemini",
            {"usageMetadata": {"promptTokenCount": 10, "cachedContentTokenCount": 11}},
            "more than",
        ),
        (
            "bedrock",
            {
                "usage": {
                    "inputTokens": 1,
                    "outputTokens": 1,
                    "cacheWriteInputTokens": 5,
                    "cacheDetails": [{"ttl": "5m", "inputTokens": 4}],
                }
            },
            "cacheDetails",
        ),
        ("bedrock", {"nothing": 1}, "no Bedrock usage"),
        ("mistral", {"prompt_tokens": 1}, "unknown provider"),
        ("anthropic", [], "empty stream"),
        ("anthropic", [{"type": "ping"}], "message_start"),
    ],
)
def test_inconsistent_or_malformed_usage_raises(provider, payload, match):
    with pytest.raises(UsageError, match=match):
        normalize_usage(provider, payload)


def test_usage_constructor_validates():
    with pytest.raises(UsageError, match="negative"):
        Usage(uncached_input_tokens=-5)
    with pytest.raises(UsageError, match="TTL split"):
        Usage(cache_write_tokens=10)
    with pytest.raises(UsageError, match="sums to"):
        Usage(cache_write_tokens=10, cache_write_by_ttl={"5m": 3, "1h": 3})
    with pytest.raises(UsageError, match="normalize_usage"):
        cost({"prompt_tokens": 10})  # type: ignore[arg-type]


# --- prices -------------------------------------------------------------------------


def test_missing_1h_price_is_an_error_not_a_5m_price():
    u = Usage(uncached_input_tokens=10, cache_write_tokens=100, cache_write_by_ttl={"1h": 100})
    with pytest.raises(PricingError, match="1h"):
        cost(u, price=Price(input="3", output="15", cache_read="0.3", cache_write_5m="3.75"))
    with pytest.raises(PricingError, match="cache-read tokens but the price"):
        cost(Usage(cache_read_tokens=5), price=Price(input="1", output="1"))


def test_custom_price_matches_bundled_and_floats_are_exact():
    u = normalize_usage("anthropic", ANTHROPIC_MESSAGE)
    custom = Price(input=3, output=15, cache_read=0.3, cache_write_5m=3.75, cache_write_1h=6)
    assert cost(u, price=custom).total == cost(u).total == D("0.044775")
    # 0.1 + 0.2 style float noise never reaches the cost: 0.3 is Decimal("0.3")
    assert custom.cache_read == D("0.3")
    with pytest.raises(PricingError):
        Price(input=-1, output=1)
    with pytest.raises(PricingError):
        Price(input="abc", output=1)


def test_hand_built_usage_equals_parsed_usage():
    hand = Usage(
        uncached_input_tokens=50,
        cache_read_tokens=100_000,
        cache_write_tokens=2_000,
        cache_write_by_ttl={"5m": 1_500, "1h": 500},
        output_tokens=400,
    )
    assert cost(hand, model="claude-sonnet-4-5").total == D("0.044775")


def test_model_lookup_and_user_tables(tmp_path, monkeypatch):
    import promptcache.ledger.pricing as pricing

    monkeypatch.setattr(pricing, "_USER", {})  # keep registrations local to this test
    monkeypatch.setattr(pricing, "_ALIASES", dict(pricing._ALIASES))
    assert price_for("gpt-4o-mini-2024-07-18").model == "gpt-4o-mini"  # not gpt-4o
    assert price_for("us.anthropic.claude-sonnet-4-5-20250929-v1:0").model == "claude-sonnet-4-5"
    with pytest.raises(PricingError, match="closest"):
        price_for("gpt-4o-turbo-max")
    f = tmp_path / "prices.toml"
    f.write_text(
        '[models."my-model"]\ninput = "1"\noutput = "2"\ncache_read = "0.1"\n'
        'source = "internal"\ndate = "2026-11-29"\n'
    )
    assert load_prices(f) == ["my-model"]
    # 1000*1 + 1000*0.1 + 10*2 = 1120 micro-$
    u = Usage(uncached_input_tokens=1000, cache_read_tokens=1000, output_tokens=10)
    assert cost(u, model="my-model").total == D("0.00112")
    register_price("my-model", Price(input="2", output="2", cache_read="0.2"))
    assert cost(u, model="my-model").total == D("0.00222")
    bad = tmp_path / "bad.toml"
    bad.write_text('[models."x"]\ninput = "1"\noutptu = "2"\n')
    with pytest.raises(PricingError, match="unknown field"):
        load_prices(bad)


def test_every_bundled_row_has_source_and_date():
    from promptcache.ledger.pricing import _load_bundled

    for name, p in _load_bundled().items():
        assert p.source and p.source.startswith("https://"), name
        assert p.date and len(p.date) == 10, name
        # Anthropic multipliers: 1.25x, 2x, 0.1x of input -- except Claude Haiku 3, whose
        # row on the pricing page reads $0.25 / $0.30 / $0.50 / $0.03 (1.2x, 2x, 0.12x),
        # and the cache hits the page prices lower: Fable / Mythos 5.1 $0.25 (0.025x),
        # Opus 5.5 $0.20 (0.05x); a cache_read left unknown (Sonnet / Haiku 5.5) is None
        if p.cache_write_5m is not None and name != "claude-3-haiku":
            assert p.cache_write_5m == p.input * D("1.25"), name
            assert p.cache_write_1h == p.input * 2, name
            low_read = {"claude-fable-5-1": "0.025", "claude-mythos-5-1": "0.025"}
            low_read["claude-opus-5-5"] = "0.05"
            if p.cache_read is not None:
                assert p.cache_read == p.input * D(low_read.get(name, "0.1")), name


def test_public_names_resolve_lazily():
    assert promptcache.normalize_usage is normalize_usage
    assert promptcache.Price is Price


def test_integer_fast_path_equals_decimal_cost_for_every_bundled_model():
    """The ledger prices records with integers (pico-dollars); it must equal cost()."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from promptcache.ledger.pricing import _load_bundled, cost_pico

    models = sorted(_load_bundled())

    @settings(max_examples=300, deadline=None)
    @given(
        st.sampled_from(models),
        st.integers(0, 400_000),
        st.integers(0, 400_000),
        st.integers(0, 50_000),
        st.integers(0, 50_000),
    )
    def check(model, uncached, read, write, out):
        p = price_for(model)
        ttl = "5m" if p.cache_write_5m is not None else next(iter(p.cache_write), None)
        if ttl is None or p.cache_read is None:
            read = write = 0
        u = Usage(
            uncached_input_tokens=uncached,
            cache_read_tokens=read,
            cache_write_tokens=write,
            cache_write_by_ttl={ttl: write} if write else {},
            output_tokens=out,
        )
        total, baseline, _ = cost_pico(u, model=model)
        c = cost(u, model=model)
        assert D(total) / 10**12 == c.total and D(baseline) / 10**12 == c.baseline

    check()


def test_gemini_google_genai_sdk_objects():
    types = pytest.importorskip("google.genai.types", reason="google-genai not installed")
    resp = types.GenerateContentResponse.model_validate(
        {
            "modelVersion": "gemini-2.5-pro",
            "usageMetadata": {
                "promptTokenCount": 11500,
                "cachedContentTokenCount": 10000,
                "candidatesTokenCount": 1000,
                "thoughtsTokenCount": 10000,
                "totalTokenCount": 22500,
            },
        }
    )
    u = normalize_usage("gemini", resp)
    # same counts and the same $0.113125 as the REST dict in the test above
    assert (u.uncached_input_tokens, u.cache_read_tokens, u.output_tokens) == (1500, 10000, 11000)
    assert cost(u).total == D("0.113125")
    assert normalize_usage("gemini", resp.usage_metadata) == u.replace(model=None)
    # a stream of SDK chunks: the last one's metadata is the total
    assert normalize_usage("gemini", [resp, resp]) == u
