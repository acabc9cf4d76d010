"""``StreamDetokenizer`` on SmolLM2's real vocabulary, in both its modes (the token-text table
of byte-level decoders, and tokenizers' ``DecodeStream``): its deltas add up to ``decode`` of
the whole stream, a character split over byte tokens comes out whole once complete, and it
gives the same deltas as the Python prefix/read-offset method (vLLM's), token for token."""

from __future__ import annotations

import random

import pytest

from local_engine.detokenizer import StreamDetokenizer, token_text_table
from local_engine.tokenizer import IncrementalDetokenizer, Tokenizer, _bytes_to_unicode


@pytest.fixture(scope="module")
def tok(gguf_path):
    from gguf import GGUFReader

    from local_engine.loader.gguf_loader import read_gguf_tokenizer

    return Tokenizer(read_gguf_tokenizer(GGUFReader(str(gguf_path))))


def byte_token(tok, b: int) -> int:
    """The id of the single-byte token for byte ``b`` (GPT-2 byte alphabet)."""
    return tok.id_of(_bytes_to_unicode()[b])


def stream(tok, ids, prompt=(), skip=True, use_table=True):
    d = StreamDetokenizer(tok, prompt, skip, use_table=use_table)
    return [d.add(i) for i in ids]


MODES = [pytest.param(True, id="table"), pytest.param(False, id="decodestream")]


def test_the_table_is_used_for_this_byte_level_vocabulary(tok):
    d = StreamDetokenizer(tok, tok.encode("Hi"), True)
    assert d._table is not None and d._stream is None and d._fallback is None
    table = token_text_table(tok, True)
    assert len(table) == tok.vocab_size
    assert table[tok.encode(" world")[0]] == " world"
    assert table[2] == "" and token_text_table(tok, False)[2] == "<|im_end|>"  # special token
    assert table[byte_token(tok, 0xC3)] is None  # a lone UTF-8 lead byte is no text yet


@pytest.mark.parametrize("use_table", MODES)
def test_character_split_over_byte_tokens_is_emitted_whole(tok, use_table):
    # "🎉" is F0 9F 8E 89 in UTF-8; "é" is C3 A9: one byte token each
    ids = [byte_token(tok, b) for b in "é🎉!".encode()]
    assert len(ids) == 7
    assert stream(tok, ids, use_table=use_table) == ["", "é", "", "", "", "🎉", "!"]


@pytest.mark.parametrize("use_table", MODES)
def test_prompt_context_is_not_emitted(tok, use_table):
    prompt = tok.encode("The answer is")
    ids = tok.encode(" forty-two.")
    deltas = stream(tok, ids, prompt, use_table=use_table)
    assert "".join(deltas) == " forty-two."
    assert all(d is not None for d in deltas)


def test_prompt_ending_inside_a_character(tok):
    """The prompt's last token is the first byte of "é" (C3); the output's first token is its
    second byte (A9). The offset method compares decode("Caf" + C3) = "Caf\ufffd" (4
    characters) with decode("Caf" + C3 A9) = "Café" (4 characters): nothing new, and the "é"
    is never output; then " ok". Both modes give exactly those deltas (DecodeStream alone would
    re-emit the prompt's text)."""
    prompt = tok.encode("Caf") + [byte_token(tok, 0xC3)]
    ids = [byte_token(tok, 0xA9)] + tok.encode(" ok")
    assert tok.decode(prompt) == "Caf\ufffd" and tok.decode(prompt + ids) == "Café ok"
    ref = IncrementalDetokenizer(tok, prompt, True)
    assert [ref.add(i) for i in ids] == ["", " ok"]
    for use_table in (True, False):
        assert stream(tok, ids, prompt, use_table=use_table) == ["", " ok"]


@pytest.mark.parametrize("use_table", MODES)
@pytest.mark.parametrize("skip", [True, False])
def test_special_tokens_follow_skip_special_tokens(tok, skip, use_table):
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>")
    text = "".join(stream(tok, ids, skip=skip, use_table=use_table))
    assert text == ("user\nhi" if skip else "<|im_start|>user\nhi<|im_end|>")


@pytest.mark.parametrize("use_table", MODES)
@pytest.mark.parametrize("skip", [True, False])
def test_random_streams_add_up_to_the_full_decode(tok, skip, use_table):
    """Random ids (70 % single-byte tokens, so multi-byte characters are split and bytes are
    often invalid UTF-8, the rest anywhere in the vocabulary, special tokens included). The
    concatenated deltas equal ``decode`` of the whole stream whenever that decode ends on a
    complete character; otherwise they are a prefix of it (the incomplete tail is held back).
    Deltas equal those of the Python prefix/read-offset detokenizer token for token."""
    rng = random.Random(1234 + skip)
    byte_ids = [i for i in (byte_token(tok, b) for b in range(256)) if i is not None]
    assert len(byte_ids) > 200
    checked_whole = 0
    for _ in range(400):
        ids = [
            rng.randrange(256, 300)
            if rng.random() < 0.05
            else rng.choice(byte_ids)
            if rng.random() < 0.7
            else rng.randrange(tok.vocab_size)
            for _ in range(rng.randrange(1, 40))
        ]
        prompt = (
            tok.encode("Hello there, friend.")
            if rng.random() < 0.5
            else [rng.randrange(tok.vocab_size) for _ in range(rng.randrange(8))]
        )  # may end mid-character
        ours = stream(tok, ids, prompt, skip, use_table)
        ref = IncrementalDetokenizer(tok, prompt, skip)
        assert ours == [ref.add(i) for i in ids]
        text, full = "".join(ours), tok.decode(ids, skip)
        if tok.decode(prompt, skip).endswith("\ufffd"):
            continue  # the prompt's dangling bytes join the first output token's
        if full.endswith("\ufffd"):
            assert full.startswith(text)
        else:
            assert text == full
            checked_whole += 1
    assert checked_whole > 50


def test_falls_back_to_the_python_method_when_the_stream_refuses(tok):
    ids = tok.encode("naïve café — 日本語 🎉 done")
    d = StreamDetokenizer(tok, (), True, use_table=False)
    assert d._stream is not None
    text = "".join(d.add(i) for i in ids[:4])

    class Refuses:
        def step(self, *_):
            raise Exception("DecodeStream InvalidPrefix")

    d._stream = Refuses()
    text += "".join(d.add(i) for i in ids[4:])
    assert text == "naïve café — 日本語 🎉 done"
