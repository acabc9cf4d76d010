"""The CUDA decode kernel for 1-byte KV caches (local_engine/attention/cuda_decode.py).

CPU (CI): the launch rule worked out by hand, the variant list's parsing, the support check
and the errors of ``decode_kernel=``. CUDA (the device; skipped without a GPU, like the other
CUDA tests): the kernel against the torch reference on the same quantized pool, on ragged
batches with NaN bytes past each context, a decode-shaped batch that is not one token per
sequence, forced splits, fp16 queries, a 32k-token INT8 context (where a bias removed after
the whole accumulation lost 2-8% in session 4's first build), and a CUDA-graph replay.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch

if not torch.cuda.is_available():  # the CPU tests drive the launcher under the interpreter
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere in this process

from local_engine.attention import cuda_decode  # noqa: E402
from local_engine.attention.cuda_decode import DecodeConfig, decode_config  # noqa: E402
from local_engine.kv_cache.quant import SCALE_BYTES, layer_views, quantize  # noqa: E402

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
BS = 16


# ----------------------------------------------------------------------------- CPU
def test_smem_bytes_by_hand():
    # (2 blocks x 16 keys) x 128 bytes of K + the same of V + 2 x 32 float32 scales, x 3 stages
    # x 4 warps = 4 * 3 * (4096 + 4096 + 256)
    assert DecodeConfig(2, 4, 3).smem_bytes(128) == 101_376
    # d64, 8 warps x 2 stages x (2048 + 2048 + 256) = 69_632 (the final merge's 8 warps x 8
    # heads x (64 + 2) floats, 16_896 bytes, reuses the same memory)
    assert DecodeConfig(2, 8, 2).smem_bytes(64) == 69_632


def test_ctas_per_sm_pads_shared_memory_by_hand():
    # sm_90: 233,472 bytes per SM, 1,024 reserved per CTA. (2, 4, 2) at d128 needs 4 x 2 x 8448
    # = 67,584 bytes: 3 CTAs fit (3 x 68,608 = 205,824). At most 2: 233,472 // 3 - 1,024 + 1 =
    # 76,801 bytes, so 3 x (76,801 + 1,024) = 233,475 > 233,472 and 2 x 77,825 fit.
    sm90 = (233_472, 1_024)
    assert DecodeConfig(2, 4, 2).launch_smem_bytes(128, 1, *sm90) == 67_584
    assert DecodeConfig(2, 4, 2, ctas_per_sm=2).launch_smem_bytes(128, 1, *sm90) == 76_801
    # at most 1: 233,472 // 2 - 1,023 = 115,713 (2 x 116,737 > 233,472)
    assert DecodeConfig(2, 4, 2, ctas_per_sm=1).launch_smem_bytes(128, 1, *sm90) == 115_713
    # a cap at what fits asks for no more than the kernel needs: (2, 4, 3), 101,376 bytes
    assert DecodeConfig(2, 4, 3, ctas_per_sm=2).launch_smem_bytes(128, 1, *sm90) == 101_376
    with pytest.raises(ValueError, match="do not fit"):  # 3 x 102,400 > 233,472
        DecodeConfig(2, 4, 3, ctas_per_sm=3).launch_smem_bytes(128, 1, *sm90)
    # the rule keeps a base's cap
    capped = DecodeConfig(2, 4, 2, ctas_per_sm=2)
    assert decode_config(64, 8, 128, 4096, 132, base=capped) == capped


def test_kernel_declares_no_static_shared_memory():
    """The dynamic shared memory must start where the runtime puts it (1 KiB aligned): a static
    ``__shared__`` array in the kernel moves it to a 16-byte offset, which the H200 measured
    3-20% slower on the rule's launches (session 5 of "## kvquant", 2026-12-01: in the history of
    bench/RESULTS.md, ``git log -p bench/RESULTS.md``)."""
    import re

    src = (cuda_decode.HERE / "decode_1b.cuh").read_text()
    code = re.sub(r"//[^\n]*", "", src)  # comments may mention it
    assert re.findall(r"__shared__[^;]*;", code) == ["__shared__ __align__(16) uint8_t smem[];"]


# the grid's CTAs per SM: 1, 2, 3-4, more (with d128 shared memory, 1, 2, 6 and 3 of these fit
# on an SM)
ONE, TWO, FOUR, MANY = (2, 8, 2), (2, 4, 3), (2, 2, 2), (2, 4, 2)


@pytest.mark.parametrize(
    "tokens, kv_heads, max_ctx, segs, cfg",
    [
        (16, 8, 32768, 1, ONE),  # 128 CTAs on 132 SMs: no split, one CTA per SM
        (17, 8, 32768, 1, TWO),  # 136 CTAs > 132: some SMs take two
        (33, 8, 8192, 1, TWO),  # 264 = 2 x 132
        (34, 8, 8192, 1, FOUR),  # 272 > 264
        (64, 8, 4096, 1, FOUR),  # 512 CTAs <= 4 per SM x 132 = 528
        (66, 8, 4096, 1, FOUR),  # 528: still one wave of 4 per SM
        (67, 8, 4096, 1, MANY),  # 536: more than 4 per SM
        (256, 8, 1024, 1, MANY),  # 2048 CTAs: many waves
        (1, 8, 32768, 16, ONE),  # 132 // 8 = 16 segments (by length 32768 // 512 = 64): 128
        (1, 1, 1024, 2, ONE),  # wants 132, but a segment needs 4 warps x 4 tiles x 32 keys
        (1, 1, 256, 1, ONE),  # shorter than one segment's minimum
        (1, 1, 1 << 20, 128, ONE),  # 132 -> capped at MAX_SEGMENTS, a power of two
        (2, 4, 65536, 16, ONE),  # 132 // 8 = 16
    ],
)
def test_split_rule_by_hand(tokens, kv_heads, max_ctx, segs, cfg):
    got = decode_config(tokens, kv_heads, 128, max_ctx, 132)
    assert got.num_segments == segs
    assert (got.steps, got.warps, got.stages) == cfg
    fixed = decode_config(tokens, kv_heads, 128, max_ctx, 132, base=DecodeConfig(4, 2, 3))
    assert (fixed.steps, fixed.warps, fixed.stages, fixed.num_segments) == (4, 2, 3, segs)


@pytest.mark.parametrize(
    "tokens, kv_heads, d, max_ctx, segs, cfg, smem",
    [
        # 4 CTAs x 32 segments = 128: one per SM; 4 warps x 2 stages x (K + V: 2 x 32 keys x
        # 128 x 2 bytes) = 131072
        (1, 4, 128, 32768, 32, (2, 4, 2), 131072),
        (1, 4, 64, 32768, 32, (2, 8, 2), 131072),  # d64: 8 warps x 2 x (2 x 32 x 64 x 2)
        (8, 16, 128, 8192, 1, (2, 4, 2), 131072),  # 128 CTAs
        (32, 8, 128, 8192, 1, (1, 4, 3), 98304),  # 256 CTAs: 4 x 3 x (2 x 16 x 128 x 2)
        (256, 8, 128, 1024, 1, (1, 4, 3), 98304),  # 2048 CTAs: the same
        (256, 8, 64, 1024, 1, (1, 4, 3), 49152),  # 4 x 3 x (2 x 16 x 64 x 2)
    ],
)
def test_16bit_rule_by_hand(tokens, kv_heads, d, max_ctx, segs, cfg, smem):
    got = decode_config(tokens, kv_heads, d, max_ctx, 132, elem_bytes=2)
    assert (got.steps, got.warps, got.stages, got.num_segments) == (*cfg, segs)
    assert got.smem_bytes(d, 2) == smem


def test_variants_parse(monkeypatch):
    monkeypatch.setenv(cuda_decode.ENV_VARIANTS, "2,4,3;4,2,2;2,4,3")
    # added to the defaults (the launch rule's configurations stay compiled in), in order
    assert cuda_decode.variants() == (*cuda_decode.DEFAULT_VARIANTS, (4, 2, 2))
    monkeypatch.setenv(cuda_decode.ENV_VARIANTS, "2,4")
    with pytest.raises(ValueError, match="steps,warps,stages"):
        cuda_decode.variants()
    monkeypatch.setenv(cuda_decode.ENV_VARIANTS, "3,4,2")  # steps 1, 2 or 4
    with pytest.raises(ValueError, match="out of range"):
        cuda_decode.variants()
    monkeypatch.delenv(cuda_decode.ENV_VARIANTS)
    assert cuda_decode.variants() == cuda_decode.DEFAULT_VARIANTS


def _pool(ctx_lens, hkv, d, fmt, device, g, nan_tail=False):
    n_blocks = [-(-c // BS) for c in ctx_lens]
    nb = sum(n_blocks) + 3
    k = torch.randn(nb, BS, hkv, d, generator=g, device=device) * 2
    v = torch.randn(nb, BS, hkv, d, generator=g, device=device)
    raw = torch.zeros((1, 2, nb, BS * hkv * (d + SCALE_BYTES)), dtype=torch.uint8, device=device)
    kc, vc, ks, vs = layer_views(raw, BS, hkv, d, fmt)[0]
    for src, c, s in ((k, kc, ks), (v, vc, vs)):
        qv, sc = quantize(src, fmt)
        c.copy_(qv)
        s.copy_(sc)
    perm = torch.randperm(nb, generator=g, device=device).to(torch.int32)
    bt = torch.full((len(ctx_lens), max(n_blocks)), 0, dtype=torch.int32, device=device)
    used = 0
    for i, n in enumerate(n_blocks):
        bt[i, :n] = perm[used : used + n]
        used += n
        if nan_tail and ctx_lens[i] % BS:
            blk = int(bt[i, n - 1])
            kc.view(torch.uint8)[blk, ctx_lens[i] % BS :] = 0x7F  # E4M3 NaN, INT8 127
            vc.view(torch.uint8)[blk, ctx_lens[i] % BS :] = 0x7F
            # stale scales too (the Triton kernel zeroes V's past the context): a NaN there
            # must not reach P' (0 * NaN) nor a large one the power-of-two normaliser
            ks[blk, ctx_lens[i] % BS :] = float("nan")
            vs[blk, ctx_lens[i] % BS :] = float("nan")
    return kc, vc, ks, vs, bt


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter runs where CUDA is not")
def test_cpu_tensors_are_refused():
    from local_engine.attention import triton_backend as tb

    g = torch.Generator().manual_seed(0)
    kc, vc, ks, vs, bt = _pool([20], 2, 64, torch.int8, "cpu", g)
    q = torch.randn(1, 4, 64).to(torch.bfloat16)
    assert cuda_decode.unsupported_reason(q, kc, vc, ks, vs, q) == "not a CUDA tensor"
    cu = torch.tensor([0, 1], dtype=torch.int32)
    sl = torch.tensor([20], dtype=torch.int32)
    with pytest.raises(RuntimeError, match="cannot run this call: not a CUDA tensor"):
        tb.paged_attention(q, kc, vc, bt, cu, sl, k_scale=ks, v_scale=vs, decode_kernel="cuda")
    cu2 = torch.tensor([0, 2], dtype=torch.int32)
    q2 = torch.randn(2, 4, 64).to(torch.bfloat16)
    with pytest.raises(ValueError, match="decode-shaped calls only"):
        tb.paged_attention(q2, kc, vc, bt, cu2, sl, k_scale=ks, v_scale=vs, decode_kernel="cuda")
    with pytest.raises(ValueError, match="decode_kernel must be"):
        tb.paged_attention(q, kc, vc, bt, cu, sl, k_scale=ks, v_scale=vs, decode_kernel="x")


def test_env_turns_it_off(monkeypatch):
    monkeypatch.setenv(cuda_decode.ENV_ENABLE, "0")
    q = torch.zeros(1, 4, 64)
    assert cuda_decode.unsupported_reason(q, q, q, q, q, q) == "PROMPTCACHE_CUDA_DECODE=0"


@pytest.fixture
def fresh_build():
    """Forget the memoised build result before and after the test (it is cached per device)."""
    cuda_decode._module.cache_clear()
    yield
    cuda_decode._module.cache_clear()


def test_build_helper_logs_and_falls_back(tmp_path, caplog):
    from local_engine.ops.extension_build import load_or_none

    caplog.set_level("INFO", logger="local_engine")
    folder = tmp_path / "k"

    def broken():
        raise RuntimeError("nvcc fatal: no such file\nerror: bad flag")

    assert load_or_none("X kernel", folder, broken, str, "first use", "fallback path") is None
    assert "X kernel: building in" in caplog.text
    assert "X kernel: build failed (RuntimeError: error: bad flag); fallback path" in caplog.text
    caplog.clear()
    (folder / "x.so").write_bytes(b"")  # something built: this time it is a load
    sentinel = object()
    assert load_or_none("X kernel", folder, lambda: sentinel, lambda m: "ok", "", "") is sentinel
    assert "X kernel: loaded" in caplog.text and "building" not in caplog.text


@pytest.mark.skipif(bool(torch.version.cuda), reason="checks the path of a torch without CUDA")
def test_no_cuda_torch_turns_it_off(fresh_build, caplog):
    caplog.set_level("INFO", logger="local_engine")
    assert cuda_decode._module(0) is None
    assert "CUDA decode kernel: off (this torch has no CUDA)" in caplog.text


def test_build_glue_with_a_stand_in_toolchain(fresh_build, tmp_path, monkeypatch, caplog):
    """The build path up to ``cpp_extension.load``, with a stand-in nvcc (``echo``) and load: the
    wrapper source names the compiled variants, the flags target the device's capability."""
    from torch.utils import cpp_extension

    caplog.set_level("INFO", logger="local_engine")
    monkeypatch.setenv("PROMPTCACHE_KERNEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(cuda_decode.ENV_VARIANTS, "2,4,3;4,4,2")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(cuda_decode, "_nvcc", lambda: "echo")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda idx=None: (9, 0))
    seen = {}

    def fake_load(**kw):
        seen.update(kw)
        return "module"

    monkeypatch.setattr(cpp_extension, "load", fake_load)
    assert cuda_decode._module(0) == "module"
    (src,) = seen["sources"]
    text = open(src).read()
    defs = " ".join(f"X({s}, {w}, {st})" for s, w, st in (*cuda_decode.DEFAULT_VARIANTS, (4, 4, 2)))
    assert text.startswith(f"#define DECODE_VARIANTS {defs}\n#include ")
    assert text.rstrip().endswith('decode_1b.cu"')
    assert "-gencode=arch=compute_90,code=sm_90" in seen["extra_cuda_cflags"]
    assert seen["build_directory"] == str(os.path.dirname(src))
    assert os.path.dirname(src).startswith(str(tmp_path / "cuda-"))
    assert "CUDA decode kernel: built" in caplog.text and "sm_90" in caplog.text


def test_broken_nvcc_turns_it_off(fresh_build, tmp_path, monkeypatch, caplog):
    """An nvcc that fails without output (a toolkit missing its libraries) is one warning and
    the Triton kernel, not an exception out of every decode call."""
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'error while loading shared libraries' >&2\nexit 127\n")
    nvcc.chmod(0o755)
    caplog.set_level("INFO", logger="local_engine")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(cuda_decode, "_nvcc", lambda: str(nvcc))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda idx=None: (9, 0))
    assert cuda_decode._module(0) is None
    assert "CUDA decode kernel: off" in caplog.text


