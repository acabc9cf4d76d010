"""The engine with the KIVI-style 2-bit KV cache (``kv_cache_dtype="int2"``): bytes per token
and residual slots against hand-worked figures (``kv-plan``, ``EngineConfig``, the allocation
agree), the refusals (block size, speculative decoding), ``serve --kv-cache-dtype int2``, the
tiny random-weight model's int2 blocks through preemption (recompute: an open block's residual
slot is not swapped), the CPU tier and the disk tier (the same greedy tokens as a recompute in
int2), and the real SmolLM2's prefix hits equal to recomputing in int2, with copy-on-write of
an open block (its residual slot copied).

Hand-worked bytes (``local_engine.kv_cache.int2``), a 16-token block per layer and KV head:
K and V codes ``16 x D/4`` each, V float16 scale and minimum ``16 x 4``, K float16 scale and
minimum per channel ``4 D``: ``16 x (3D/4 + 4)``, per token ``layers x kv_heads x (3D/4 + 4)``:
- Llama 3 8B (32 layers, 8 KV heads, D 128): 32 x 8 x 100 = 25,600 B (bf16: 131,072; 5.12x);
  a block per layer 16 x 8 x 100 = 12,800 B; a residual slot (K and V of 16 tokens, bf16)
  2 x 16 x 8 x 128 x 2 = 65,536 B = 6 blocks (5.12 rounded up);
- SmolLM2-135M (30 layers, 3 KV heads, D 64): 30 x 3 x 52 = 4,680 B; a block per layer 2,496
  B, over 30 layers 74,880 B; a residual slot in float32 2 x 16 x 3 x 64 x 4 = 24,576 B per
  layer = 10 blocks (9.85), in bf16 5 (4.92);
- the tiny test model (2 layers, 2 KV heads, D 16): 2 x 2 x 16 = 64 B; a block 1,024 B.
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

from . import test_kv_quant_lowbit_tiers as lowbit
from .test_kv_quant_engine import _chat_prompts, _run
from .test_kv_quant_lowbit_tiers import prompts

GREEDY = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
TINY_BLOCK = lowbit.BLOCK["int2"]


# ---- bytes ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("preset", "per_token", "residual", "blocks"),
    # 64 GiB = 68,719,476,736 B; residual: (64 + 4) slots x 6 (Llama) / 5 (SmolLM2) blocks
    # Llama: 68,719,476,736 // 409,600 = 167,772 - 408; SmolLM2: // 74,880 = 917,728 - 340
    [("llama-3-8b", 25_600, 408, 167_364), ("smollm2-135m", 4_680, 340, 917_388)],
)
def test_bytes_per_token_by_hand_and_capacity_against_bf16(preset, per_token, residual, blocks):
    mc = PRESETS[preset][0]
    fmt = kv_cache_format("int2", torch.bfloat16)
    assert fmt.bytes_per_token(mc) == per_token
    assert kv_block_bytes(mc, 16, fmt) == 16 * per_token
    p = plan(mc, context=4096, kv_dtype="int2", memory=64 * 2**30, weight_bytes=0)
    assert p.kv_bytes_per_token == per_token
    assert p.residual_blocks == residual and p.kv_blocks == blocks
    assert fmt.residual_blocks(mc, 16, 64) == residual
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
    d = mc.head_dim  # bf16: 4 D bytes per token-head against 3D/4 + 4
    assert (n_q + residual) / n_b == pytest.approx(4 * d / (3 * d / 4 + 4), rel=1e-4)


def test_engine_allocation_agrees_with_kv_plan(engine_factory):
    """64 MiB, float32 (the CPU engine's dtype), 8 running sequences: 67,108,864 // 74,880 =
    896 blocks' bytes, of which (8 + 4) slots x 10 = 120 hold the residual: 776 blocks."""
    eng = engine_factory(
        kv_cache_dtype="int2", num_kv_blocks=None, kv_cache_memory=64 * 2**20, max_num_seqs=8
    )
    p = plan(
        PRESETS["smollm2-135m"][0],
        context=2048,
        kv_dtype="int2",
        memory=64 * 2**20,
        weight_bytes=0,
        weight_dtype="fp32",
        max_num_seqs=8,
    )
    assert p.kv_bytes_per_token == 4_680 and p.residual_blocks == 120 and p.kv_blocks == 776
    assert eng.kv_cache_manager.num_blocks == 776
    res = eng.kv_cache_manager.residual
    assert (res.num_slots, res.first, res.blocks_per_slot) == (12, 776, 10)
    assert eng.runner.kv_cache.shape == (30, 1, 896, 2_496)
    assert eng.runner.kv_cache.numel() == 896 * 74_880 <= 64 * 2**20
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
    assert "int2" in out and "25,600" in out
    p = argparse.ArgumentParser(prog="promptcache serve")
    add_arguments(p)
    assert p.parse_args(["--kv-cache-dtype", "int2"]).kv_cache_dtype == "int2"


# ---- the tiny model: swap (the CPU and disk tiers: test_kv_quant_lowbit_tiers.py) ---------
@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from .attention.test_triton_cuda_graphs import tiny_model_folder

    return tiny_model_folder(tmp_path_factory.mktemp("tiny_int2"))


def tiny(folder, **kw):
    return lowbit.tiny(folder, "int2", **kw)


def alone(folder, ps, params, **kw):
    return lowbit.alone(folder, "int2", ps, params, **kw)


def test_swap_moves_int2_blocks_and_the_open_blocks_residual_slot(folder):
    """Four requests that cannot all fit a 10-block pool: preemption swaps their blocks out
    and back, an open block's residual slot (8 pseudo-blocks of float32 K and V) with them;
    every output equals the request run alone and every slot comes back. Each prompt is
    prefilled in one step (a 256-token budget): int2's results depend on where chunks end (a
    query reads its own block from the residual slot while the block is open, 2-bit once it
    is full), and a recompute would not be bit-equal either."""
    probe = tiny(folder)
    assert kv_block_bytes(probe.model_config, 16, kv_cache_format("int2", torch.float32)) == (
        TINY_BLOCK
    )
    eng = tiny(folder, swap_space=80 * TINY_BLOCK, max_num_batched_tokens=256)
    # lengths such that the sequence preempted holds an open block (measured: one swap,
    # its 8 residual pseudo-blocks moved out and back)
    ps = prompts(4, seed=1, lengths=[40, 45, 50, 37])
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    for i, p in enumerate(ps):
        eng.add_request(f"s{i}", p, params)
    from .conftest import run_to_completion

    kv = eng.kv_cache_manager
    moved = []  # (device, host) pairs of residual pseudo-blocks (ids past the pool's blocks)
    swap_out = kv.swap_out
    kv.swap_out = lambda seq: (
        out := swap_out(seq),
        moved.extend(p for p in out if p[0] >= kv.num_blocks),
    )[0]
    final, _ = run_to_completion(eng)
    assert eng.scheduler.num_swaps > 0 and len(moved) % 8 == 0 and moved
    want = alone(folder, ps, params, max_num_batched_tokens=256)
    assert [final[f"s{i}"].token_ids for i in range(4)] == want
    res = eng.kv_cache_manager.residual
    assert not res.of_block and len(res.free) == res.num_slots == 4 + 4


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
    # writes its own copy of its residual slot and finishes it on its own
    ids = chats[1][:45]
    params = SamplingParams(temperature=0.0, max_tokens=8, n=3, ignore_eos=True)
    out = _run(on, "i2-cow", ids, params)
    toks = [c.token_ids for c in out.outputs]
    assert toks[0] == toks[1] == toks[2] == _run(off, "i2-cow1", ids, GREEDY).token_ids[:8]
    assert on.kv_cache_manager.num_free_blocks == on.kv_cache_manager.num_blocks


# ---- residual slots: copy-on-write, a hit on a block a decode filled --------------------------
def test_copy_on_write_of_an_open_block_copies_its_residual_slot():
    """The manager alone: a fork shares the open block and its slot; the first write by the
    child gives it a new block with a new slot, and the copies are the block and the slot's
    pseudo-blocks (ids past the pool's); freeing both gives every slot back."""
    from local_engine.kv_cache.manager import KVCacheManager
    from local_engine.kv_cache.residual import ResidualSlots
    from local_engine.sequence import Sequence

    kv = KVCacheManager(8, 16, residual=ResidualSlots(3, 8, 2))  # slots at 8, 10, 12
    parent = Sequence("p", "p", 0, list(range(20)), SamplingParams())
    assert kv.allocate_slots(parent, 20) == []  # block 1 left open: slot 8
    assert kv.residual.of_block == {kv.block_ids("p")[1]: 8}
    parent.num_computed_tokens = 20
    child = Sequence("c", "c", 0, list(range(21)), SamplingParams())
    child.num_computed_tokens = 20
    kv.fork(parent, child)
    old = kv.block_ids("c")[1]
    copies = kv.allocate_slots(child, 1)
    new = kv.block_ids("c")[1]
    assert new != old and copies == [(old, new), (8, 10), (9, 11)]
    assert kv.residual.of_block == {old: 8, new: 10}
    assert kv.residual.take_writes() == [(old, 8), (new, 10)]
    kv.check_invariants()
    kv.free(child)
    kv.free(parent)
    assert not kv.residual.of_block and sorted(kv.residual.free) == [8, 10, 12]


def test_fork_of_an_open_block_equals_one_sample(folder):
    """Three greedy samples of a 21-token prompt (block 1 open, in a residual slot) each write
    their own copy of the slot: all equal the single-sample run."""
    eng = tiny(folder, num_kv_blocks=16)
    p = prompts(1, seed=5, length=21)[0]
    params = SamplingParams(temperature=0.0, max_tokens=20, n=3, ignore_eos=True)
    out = _run(eng, "fork", p, params)
    one = alone(folder, [p], SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True))[0]
    assert [c.token_ids for c in out.outputs] == [one] * 3
    res = eng.kv_cache_manager.residual
    assert not res.of_block and len(res.free) == res.num_slots


