"""The engine's C++ CPU kernels (``local_engine/ops/cpu``) against their torch references.

- Packing: the panel layouts by their index formulas (no build needed).
- Every build this CPU runs (the ``isa`` fixture: its own and, on an AVX-512 CPU, the AVX2
  build forced by ``PROMPTCACHE_CPU_ISA=avx2``, which is what AVX2-only machines run).
- Linears (skipped where the kernels are not built): float32 against a float64 ``F.linear``
  (relative 1e-5 of the row maximum: the same products, another summation order); bfloat16
  against float64 over the bfloat16-rounded input and weight (relative 1e-5: the products are
  exact in float32 and the kernel accumulates in float32); int8 bit for bit against fbgemm's
  arithmetic with 8-bit activations one row at a time, emulated in torch (ATen's parameter
  choice, the fma rounding, exact integer sums), itself checked bit for bit against fbgemm's
  dynamic linear where fbgemm sums exactly (VNNI). Odd shapes (``in`` not a multiple of 4 or
  16, ``out`` not a multiple of 32, one row, more rows than a register block), 1 and 2
  threads; a call large enough to be split over two threads equals the one-thread result.
- The fused decoder layer against the module-by-module torch path on a small random Llama:
  batch-1 decode over a context spread over non-contiguous blocks, a batched decode of three
  sequences, a 5-token verification step over a cached prefix; outputs and the KV written.
- The real SmolLM2 engine with the kernels on and off: greedy float32 tokens identical on chat
  prompts except at a detected near-tie, decode-step logits within 1e-4 of the row maximum
  (the process's build: run the file with ``PROMPTCACHE_CPU_ISA=avx2`` for the AVX2 one).
- The fallback: ``PROMPTCACHE_CPU_KERNELS=0`` and a failing compiler each log one line and
  leave the torch path (fresh processes).
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

from local_engine.ops import cpu
from local_engine.sampling import SamplingParams

from .conftest import run_to_completion
from .test_model_vs_hf import PROMPTS, _engine_prefill_logits

SHAPES = [(80, 48), (33, 17), (96, 577), (1, 5), (64, 130)]  # (out, in)
ROWS = [1, 5, 13, 37]


def _isas():
    """The builds this CPU runs: its own and, on an AVX-512 CPU, the forced AVX2 one
    (``PROMPTCACHE_CPU_ISA=avx2``, what AVX2-only machines run)."""
    native = cpu.native_isa()
    if native is None:
        return ["native"]  # the kernel tests skip
    return [native, "avx2"] if native == "avx512" else [native]


@pytest.fixture(params=_isas())
def isa(request, monkeypatch):
    """Runs the test on each build of :func:`_isas` (each built once per kernel cache)."""
    monkeypatch.setenv(cpu.ENV_ISA, request.param)
    return request.param


def _need(kind):
    if not cpu.has(kind):
        pytest.skip(f"no {kind} CPU kernel built here (isa {cpu.isa()})")
    mod = cpu.kernels()
    assert mod is not None
    return mod


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def test_pack_layouts_by_formula():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(33, 7, generator=g)
    p = cpu.pack_f32(w)
    assert p.shape == (2, 7, 32)
    assert p[1, 4, 0] == w[32, 4] and p[0, 6, 31] == w[31, 6] and not p[1, :, 1:].any()
    assert torch.equal(cpu.unpack_f32(p, 33), w)
    b = cpu.pack_bf16(w)
    assert b.shape == (2, 4, 32, 2) and b.dtype == torch.bfloat16
    assert b[0, 2, 5, 1] == w[5, 5].bfloat16() and b[1, 3, 0, 1] == 0  # k = 7 is padding
    assert torch.equal(cpu.unpack_bf16(b, 33, 7), w.bfloat16())
    q = torch.randint(-127, 128, (33, 7), generator=g, dtype=torch.int8)
    packed, wsum, scale = cpu.pack_int8(q, torch.rand(33, generator=g))
    assert packed.shape == (2, 2, 32, 4) and packed[1, 1, 0, 2] == q[32, 6]
    assert packed[0, 1, 3, 3] == 0  # k = 7 padding
    assert torch.equal(wsum[:33], q.sum(1, dtype=torch.int32)) and not wsum[33:].any()
    assert scale.shape == (64,) and bool((scale[33:] == 1).all())


@pytest.mark.parametrize("out_in", SHAPES)
@pytest.mark.parametrize("rows", ROWS)
def test_linear_f32_matches_float64(out_in, rows, threads, isa):
    mod = _need("float32")
    n, k = out_in
    g = torch.Generator().manual_seed(n * k + rows)
    w, x = torch.randn(n, k, generator=g), torch.randn(rows, k, generator=g)
    y = mod.linear_f32(x, cpu.pack_f32(w), n)
    ref = F.linear(x.double(), w.double())
    assert y.shape == (rows, n) and y.dtype == torch.float32
    assert ((y.double() - ref).abs().max() / ref.abs().max()).item() < 1e-5


def test_linear_f32_strided_rows(isa):
    """A view whose rows are strided (a slice of a wider tensor) reads the right elements."""
    mod = _need("float32")
    g = torch.Generator().manual_seed(3)
    w, big = torch.randn(40, 24, generator=g), torch.randn(6, 50, generator=g)
    x = big[:, 3:27]
    ref = F.linear(x.double(), w.double())
    y = mod.linear_f32(x, cpu.pack_f32(w), 40)
    assert ((y.double() - ref).abs().max() / ref.abs().max()).item() < 1e-5


@pytest.mark.parametrize("out_in", SHAPES)
@pytest.mark.parametrize("rows", ROWS)
def test_linear_bf16_matches_rounded_float64(out_in, rows, threads, isa):
    mod = _need("bfloat16")
    n, k = out_in
    g = torch.Generator().manual_seed(n + k + rows)
    w, x = torch.randn(n, k, generator=g), torch.randn(rows, k, generator=g)
    y = mod.linear_bf16(x, cpu.pack_bf16(w), n)
    ref = F.linear(x.bfloat16().double(), w.bfloat16().double())
    assert ((y.double() - ref).abs().max() / ref.abs().max()).item() < 1e-5


def _fbgemm_rows(x, q, scale):
    from local_engine.models.linear import _pack_int8

    packed = _pack_int8(q, scale)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.cat(
            [torch.ops.quantized.linear_dynamic(x[i : i + 1], packed, False) for i in range(len(x))]
        )


def _fbgemm_arithmetic_rows(x, q, scale):
    """fbgemm's dynamic linear with 8-bit activations, one row at a time, in torch: the row's
    uint8 parameters from ATen's ChooseQuantizationParams (``torch._choose_qparams_per_tensor``),
    ``nearbyint(fma(x, 1 / scale, zp))`` clamped to [0, 255] (the fma emulated in float64,
    where ``x * (1 / scale)`` is exact), exact integer sums, then ``(acc - zp * wsum) * (sx *
    sw)`` in float32. What fbgemm computes on a VNNI CPU; on AVX2 alone fbgemm saturates at 8
    bits, so this is the reference there."""
    out = []
    wsum = q.sum(1, dtype=torch.int64)
    for row in x:
        sx, zp = torch._choose_qparams_per_tensor(row, False)
        inv = torch.tensor(1.0 / sx, dtype=torch.float64).float().double()
        t = (row.double() * inv + zp).float()  # one rounding to float32, as fma
        xq = torch.round(t).clamp(0, 255).long()
        acc = (xq[None, :] * q.long()).sum(1) - zp * wsum
        s = torch.tensor(sx, dtype=torch.float64).float() * scale.float()
        out.append(acc.float() * s)
    return torch.stack(out)


def test_fbgemm_arithmetic_reference_is_fbgemm():
    """The torch emulation above is fbgemm's linear_dynamic (8-bit activations) bit for bit,
    where fbgemm runs exact VNNI sums."""
    from local_engine.models.linear import int8_reduce_range, quantize_int8

    if int8_reduce_range():
        pytest.skip("fbgemm here saturates at 8 bits (no VNNI, or held to AVX2)")
    g = torch.Generator().manual_seed(4)
    w, x = torch.randn(96, 577, generator=g), torch.randn(13, 577, generator=g) * 3
    x[0, 0] = 40.0
    q, scale = quantize_int8(w)
    assert torch.equal(_fbgemm_arithmetic_rows(x, q, scale), _fbgemm_rows(x, q, scale))


@pytest.mark.parametrize("out_in", SHAPES)
@pytest.mark.parametrize("rows", ROWS)
def test_linear_int8_is_fbgemm_per_row(out_in, rows, threads, isa):
    from local_engine.models.linear import quantize_int8

    mod = _need("int8")
    n, k = out_in
    g = torch.Generator().manual_seed(7 * n + k + rows)
    w, x = torch.randn(n, k, generator=g), torch.randn(rows, k, generator=g) * 3
    x[0, 0] = 40.0  # an outlier row: its own scale must not leak into the others
    q, scale = quantize_int8(w)
    y = mod.linear_int8(x, *cpu.pack_int8(q, scale), n)
    _assert_fbgemm_equal(y, _fbgemm_arithmetic_rows(x, q, scale))


def _assert_fbgemm_equal(y, ref):
    """Bit-equal to fbgemm: the same uint8 parameters, the same rounding of ``x / scale``
    (``fma(x, 1 / scale, zp)`` rounded once) and exact int32 sums."""
    assert torch.equal(y, ref), f"{(y != ref).double().mean().item():.2%} differ from fbgemm"


@pytest.mark.parametrize("kind", ["float32", "bfloat16", "int8"])
def test_large_call_splits_across_threads_identically(kind, isa):
    """A call big enough to be split over threads (~2 ms of work: 320 rows) gives, column for
    column, the 1-thread result (each panel is computed by the same code whichever thread
    runs it), which matches the reference."""
    from local_engine.models.linear import quantize_int8

    mod = _need(kind)
    g = torch.Generator().manual_seed(9)
    w, x = torch.randn(1000, 700, generator=g), torch.randn(320, 700, generator=g)
    if kind == "float32":
        args, ref = (cpu.pack_f32(w), 1000), F.linear(x.double(), w.double())
        call = mod.linear_f32
    elif kind == "bfloat16":
        args, ref = (cpu.pack_bf16(w), 1000), F.linear(x.bfloat16().double(), w.bfloat16().double())
        call = mod.linear_bf16
    else:
        q, scale = quantize_int8(w)
        args, ref = (*cpu.pack_int8(q, scale), 1000), _fbgemm_arithmetic_rows(x, q, scale).double()
        call = mod.linear_int8
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = call(x, *args)
        torch.set_num_threads(2)
        two = call(x, *args)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)
    if kind == "int8":
        _assert_fbgemm_equal(two, ref.float())
    else:
        assert ((two.double() - ref).abs().max() / ref.abs().max()).item() < 1e-5


def test_linear_module_uses_kernels_by_rows(isa):
    """Linear picks the kernel for the rows it covers and the torch path above that; both
    agree with F.linear on the module's own weight."""
    from local_engine.models.linear import BF16_KERNEL_ROWS, Linear

    _need("bfloat16")
    g = torch.Generator().manual_seed(5)
    w = torch.randn(64, 40, generator=g) * 0.1
    lin = Linear(40, 64)
    lin.set_bf16(w)
    assert lin.kernel_spec()[0] == 1 and lin.kernel_spec()[3] == BF16_KERNEL_ROWS
    for rows in (1, BF16_KERNEL_ROWS, BF16_KERNEL_ROWS + 1):
        x = torch.randn(rows, 40, generator=g)
        ref = F.linear(x.bfloat16().float(), lin.dense_weight().float())
        assert ((lin(x) - ref).abs().max() / ref.abs().max()).item() < 1e-2
    lin32 = Linear(40, 64)
    lin32.set_dense(w.clone())
    assert lin32.format == "panels" and torch.equal(lin32.dense_weight(), w)
    lin32.set_dense(w.clone(), use_kernels=False)
    assert lin32.format == "dense" and lin32.kernel_spec() is None


