import math

import pytest

from promptcache.prompt import tokens
from promptcache.prompt.tokens import count_tokens, count_tokens_memo, encoding_for_model


def test_cl100k_exact_count_for_gpt4():
    # OpenAI cookbook "How to count tokens with tiktoken": cl100k_base encodes
    # "tiktoken is great!" as [83, 1609, 5963, 374, 2294, 0] -- 6 tokens.
    c = count_tokens("tiktoken is great!", "gpt-4")
    assert (c.tokens, c.encoding, c.approximate) == (6, "cl100k_base", False)


@pytest.mark.parametrize(
    "model,enc",
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-2024-08-06", "o200k_base"),
        ("gpt-5.1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("openai/gpt-4.1", "o200k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("claude-sonnet-4-5", None),
        (None, None),
    ],
)
def test_encoding_for_model(model, enc):
    assert encoding_for_model(model) == enc


def test_o200k_without_file_is_flagged_approximate(monkeypatch, tmp_path):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # empty cache: nothing offline
    tokens._load_encoding.cache_clear()
    try:
        c = count_tokens("tiktoken is great!", "gpt-4o")
        assert c.approximate and c.encoding == "cl100k_base" and c.tokens == 6
    finally:
        tokens._load_encoding.cache_clear()


def test_other_providers_are_estimates():
    c = count_tokens("hello world", "claude-sonnet-4-5")
    assert c.approximate and c.tokens == 2  # cl100k: "hello", " world"


def test_bytes_fallback_without_tiktoken(monkeypatch):
    monkeypatch.setattr(tokens, "_load_encoding", lambda name: None)
    text = "héllo wörld!"  # 14 UTF-8 bytes
    c = count_tokens(text, "gpt-4")
    assert (c.tokens, c.encoding, c.approximate) == (math.ceil(14 / 4), "bytes/4", True)


def test_registered_counter_is_exact_and_longest_prefix_wins():
    tokens.register_counter("claude-", lambda t, m: 1)
    tokens.register_counter("claude-opus", lambda t, m: len(t))
    try:
        assert count_tokens("abc", "claude-opus-4-1").tokens == 3
        assert count_tokens("abc", "claude-sonnet-4-5") == tokens.TokenCount(
            1, "counter:claude-", False
        )
        assert tokens.text_tokens("abcd", "claude-opus-4-1") == 4
    finally:
        tokens.unregister_counter("claude-")
        tokens.unregister_counter("claude-opus")
    assert count_tokens("abc", "claude-opus-4-1").approximate


def test_memo_is_keyed_by_hash():
    calls = []
    tokens.register_counter("memo-model", lambda t, m: calls.append(t) or len(t))
    try:
        assert count_tokens_memo("h1", "aaaa", "memo-model").tokens == 4
        assert count_tokens_memo("h1", "aaaa", "memo-model").tokens == 4
        assert calls == ["aaaa"]
    finally:
        tokens.unregister_counter("memo-model")


def test_bad_input():
    with pytest.raises(TypeError):
        count_tokens(b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        tokens.register_counter("x", 3)  # type: ignore[arg-type]


def test_anthropic_count_tokens_endpoint_as_counter():
    import json

    import anthropic
    import httpx2

    asked = []

    def handler(request):
        body = json.loads(request.content)
        asked.append((request.url.path, body["model"], body["messages"][0]["content"]))
        text = body["messages"][0]["content"]
        # a fake endpoint: 7 tokens of wrapper + one per character
        return httpx2.Response(200, json={"input_tokens": 7 + len(text)})

    client = anthropic.Anthropic(
        api_key="x",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )
    tokens.register_counter("claude-", tokens.anthropic_counter(client))
    try:
        c = count_tokens("hello", "claude-sonnet-4-6")
        # wrapper measured with "." : 7 + 1 - 1 = 7 -> "hello": 12 - 7 = 5
        assert (c.tokens, c.approximate) == (5, False)
        assert asked[0] == ("/v1/messages/count_tokens", "claude-sonnet-4-6", ".")
        count_tokens("abc", "claude-sonnet-4-6")
        assert len(asked) == 3  # the wrapper is measured once per model
    finally:
        tokens.unregister_counter("claude-")
