"""The engine with a packed INT4 KV cache (``kv_cache_dtype="int4"``): capacity against bf16 and
``kv-plan`` (hand-computed bytes), the real SmolLM2's prefix hits equal to recomputing in INT4,
copy-on-write, and the tiny random-weight model's packed blocks through swap (values and
scales travel as whole blocks: the same greedy tokens as a recompute in INT4), with the pool's
invariants checked every step; the CPU and disk tiers: test_kv_quant_lowbit_tiers.py."""

from __future__ import annotations

import pytest
import torch

from local_engine.config import EngineConfig
from local_engine.kv_cache.quant import kv_cache_format
from local_engine.kv_plan import PRESETS, plan
from local_engine.runner import kv_block_bytes, plan_num_blocks
from local_engine.sampling import SamplingParams

from .test_kv_quant_engine import _chat_prompts, _run

GREEDY = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)


# ---- capacity ------------------------------------------------------------------------------
@pytest.mark.parametrize("preset", ["llama-3-8b", "smollm2-135m"])
def test_capacity_against_bf16_and_kv_plan(preset):
    mc = PRESETS[preset][0]
    budget = 64 * 2**30
    fmt = kv_cache_format("int4", torch.bfloat16)
    n_q = plan_num_blocks(
        EngineConfig(kv_cache_dtype="int4", kv_cache_memory=budget), mc, fmt, 4096
    )
    n_b = plan_num_blocks(
        EngineConfig(dtype="bfloat16", kv_cache_memory=budget),
        mc,
        kv_cache_format("auto", torch.bfloat16),
        4096,
    )
    # per token-head: bf16 2 x head_dim bytes; int4 head_dim / 2 + 4 (float32 scale):
    # d128 256 / 68 = 3.76x, d64 128 / 36 = 3.56x
    d = mc.head_dim
    assert n_q / n_b == pytest.approx(2 * d / (d / 2 + 4), rel=1e-3)
    p = plan(mc, context=4096, kv_dtype="int4", memory=budget, weight_bytes=0)
    assert p.kv_bytes_per_token * 16 == kv_block_bytes(mc, 16, fmt)
    assert p.kv_blocks == n_q
    if preset == "llama-3-8b":  # 2 x 32 x 8 x (64 + 4) = 34,816 B a token
        assert p.kv_bytes_per_token == 34_816


def test_engine_allocation_agrees_with_kv_plan(engine_factory):
    eng = engine_factory(kv_cache_dtype="int4", num_kv_blocks=None, kv_cache_memory=64 * 2**20)
    p = plan(
        PRESETS["smollm2-135m"][0], context=2048, kv_dtype="int4", memory=64 * 2**20, weight_bytes=0
    )
    # 2 x 30 x 3 x (32 + 4) = 6,480 B a token; x 16 = 103,680 B a block; 64 MiB -> 647
    assert p.kv_bytes_per_token == 6_480 and p.kv_blocks == 647
    assert eng.kv_cache_manager.num_blocks == 647
    assert eng.runner.kv_cache.numel() == 647 * 103_680
    assert eng.metrics.kv_cache_dtype == "int4"


def test_kv_plan_cli_knows_int4(capsys):
    from promptcache.cli import main

    assert main(["kv-plan", "--model", "llama-3-8b", "--context", "4k", "--kv-dtype", "int4"]) == 0
    assert "int4" in capsys.readouterr().out


# ---- the real model: prefix caching and copy-on-write ----------------------------------------
@pytest.mark.slow  # two SmolLM2 engines, six chat prompts and a fork
def test_hit_on_packed_blocks_equals_recompute_and_cow(engine_factory):
    on = engine_factory(kv_cache_dtype="int4", debug_checks=True)
    off = engine_factory(kv_cache_dtype="int4", enable_prefix_caching=False)
    prompts = _chat_prompts(on.tokenizer)
    with_cache = [_run(on, f"i4-on-{i}", ids) for i, ids in enumerate(prompts)]
    without = [_run(off, f"i4-off-{i}", ids) for i, ids in enumerate(prompts)]
    shared = next(i for i, (x, y) in enumerate(zip(prompts[0], prompts[1])) if x != y)
    assert [o.num_cached_tokens for o in with_cache] == [0] + [shared // 16 * 16] * 2
    for a, b in zip(with_cache, without):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
    # copy-on-write: 3 greedy samples share a partial packed block, each writes its own copy
    ids = prompts[1][:45]
    params = SamplingParams(temperature=0.0, max_tokens=8, n=3, ignore_eos=True)
    out = _run(on, "i4-cow", ids, params)
    toks = [c.token_ids for c in out.outputs]
    assert toks[0] == toks[1] == toks[2] == _run(off, "i4-cow1", ids, GREEDY).token_ids[:8]
    assert on.kv_cache_manager.num_free_blocks == on.kv_cache_manager.num_blocks


# ---- the tiny model: swap, CPU tier, disk tier ---------------------------------------------
@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from .attention.test_triton_cuda_graphs import tiny_model_folder

    return tiny_model_folder(tmp_path_factory.mktemp("tiny_int4"))


def tiny(folder, **kw):
    from local_engine.engine import LLMEngine

    kw.setdefault("num_kv_blocks", 10)
    return LLMEngine.from_config(
        folder,
        device="cpu",
        seed=0,
        max_num_seqs=4,
        max_num_batched_tokens=64,
        kv_cache_dtype="int4",
        debug_checks=True,
        **kw,
    )


def prompts(n, seed=0, length=70):
    import random

    rng = random.Random(seed)
    return [[rng.randrange(256) for _ in range(length)] for _ in range(n)]


def alone(folder, ps, params):
    big = tiny(folder, num_kv_blocks=64, enable_prefix_caching=False)
    return [_run(big, f"alone{i}", p, params).token_ids for i, p in enumerate(ps)]


def test_swap_moves_packed_blocks_with_their_scales(folder):
    """Four requests that cannot all fit a 10-block pool: preemption swaps their packed blocks
    (values and scales) out and back; every output equals the request run alone."""
    probe = tiny(folder)
    bb = probe.runner.kv_transfer.block_bytes if probe.runner.kv_transfer else None
    fmt = kv_cache_format("int4", torch.float32)
    block = kv_block_bytes(probe.model_config, 16, fmt)
    # tiny model: 2 layers x 2 x 16 tokens x 2 KV heads x (16 / 2 + 4) bytes = 1,536 B
    assert block == 1_536 and bb is None
    eng = tiny(folder, swap_space=40 * block)
    ps = prompts(4, seed=1, length=40)
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    for i, p in enumerate(ps):
        eng.add_request(f"s{i}", p, params)
    from .conftest import run_to_completion

    final, _ = run_to_completion(eng)
    assert eng.scheduler.num_swaps > 0
    assert [final[f"s{i}"].token_ids for i in range(4)] == alone(folder, ps, params)


# (the CPU and disk tiers: test_kv_quant_lowbit_tiers.py, parametrized over int4 and int2)
