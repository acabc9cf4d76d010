"""Usage shapes users actually have: LiteLLM ModelResponse (dict and object, streamed or not,
for Anthropic, OpenAI, Gemini and Bedrock models), fields that disagree, and self-hosted
servers' own cache fields.

LiteLLM is not installed here (its wheel is 43 MB with tokenizers, huggingface-hub, aiohttp,
openai and httpx as dependencies); the shapes below are what ``ModelResponse.model_dump()``
gives, built from litellm 1.110.2's own code: ``litellm/types/utils.py`` (``Usage.__init__``,
``PromptTokensDetailsWrapper``), ``llms/anthropic/chat/transformation.py``
(``calculate_usage``: prompt_tokens = input + cache read + cache creation),
``llms/bedrock/chat/converse_transformation.py`` (the same for Converse) and
``llms/vertex_ai/gemini/...`` (``cachedContentTokenCount`` -> ``cached_tokens``).
"""

from __future__ import annotations

import warnings
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest

from promptcache import normalize_usage
from promptcache.errors import PromptCacheWarning, UsageError
from promptcache.integrations.litellm import PromptCacheCallback, litellm_callback
from promptcache.providers.usage_reconcile import FIELDS_DISAGREED


def model_response(usage: dict, model: str) -> dict:
    return {
        "id": "chatcmpl-5b1c",
        "created": 1764578000,
        "model": model,
        "object": "chat.completion",
        "system_fingerprint": None,
        "choices": [
            {
                "finish_reason": "stop",
                "index": 0,
                "message": {"content": "Hi.", "role": "assistant", "tool_calls": None},
            }
        ],
        "usage": usage,
    }


# Anthropic through LiteLLM: input_tokens 30, cache_read 4980, cache_creation 20 (5m)
ANTHROPIC = model_response(
    {
        "completion_tokens": 12,
        "prompt_tokens": 5030,
        "total_tokens": 5042,
        "completion_tokens_details": {"reasoning_tokens": 0, "text_tokens": 12},
        "prompt_tokens_details": {
            "audio_tokens": None,
            "cached_tokens": 4980,
            "text_tokens": 30,
            "image_tokens": None,
            "cache_write_tokens": 20,
            "cache_creation_tokens": 20,
            "cache_creation_token_details": {
                "ephemeral_5m_input_tokens": 20,
                "ephemeral_1h_input_tokens": 0,
            },
        },
        "cache_creation_input_tokens": 20,
        "cache_read_input_tokens": 4980,
    },
    "claude-sonnet-4-5-20250929",
)
OPENAI = model_response(
    {
        "completion_tokens": 5,
        "prompt_tokens": 2000,
        "total_tokens": 2005,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    },
    "gpt-4o-2024-08-06",
)
GEMINI = model_response(
    {
        "completion_tokens": 40,
        "prompt_tokens": 9000,
        "total_tokens": 9040,
        "prompt_tokens_details": {"cached_tokens": 8192, "text_tokens": 9000},
    },
    "gemini-2.5-flash",
)
# Bedrock Converse through LiteLLM: inputTokens 100, cacheReadInputTokens 3000,
# cacheWriteInputTokens 1000 with a 1h TTL
BEDROCK = model_response(
    {
        "completion_tokens": 8,
        "prompt_tokens": 4100,
        "total_tokens": 4108,
        "prompt_tokens_details": {
            "cached_tokens": 3000,
            "text_tokens": 100,
            "cache_creation_tokens": 1000,
            "cache_write_tokens": 1000,
            "cache_creation_token_details": {"ephemeral_1h_input_tokens": 1000},
        },
        "cache_creation_input_tokens": 1000,
        "cache_read_input_tokens": 3000,
    },
    "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
)


@pytest.mark.parametrize(
    ("resp", "uncached", "read", "write", "ttl"),
    [
        (ANTHROPIC, 30, 4980, 20, {"5m": 20}),
        (OPENAI, 80, 1920, 0, {}),
        (GEMINI, 808, 8192, 0, {}),
        (BEDROCK, 100, 3000, 1000, {"1h": 1000}),
    ],
    ids=["anthropic", "openai", "gemini", "bedrock"],
)
def test_litellm_model_response_dict(resp, uncached, read, write, ttl) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # consistent fields: no warning
        u = normalize_usage("litellm", resp)
    assert (u.uncached_input_tokens, u.cache_read_tokens, u.cache_write_tokens) == (
        uncached,
        read,
        write,
    )
    assert dict(u.cache_write_by_ttl) == ttl
    assert u.prompt_tokens == resp["usage"]["prompt_tokens"]
    assert u.model == resp["model"]


class FakeModel:
    """Stands for a pydantic ModelResponse: read through model_dump like the real one."""

    def __init__(self, data: dict) -> None:
        self._data = data

    def model_dump(self, **_: object) -> dict:
        return self._data