# ------------------------------------------------------------------ the fused layer


def _tiny_model(weight_dtype):
    from local_engine.config import ModelConfig
    from local_engine.models.llama import LlamaForCausalLM

    mc = ModelConfig(
        name="t", vocab_size=128, hidden_size=64, intermediate_size=96, num_layers=2,
        num_heads=4, num_kv_heads=2, head_dim=16, rms_norm_eps=1e-5, rope_theta=10000.0,
        max_position_embeddings=256, tie_word_embeddings=False,
    )  # fmt: skip
    g = torch.Generator().manual_seed(11)
    hf = {
        "model.embed_tokens.weight": torch.randn(128, 64, generator=g),
        "model.norm.weight": 1 + 0.1 * torch.randn(64, generator=g),
        "lm_head.weight": 0.1 * torch.randn(128, 64, generator=g),
    }
    for i in range(2):
        p = f"model.layers.{i}."
        for name, shape in {
            "input_layernorm.weight": (64,), "post_attention_layernorm.weight": (64,),
            "self_attn.q_proj.weight": (64, 64), "self_attn.k_proj.weight": (32, 64),
            "self_attn.v_proj.weight": (32, 64), "self_attn.o_proj.weight": (64, 64),
            "mlp.gate_proj.weight": (96, 64), "mlp.up_proj.weight": (96, 64),
            "mlp.down_proj.weight": (64, 96),
        }.items():  # fmt: skip
            t = torch.randn(*shape, generator=g)
            hf[p + name] = 1 + 0.1 * t if len(shape) == 1 else t / shape[1] ** 0.5
    model = LlamaForCausalLM(mc)
    model.load_weights(hf, weight_dtype)
    return model


