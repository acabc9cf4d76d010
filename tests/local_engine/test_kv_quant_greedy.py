"""Greedy output of the real SmolLM2-135M-Instruct with an INT8 / FP8 / INT4 / int2 KV cache
against the float32 cache, on 8 chat prompts (32 new tokens each).

Two numbers per format, printed (``-s``) and held to floors:

- teacher-forced top-1 agreement: over the float32 run's output positions, the quantized
  cache's argmax (same prefix, teacher-forced through a paged prefill that reads the
  quantized pool) equals the float32 one. Floors: INT8 >= 0.97, FP8 >= 0.95 (measured
  2026-12-01: INT8 229/232 = 0.987, FP8 226/232 = 0.974).
- free-running greedy: each output equals the float32 one up to its first divergence, and a
  divergence is only allowed at a detected near-tie: the float32 cache's own top-2 logit
  margin there is below TIE logits (quantization moves SmolLM2's logits by ~0.1-0.5); held
  for INT8 and FP8 only, printed for INT4 and int2.
"""

from __future__ import annotations

import pytest
import torch

from local_engine.sampling import SamplingParams

from .conftest import all_position_logits, run_to_completion

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about autumn leaves.",
    "Explain what a hash table is in two sentences.",
    "List three tips for staying focused while studying.",
    "How do I reverse a list in Python?",
    "Why is the sky blue?",
    "Give me a short recipe for pancakes.",
    "What is the difference between weather and climate?",
]
MAX_NEW = 32
# Floors for teacher-forced top-1 agreement. Measured 2026-12-01 on these prompts: int8
# 229/232 = 0.987 (5/8 outputs identical; divergences at fp32 margins 0.009, 0.054, 0.061),
# fp8 226/232 = 0.974 (3/8 identical; margins 0.009-0.527).
FLOOR = {"int8": 0.97, "fp8": 0.95}
TIE = 1.0


# INT4 (keys Hadamard-rotated, per-token scales) and int2: the teacher-forced floor only;
# free-running outputs diverge earlier than INT8's and not only at near-ties, so they are
# printed, not held. INT4 measured 2026-12-03 on these prompts: 204/232 = 0.879 (0/8 outputs
# identical; first divergences at tokens 0-13); without the Hadamard key rotation the first 6
# prompts gave 0.68 (114/168). int2 (KIVI-style 2-bit, local_engine.kv_cache.int2, the open
# block in a full-precision residual slot): measured 2026-12-03 on these prompts 145/232 =
# 0.625 (0/8 outputs identical; first divergences at tokens 0-9); the INT4-residual layout it
# replaced measured 136/232 = 0.586.
FLOOR.update({"int4": 0.85, "int2": 0.5})
HOLD_FREE_RUNNING = {"int8", "fp8"}


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["int8", "fp8", "int4", "int2"])
def test_greedy_agreement_with_the_float32_cache(engine_factory, dtype):
    ref = engine_factory(kv_cache_dtype="auto", enable_prefix_caching=False)
    qe = engine_factory(kv_cache_dtype=dtype, enable_prefix_caching=False)
    tok = ref.tokenizer
    params = SamplingParams(temperature=0.0, max_tokens=MAX_NEW)
    agree = total = exact = 0
    report = []
    for i, q in enumerate(QUESTIONS):
        ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": q}]))
        outs = {}
        for name, eng in (("ref", ref), ("q", qe)):
            eng.add_request(f"g-{dtype}-{name}-{i}", ids, params)
            final, _ = run_to_completion(eng)
            outs[name] = final[f"g-{dtype}-{name}-{i}"].outputs[0].token_ids
        r, o = outs["ref"], outs["q"]
        full = ids + list(r)
        lr = all_position_logits(ref, full)[len(ids) - 1 : len(full) - 1]
        lq = all_position_logits(qe, full)[len(ids) - 1 : len(full) - 1]
        agree += int((lr.argmax(-1) == lq.argmax(-1)).sum())
        total += len(r)
        assert torch.isfinite(lq).all()
        # the float32 engine's teacher-forced argmax is its own greedy output
        assert lr.argmax(-1).tolist() == list(r)
        c = next((j for j, (a, b) in enumerate(zip(r, o)) if a != b), None)
        if c is None:
            assert len(r) == len(o)
            exact += 1
            report.append(f"{i}: same {len(r)} tokens")
            continue
        top2 = lr[c].topk(2).values
        margin = float(top2[0] - top2[1])
        report.append(f"{i}: diverge at {c}/{len(r)}, fp32 margin {margin:.3f}")
        if dtype in HOLD_FREE_RUNNING:
            assert margin < TIE, f"prompt {i}: diverged at {c} without a near-tie ({margin:.2f})"
    rate = agree / total
    print(
        f"\n{dtype}: teacher-forced top-1 {agree}/{total} = {rate:.4f}; "
        f"identical outputs {exact}/8; " + "; ".join(report)
    )
    assert rate >= FLOOR[dtype]