def test_litellm_object_and_stream() -> None:
    assert normalize_usage("litellm", FakeModel(ANTHROPIC)).cache_read_tokens == 4980
    # streamed with include_usage: only the last chunk has usage
    chunks = [
        {"id": "c", "model": ANTHROPIC["model"], "choices": [{"delta": {"content": "H"}}]},
        {"id": "c", "model": ANTHROPIC["model"], "choices": [{"delta": {"content": "i"}}]},
        {"id": "c", "model": ANTHROPIC["model"], "choices": [], "usage": ANTHROPIC["usage"]},
    ]
    u = normalize_usage("litellm", chunks)
    assert (u.uncached_input_tokens, u.cache_read_tokens, u.cache_write_tokens) == (30, 4980, 20)
    with pytest.raises(UsageError, match="include_usage"):
        normalize_usage("litellm", chunks[:2])


DISAGREE = {
    "prompt_tokens": 5000,
    "completion_tokens": 10,
    "total_tokens": 5010,
    "prompt_tokens_details": {"cached_tokens": 0},
    "cache_read_input_tokens": 4980,
}


@pytest.mark.parametrize("provider", ["litellm", "openai", "openai_compatible", "vllm", "local"])
def test_disagreeing_fields_count_the_reads_and_warn(provider: str) -> None:
    with pytest.warns(PromptCacheWarning, match="cached_tokens=0 but cache_read_input_tokens"):
        u = normalize_usage(provider, model_response(DISAGREE, "claude-sonnet-4-5"))
    assert (u.cache_read_tokens, u.uncached_input_tokens) == (4980, 20)
    assert FIELDS_DISAGREED in u.flags


def test_only_anthropic_names_is_not_a_disagreement() -> None:
    usage = {"prompt_tokens": 5000, "completion_tokens": 1, "cache_read_input_tokens": 4000}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        u = normalize_usage("litellm", {"usage": usage})
    assert (u.cache_read_tokens, u.uncached_input_tokens, u.cache_reported) == (4000, 1000, True)
    with pytest.raises(UsageError, match="more than"):
        normalize_usage("litellm", {"usage": {**usage, "cache_read_input_tokens": 6000}})


def test_litellm_responses_api_object() -> None:
    resp = {
        "id": "resp_1",
        "model": "gpt-5",
        "usage": {
            "input_tokens": 3000,
            "output_tokens": 20,
            "input_tokens_details": {"cached_tokens": 2944},
        },
    }
    u = normalize_usage("litellm", resp)
    assert (u.cache_read_tokens, u.uncached_input_tokens) == (2944, 56)


# ---- self-hosted servers ---------------------------------------------------------------


def test_llamacpp_timings() -> None:
    # OpenAI-compatible route without prompt_tokens_details: timings say 13 of 14 reused
    resp = {
        "choices": [{"finish_reason": "stop", "index": 0, "message": {"content": "x"}}],
        "model": "gpt-3.5-turbo",
        "usage": {"completion_tokens": 326, "prompt_tokens": 14, "total_tokens": 340},
        "timings": {"cache_n": 13, "prompt_n": 1, "prompt_ms": 20.3, "predicted_n": 326},
    }
    for provider in ("llamacpp", "openai_compatible", "local"):
        u = normalize_usage(provider, resp)
        assert (u.cache_read_tokens, u.uncached_input_tokens, u.output_tokens) == (13, 1, 326)
    # native /completion: no usage, prompt = cache_n + prompt_n
    native = {"content": "x", "timings": {"cache_n": 1190, "prompt_n": 12, "predicted_n": 14}}
    u = normalize_usage("llamacpp", native)
    assert (u.cache_read_tokens, u.uncached_input_tokens, u.output_tokens) == (1190, 12, 14)
    # streamed: the final chunk carries the timings
    chunks = [
        {"choices": [{"delta": {"content": "Hel"}}]},
        {"choices": [{"finish_reason": "stop", "delta": {}}], "timings": native["timings"]},
    ]
    assert normalize_usage("llamacpp", chunks).cache_read_tokens == 1190


def test_sglang_native_and_openai() -> None:
    native = {
        "text": "ok",
        "meta_info": {"prompt_tokens": 2048, "completion_tokens": 4, "cached_tokens": 2000},
    }
    u = normalize_usage("sglang", native)
    assert (u.cache_read_tokens, u.uncached_input_tokens) == (2000, 48)
    # OpenAI API without --enable-cache-report: unknown, not a miss
    plain = {"model": "qwen", "usage": {"prompt_tokens": 2048, "completion_tokens": 4}}
    u = normalize_usage("sglang", plain)
    assert not u.cache_reported and u.hit_rate is None


