"""Tokenizer: Hugging Face ``tokenizers`` BPE built from the model file, plus its chat template.

For a GGUF file with ``tokenizer.ggml.model = "gpt2"`` (byte-level BPE) the vocabulary and merges
come from ``tokenizer.ggml.tokens`` / ``tokenizer.ggml.merges``; tokens whose
``tokenizer.ggml.token_type`` is CONTROL (3) become special added tokens (matched whole, dropped by
``skip_special_tokens``) and USER_DEFINED (4) plain added tokens, as llama.cpp and transformers do.

The pre-tokenizer follows ``tokenizer.ggml.pre``. For ``"smollm"`` (and the other StarCoder-style
vocabularies llama.cpp groups with it: starcoder, refact, command-r, codeshell, exaone,
minerva) llama.cpp's ``llama-vocab.cpp`` splits every ``\\p{N}`` character on its own and then
applies the GPT-2 regex; that is ``Digits(individual_digits=True)`` followed by byte-level
GPT-2 splitting, the pre-tokenizer of SmolLM2's own ``tokenizer.json`` on the Hugging Face hub.
(transformers' GGUF converter omits the digit split; since this vocabulary holds no merge of a
digit with another character the two agree except where a space precedes a non-ASCII numeric
character such as ``" ²"``.)

The chat template is the file's Jinja template, rendered in a sandbox the way transformers
renders it (``trim_blocks``, ``lstrip_blocks``, ``raise_exception``, ``tojson``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import lru_cache

from .errors import EngineError
from .loader import TokenizerSpec

CONTROL_TOKEN_TYPE = 3
USER_DEFINED_TOKEN_TYPE = 4

# llama.cpp pre-tokenizer names (tokenizer.ggml.pre) and the split regexes they use
# (src/llama-vocab.cpp, llm_tokenizer_bpe constructor). None = GPT-2 byte-level regex only.
_GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_DIGITS_THEN_GPT2 = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}
_SPLIT_REGEX = {
    "llama3": _LLAMA3_REGEX,
    "llama-bpe": _LLAMA3_REGEX,
    "llama-v3": _LLAMA3_REGEX,
    "dbrx": _LLAMA3_REGEX,
    "smaug-bpe": _LLAMA3_REGEX,
    "falcon3": _LLAMA3_REGEX,
    "qwen2": _QWEN2_REGEX,
    "deepseek-r1-qwen": _QWEN2_REGEX,
}


def _bytes_to_unicode() -> dict:
    """GPT-2's byte -> printable-character table (the alphabet of byte-level BPE vocabularies)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def _pre_tokenizer(pre: str | None):
    from tokenizers import Regex, pre_tokenizers

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in _DIGITS_THEN_GPT2:
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre in _SPLIT_REGEX:
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_SPLIT_REGEX[pre]), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    return byte_level


