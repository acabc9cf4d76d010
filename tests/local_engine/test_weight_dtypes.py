"""CPU weight formats (``EngineConfig.weight_dtype``) against float32.

Layer level (fast): every :class:`~local_engine.models.linear.Linear` format against
``F.linear`` on the dequantized weight; the int8 quantizer's round-trip bound.

Model level (slow): on the 8 chat prompts of ``test_model_vs_hf``, the float32 engine decodes 32
greedy tokens; each weight dtype then scores the same sequences (teacher forcing) and must pick
float32's token at each step, except where float32's own margin between its token and the other
dtype's choice is under ``NEAR_TIE`` logits. Floors, set below what was measured on
SmolLM2-135M-Instruct on 2026-12-01 (``bench/RESULTS.md`` "## cpu"): bfloat16 >= 0.97 of the
steps outside near-ties (measured 1.000) and logit error ``max |w - f32| / max |f32|`` <= 0.03
(0.022); int8 >= 0.93 (0.970; 0.895 counting near-ties) and <= 0.35 (0.25). int8 quantizes
activations too (per token, 8 bits): on a 135M model that moves logits by about 12 % of their
row maximum (median), so free-running greedy output drifts from float32 within a few tokens.

Without VNNI (:func:`~local_engine.models.linear.int8_reduce_range`: an AVX2-only x86 CPU)
fbgemm quantizes activations to 7 bits, which doubles their rounding error: one 576 x 576
layer on random data with an outlier channel had output error 0.0720 there, a per-token
7-bit simulation 0.0718 and an 8-bit one 0.0361 (2026-12-01, ``bench/int8_activation_bits.py``;
``bench/RESULTS.md`` "## cpu"). Measured on that machine (an
AVX2 AMD EPYC, 2026-12-01): agreement 209/239 = 0.874, logit error 0.62; floors 0.83 and 0.8.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from local_engine.models.linear import Linear, int8_reduce_range, quantize_int8
from local_engine.sampling import SamplingParams

from .conftest import run_to_completion
from .test_model_vs_hf import PROMPTS, _engine_prefill_logits

NEAR_TIE = 0.5
FLOORS = {"bfloat16": (0.97, 0.03), "int8": (0.93, 0.35)}
FLOORS_7BIT = {**FLOORS, "int8": (0.83, 0.8)}  # no VNNI: int8 activations get 7 bits


def test_quantize_int8_round_trip():
    torch.manual_seed(0)
    w = torch.randn(64, 96) * torch.rand(64, 1)  # rows of different ranges
    w[3] = 0.0
    q, scale = quantize_int8(w)
    assert q.dtype == torch.int8 and int(q.abs().max()) <= 127
    # scale = max|row| / 127, so each row's largest entry maps to +-127 exactly
    assert torch.allclose(scale[:3], w[:3].abs().amax(1) / 127)
    assert int(q[0].abs().max()) == 127 and scale[3] == 1.0 and not q[3].any()
    err = (q.float() * scale[:, None] - w).abs()
    assert bool((err <= scale[:, None] / 2 + 1e-7).all())  # round to nearest: half a step


@pytest.mark.parametrize("fmt", ["dense", "dense_t", "bf16", "int8"])
@pytest.mark.parametrize("rows", [1, 37])
def test_linear_formats_match_f_linear(fmt, rows):
    torch.manual_seed(1)
    w = torch.randn(80, 48) * 0.1
    x = torch.randn(rows, 48)
    lin = Linear(48, 80)
    if fmt == "dense":
        lin.set_dense(w.clone())
    elif fmt == "dense_t":
        lin.set_dense_t(w.t().contiguous())
    elif fmt == "bf16":
        lin.set_bf16(w)
    else:
        lin.set_int8(*quantize_int8(w))
    ref = F.linear(x, lin.dense_weight().float())
    y = lin(x)
    assert y.shape == (rows, 80) and y.dtype == torch.float32
    # float32 exact up to summation order; bfloat16 rounds x and y to 8 mantissa bits (2^-8
    # relative); int8 also quantizes x to 8 bits, one scale per call (|x|max / 127.5 a step)
    tol = {"dense": 1e-5, "dense_t": 1e-5, "bf16": 2e-2, "int8": 3e-2}[fmt]
    assert ((y - ref).abs().max() / ref.abs().max()).item() < tol
    if fmt == "int8":  # and the quantized weight is close to the original
        assert (lin.dense_weight() - w).abs().max() <= w.abs().max() / 254 + 1e-7


def test_linear_rejects_wrong_shapes():
    lin = Linear(4, 6)
    with pytest.raises(ValueError, match="weight_t must be"):
        lin.set_dense_t(torch.zeros(6, 4))
    with pytest.raises(ValueError, match="weight must be"):
        lin.set_dense(torch.zeros(4, 6))
    with pytest.raises(ValueError, match="qweight must be int8"):
        lin.set_int8(torch.zeros(6, 4), torch.ones(6))


def test_float32_layout_per_shape_round_trips(monkeypatch):
    """float32 prepared weights without the C++ kernels: [in, out] where out >= in, [out, in]
    for down_proj (out < in); a model loaded from them computes every linear as F.linear on the
    original weight. (With the kernels: tests/local_engine/test_cpu_kernels.py.)"""
    from local_engine.ops import cpu

    monkeypatch.setattr(cpu, "has", lambda kind: False)
    from local_engine.config import ModelConfig
    from local_engine.models.llama import LlamaForCausalLM
    from local_engine.models.weights import load_prepared, prepare_weights

    mc = ModelConfig(
        name="t", vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=1,
        num_heads=4, num_kv_heads=2, head_dim=8, rms_norm_eps=1e-5, rope_theta=10000.0,
        max_position_embeddings=64, tie_word_embeddings=False,
    )  # fmt: skip
    g = torch.Generator().manual_seed(0)
    shapes = {
        "model.embed_tokens.weight": (64, 32), "model.norm.weight": (32,), "lm_head.weight": (64, 32),
        "model.layers.0.input_layernorm.weight": (32,),
        "model.layers.0.post_attention_layernorm.weight": (32,),
        "model.layers.0.self_attn.q_proj.weight": (32, 32),
        "model.layers.0.self_attn.k_proj.weight": (16, 32),
        "model.layers.0.self_attn.v_proj.weight": (16, 32),
        "model.layers.0.self_attn.o_proj.weight": (32, 32),
        "model.layers.0.mlp.gate_proj.weight": (48, 32),
        "model.layers.0.mlp.up_proj.weight": (48, 32),
        "model.layers.0.mlp.down_proj.weight": (32, 48),
    }  # fmt: skip
    hf = {k: torch.randn(*v, generator=g) for k, v in shapes.items()}
    prepared = prepare_weights(hf, mc, "float32")
    assert "layers.0.mlp.down_proj.weight" in prepared  # [out, in]: out 32 < in 48
    assert prepared["layers.0.mlp.gate_up_proj.weight_t"].shape == (32, 96)
    assert "lm_head.weight_t" in prepared and "layers.0.self_attn.o_proj.weight_t" in prepared
    model = LlamaForCausalLM(mc)
    load_prepared(model, prepared)
    down = model.layers[0].mlp.down_proj
    assert down.format == "dense" and model.lm_head.format == "dense_t"
    x = torch.randn(3, 48, generator=g)
    ref = F.linear(x, hf["model.layers.0.mlp.down_proj.weight"])
    assert torch.equal(down(x), ref)
    h = torch.randn(2, 32, generator=g)
    torch.testing.assert_close(
        model.lm_head(h), F.linear(h, hf["lm_head.weight"]), atol=1e-5, rtol=1e-5
    )


def test_weight_dtype_validation():
    from local_engine.config import EngineConfig
    from local_engine.errors import EngineError

    assert EngineConfig().cpu_weight_dtype() == "float32"
    assert EngineConfig(weight_dtype="int8").cpu_weight_dtype() == "int8"
    assert EngineConfig(dtype="bfloat16").cpu_weight_dtype() == "bfloat16"
    with pytest.raises(EngineError, match="weight_dtype must be one of"):
        EngineConfig(weight_dtype="int4")
    with pytest.raises(EngineError, match="CPU-only"):
        EngineConfig(device="cuda", weight_dtype="int8")


def _chat_ids(tok, text):
    return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))


@pytest.fixture(scope="module")
def float32_runs(engine):
    """The float32 engine's 32 greedy tokens per prompt and its teacher-forced logits."""
    tok = engine.tokenizer
    prompts = [_chat_ids(tok, p) for p in PROMPTS]
    p = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
    for i, ids in enumerate(prompts):
        engine.add_request(f"f32-{i}", ids, p)
    final, _ = run_to_completion(engine)
    runs = []
    for i, ids in enumerate(prompts):
        gen = list(final[f"f32-{i}"].outputs[0].token_ids)
        full = ids + gen
        logits = _engine_prefill_logits(engine, full, [len(full)])
        runs.append((ids, gen, logits))
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("weight_dtype", ["bfloat16", "int8"])
def test_greedy_agreement_with_float32(engine_factory, float32_runs, weight_dtype):
    other = engine_factory(weight_dtype=weight_dtype)
    agree = steps = ties = 0
    worst = 0.0
    for ids, gen, ref in float32_runs:
        full = ids + gen
        logits = _engine_prefill_logits(other, full, [len(full)])
        worst = max(worst, ((logits - ref).abs().max() / ref.abs().max()).item())
        # row len(ids) - 1 + j predicts generated token j
        for j, tok in enumerate(gen):
            row = len(ids) - 1 + j
            mine = int(logits[row].argmax())
            if mine == tok:
                agree += 1
            elif float(ref[row, tok] - ref[row, mine]) < NEAR_TIE:
                ties += 1
                continue
            steps += 1
    rate = agree / steps
    floor, max_err = (FLOORS_7BIT if int8_reduce_range() else FLOORS)[weight_dtype]
    # free-running greedy (reported, not asserted: one flip changes everything after it)
    p = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
    for i, (ids, _, _) in enumerate(float32_runs):
        other.add_request(f"{weight_dtype}-{i}", ids, p)
    final, _ = run_to_completion(other)
    prefix = []
    for i, (_, gen, _) in enumerate(float32_runs):
        mine = final[f"{weight_dtype}-{i}"].outputs[0].token_ids
        n = next((k for k, (a, b) in enumerate(zip(mine, gen)) if a != b), len(gen))
        prefix.append(n)
    print(
        f"\n{weight_dtype}: teacher-forced greedy agreement {agree}/{steps} = {rate:.3f} "
        f"({ties} near-ties under {NEAR_TIE} logits excluded); logit error {worst:.4f}; "
        f"free-running tokens equal to float32 before the first difference: {prefix} of 32"
    )
    assert rate >= floor, f"{weight_dtype} agrees with float32 on {rate:.3f} < {floor}"
    assert worst <= max_err, f"{weight_dtype} logit error {worst:.4f} > {max_err}"
