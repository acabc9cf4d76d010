"""Shared fixtures: a deterministic token counter (one token per whitespace-separated word)
registered for the model families the placement tests use, so that hand-worked breakpoint
positions do not depend on a tokenizer."""

from __future__ import annotations

import pytest

from promptcache.prompt import tokens


def words(text: str, model: str) -> int:
    return len(text.split())


@pytest.fixture
def word_tokens():
    """Count tokens as words for claude-*, gpt-5.6*, us.anthropic.* and nova models."""
    prefixes = ("claude-", "gpt-5.6", "us.anthropic.", "amazon.nova", "gemini-")
    for p in prefixes:
        tokens.register_counter(p, words)
    yield words
    for p in prefixes:
        tokens.unregister_counter(p)
