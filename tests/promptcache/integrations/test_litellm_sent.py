"""The LiteLLM callback scores what LiteLLM sent, from the kwargs LiteLLM 1.110 passes its
loggers (``litellm/litellm_core_utils/litellm_logging.py``: ``additional_args`` with
``complete_input_dict`` and ``api_base`` at pre-call; ``litellm_params``;
``original_response`` the raw JSON text; for streams ``complete_streaming_response``)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from promptcache import Tracker, litellm_callback

SYSTEM = "You plan trips; answer in metric units. " * 120
BODY = {  # what LiteLLM sends to /v1/messages for anthropic/... (no cache_control)
    "model": "claude-sonnet-4-5",
    "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
    "max_tokens": 8,
    "system": [{"type": "text", "text": SYSTEM}],
}
RAW = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [{"type": "text", "text": "Hello"}],
    "usage": {
        "input_tokens": 1200,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": 2,
    },
}


def kwargs(call_id: str, *, stream: bool = False) -> dict:
    return {
        "model": "claude-sonnet-4-5",
        "litellm_call_id": call_id,
        "call_type": "completion",
        "stream": stream,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}],
        "litellm_params": {
            "custom_llm_provider": "anthropic",
            "api_base": "https://api.anthropic.com/v1/messages",
        },
        "additional_args": {"complete_input_dict": BODY},
        "original_response": json.dumps(RAW),
    }


def test_messages_api_without_breakpoints_is_no_breakpoint(tmp_path) -> None:
    tracker = Tracker(tmp_path / "l.db")
    cb = litellm_callback(tracker)
    t0 = datetime(2026, 12, 3, 9, 0, 0)
    for i in range(2):
        cb.log_success_event(kwargs(f"id{i}"), None, t0, t0 + timedelta(seconds=1))
    recs = tracker.records()
    # Anthropic caches only up to explicit markers (prompt-caching docs): none were sent
    assert [r.miss_cause for r in recs] == ["no_breakpoint", "no_breakpoint"]
    assert all(r.api == "messages" and r.provider == "anthropic" for r in recs)
    # the provider's own usage: 1200 input tokens, none cached
    assert recs[0].usage.uncached_input_tokens == 1200 and recs[0].usage.cache_reported


def test_a_stream_is_scored_from_the_body_kept_at_pre_call(tmp_path) -> None:
    tracker = Tracker(tmp_path / "l.db")
    cb = litellm_callback(tracker)
    pre = kwargs("s1", stream=True)
    pre["additional_args"]["api_base"] = "http://127.0.0.1:4000/v1/messages"
    cb.log_pre_api_call("claude-sonnet-4-5", pre["messages"], pre)
    done = kwargs("s1", stream=True)
    done["additional_args"] = {}  # LiteLLM's success kwargs for a stream no longer carry it
    done["litellm_params"] = {"custom_llm_provider": "anthropic"}
    t0 = datetime(2026, 12, 3, 9, 0, 0)
    cb.log_success_event(done, None, t0, t0)  # not complete yet: nothing recorded
    assert tracker.count() == 0

    class Assembled:  # LiteLLM's assembled ModelResponse, as a dict
        def model_dump(self) -> dict:
            return {
                "model": "claude-sonnet-4-5",
                "usage": {
                    "prompt_tokens": 1200,
                    "completion_tokens": 2,
                    "prompt_tokens_details": {"cached_tokens": 0},
                    "cache_read_input_tokens": 0,
                    "cache_creation_input_tokens": 0,
                },
            }

    done["complete_streaming_response"] = Assembled().model_dump()
    cb.log_success_event(done, done["complete_streaming_response"], t0, t0)
    (rec,) = tracker.records()
    assert (rec.api, rec.provider, rec.stream) == ("messages", "local", True)
    assert rec.miss_cause == "no_breakpoint" and rec.usage.prompt_tokens == 1200