def build_gguf_tokenizer(spec: TokenizerSpec):
    """A ``tokenizers.Tokenizer`` for a GGUF byte-level BPE vocabulary.

    Raises:
        EngineError: the vocabulary is not byte-level BPE (``tokenizer.ggml.model != "gpt2"``).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models

    if spec.model != "gpt2":
        raise EngineError(
            f"tokenizer model {spec.model!r} is not supported (only byte-level BPE, 'gpt2')"
        )
    alphabet = _bytes_to_unicode()
    letters = set(alphabet.values())
    tokens: list[str] = spec.tokens or []
    vocab: dict[str, int] = {}
    for i, piece in enumerate(tokens):
        if not set(piece) <= letters:  # a token stored as raw text: spell it in the byte alphabet
            piece = "".join(alphabet[b] for b in piece.encode("utf-8"))
        vocab.setdefault(piece, i)
    merges = [tuple(m.split(" ", 1)) for m in spec.merges or []]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = _pre_tokenizer(spec.pre)
    tok.decoder = decoders.ByteLevel()
    types = spec.token_types or []
    control = [
        AddedToken(t, normalized=False, special=True)
        for t, ty in zip(tokens, types)
        if ty == CONTROL_TOKEN_TYPE and set(t) <= letters  # others are llama.cpp mislabels
    ]
    if control:
        tok.add_special_tokens(control)
    user = [
        AddedToken(t, normalized=False, special=False)
        for t, ty in zip(tokens, types)
        if ty == USER_DEFINED_TOKEN_TYPE
    ]
    if user:
        tok.add_tokens(user)
    return tok


@lru_cache(maxsize=8)
def _compile_template(template: str):
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template)


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """:func:`_bytes_to_unicode` inverted: vocabulary character -> byte."""
    return {ch: b for b, ch in _bytes_to_unicode().items()}


class Tokenizer:
    """Text <-> token ids for one model, and its chat template.

    Attributes:
        eos_token_id: the end-of-sequence id (SmolLM2: 2, ``<|im_end|>``).
        bos_token_id: begin-of-sequence id or None.
        stop_token_ids: ids that end generation by default (eos, end-of-turn, ``<|endoftext|>``).
        vocab_size: number of ids including added tokens.
        chat_template: the Jinja source or None.
    """

    def __init__(self, spec: TokenizerSpec):
        from tokenizers import Tokenizer as HFTokenizer

        if spec.tokenizer_json is not None:
            self._tok = HFTokenizer.from_str(spec.tokenizer_json)
        else:
            self._tok = build_gguf_tokenizer(spec)
        self.spec = spec
        self.bos_token_id = spec.bos_token_id
        self.eos_token_id = spec.eos_token_id
        self.pad_token_id = spec.pad_token_id
        self.add_bos_token = spec.add_bos_token
        self.chat_template = spec.chat_template
        stops = {i for i in [spec.eos_token_id, *spec.extra_stop_token_ids] if i is not None}
        endoftext = self._tok.token_to_id("<|endoftext|>")
        if endoftext is not None:
            stops.add(endoftext)
        self.stop_token_ids = stops
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        added = self._tok.get_added_tokens_decoder()
        self._added_ids = frozenset(added)
        self._byte_level = type(self._tok.decoder).__name__ == "ByteLevel"

    def token_to_text(self, token_id: int) -> str | None:
        """The token's spelling as stored in the vocabulary (None for an unknown id)."""
        return self._tok.id_to_token(token_id)

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes this token contributes to the text: for a byte-level BPE vocabulary
        (GPT-2 style, as SmolLM2 and Llama 3 use) the vocabulary spelling mapped back through
        the byte-to-character table, so a token holding part of a UTF-8 character gives those
        bytes (decoding it alone would give U+FFFD); otherwise, and for added tokens, the UTF-8
        of its decoded text. Concatenating the bytes of a sequence's tokens gives its text's
        UTF-8 (what OpenAI's ``logprobs[].bytes`` promise)."""
        piece = self._tok.id_to_token(token_id) if self._byte_level else None
        if piece is not None and token_id not in self._added_ids:
            table = _byte_decoder()
            if all(ch in table for ch in piece):
                return bytes(table[ch] for ch in piece)
        return self._tok.decode([token_id], skip_special_tokens=False).encode("utf-8")

    def id_of(self, token: str) -> int | None:
        """The id of a token string (``"<|im_end|>"``) or None."""
        return self._tok.token_to_id(token)

    @property
    def bos_token(self) -> str | None:
        return None if self.bos_token_id is None else self._tok.id_to_token(self.bos_token_id)

    @property
    def eos_token(self) -> str | None:
        return None if self.eos_token_id is None else self._tok.id_to_token(self.eos_token_id)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``. Special-token strings in the text (``<|im_start|>``) map to
        their ids. ``add_special_tokens`` prepends BOS when the model asks for it."""
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if add_special_tokens and self.add_bos_token and self.bos_token_id is not None:
            ids = [self.bos_token_id] + ids
        return ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text (no special tokens added), encoded in one ``tokenizers`` call."""
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Text of ``ids``; ``skip_special_tokens`` drops control tokens such as ``<|im_end|>``."""
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self,
        messages: list[dict],
        add_generation_prompt: bool = True,
        tools: list | None = None,
        **kwargs,
    ) -> str:
        """Render a conversation with the model's chat template (Jinja, sandboxed).

        Args:
            messages: ``[{"role": "system"|"user"|"assistant"|..., "content": str}, ...]``.
            add_generation_prompt: append the assistant header so the model answers next.
            tools: tool schemas, passed to the template as ``tools``.

        Raises:
            EngineError: the model has no chat template, or the template rejects the input.
        """
        if not self.chat_template:
            raise EngineError("this model has no chat template; send a plain prompt instead")
        from jinja2.exceptions import TemplateError

        try:
            return _compile_template(self.chat_template).render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                tools=tools,
                bos_token=self.bos_token or "",
                eos_token=self.eos_token or "",
                **kwargs,
            )
        except TemplateError as exc:
            raise EngineError(f"chat template error: {exc}") from exc


class IncrementalDetokenizer:
    """Turns a growing list of token ids into text deltas without re-decoding everything and
    without emitting half a multi-byte character (vLLM's prefix/read-offset method)."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_tail: Sequence[int] = (),
        skip_special_tokens: bool = True,
    ):
        self.tokenizer = tokenizer
        self.skip = skip_special_tokens
        self.ids: list[int] = list(prompt_tail)[-6:]
        self.prefix_offset = 0
        self.read_offset = len(self.ids)
        self.text = ""

    def add(self, token_id: int) -> str:
        """Append one id; returns the newly completed text (possibly empty)."""
        self.ids.append(token_id)
        dec = self.tokenizer.decode
        prefix = dec(self.ids[self.prefix_offset : self.read_offset], self.skip)
        full = dec(self.ids[self.prefix_offset :], self.skip)
        if len(full) > len(prefix) and not full.endswith("\ufffd"):
            delta = full[len(prefix) :]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
            self.text += delta
            return delta
        return ""
