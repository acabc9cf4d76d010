"""The engine with the KIVI-style 2-bit KV cache (``kv_cache_dtype="int2"``): bytes per token
against hand-worked figures (``kv-plan``, ``EngineConfig``, the allocation agree), the refusals
(block size, speculative decoding), ``serve --kv-cache-dtype int2``, the tiny random-weight
model's int2 blocks through swap, the CPU tier and the disk tier (a block carries its INT4
residual or its per-channel scales: the same greedy tokens as a recompute in int2), and the
real SmolLM2's prefix hits equal to recomputing in int2, with copy-on-write of an open block.

Hand-worked bytes (``local_engine.kv_cache.int2``): per token and KV head ``D/2`` (K area) +
``D/4`` (V codes) + 4 (K residual scale) + 4 (V float16 scale and minimum) = ``3D/4 + 8``;
per token ``layers x kv_heads x (3D/4 + 8)``:
- Llama 3 8B (32 layers, 8 KV heads, D 128): 32 x 8 x 104 = 26,624 B (bf16: 131,072; 4.92x);
- SmolLM2-135M (30 layers, 3 KV heads, D 64): 30 x 3 x 56 = 5,040 B; a 16-token block 80,640 B;
  64 MiB = 67,108,864 B holds 832 blocks (67,108,864 / 80,640 = 832.2);
- the tiny test model (2 layers, 2 KV heads, D 16): 2 x 2 x 20 = 80 B; a block 1,280 B.
"""

from __future__ import annotations

import argparse

import pytest
import torch

from local_engine.config import EngineConfig
from local_engine.errors import EngineError
from local_engine.kv_cache.quant import kv_cache_format
from local_engine.kv_plan import PRESETS, PlanError, plan
from local_engine.runner import kv_block_bytes, plan_num_blocks
from local_engine.sampling import SamplingParams

from .test_kv_quant_engine import _chat_prompts, _run

GREEDY = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
TINY_BLOCK = 1_280


# ---- bytes ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("preset", "per_token"), [("llama-3-8b", 26_624), ("smollm2-135m", 5_040)])
def test_bytes_per_token_by_hand_and_capacity_against_bf16(preset, per_token):
    mc = PRESETS[preset][0]
    fmt = kv_cache_format("int2", torch.bfloat16)
    assert fmt.bytes_per_token(mc) == per_token
    assert kv_block_bytes(mc, 16, fmt) == 16 * per_token
    p = plan(mc, context=4096, kv_dtype="int2", memory=64 * 2**30, weight_bytes=0)
    assert p.kv_bytes_per_token == per_token
    budget = 64 * 2**30
    n_q = plan_num_blocks(
        EngineConfig(kv_cache_dtype="int2", kv_cache_memory=budget), mc, fmt, 4096
    )
    n_b = plan_num_blocks(
        EngineConfig(dtype="bfloat16", kv_cache_memory=budget),
        mc,
        kv_cache_format("auto", torch.bfloat16),
        4096,
    )
    assert p.kv_blocks == n_q
    d = mc.head_dim  # bf16: 4 D bytes per token-head against 3D/4 + 8
    assert n_q / n_b == pytest.approx(4 * d / (3 * d / 4 + 8), rel=1e-3)


def test_engine_allocation_agrees_with_kv_plan(engine_factory):
    eng = engine_factory(kv_cache_dtype="int2", num_kv_blocks=None, kv_cache_memory=64 * 2**20)
    p = plan(
        PRESETS["smollm2-135m"][0], context=2048, kv_dtype="int2", memory=64 * 2**20, weight_bytes=0
    )
    assert p.kv_bytes_per_token == 5_040 and p.kv_blocks == 832
    assert eng.kv_cache_manager.num_blocks == 832
    # per layer a block is 16 x 3 x 56 = 2,688 B; over 30 layers 80,640 B
    assert eng.runner.kv_cache.shape == (30, 1, 832, 2_688)
    assert eng.runner.kv_cache.numel() == 832 * 80_640
    assert eng.metrics.kv_cache_dtype == "int2"


def test_refusals():
    with pytest.raises(EngineError, match="block_size >= 16"):
        EngineConfig(kv_cache_dtype="int2", block_size=8)
    with pytest.raises(EngineError, match="speculative"):
        EngineConfig(
            kv_cache_dtype="int2", speculative={"method": "ngram", "num_speculative_tokens": 3}
        )
    with pytest.raises(PlanError, match="block-size >= 16"):
        plan(PRESETS["smollm2-135m"][0], context=64, kv_dtype="int2", block_size=8)


