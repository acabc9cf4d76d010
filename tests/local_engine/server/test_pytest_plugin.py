"""``promptcache.integrations.pytest_plugin``: the pytest plugin (pytest11 entry point) and its helpers."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from promptcache.integrations.pytest_plugin import (
    assert_cache_hit,
    assert_cache_miss,
    cached_tokens,
)


def test_cached_tokens_reads_every_usage_shape():
    import anthropic.types as at
    import openai.types.chat as oc
    from openai.types import CompletionUsage

    chat = oc.ChatCompletion.model_validate(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [],
            "usage": {
                "prompt_tokens": 2000,
                "completion_tokens": 1,
                "total_tokens": 2001,
                "prompt_tokens_details": {"cached_tokens": 1920},
            },
        }
    )
    assert cached_tokens(chat) == 1920
    assert cached_tokens(CompletionUsage(prompt_tokens=5, completion_tokens=1, total_tokens=6)) == 0
    msg = at.Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 10,
                "output_tokens": 1,
                "cache_read_input_tokens": 1200,
                "cache_creation_input_tokens": 0,
            },
        }
    )
    assert cached_tokens(msg) == 1200
    assert (
        cached_tokens({"usage": {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 7}}})
        == 7
    )
    assert assert_cache_hit(msg, min_tokens=1024) == 1200
    with pytest.raises(AssertionError, match="at least 1201"):
        assert_cache_hit(msg, min_tokens=1201)
    with pytest.raises(AssertionError):
        assert_cache_miss(chat)
    with pytest.raises(ValueError):
        cached_tokens({"id": "no usage"})


def test_plugin_is_registered():
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"], capture_output=True, text=True, timeout=120
    )
    assert "--promptcache-cache-mode" in p.stdout


@pytest.mark.slow
def test_plugin_fixture_in_an_application_suite(tmp_path):
    """An application's own test file using the fixtures, run by pytest in a subprocess
    (starts its own engine: slow)."""
    (tmp_path / "test_app.py").write_text(
        textwrap.dedent("""
        from promptcache.integrations.pytest_plugin import assert_cache_hit, assert_cache_miss

        SYSTEM = "You are the help desk of a bicycle shop. " * 8

        def test_prompt_is_cached(promptcache_openai, promptcache_engine):
            assert promptcache_engine.cache_mode == "automatic"
            kw = dict(model="local", max_tokens=1,
                      messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}])
            assert_cache_miss(promptcache_openai.chat.completions.create(**kw))
            assert_cache_hit(promptcache_openai.chat.completions.create(**kw), min_tokens=64)

        def test_anthropic_client_too(promptcache_anthropic):
            r = promptcache_anthropic.messages.create(model="m", max_tokens=1, system=SYSTEM,
                                                      messages=[{"role": "user", "content": "hi"}])
            assert_cache_hit(r, min_tokens=64)
    """)
    )
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 passed" in p.stdout
