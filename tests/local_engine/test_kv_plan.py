"""kv-plan numbers against hand-computed examples (the arithmetic is written out per test)."""

from __future__ import annotations

import json

import pytest

from local_engine.kv_plan import PRESETS, PlanError, count_parameters, parse_bytes, plan


def test_llama3_8b_hand_computed():
    cfg, _ = PRESETS["llama-3-8b"]
    p = plan(cfg, context=4096, batch=32, kv_dtype="bf16", memory=80 * 2**30)
    # 2 (K,V) x 32 layers x 8 KV heads x 128 head_dim x 2 bytes = 131,072 B per token
    assert p.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131_072
    # 4096 tokens = 256 blocks of 16 -> 4096 x 131,072 = 536,870,912 B (512 MiB)
    assert p.blocks_per_request == 256
    assert p.kv_bytes_per_request == 536_870_912
    assert p.kv_bytes_batch == 32 * 536_870_912 == 17_179_869_184  # 16 GiB
    # parameters: embed+lm_head 2 x 128256 x 4096 = 1,050,673,152; per layer q,o 2 x 4096^2
    # + k,v 2 x 4096 x 1024 + MLP 3 x 4096 x 14336 + norms 2 x 4096 = 218,112,000; x 32 layers
    # = 6,979,584,000; + final norm 4096 -> 8,030,261,248 (the published Llama 3 8B count)
    assert count_parameters(cfg) == 8_030_261_248
    assert p.weight_bytes == 16_060_522_496  # bf16
    # 80 GiB = 85,899,345,920 B; minus weights = 69,838,823,424 B; one block = 16 x 131,072
    # = 2,097,152 B -> 33,301 blocks -> 33,301 // 256 = 130 requests of 4096 tokens
    assert p.memory_after_weights == 69_838_823_424
    assert p.kv_blocks == 33_301
    assert p.max_requests == 130 and p.batch_fits


def test_llama3_70b_fp8_context_rounds_up_to_blocks():
    cfg, _ = PRESETS["llama-3-70b"]
    p = plan(cfg, context=1000, batch=8, kv_dtype="fp8")
    # 2 x 80 layers x 8 KV heads x (128 x 1 byte + 4 bytes of float32 scale) = 168,960 B per
    # token, of which 2 x 80 x 8 x 4 = 5,120 B are scales
    assert p.kv_bytes_per_token == 168_960
    assert p.kv_scale_bytes_per_token == 5_120
    # 1000 tokens -> 63 blocks (1008 slots) -> 1008 x 168,960 = 170,311,680 B
    assert p.blocks_per_request == 63
    assert p.kv_bytes_per_request == 170_311_680
    assert p.kv_bytes_batch == 8 * 170_311_680
    assert p.memory is None and p.max_requests is None


def test_smollm2_and_qwen_and_mistral_per_token():
    # SmolLM2-135M: 2 x 30 x 3 x 64 x 4 (fp32) = 46,080 B
    assert (
        plan(PRESETS["smollm2-135m"][0], context=16, kv_dtype="fp32").kv_bytes_per_token == 46_080
    )
    # Qwen2.5-7B: 2 x 28 x 4 x 128 x 2 = 57,344 B
    assert plan(PRESETS["qwen2.5-7b"][0], context=16).kv_bytes_per_token == 57_344
    # Mistral 7B: 2 x 32 x 8 x 128 x 2 = 131,072 B
    assert plan(PRESETS["mistral-7b"][0], context=16).kv_bytes_per_token == 131_072


def test_smollm2_parameter_count_matches_the_gguf_file(gguf_path):
    # the GGUF file holds 134,515,008 weights (tied embeddings): the formula must agree
    import gguf

    from local_engine.loader.gguf_loader import read_gguf_config

    reader = gguf.GGUFReader(str(gguf_path))
    assert sum(int(t.n_elements) for t in reader.tensors) == 134_515_008
    assert count_parameters(read_gguf_config(reader, gguf_path)) == 134_515_008
    assert count_parameters(PRESETS["smollm2-135m"][0]) == 134_515_008


def test_weights_larger_than_memory_fit_nothing():
    p = plan(PRESETS["llama-3-70b"][0], context=4096, batch=1, memory=80 * 2**30)
    assert p.memory_after_weights < 0 and p.kv_blocks == 0 and p.max_requests == 0
    assert not p.batch_fits