def test_hit_on_a_block_a_decode_filled(folder):
    """A: a 20-token prompt, 24 greedy tokens; its block 1 is filled by decodes (tokens 20-31
    through its residual slot, quantized by the write of token 31). B: A's first 36 tokens as
    a prompt hits blocks 0 and 1 (32 tokens) and computes tokens 32-35 over them as A's
    decodes did (blocks 0-1 2-bit, block 2 from its slot): B's greedy tokens are A's next 8."""
    eng = tiny(folder, num_kv_blocks=16)
    p = prompts(1, seed=6, length=20)[0]
    a = _run(eng, "A", p, SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True))
    t = a.outputs[0].token_ids
    b = _run(eng, "B", p + t[:16], SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True))
    assert b.num_cached_tokens == 32
    assert b.outputs[0].token_ids == t[16:24]


def test_slots_under_chunked_prefill_forks_and_preemption(folder):
    """Eight requests of 10-60 tokens (two with 2 samples) through a 9-block pool with a
    24-token step budget (chunks end inside blocks, so a chunk holds two slots) and swap
    space: the manager's invariants hold every step (debug_checks), every request finishes,
    and every slot and block comes back."""
    import random

    from .conftest import run_to_completion

    rng = random.Random(3)
    eng = tiny(folder, num_kv_blocks=9, max_num_batched_tokens=24, swap_space=40 * TINY_BLOCK)
    for i in range(8):
        ids = [rng.randrange(256) for _ in range(rng.randrange(10, 60))]
        params = SamplingParams(
            temperature=0.0, max_tokens=30, ignore_eos=True, n=2 if i % 4 else 1
        )
        eng.add_request(f"r{i}", ids, params)
    final, _ = run_to_completion(eng)
    assert len(final) == 8 and eng.scheduler.num_preemptions > 0
    assert all(len(c.token_ids) == 30 for o in final.values() for c in o.outputs)
    kv = eng.kv_cache_manager
    assert not kv.residual.of_block and len(kv.residual.free) == kv.residual.num_slots
    assert kv.num_free_blocks == kv.num_blocks