def test_ollama_prompt_eval_count_against_the_prompt_length() -> None:
    turn2 = {
        "model": "llama3.2",
        "done": True,
        "prompt_eval_count": 26,
        "eval_count": 40,
        "message": {"role": "assistant", "content": "..."},
    }
    # without the prompt length the reads are unknown
    u = normalize_usage("ollama", turn2)
    assert not u.cache_reported and u.uncached_input_tokens == 26
    # a 1,200-token prompt of which Ollama evaluated 26: 1,174 came from its cache
    u = normalize_usage("ollama", turn2, prompt_tokens=1200)
    assert (u.cache_read_tokens, u.uncached_input_tokens, u.output_tokens) == (1174, 26, 40)
    # prompt_eval_count is missing when the whole prompt was cached (ollama#2068)
    full = {k: v for k, v in turn2.items() if k != "prompt_eval_count"}
    assert normalize_usage("ollama", full, prompt_tokens=1200).cache_read_tokens == 1200
    with pytest.raises(UsageError, match="prompt_eval_count=26 > prompt_tokens=10"):
        normalize_usage("ollama", turn2, prompt_tokens=10)


def test_tgi_reports_nothing_about_the_cache() -> None:
    resp = {"model": "tgi", "usage": {"prompt_tokens": 900, "completion_tokens": 9}}
    u = normalize_usage("tgi", resp)
    assert not u.cache_reported and u.uncached_input_tokens == 900


def test_vllm_prompt_tokens_details() -> None:
    resp = {
        "model": "Qwen/Qwen3-8B",
        "usage": {
            "prompt_tokens": 1500,
            "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 1488},
        },
    }
    u = normalize_usage("vllm", resp)
    assert (u.cache_read_tokens, u.uncached_input_tokens) == (1488, 12)


# A Responses API reply from an OpenAI-compatible server (the local engine and vLLM serve
# /v1/responses): the shape of OpenAI's documented Responses usage (input_tokens includes
# input_tokens_details.cached_tokens), here with 2,176 of 2,200 input tokens read.
_RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "model": "SmolLM2-135M-Instruct",
    "usage": {
        "input_tokens": 2200,
        "input_tokens_details": {"cached_tokens": 2176},
        "output_tokens": 16,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 2216,
    },
}


@pytest.mark.parametrize("provider", ["openai_compatible", "local", "vllm"])
def test_responses_reply_from_a_compatible_server(provider: str) -> None:
    u = normalize_usage(provider, _RESPONSE)
    assert (u.uncached_input_tokens, u.cache_read_tokens, u.output_tokens) == (24, 2176, 16)
    assert u.cache_reported and u.model == "SmolLM2-135M-Instruct"
    events = [
        {"type": "response.created", "response": {**_RESPONSE, "usage": None}},
        {"type": "response.output_text.delta", "delta": "Hi"},
        {"type": "response.completed", "response": _RESPONSE},
    ]
    s = normalize_usage(provider, events)
    assert (s.uncached_input_tokens, s.cache_read_tokens, s.output_tokens) == (24, 2176, 16)
    # without input_tokens_details the cache is unknown, not a miss
    bare = {**_RESPONSE, "usage": {"input_tokens": 2200, "output_tokens": 16}}
    assert not normalize_usage(provider, bare).cache_reported


# ---- the LiteLLM callback ----------------------------------------------------------------


class FakeTracker:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def record(self, usage, **fields):  # noqa: ANN001, ANN201
        self.calls.append((usage, fields))
        return fields.get("record_id")


def test_callback_records_provider_latency_and_call_id() -> None:
    tracker = FakeTracker()
    cb = litellm_callback(tracker, metadata={"app": "t"})
    assert isinstance(cb, PromptCacheCallback)
    t0 = datetime(2026, 12, 1, 9, 0, 0)
    kwargs = {
        "model": "claude-sonnet-4-5-20250929",
        "litellm_call_id": "call-1",
        "litellm_params": {"custom_llm_provider": "anthropic"},
        "messages": [{"role": "user", "content": "hi"}],
        "optional_params": {"tools": [{"type": "function", "function": {"name": "f"}}]},
    }
    cb.log_success_event(kwargs, FakeModel(ANTHROPIC), t0, t0 + timedelta(milliseconds=850))
    ((usage, fields),) = tracker.calls
    assert usage.cache_read_tokens == 4980 and usage.provider == "anthropic"
    assert fields["record_id"] == "call-1"
    assert fields["latency_ms"] == pytest.approx(850.0)
    assert fields["metadata"] == {"app": "t"}
    assert fields["request"]["tools"][0]["function"]["name"] == "f"
    # function style, and a response without usage is recorded with usage unknown
    # (no call left out), never raised
    cb(kwargs, SimpleNamespace(), t0, t0)
    assert len(tracker.calls) == 2
    unknown, _ = tracker.calls[1]
    assert "usage_unknown" in unknown.flags and unknown.prompt_tokens == 0


def test_litellm_keeps_one_callback_per_tracker() -> None:
    """LiteLLM drops a custom logger whose class name and public scalar attributes equal
    one it already has; two promptcache callbacks (two ledgers) must both be kept."""
    litellm = pytest.importorskip("litellm")
    key = litellm.logging_callback_manager._get_custom_logger_key
    a, b = litellm_callback(FakeTracker()), litellm_callback(FakeTracker())
    assert key(a) != key(b)