def test_rule_smem_against_99_kib_devices():
    # sm_86 / sm_89 / sm_120 let a CTA opt in to 99 KiB: the one-per-SM tiers need more, so
    # unsupported_reason sends those devices to the Triton kernel instead of a launch error
    assert cuda_decode.rule_smem_bytes(128, 1) == 8 * 2 * (4096 + 4096 + 256) > 99 * 1024
    assert cuda_decode.rule_smem_bytes(64, 2) == 8 * 2 * (2 * 32 * 64 * 2) > 99 * 1024
    assert cuda_decode.rule_smem_bytes(128, 2) <= cuda_decode.MAX_SMEM


def test_paged_decode_hands_the_kernel_its_launch(monkeypatch):
    """What :func:`cuda_decode.paged_decode` passes the extension (a stand-in here): the rule's
    launch for the shapes, float32 split-K scratch of the worked-out shapes, placeholders."""
    calls = []

    class Fake:
        def decode_1b(self, *args):
            calls.append(args)

    monkeypatch.setattr(cuda_decode, "_module", lambda idx: Fake())
    monkeypatch.setattr(cuda_decode, "_device_index", lambda device: 0)
    kc = torch.zeros(300, 16, 8, 128, dtype=torch.int8)
    q = torch.zeros(1, 32, 128, dtype=torch.bfloat16)
    bt = torch.zeros(1, 2048, dtype=torch.int32)  # 32768 tokens of table
    cu = torch.tensor([0, 1], dtype=torch.int32)
    sl = torch.tensor([30000], dtype=torch.int32)
    ks = torch.zeros(300, 16, 8)
    out = torch.empty_like(q)
    # 1 token x 8 KV heads on 132 SMs: 16 segments (test_split_rule_by_hand), one CTA per SM
    parts = cuda_decode.paged_decode(out, q, kc, kc, ks, ks, bt, cu, sl, 0.5, 132)
    assert parts is not None
    assert [tuple(t.shape) for t in parts] == [(1, 32, 16, 128), (1, 32, 16), (1, 32, 16)]
    assert all(t.dtype == torch.float32 for t in parts)
    args = calls[-1]
    assert args[1] is parts[0] and args[2] is parts[1] and args[3] is parts[2]
    # qk_scale, segments, steps, warps, stages, shared memory (0: the kernel's own)
    assert args[12:] == (0.5, 16, 2, 8, 2, 0)
    # unsplit: no scratch, the output stands in; a 16-bit cache's scales are placeholders too
    kb = torch.zeros(300, 16, 8, 128, dtype=torch.bfloat16)
    q64 = torch.zeros(64, 32, 128, dtype=torch.bfloat16)
    cu64 = torch.arange(65, dtype=torch.int32)
    out64 = torch.empty_like(q64)
    bt64, sl64 = torch.zeros(64, 256, dtype=torch.int32), torch.full((64,), 4096, dtype=torch.int32)
    assert (
        cuda_decode.paged_decode(out64, q64, kb, kb, None, None, bt64, cu64, sl64, 1.0, 132) is None
    )
    args = calls[-1]
    assert args[1] is args[2] is args[3] is out64 and args[7] is args[8] is kb
    assert args[13:] == (1, 1, 4, 3, 0)  # 512 CTAs: 16-key tiles x 3 stages (16-bit rule)
    with pytest.raises(ValueError, match="decode-shaped"):
        cuda_decode.paged_decode(out64, q64, kb, kb, None, None, bt, cu, sl, 1.0, 132)
    # a cap: the padded shared memory of the device's attributes (sm_90's here)
    monkeypatch.setattr(cuda_decode, "_smem_limits", lambda idx: (233_472, 1_024))
    monkeypatch.setattr(cuda_decode, "_device_limits", lambda idx: ((9, 0), 232_448))
    capped = DecodeConfig(2, 4, 2, 1, ctas_per_sm=2)
    cuda_decode.paged_decode(out64, q64, kc, kc, ks, ks, bt64, cu64, sl64, 1.0, 132, capped)
    assert calls[-1][13:] == (1, 2, 4, 2, 76_801)
    monkeypatch.setattr(cuda_decode, "_device_limits", lambda idx: ((8, 6), 101_376))
    with pytest.raises(ValueError, match="ctas_per_sm=1 needs 115713 bytes"):
        cuda_decode.paged_decode(
            out64, q64, kc, kc, ks, ks, bt64, cu64, sl64, 1.0, 132, replace(capped, ctas_per_sm=1)
        )