def test_kv_plan_and_serve_clis_know_int2(capsys):
    from local_engine.server.cli import add_arguments
    from promptcache.cli import main

    assert main(["kv-plan", "--model", "llama-3-8b", "--context", "4k", "--kv-dtype", "int2"]) == 0
    out = capsys.readouterr().out
    assert "int2" in out and "26,624" in out
    p = argparse.ArgumentParser(prog="promptcache serve")
    add_arguments(p)
    assert p.parse_args(["--kv-cache-dtype", "int2"]).kv_cache_dtype == "int2"


# ---- the tiny model: swap, CPU tier, disk tier ---------------------------------------------
@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from .attention.test_triton_cuda_graphs import tiny_model_folder

    return tiny_model_folder(tmp_path_factory.mktemp("tiny_int2"))


def tiny(folder, **kw):
    from local_engine.engine import LLMEngine

    kw.setdefault("num_kv_blocks", 10)
    return LLMEngine.from_config(
        folder,
        device="cpu",
        seed=0,
        max_num_seqs=4,
        max_num_batched_tokens=64,
        kv_cache_dtype="int2",
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


def test_swap_moves_int2_blocks_open_and_finished(folder):
    """Four requests that cannot all fit a 10-block pool: preemption swaps their blocks (open
    ones with their INT4 residual, finished ones with their per-channel scales) out and back;
    every output equals the request run alone."""
    probe = tiny(folder)
    assert kv_block_bytes(probe.model_config, 16, kv_cache_format("int2", torch.float32)) == (
        TINY_BLOCK
    )
    eng = tiny(folder, swap_space=40 * TINY_BLOCK)
    ps = prompts(4, seed=1, length=40)
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    for i, p in enumerate(ps):
        eng.add_request(f"s{i}", p, params)
    from .conftest import run_to_completion

    final, _ = run_to_completion(eng)
    assert eng.scheduler.num_swaps > 0
    assert [final[f"s{i}"].token_ids for i in range(4)] == alone(folder, ps, params)


def test_cpu_and_disk_tiers_move_int2_blocks(folder, tmp_path):
    """Six 70-token prompts through a 10-block pool, a 4-block CPU tier and a disk folder; a
    fresh engine on the folder reads the first prompt's 4 finished blocks back from disk (64
    tokens) and produces the same greedy tokens as a recompute in int2."""
    ps = prompts(6, seed=2)
    eng = tiny(folder, cpu_cache_memory=4 * TINY_BLOCK, disk_cache_dir=str(tmp_path))
    firsts = [_run(eng, f"p{i}", p, GREEDY) for i, p in enumerate(ps)]
    eng.disk_tier.flush()
    again = _run(eng, "again-cpu", ps[5], GREEDY)
    assert again.num_cached_tokens == 64 and again.token_ids == firsts[5].token_ids
    fresh = tiny(folder, cpu_cache_memory=4 * TINY_BLOCK, disk_cache_dir=str(tmp_path))
    back = _run(fresh, "again-disk", ps[0], GREEDY)
    assert (back.num_cached_tokens, back.num_disk_cached_tokens) == (64, 64)
    assert fresh.metrics.kv_bytes_from_disk == 4 * TINY_BLOCK
    assert back.token_ids == firsts[0].token_ids == alone(folder, ps[:1], GREEDY)[0]


# ---- the real model: prefix caching and copy-on-write ----------------------------------------
@pytest.mark.slow  # two SmolLM2 engines, six chat prompts and a fork
def test_hit_on_int2_blocks_equals_recompute_and_cow(engine_factory):
    on = engine_factory(kv_cache_dtype="int2", debug_checks=True)
    off = engine_factory(kv_cache_dtype="int2", enable_prefix_caching=False)
    chats = _chat_prompts(on.tokenizer)
    with_cache = [_run(on, f"i2-on-{i}", ids) for i, ids in enumerate(chats)]
    without = [_run(off, f"i2-off-{i}", ids) for i, ids in enumerate(chats)]
    shared = next(i for i, (x, y) in enumerate(zip(chats[0], chats[1])) if x != y)
    assert [o.num_cached_tokens for o in with_cache] == [0] + [shared // 16 * 16] * 2
    for a, b in zip(with_cache, without):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
    # copy-on-write: 3 greedy samples share an open block (45 = 2 x 16 + 13 tokens), each
    # writes its own copy of its INT4 residual and finishes it on its own
    ids = chats[1][:45]
    params = SamplingParams(temperature=0.0, max_tokens=8, n=3, ignore_eos=True)
    out = _run(on, "i2-cow", ids, params)
    toks = [c.token_ids for c in out.outputs]
    assert toks[0] == toks[1] == toks[2] == _run(off, "i2-cow1", ids, GREEDY).token_ids[:8]
    assert on.kv_cache_manager.num_free_blocks == on.kv_cache_manager.num_blocks