def _meta(slots, tables, cu, lens):
    from local_engine.attention.metadata import AttentionMetadata

    return AttentionMetadata(
        slot_mapping=torch.tensor(slots, dtype=torch.long),
        block_tables=torch.tensor(tables, dtype=torch.int32),
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32),
        seq_lens=torch.tensor(lens, dtype=torch.int32),
        logits_indices=torch.arange(len(slots)),
        backend="torch",
    )


def _forward_both(model, ids, positions, meta, caches):
    """(fused output, unfused output, fused caches, unfused caches) from the same caches."""
    results = []
    for fused in (True, False):
        kv = [(k.clone(), v.clone()) for k, v in caches]
        for layer in model.layers:
            layer._fused = None if fused else False
        out = model(torch.tensor(ids), torch.tensor(positions), meta, kv)
        results.append((out, kv))
    for layer in model.layers:
        layer._fused = None
    return results


def _cases():
    bs, g = 16, torch.Generator().manual_seed(2)
    # caches: 8 blocks of 16 tokens, 2 KV heads of 16; earlier positions hold random K/V
    caches = [
        (torch.randn(8, bs, 2, 16, generator=g), torch.randn(8, bs, 2, 16, generator=g))
        for _ in range(2)
    ]
    # decode at position 36 of a sequence on blocks [5, 1, 6]: slot 6*16 + 4
    yield "decode", [7], [36], _meta([100], [[5, 1, 6]], [0, 1], [37]), caches
    # three decodes: contexts 3, 17 (block edge), 30
    yield (
        "batched decode",
        [1, 2, 3],
        [2, 16, 29],
        _meta([2 * 16 + 2, 3 * 16 + 0, 7 * 16 + 13], [[2, 0], [4, 3], [0, 7]], [0, 1, 2, 3],
              [3, 17, 30]),
        caches,
    )  # fmt: skip
    # a verification: 5 new tokens at positions 20..24 over a 20-token cached prefix
    slots = [1 * 16 + 4 + j for j in range(5)]
    yield (
        "verify 5",
        [9, 8, 7, 6, 5],
        list(range(20, 25)),
        _meta(slots, [[3, 1]], [0, 5], [25]),
        caches,
    )
    # a mixed step of 20 rows (past the old 16-row limit): verifications of 3 and 7 tokens over
    # cached prefixes, a decode, and a 9-token prompt with nothing cached (the causal square)
    yield _step([(20, 3, [3, 1]), (40, 7, [5, 0, 6]), (10, 1, [2]), (9, 9, [7])], bs), caches
    # a batch-8 verification: 8 sequences x 5 tokens (40 rows), odd contexts 13..41, 24 blocks
    big = [
        (torch.randn(24, bs, 2, 16, generator=g), torch.randn(24, bs, 2, 16, generator=g))
        for _ in range(2)
    ]
    seqs = [(13 + 4 * i, 5, [3 * i, 3 * i + 1, 3 * i + 2]) for i in range(8)]
    yield _step(seqs, bs), big