# ----------------------------------------------------------------------------- CUDA
def _rel(a, b) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def _ref(q, kc, vc, ks, vs, bt, cu, sl):
    from local_engine.attention import torch_ref

    return torch_ref.paged_attention(q, kc, vc, bt, cu, sl, k_scale=ks, v_scale=vs)


@cuda
@pytest.mark.parametrize("fmt", ["int8", "fp8"])
@pytest.mark.parametrize("h, hkv, d", [(32, 8, 128), (28, 4, 128), (8, 8, 64), (16, 2, 64)])
@pytest.mark.parametrize("nseg", [None, 1, 3])
def test_matches_reference(fmt, h, hkv, d, nseg):
    from local_engine.attention import triton_backend as tb

    dtype = torch.int8 if fmt == "int8" else torch.float8_e4m3fn
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(3)
    ctx = [700, 33, 1, 260, 17, 1029, 64, 95]
    kc, vc, ks, vs, bt = _pool(ctx, hkv, d, dtype, dev, g, nan_tail=True)
    q = torch.randn(len(ctx), h, d, generator=g, device=dev).to(torch.bfloat16)
    sl = torch.tensor(ctx, dtype=torch.int32, device=dev)
    for cu in (
        torch.arange(len(ctx) + 1, dtype=torch.int32, device=dev),
        # decode-shaped, not one token each: sequence 1 has none, sequence 3 two
        torch.tensor([0, 1, 1, 2, 4, 5, 6, 7, 8], dtype=torch.int32, device=dev),
    ):
        out = tb.paged_attention(
            q, kc, vc, bt, cu, sl, k_scale=ks, v_scale=vs, decode_kernel="cuda", num_segments=nseg
        )
        assert not out.isnan().any()
        # tolerance: fp16 products (11 significant bits) against the float32 reference; run 1
        # measured 3e-4 .. 1.2e-3 on these shapes
        assert _rel(out, _ref(q, kc, vc, ks, vs, bt, cu, sl)) < 5e-3