@pytest.mark.parametrize(
    "text,expected",
    [
        ("80GiB", 80 * 2**30),
        ("24GB", 24 * 10**9),
        ("1.5 MiB", 1_572_864),
        ("1024", 1024),
        ("2kb", 2000),
    ],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


def test_parse_bytes_rejects_garbage():
    with pytest.raises(PlanError, match="80GiB"):
        parse_bytes("lots")


def test_cli_json_and_errors(capsys, gguf_path, tmp_path):
    from promptcache.cli import main

    assert (
        main(
            [
                "kv-plan",
                "--model",
                "llama3-8b",
                "--context",
                "4096",
                "--batch",
                "32",
                "--memory",
                "80GiB",
                "--headroom",
                "0",  # the hand-computed 130 has no headroom (test_kv_plan_cli: 114 with 10%)
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["max_requests"] == 130 and data["kv_bytes_per_token"] == 131_072

    # a GGUF file: numbers from its metadata, weights at their stored (quantized) size
    assert (
        main(
            [
                "kv-plan",
                "--model",
                str(gguf_path),
                "--context",
                "2048",
                "--kv-dtype",
                "fp32",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["kv_bytes_per_token"] == 46_080 and data["weight_bytes"] < 134_515_008

    # an HF config.json
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "num_hidden_layers": 3,
                "intermediate_size": 128,
                "vocab_size": 100,
            }
        )
    )
    assert main(["kv-plan", "--model", str(tmp_path), "--context", "32", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["kv_bytes_per_token"] == 2 * 3 * 2 * 16 * 2  # head_dim 64/4 = 16

    assert main(["kv-plan", "--model", "no-such-model", "--context", "10"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "llama-3-8b" in err
    assert main(["kv-plan", "--model", "mistral", "--context", "10", "--memory", "12XB"]) == 2
    assert main(["kv-plan", "--model", "mistral", "--context", "0"]) == 2


def test_cpu_tier_blocks_and_prefixes_hand_computed():
    cfg, _ = PRESETS["llama-3-8b"]
    p = plan(cfg, context=8192, kv_dtype="bf16", memory=80 * 2**30, cpu_cache_memory=64 * 2**30)
    # one block = 16 x 131,072 B = 2,097,152 B (2 MiB): 64 GiB / 2 MiB = 32,768 blocks;
    # 8192 tokens = 512 blocks -> 32,768 // 512 = 64 prefixes in the tier; the device holds
    # 33,301 // 512 = 65 (80 GiB minus the bf16 weights, as in the 8B test above)
    assert p.cpu_tier_blocks == 32_768
    assert p.cpu_tier_prefixes == 64
    assert p.max_requests == 65
    # int8 halves the bytes: 2 x 32 x 8 x (128 + 4) = 67,584 B a token, 1,081,344 B a block
    q = plan(cfg, context=8192, kv_dtype="int8", cpu_cache_memory=64 * 2**30)
    assert q.cpu_tier_blocks == 68_719_476_736 // 1_081_344 == 63_550
    assert q.cpu_tier_prefixes == 63_550 // 512 == 124
    assert plan(cfg, context=16).cpu_tier_blocks is None
    with pytest.raises(PlanError, match="cpu-cache-memory"):
        plan(cfg, context=16, cpu_cache_memory=-1)


@pytest.mark.parametrize("text, expected", [("4G", 4 * 10**9), ("512m", 512 * 10**6)])
def test_parse_bytes_reads_bare_decimal_units_as_serve_did(text, expected):
    # serve --cpu-cache-memory used pydantic's ByteSize before the parsers were made one:
    # a bare K/M/G/T is decimal there too
    assert parse_bytes(text) == expected


def test_cli_prints_the_cpu_tier(capsys):
    import argparse

    from local_engine.kv_plan import add_arguments, run

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        ["--model", "llama-3-8b", "--context", "8k", "--memory", "80GiB", "--headroom", "0"]
        + ["--cpu-cache-memory", "64GiB"]
    )
    assert run(args) == 0
    out = capsys.readouterr().out
    assert "CPU tier KV blocks" in out and "32,768" in out
    assert "64 (device: 65; together 129)" in out
    args = parser.parse_args(
        ["--model", "llama-3-8b", "--context", "8k", "--cpu-cache-memory", "lots"]
    )
    assert run(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "4GiB" in err[0]


def test_llama31_is_its_own_preset_not_llama3_renamed():
    """The tryout found `--model llama-3.1-8b` planned (and printed) as llama-3-8b. Llama 3.1
    has Llama 3's shape and a 131,072-token window (its config.json on the Hub)."""
    from local_engine.kv_plan import resolve_model

    cfg31, source, _ = resolve_model("Llama-3.1-8B")
    cfg3, _ = PRESETS["llama-3-8b"]
    assert cfg31.name == "llama-3.1-8b" and "Llama-3.1-8B" in source
    assert cfg31.max_position_embeddings == 131_072 and cfg3.max_position_embeddings == 8192
    assert count_parameters(cfg31) == count_parameters(cfg3) == 8_030_261_248
    assert resolve_model("llama3.1-70b")[0].name == "llama-3.1-70b"