def _step(seqs, bs):
    """``(name, ids, positions, meta)`` for sequences ``(ctx, q_len, blocks)``: each's new
    tokens are its last ``q_len`` positions, written at their slots through its blocks."""
    ids, positions, slots, cu, lens = [], [], [], [0], []
    width = max(len(b) for _, _, b in seqs)
    for ctx, q_len, blocks in seqs:
        for p in range(ctx - q_len, ctx):
            ids.append((7 * p + len(ids)) % 128)
            positions.append(p)
            slots.append(blocks[p // bs] * bs + p % bs)
        cu.append(cu[-1] + q_len)
        lens.append(ctx)
    tables = [b + [0] * (width - len(b)) for _, _, b in seqs]
    name = "step " + " ".join(f"{q}/{c}" for c, q, _ in seqs)
    return name, ids, positions, _meta(slots, tables, cu, lens)


@pytest.mark.parametrize("weight_dtype", ["float32", "bfloat16", "int8"])
def test_fused_layer_matches_torch_path(weight_dtype, threads, isa):
    _need("float32")
    model = _tiny_model(weight_dtype)
    assert model.layers[0].fused_op() is not None
    # float32 and bf16: the same roundings up to summation order and exp; int8 also requantizes
    # the activations, where a last-bit difference can move one value by one uint8 step
    tol = {"float32": 1e-5, "bfloat16": 1e-5, "int8": 2e-2}[weight_dtype]
    for case in _cases():
        if len(case) == 2:  # (_step(...), caches)
            (name, ids, positions, meta), caches = case
        else:
            name, ids, positions, meta, caches = case
        if weight_dtype == "float32":  # the fused layer runs every case, 40 rows included
            assert model.layers[0].fused_op().max_rows >= len(ids), name
        (fused, kv_f), (ref, kv_r) = _forward_both(model, ids, positions, meta, caches)
        err = ((fused - ref).abs().max() / ref.abs().max()).item()
        assert err < tol, f"{name}: {err}"
        for (kf, vf), (kr, vr) in zip(kv_f, kv_r):
            slots = meta.slot_mapping
            kf, kr = kf.view(-1, 2, 16)[slots], kr.view(-1, 2, 16)[slots]
            assert ((kf - kr).abs().max() / kr.abs().max()).item() < max(tol, 1e-5), name
            vf, vr = vf.view(-1, 2, 16)[slots], vr.view(-1, 2, 16)[slots]
            assert ((vf - vr).abs().max() / vr.abs().max()).item() < max(tol, 1e-5), name


def test_fused_layer_declines_what_it_does_not_cover(isa):
    _need("float32")
    model = _tiny_model("int8")
    op = model.layers[0].fused_op()
    x = torch.randn(3, 64)
    kv = (torch.zeros(4, 16, 2, 16), torch.zeros(4, 16, 2, 16))
    assert op.applies(x, None, kv, None) and op.applies(x, None, kv, "torch")
    # the int8 kernel's rows: 16 with AVX512-VNNI, 4 on AVX2 (models/linear.py)
    limit = 16 if (cpu.isa() or "").startswith("avx512") and "vnni" in cpu.isa() else 4
    assert op.max_rows == limit and op.applies(torch.randn(limit, 64), None, kv, None)
    assert not op.applies(torch.randn(limit + 1, 64), None, kv, None)
    f32 = _tiny_model("float32").layers[0].fused_op()
    assert f32.applies(torch.randn(64, 64), None, kv, None)  # float32: up to MAX_ROWS = 64
    assert not f32.applies(torch.randn(65, 64), None, kv, None)
    assert not op.applies(x, None, kv, "triton")
    assert not op.applies(x.double(), None, kv, None)
    assert not op.applies(x, None, (*kv, torch.ones(4, 16, 2), torch.ones(4, 16, 2)), None)
    # reloaded weights: the op is rebuilt over the new tensors
    lin = model.layers[0].self_attn.o_proj
    lin.set_int8(lin.qweight.clone(), lin.scale.clone())
    assert model.layers[0].fused_op() is not op


# ------------------------------------------------------------------ the real engine


@pytest.fixture(scope="module")
def torch_path_engine(engine_factory, monkeypatch_module):
    """The float32 engine built with the C++ kernels hidden (the torch path)."""
    monkeypatch_module.setattr(cpu, "has", lambda kind: False)
    monkeypatch_module.setattr(cpu, "isa", lambda: None)
    eng = engine_factory()
    monkeypatch_module.undo()
    return eng


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def _chat_ids(tok, text):
    return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))