@cuda
def test_long_int8_context_keeps_its_digits():
    from local_engine.attention import triton_backend as tb

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(5)
    ctx = [32768, 30001]
    kc, vc, ks, vs, bt = _pool(ctx, 8, 128, torch.int8, dev, g)
    q = torch.randn(2, 32, 128, generator=g, device=dev).to(torch.bfloat16)
    cu = torch.arange(3, dtype=torch.int32, device=dev)
    sl = torch.tensor(ctx, dtype=torch.int32, device=dev)
    ref = _ref(q, kc, vc, ks, vs, bt, cu, sl)
    for nseg in (1, None):
        out = tb.paged_attention(
            q, kc, vc, bt, cu, sl, k_scale=ks, v_scale=vs, decode_kernel="cuda", num_segments=nseg
        )
        assert _rel(out, ref) < 5e-3  # the V bias removed at the end: 2.4e-2 .. 7.8e-2


@cuda
def test_fp16_queries():
    from local_engine.attention import triton_backend as tb

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(6)
    kc, vc, ks, vs, bt = _pool([300, 77], 8, 128, torch.int8, dev, g)
    q = torch.randn(2, 32, 128, generator=g, device=dev).to(torch.float16)
    cu = torch.arange(3, dtype=torch.int32, device=dev)
    sl = torch.tensor([300, 77], dtype=torch.int32, device=dev)
    out = tb.paged_attention(q, kc, vc, bt, cu, sl, k_scale=ks, v_scale=vs, decode_kernel="cuda")
    assert out.dtype == torch.float16
    assert _rel(out, _ref(q, kc, vc, ks, vs, bt, cu, sl)) < 5e-3


