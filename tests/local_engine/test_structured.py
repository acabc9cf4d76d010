"""Constrained decoding in the engine: every output parses and validates against its schema
(``jsonschema``, an independent validator), under continuous batching and prefix caching;
the bitmask application matches a mask built by hand; with speculative decoding on, drafts
outside the grammar are rejected and greedy outputs equal speculation off."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

from local_engine.sampling import SamplingParams, apply_token_bitmask
from local_engine.spec_decode.config import SpeculativeConfig
from local_engine.structured import GrammarError, StructuredOutput, check, verify_masks

from .conftest import run_to_completion

SCHEMAS = {
    "object": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    },
    "enum": {"enum": ["red", "green", "blue", 7, None]},
    "array": {"type": "array", "items": {"type": "integer", "maximum": 99}, "maxItems": 4},
    "nested": {
        "type": "object",
        "properties": {
            "point": {
                "type": "object",
                "properties": {"x": {"type": "integer"}, "y": {"type": "boolean"}},
                "required": ["x", "y"],
                "additionalProperties": False,
            },
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
        },
        "required": ["point", "tags"],
        "additionalProperties": False,
    },
    "anyOf": {
        "anyOf": [
            {"type": "integer", "minimum": 0, "maximum": 999},
            {"type": "string", "maxLength": 6},
            {
                "type": "object",
                "properties": {"ok": {"type": "boolean"}},
                "required": ["ok"],
                "additionalProperties": False,
            },
        ]
    },
}


def _prompt(engine, text: str) -> list[int]:
    tok = engine.tokenizer
    return tok.encode(
        tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
    )


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(SCHEMAS))
def test_hundred_samples_per_schema_kind_all_validate(engine, kind):
    schema = SCHEMAS[kind]
    prompt = _prompt(engine, f"Reply with JSON ({kind}).")  # shared: prefix caching
    spec = StructuredOutput(json_schema=schema)
    for i in range(100):  # all queued at once: continuous batching
        params = SamplingParams(temperature=1.0, seed=i, max_tokens=48, structured=spec)
        engine.add_request(f"{kind}-{i}", prompt, params)
    final, _ = run_to_completion(engine)
    assert len(final) == 100
    for out in final.values():
        o = out.outputs[0]
        assert o.finish_reason == "stop", o.text  # every schema here closes within 48 tokens
        jsonschema.validate(json.loads(o.text), schema)
    assert max(out.num_cached_tokens for out in final.values()) > 0  # the prompt was shared


def test_greedy_json_object_and_n_samples(engine):
    spec = StructuredOutput(json_schema={"type": "object"})
    params = SamplingParams(temperature=0.8, seed=3, n=3, max_tokens=40, structured=spec)
    engine.add_request("n3", _prompt(engine, "A JSON object please."), params)
    final, _ = run_to_completion(engine)
    for o in final["n3"].outputs:
        if o.finish_reason == "stop":
            assert isinstance(json.loads(o.text), dict)
        else:  # cut by max_tokens: still a prefix of an object
            assert o.text.startswith("{")


def test_apply_token_bitmask_matches_a_hand_built_mask():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 70, generator=g)
    allowed = torch.rand(3, 70, generator=g) < 0.3
    words = torch.zeros(3, 3, dtype=torch.int64)
    for r in range(3):
        for t in range(70):
            if allowed[r, t]:
                words[r, t // 32] |= 1 << (t % 32)
    bitmask = words.to(torch.int64).apply_(lambda v: v - (1 << 32) if v >= 1 << 31 else v)
    out = apply_token_bitmask(logits.clone(), bitmask.to(torch.int32))
    expected = logits.masked_fill(~allowed, float("-inf"))
    assert torch.equal(out, expected)


def test_verify_masks_reject_a_draft_outside_the_grammar(engine):
    tok = engine.tokenizer
    schema = {"enum": ["yes", "no"]}
    m = engine.grammar.matcher(StructuredOutput(json_schema=schema))
    good = tok.encode('"yes"')
    bad = tok.encode("[1]")  # never valid for this schema
    drafts = [good[:2] + bad[:1]]
    bitmask = verify_masks(engine.grammar, [m], drafts, rows=4)

    def allowed(row, t):
        return bool((int(bitmask[row, t // 32]) >> (t % 32)) & 1)

    assert allowed(0, good[0]) and allowed(1, good[1])
    assert not allowed(2, bad[0])  # the bad draft has probability 0 there
    assert not m.is_error() and m.consume_token(good[0])  # the matcher was rolled back


@pytest.mark.parametrize(
    "schema, words",
    [
        ({"type": "strin"}, "strin"),
        ({"type": "object", "not": {}}, '"not"'),
        ({"type": "object", "properties": {"a": {"$ref": "#/defs/x"}}}, "/defs/x"),
    ],
    ids=["invalid-type", "unsupported-keyword", "bad-ref"],
)
def test_bad_schema_is_a_grammar_error(schema, words):
    with pytest.raises(GrammarError, match=words.replace("$", r"\$")):
        check(StructuredOutput(json_schema=schema))


@pytest.mark.slow
def test_speculation_on_equals_off_for_greedy(engine_factory):
    schema = SCHEMAS["nested"]
    spec = StructuredOutput(json_schema=schema)
    prompts = ["Give a point as JSON.", 'Copy this: {"point":{"x":5,"y":true},"tags":["a"]}']

    def run(engine):
        for i, p in enumerate(prompts):
            params = SamplingParams(temperature=0.0, max_tokens=40, structured=spec)
            engine.add_request(f"s{i}", _prompt(engine, p), params)
        final, _ = run_to_completion(engine)
        return {k: v.outputs[0].text for k, v in final.items()}, final

    off, _ = run(engine_factory())
    for cfg in (SpeculativeConfig("ngram", 4), SpeculativeConfig("draft", 4, layers=6)):
        on, final = run(engine_factory(speculative=cfg))
        assert on == off
        assert sum(f.metrics.num_draft_tokens for f in final.values()) > 0  # it speculated
    for text in off.values():
        jsonschema.validate(json.loads(text), schema)


# ---- the mask path on CUDA (skipped without a CUDA device; run on the H200, see
# bench/RESULTS.md "## engine-api") ---------------------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]
#: a folder from ``bench/engine_gpu.py prepare`` (config.json + tokenizer, random weights) for
#: machines without the embedded GGUF; unset: the GGUF
MODEL_DIR_ENV = "PROMPTCACHE_TEST_MODEL_DIR"
#: the schema kinds whose every output is finite (bounded strings, integers, items), so a
#: greedy run of any weights (random ones too) closes within ``max_tokens``
FINITE_KINDS = ["object", "enum", "anyOf"]


def _device_engine(device: str, **overrides):
    import os

    from local_engine.engine import LLMEngine

    overrides.setdefault("num_kv_blocks", 256)
    folder = os.environ.get(MODEL_DIR_ENV)
    if folder:
        return LLMEngine.from_config(folder, device=device, **overrides)
    return LLMEngine.from_model(None, device=device, **overrides)


@pytest.fixture(scope="module")
def cuda_engine():
    return _device_engine("cuda")


@pytest.mark.parametrize("device", DEVICES)
def test_apply_token_bitmask_on_device_matches_numpy_unpacking(device):
    np = pytest.importorskip("numpy")
    g = torch.Generator().manual_seed(1)
    rows, vocab = 64, 49155  # a vocabulary that is not a multiple of 32: a padded last word
    logits = torch.randn(rows, vocab, generator=g)
    bitmask = torch.randint(-(2**31), 2**31 - 1, (rows, (vocab + 31) // 32), generator=g)
    bitmask = bitmask.to(torch.int32)
    # little-endian int32 words -> bytes -> bits, least significant first: bit t of the row
    bits = np.unpackbits(bitmask.numpy().view(np.uint8), axis=1, bitorder="little")[:, :vocab]
    expected = logits.masked_fill(torch.from_numpy(bits == 0), float("-inf"))
    out = apply_token_bitmask(logits.to(device), bitmask)
    assert out.device.type == device
    assert torch.equal(out.cpu(), expected)


@pytest.mark.parametrize("device", DEVICES)
def test_constrained_greedy_batch_on_device_validates_beside_a_free_row(device, request):
    engine = request.getfixturevalue("engine" if device == "cpu" else "cuda_engine")
    for kind in FINITE_KINDS:  # all queued at once: one batch, masked and free rows mixed
        spec = StructuredOutput(json_schema=SCHEMAS[kind])
        params = SamplingParams(temperature=0.0, max_tokens=48, structured=spec)
        engine.add_request(
            f"{device}-{kind}", _prompt(engine, f"Reply with JSON ({kind})."), params
        )
    free = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    engine.add_request(f"{device}-free", _prompt(engine, "Say anything."), free)
    final, _ = run_to_completion(engine)
    assert len(final[f"{device}-free"].outputs[0].token_ids) == 8
    for kind in FINITE_KINDS:
        o = final[f"{device}-{kind}"].outputs[0]
        assert o.finish_reason == "stop", o.text
        jsonschema.validate(json.loads(o.text), SCHEMAS[kind])


@needs_cuda
def test_speculation_on_equals_off_for_constrained_greedy_on_cuda():
    """float32 so that a verification forward and a decode forward agree to rounding (the
    comparison is about the grammar's draft rejection, not bf16 ties)."""
    spec = StructuredOutput(json_schema=SCHEMAS["object"])
    prompts = ["Give a person as JSON.", 'Copy this: {"name":"Ann","age":31}']

    def run(engine):
        for i, p in enumerate(prompts):
            params = SamplingParams(temperature=0.0, max_tokens=40, structured=spec)
            engine.add_request(f"s{i}", _prompt(engine, p), params)
        final, _ = run_to_completion(engine)
        return {k: v.outputs[0].text for k, v in final.items()}, final

    off, _ = run(_device_engine("cuda", dtype="float32"))
    on, final = run(
        _device_engine("cuda", dtype="float32", speculative=SpeculativeConfig("ngram", 4))
    )
    assert on == off
    assert sum(f.metrics.num_draft_tokens for f in final.values()) > 0  # it speculated
    for text in off.values():
        jsonschema.validate(json.loads(text), SCHEMAS["object"])