def test_engine_greedy_tokens_kernels_on_vs_off(engine, torch_path_engine):
    """float32 greedy decode, 24 tokens on 3 chat prompts: the engine on the C++ kernels (the
    shared test engine) and on the torch path pick the same tokens, except where the torch
    path's own margin between the two choices is under 1e-4 logits (a near-tie)."""
    if not cpu.has("float32"):
        pytest.skip("kernels not built")
    layer0 = engine.runner.model.layers[0]
    assert layer0.self_attn.qkv_proj.format == "panels"
    assert layer0.fused_op() is not None  # every build (AVX-512, AVX2) has the one-call layer
    assert torch_path_engine.runner.model.layers[0].self_attn.qkv_proj.format != "panels"
    tok = engine.tokenizer
    p = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    for text in PROMPTS[:3]:
        ids = _chat_ids(tok, text)
        gens = []
        for eng in (engine, torch_path_engine):
            eng.add_request("k", ids, p)
            final, _ = run_to_completion(eng)
            gens.append(list(final["k"].outputs[0].token_ids))
        on, off = gens
        j = next((i for i, (a, b) in enumerate(zip(on, off)) if a != b), None)
        if j is not None:
            ref = _engine_prefill_logits(torch_path_engine, ids + off[:j], [len(ids) + j])[-1]
            margin = float(ref[off[j]] - ref[on[j]])
            assert margin < 1e-4, f"{text!r}: token {j} differs with margin {margin}"


