"""The low-bit KV caches' blocks (``"int4"``, ``"int2"``) through the CPU tier and the disk
tier, on the tiny random-weight model: six 70-token prompts through a 10-block pool, a 4-block
CPU tier and a disk folder; the first prompt's 4 full blocks fall through to disk. A fresh
engine on the folder reads them back (64 tokens from disk) and produces the same greedy tokens
as a recompute in that format; the bytes read are 4 blocks.

Block bytes of the tiny model (2 layers, 2 KV heads, head_dim 16, 16 tokens), by hand:
INT4 2 layers x 2 (K, V) x 16 x 2 x (16 / 2 + 4) = 1,536; int2 2 layers x 16 x 2 x (3 x 16 /
4 + 4) = 1,024 (``local_engine.kv_cache.int2``: codes, scales and minima; its residual slots
hold open blocks only and never reach the tiers).
"""

from __future__ import annotations

import pytest
import torch

from local_engine.kv_cache.quant import kv_cache_format
from local_engine.runner import kv_block_bytes
from local_engine.sampling import SamplingParams

from .test_kv_quant_engine import _run

GREEDY = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
BLOCK = {"int4": 1_536, "int2": 1_024}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from .attention.test_triton_cuda_graphs import tiny_model_folder

    return tiny_model_folder(tmp_path_factory.mktemp("tiny_lowbit"))


def tiny(folder, dtype, **kw):
    """The tiny model on the CPU with a ``dtype`` KV cache, pool invariants checked each step."""
    from local_engine.engine import LLMEngine

    kw.setdefault("num_kv_blocks", 10)
    kw.setdefault("max_num_batched_tokens", 64)
    return LLMEngine.from_config(
        folder,
        device="cpu",
        seed=0,
        max_num_seqs=4,
        kv_cache_dtype=dtype,
        debug_checks=True,
        **kw,
    )


def prompts(n, seed=0, length=70, lengths=None):
    import random

    rng = random.Random(seed)
    return [[rng.randrange(256) for _ in range(k)] for k in (lengths or [length] * n)]


def alone(folder, dtype, ps, params, **kw):
    """Each prompt's tokens from an engine with room for all (no preemption, no cache)."""
    big = tiny(folder, dtype, num_kv_blocks=64, enable_prefix_caching=False, **kw)
    return [_run(big, f"alone{i}", p, params).token_ids for i, p in enumerate(ps)]


@pytest.mark.parametrize("dtype", ["int4", "int2"])
def test_cpu_and_disk_tiers_move_low_bit_blocks(folder, tmp_path, dtype):
    block = BLOCK[dtype]
    probe = tiny(folder, dtype)
    assert kv_block_bytes(probe.model_config, 16, kv_cache_format(dtype, torch.float32)) == block
    ps = prompts(6, seed=2)
    eng = tiny(folder, dtype, cpu_cache_memory=4 * block, disk_cache_dir=str(tmp_path))
    firsts = [_run(eng, f"p{i}", p, GREEDY) for i, p in enumerate(ps)]
    eng.disk_tier.flush()
    again = _run(eng, "again-cpu", ps[5], GREEDY)  # most recent: device pool or CPU tier
    assert again.num_cached_tokens == 64 and again.token_ids == firsts[5].token_ids
    fresh = tiny(folder, dtype, cpu_cache_memory=4 * block, disk_cache_dir=str(tmp_path))
    back = _run(fresh, "again-disk", ps[0], GREEDY)
    assert (back.num_cached_tokens, back.num_disk_cached_tokens) == (64, 64)
    assert fresh.metrics.kv_bytes_from_disk == 4 * block
    assert back.token_ids == firsts[0].token_ids == alone(folder, dtype, ps[:1], GREEDY)[0]
