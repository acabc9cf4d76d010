"""The INT4 attention program's variants (``int4_variant=(INT4_CVT, INT4_FOLD)``,
:mod:`local_engine.attention.triton_int4`) under the Triton interpreter, each against float64
attention over the dequantized cache (keys rotated back): a mixed prefill/decode batch (the
test_kv_quant_int4 case) and decode-shaped split-K batches whose scores grow along the
context (the online softmax rescales on many tiles), outputs and scratch poisoned with NaN
first. ``INT4_CVT`` 2 (inline PTX) runs as 1 in the interpreter (the launcher's choice for
CPU tensors); the H200 check of the compiled kernels is bench/kv_int4_variants.py.

Tolerances: float32 queries 1e-5 (only float32 arithmetic differs; the fold's offset
subtraction loses ~2**-24 * 136 * sum|q| per score, far below); bf16/fp16 queries 2e-2
(queries and probabilities rounded to 16 bits, as test_kv_quant_int4's bf16 test).
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere in this process

import functools
import types

import pytest
import torch

from local_engine.attention import write_kv_cache
from local_engine.kv_cache.quant import dequantize, hadamard

from .test_kv_quant import _dense, _pool, rel
from .test_kv_quant_int4 import _attention_case

ALL = [(0, False), (1, False), (1, True), (2, False), (2, True)]
FAST = [(1, False), (2, True)]


def vid(v) -> str:
    """``cvt2-fold`` style test ids."""
    return f"cvt{v[0]}" + ("-fold" if v[1] else "")


@pytest.fixture(scope="module")
def tb():
    """The Triton backend, interpreted (reloaded if triton was imported without the flag)."""
    import importlib

    from local_engine.attention import triton_attention, triton_int4, triton_kv_write

    if type(triton_attention.paged_attention_kernel).__name__ != "InterpretedFunction":
        importlib.reload(triton_kv_write)
        importlib.reload(triton_int4)
        importlib.reload(triton_attention)
    return importlib.reload(importlib.import_module("local_engine.attention.triton_backend"))


def _with_variant(tb, variant, **kw):
    """A stand-in for the backend module whose ``paged_attention`` forces ``variant``."""
    return types.SimpleNamespace(
        paged_attention=functools.partial(tb.paged_attention, int4_variant=variant, **kw)
    )


def _mixed(tb, variant, q_dtype, seed):
    out, deq, _ = _attention_case("triton", q_dtype, seed, _with_variant(tb, variant))
    return out, deq


@pytest.mark.parametrize("variant", FAST, ids=vid)
def test_variants_mixed_batch_float32(variant, tb):
    out, deq = _mixed(tb, variant, torch.float32, 3)
    assert not out.isnan().any()
    assert rel(out, deq) < 1e-5, rel(out, deq)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ALL, ids=vid)
@pytest.mark.parametrize("q_dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_every_variant_mixed_batch(variant, q_dtype, tb):
    out, deq = _mixed(tb, variant, q_dtype, 4)
    assert out.dtype == q_dtype and not out.isnan().any()
    assert rel(out, deq) < (1e-5 if q_dtype == torch.float32 else 2e-2), rel(out, deq)


def _decode_case(tb, variant, q_dtype, segments, seed=5):
    """Decode-shaped batch (one new token per sequence) over an INT4 pool in random blocks,
    keys growing along the context (x (1 + pos / 8)), so scores' maxima rise tile after tile.
    Returns (out, float64 over the dequantized cache)."""
    g = torch.Generator().manual_seed(seed)
    Hq, H, D, bs = 8, 2, 32, 4
    ctx_lens = [1, 9, 70, 45]
    n_blocks = [-(-c // bs) for c in ctx_lens]
    nb = sum(n_blocks) + 2
    _, (kc, vc, ks, vs) = _pool("int4", nb, bs, H, D)
    perm = torch.randperm(nb, generator=g).tolist()
    tables = torch.zeros((len(ctx_lens), max(n_blocks)), dtype=torch.int32)
    q = torch.randn((len(ctx_lens), Hq, D), generator=g)
    deq = []
    for i, (c, n) in enumerate(zip(ctx_lens, n_blocks)):
        blocks = [perm.pop() for _ in range(n)]
        tables[i, :n] = torch.tensor(blocks)
        slot = torch.tensor([blocks[p // bs] * bs + p % bs for p in range(c)])
        ramp = 1 + torch.arange(c, dtype=torch.float32)[:, None, None] / 8
        # keys leaning towards the sequence's first query head, growing with position
        k = (torch.randn((c, H, D), generator=g) + q[i, 0]) * ramp
        v = torch.randn((c, H, D), generator=g)
        write_kv_cache(k, v, kc, vc, slot, backend="triton", k_scale=ks, v_scale=vs)
        b, o = slot // bs, slot % bs
        kd = dequantize(kc[b, o], ks[b, o], torch.float64) @ hadamard(D, torch.float64)
        vd = dequantize(vc[b, o], vs[b, o], torch.float64)
        deq.append(_dense(q[i : i + 1].double(), kd, vd, c, 1))
    q = q.to(q_dtype)
    cu = torch.arange(len(ctx_lens) + 1, dtype=torch.int32)
    lens = torch.tensor(ctx_lens, dtype=torch.int32)
    cfg = tb.KernelConfig(16, 16, 1, 2)  # 16-key tiles: several tiles per sequence
    out = tb.paged_attention(
        q, kc, vc, tables, cu, lens, k_scale=ks, v_scale=vs, config=cfg,
        num_segments=segments, int4_variant=variant,
    )  # fmt: skip
    return out, torch.cat(deq)


@pytest.fixture
def poisoned(tb, monkeypatch):
    """Outputs and split-K scratch start as NaN: every element must be written."""
    monkeypatch.setattr(
        tb, "_alloc", lambda shape, dtype, device: torch.full(shape, float("nan"), dtype=dtype)
    )
    return tb


@pytest.mark.parametrize("variant", FAST + [(0, False)], ids=vid)
@pytest.mark.parametrize("segments", [1, 3])
def test_decode_split_k_growing_scores(variant, segments, poisoned):
    out, deq = _decode_case(poisoned, variant, torch.float32, segments)
    assert not out.isnan().any()
    assert rel(out, deq) < 1e-5, rel(out, deq)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ALL, ids=vid)
def test_every_variant_decode_bf16(variant, poisoned):
    out, deq = _decode_case(poisoned, variant, torch.bfloat16, 3)
    assert not out.isnan().any()
    assert rel(out, deq) < 2e-2, rel(out, deq)


def test_magic_number_operands_by_hand():
    """The bit patterns INT4_CVT 1/2 build: bf16 0x4300 | c is 128 + c and fp16 0x6400 | c
    is 1024 + c for every 4-bit code c (their ulp there is 1), so subtracting 136 / 1032
    gives the value c - 8 exactly."""
    c = torch.arange(16, dtype=torch.int16)
    assert torch.equal((c | 0x4300).view(torch.bfloat16).double(), 128.0 + c.double())
    assert torch.equal((c | 0x6400).view(torch.float16).double(), 1024.0 + c.double())


def test_int4_variant_of(tb):
    assert tb.int4_variant_of(128) == tb.INT4_VARIANT
    assert tb.int4_variant_of(128, (0, True)) == (0, False)  # no fold without the program
    assert tb.int4_variant_of(16) == (0, False)  # tl.dot depth D/2 < 16
    with pytest.raises(ValueError, match="head_dim >= 32"):
        tb.int4_variant_of(16, (2, True))
    with pytest.raises(ValueError, match="INT4_CVT"):
        tb.int4_variant_of(128, (3, True))