def test_engine_decode_logits_kernels_on_vs_off(engine, torch_path_engine):
    """Teacher-forced logits through decode-sized steps (the fused layer, then 1-row chunks)
    agree with the torch path within 1e-4 of the row maximum."""
    if not cpu.has("float32"):
        pytest.skip("kernels not built")
    ids = _chat_ids(engine.tokenizer, PROMPTS[1])
    chunks = [len(ids) - 7, 1, 1, 5]  # a prefill, two decodes, a 5-token verification
    a = _engine_prefill_logits(engine, ids, chunks)
    b = _engine_prefill_logits(torch_path_engine, ids, chunks)
    assert ((a - b).abs().max() / b.abs().max()).item() < 1e-4


# ------------------------------------------------------------------ fallback

_PROBE = (
    "import logging, sys; logging.basicConfig(level=logging.INFO, stream=sys.stdout, "
    "format='%(message)s'); from local_engine.ops import cpu; "
    "from local_engine.models.linear import Linear; import torch; "
    "print('kernels', cpu.kernels()); l = Linear(8, 8); l.set_dense(torch.randn(8, 8)); "
    "print('format', l.format)"
)


def _probe(env):
    full = {**os.environ, **env}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=full, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_fallback_when_disabled_by_env():
    out = _probe({cpu.ENV_ENABLE: "0"})
    assert "CPU kernels: off (PROMPTCACHE_CPU_KERNELS=0); using the torch path" in out
    assert "kernels None" in out and "format dense" in out


def test_fallback_when_the_build_fails(tmp_path):
    """A compiler that fails (``CXX=false``) into an empty cache folder: one warning, torch path."""
    out = _probe({cpu.ENV_DIR: str(tmp_path), "CXX": "false"})
    assert "CPU kernels: build failed" in out and "using the torch path" in out
    assert "kernels None" in out and "format dense" in out


def test_isa_selection_by_env(monkeypatch):
    """``PROMPTCACHE_CPU_ISA``: unset or ``native`` is the CPU's own build; ``avx2`` where the
    CPU has AVX2 + FMA; an unknown value or one the CPU cannot run turns the kernels off with
    the reason."""
    monkeypatch.setattr(cpu, "cpu_flags", lambda: ("avx2", "fma"))  # an AVX2-only CPU
    for value, want in (("", "avx2"), ("native", "avx2"), ("avx2", "avx2")):
        monkeypatch.setenv(cpu.ENV_ISA, value)
        assert cpu.selected_isa() == (want, None), value
    monkeypatch.setenv(cpu.ENV_ISA, "avx512")
    isa, reason = cpu.selected_isa()
    assert isa is None and "lacks avx512f" in reason
    monkeypatch.setenv(cpu.ENV_ISA, "sse")
    assert cpu.selected_isa()[0] is None and "not one of" in cpu.disabled_reason()
    flags512 = ("avx2", "avx512bw", "avx512dq", "avx512f", "avx512vl", "fma")
    monkeypatch.setattr(cpu, "cpu_flags", lambda: flags512)
    monkeypatch.setenv(cpu.ENV_ISA, "avx2")
    assert cpu.selected_isa() == ("avx2", None)
    # the forced AVX2 build on an AVX-512 CPU compiles for x86-64-v3, not for this CPU's -march
    assert "-march=x86-64-v3" in cpu.isa_flags("avx2")
    assert cpu.isa_flags("avx512") == ("-march=native",)


def test_fallback_when_the_isa_env_is_unknown():
    out = _probe({cpu.ENV_ISA: "sse"})
    assert "CPU kernels: off (PROMPTCACHE_CPU_ISA='sse' is not one of" in out
    assert "kernels None" in out and "format dense" in out