@cuda
@pytest.mark.parametrize("cfg", [(2, 4, 2), (2, 4, 3), (2, 2, 2)])
def test_ctas_per_sm_holds_and_changes_no_digit(cfg):
    """``ctas_per_sm`` c: the runtime's occupancy for the padded launch is c (every c below
    what fits), and the output is bit-identical to the unpadded launch."""
    from local_engine.attention import triton_backend as tb

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(9)
    ctx = [4000, 123, 9000, 1]
    kc, vc, ks, vs, bt = _pool(ctx, 8, 128, torch.int8, dev, g)
    q = torch.randn(len(ctx), 32, 128, generator=g, device=dev).to(torch.bfloat16)
    cu = torch.arange(len(ctx) + 1, dtype=torch.int32, device=dev)
    sl = torch.tensor(ctx, dtype=torch.int32, device=dev)
    args = (q, kc, vc, ks, vs, bt, cu, sl)
    base = DecodeConfig(*cfg)
    fits = cuda_decode.launch_occupancy(*args, base)
    per_sm, reserved = cuda_decode._smem_limits(cuda_decode._device_index(dev))
    need = base.smem_bytes(128) + reserved
    # shared memory (or the 64 warps of an sm_80/sm_90 SM) bound it: at <= 128 registers a
    # thread (122 for INT8 d128 with nvcc 13) 4 CTAs of 128 threads fit by registers
    assert fits == min(per_sm // need, 64 // base.warps)
    want = tb.paged_attention(
        *args[:3], bt, cu, sl, k_scale=ks, v_scale=vs, decode_kernel="cuda", cuda_config=base
    )
    for c in range(1, fits):
        capped = replace(base, ctas_per_sm=c)
        assert cuda_decode.launch_occupancy(*args, capped) == c
        got = tb.paged_attention(
            *args[:3], bt, cu, sl, k_scale=ks, v_scale=vs, decode_kernel="cuda", cuda_config=capped
        )
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@cuda
def test_auto_picks_it_and_graph_replay_matches():
    from local_engine.attention import triton_backend as tb

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(7)
    kc, vc, ks, vs, bt = _pool([4000, 123, 9000], 8, 128, torch.int8, dev, g)
    q = torch.randn(3, 32, 128, generator=g, device=dev).to(torch.bfloat16)
    cu = torch.arange(4, dtype=torch.int32, device=dev)
    sl = torch.tensor([4000, 123, 9000], dtype=torch.int32, device=dev)
    out = torch.empty_like(q)
    cuda_out = tb.paged_attention(
        q, kc, vc, bt, cu, sl, k_scale=ks, v_scale=vs, decode_kernel="cuda"
    )
    tb.paged_attention(q, kc, vc, bt, cu, sl, k_scale=ks, v_scale=vs, out=out)  # auto
    torch.testing.assert_close(out, cuda_out, rtol=0, atol=0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tb.paged_attention(q, kc, vc, bt, cu, sl, k_scale=ks, v_scale=vs, out=out)
    out.zero_()
    q.copy_(torch.randn(3, 32, 128, generator=g, device=dev).to(torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize()
    assert _rel(out, _ref(q, kc, vc, ks, vs, bt, cu, sl)) < 5e-3


@cuda
@pytest.mark.parametrize(
    "h, hkv, d, cfg",
    [
        (32, 8, 128, DecodeConfig(2, 4, 2)),
        (28, 4, 128, DecodeConfig(1, 4, 3)),
        (32, 8, 128, DecodeConfig(1, 4, 3)),
        (8, 8, 64, DecodeConfig(2, 8, 2)),
        (28, 4, 64, DecodeConfig(2, 4, 2)),
    ],
)
@pytest.mark.parametrize("nseg", [1, 3])
def test_16bit_cache_matches_reference(h, hkv, d, cfg, nseg):
    from local_engine.attention import triton_backend as tb

    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(8)
    ctx = [700, 33, 1, 260, 17, 1029, 64, 95]
    nb = sum(-(-c // BS) for c in ctx) + 3
    k = torch.randn(nb, BS, hkv, d, generator=g, device=dev).to(torch.bfloat16)
    v = torch.randn(nb, BS, hkv, d, generator=g, device=dev).to(torch.bfloat16)
    perm = torch.randperm(nb, generator=g, device=dev).to(torch.int32)
    bt = torch.zeros((len(ctx), max(-(-c // BS) for c in ctx)), dtype=torch.int32, device=dev)
    used = 0
    for i, c in enumerate(ctx):
        n = -(-c // BS)
        bt[i, :n] = perm[used : used + n]
        used += n
        if c % BS:  # stale slots past the context may hold anything, NaN too
            k[int(bt[i, n - 1]), c % BS :] = float("nan")
            v[int(bt[i, n - 1]), c % BS :] = float("nan")
    q = torch.randn(len(ctx), h, d, generator=g, device=dev).to(torch.bfloat16)
    cu = torch.arange(len(ctx) + 1, dtype=torch.int32, device=dev)
    sl = torch.tensor(ctx, dtype=torch.int32, device=dev)
    out = tb.paged_attention(
        q, k, v, bt, cu, sl, decode_kernel="cuda", cuda_config=cfg, num_segments=nseg
    )
    assert not out.isnan().any()
    ref = _ref(q, k, v, None, None, bt, cu, sl)
    assert _rel(out, ref) < 1e-2  # bf16 products and probabilities against float32
