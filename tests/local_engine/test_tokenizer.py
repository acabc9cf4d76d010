"""The engine's tokenizer (built from the GGUF vocabulary with HF ``tokenizers``) against
transformers' tokenizer for the same file, and the chat template against transformers'
rendering."""

from __future__ import annotations

import pytest

CORPUS = [
    "Hello, world!",
    "  leading spaces and trailing   ",
    "I have 3 apples, 42 pears and 1234567 grains of rice; π ≈ 3.14159.",
    "Prices: $19.99, €5, ¥1000, 50% off!!! (2024-06-01T12:30:00Z)",
    "héllo wörld — naïve café, Ærøskøbing, Straße",
    "日本語のテキストと中文文本，以及한국어 텍스트.",
    "Emoji: 🎉🚀👩‍💻 and flags 🇫🇷",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    'for (int i = 0; i < 10; ++i) { printf("%d\\n", i); }',
    '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
    "<|im_start|>user\nWhat's up?<|im_end|>\n<|im_start|>assistant\n",
    "Tabs\tand\nnewlines\r\nand\n\n\nblank lines",
    "don't won't I'm you're they've we'll she'd",
    "x²³+y½=z;١٢٣ (non-ASCII numerals, no space before them: see the next test)",
    "",
]


@pytest.mark.parametrize("text", CORPUS)
def test_ids_match_transformers(engine, hf_tokenizer, text):
    ours = engine.tokenizer.encode(text)
    ref = hf_tokenizer.encode(text, add_special_tokens=False)
    assert ours == ref


@pytest.mark.parametrize("text", CORPUS)
def test_decode_round_trip(engine, text):
    tok = engine.tokenizer
    assert tok.decode(tok.encode(text), skip_special_tokens=False) == text


def test_digit_split_follows_llama_cpp_smollm_rule(engine, hf_tokenizer):
    """llama.cpp's "smollm" pre-tokenizer (and SmolLM2's own tokenizer.json) split every
    numeric character before the GPT-2 regex; transformers' GGUF converter does not. The only
    visible difference on this vocabulary: a space before a non-ASCII numeric character."""
    tok = engine.tokenizer
    ours = [tok.token_to_text(i) for i in tok.encode("a ²")]
    assert ours == ["a", "Ġ", "Â²"]
    ref = hf_tokenizer.convert_ids_to_tokens(hf_tokenizer.encode("a ²", add_special_tokens=False))
    assert ref == ["a", "ĠÂ", "²"]


def test_special_tokens(engine):
    tok = engine.tokenizer
    assert tok.encode("<|im_end|>") == [2]
    assert tok.eos_token_id == 2 and tok.eos_token == "<|im_end|>"
    assert {0, 2} <= tok.stop_token_ids  # <|endoftext|>, <|im_end|>
    assert tok.decode([1, 4093, 198, 2]) == "user\n"
    assert (
        tok.decode([1, 4093, 198, 2], skip_special_tokens=False) == "<|im_start|>user\n<|im_end|>"
    )


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "Hi there"}],
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Why is the sky blue?"},
            {"role": "assistant", "content": "Rayleigh scattering."},
            {"role": "user", "content": "More?"},
        ],
    ],
)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_template_matches_transformers(engine, hf_tokenizer, messages, add_generation_prompt):
    ours = engine.tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt
    )
    ref = hf_tokenizer.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=False
    )
    assert ours == ref
    if messages[0]["role"] != "system":
        assert ours.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


@pytest.mark.parametrize(
    "text",
    [
        "Say something with emoji 🎉 and 日本語",
        "naïve café — “quotes” 👩‍👩‍👧 🇫🇷",
        "<|im_start|>user\nhi<|im_end|>",
    ],
)
def test_token_bytes_concatenate_to_the_texts_utf8(engine, text):
    """``token_bytes`` of the ids of ``text`` joined equal ``text.encode('utf-8')`` (the
    definition of byte-level BPE), including tokens that hold part of a character, which decode
    alone to U+FFFD; the emoji text must have such tokens or the check would prove nothing."""
    tok = engine.tokenizer
    ids = tok.encode(text)
    assert b"".join(tok.token_bytes(i) for i in ids) == text.encode("utf-8")
    partial = [i for i in ids if "\ufffd" in tok.decode([i], skip_special_tokens=False)]
    assert bool(partial) == (not text.isascii())
