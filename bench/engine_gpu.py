"""The engine on a CUDA GPU: output tokens per second against Hugging Face transformers.

Two steps, on two machines:

    # here, where the embedded GGUF is installed: write the two model folders (config.json,
    # tokenizer.json, tokenizer_config.json; no weights)
    python bench/engine_gpu.py prepare --dir .bench_models
    # on the GPU machine (the folder travels with the call)
    python bench/engine_gpu.py run --dir .bench_models --out $OUT

Models (random weights, transformers' initialisation, built from a config alone; the GGUF
(~98 MB) cannot travel to the device, so the SmolLM2 run uses its architecture with random
weights too):

- ``smollm2-135m``: SmolLM2-135M-Instruct's architecture read from the embedded GGUF (30 layers,
  576 wide, 9 query / 3 KV heads of 64, vocab 49,152, tied embeddings) and its tokenizer;
- ``llama3-8b-shape``: Meta-Llama-3-8B's ``config.json`` numbers (32 layers, 4096 wide, MLP
  14,336, 32 query / 8 KV heads of 128, vocab 128,256, rope theta 500,000, untied); its
  tokenizer is SmolLM2's vocabulary padded with added tokens ``<|reserved_i|>`` up to 128,256
  ids so that every sampled id detokenizes.

For each model the run: builds the transformers model on the GPU (bf16, SDPA attention), builds
the engine with the *same* weights (``LLMEngine.from_config(folder, weights=state_dict)``),
checks the engine against transformers (greedy continuations of prompts, two of them sharing
a cached prefix, compared token by token with transformers' teacher-forced logits: a mismatch
is accepted only at a near-tie, which is counted and reported), then times, with 512-token
prompts (random ids) and 128 new tokens (greedy, EOS ignored), at batch 1, 16, 64 and 256:

- the engine (CUDA graphs for decode; and eager at batch 1 and 64, for the graphs' effect);
- transformers ``generate`` (static batch) and ``generate_batch`` (continuous batching);
- the weights-once floor: ``batch / (weight bytes / 4.2 TB/s)`` tokens per second, the rate if
  every decode step only streamed the weights once (H200 copy rate measured in KINDS.md).

Output tokens per second = batch x 128 / wall time from submitting the prompts to the last
token (prefill included). The engine's decode-phase rate (after every request has its first
token) is reported too. Results go to ``$OUT/engine_gpu.json`` as they are measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROMPT_LEN, NEW_TOKENS = 512, 128
BATCHES = (1, 16, 64, 256)
COPY_TBPS = 4.2  # H200 device-to-device copy, KINDS.md (2026-10-28)

LLAMA3_8B = dict(  # meta-llama/Meta-Llama-3-8B config.json (architecture numbers only)
    architectures=["LlamaForCausalLM"],
    model_type="llama",
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=128256,
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
    max_position_embeddings=8192,
    tie_word_embeddings=False,
    hidden_act="silu",
    attention_bias=False,
    mlp_bias=False,
    bos_token_id=1,
    eos_token_id=2,
    initializer_range=0.02,
)


# ----------------------------------------------------------------------------- prepare (CPU)


def prepare(folder: Path) -> None:
    """Write the two model folders from the embedded GGUF's metadata and tokenizer."""
    from gguf import GGUFReader

    from local_engine.loader import default_model_path
    from local_engine.loader.gguf_loader import read_gguf_config, read_gguf_tokenizer
    from local_engine.tokenizer import Tokenizer

    path = default_model_path()
    reader = GGUFReader(str(path))
    mc = read_gguf_config(reader, path)
    spec = read_gguf_tokenizer(reader)
    tok = Tokenizer(spec)
    tok_json = json.loads(tok._tok.to_str())
    special = {"bos_token": tok.bos_token, "eos_token": tok.eos_token}
    tcfg = {k: v for k, v in special.items() if v is not None}
    tcfg["chat_template"] = spec.chat_template

    small = dict(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        hidden_size=mc.hidden_size,
        intermediate_size=mc.intermediate_size,
        num_hidden_layers=mc.num_layers,
        num_attention_heads=mc.num_heads,
        num_key_value_heads=mc.num_kv_heads,
        head_dim=mc.head_dim,
        vocab_size=mc.vocab_size,
        rms_norm_eps=mc.rms_norm_eps,
        rope_theta=mc.rope_theta,
        max_position_embeddings=mc.max_position_embeddings,
        tie_word_embeddings=mc.tie_word_embeddings,
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        initializer_range=0.02,
    )
    d = folder / "smollm2-135m"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(small, indent=1))
    (d / "tokenizer.json").write_text(json.dumps(tok_json))
    (d / "tokenizer_config.json").write_text(json.dumps(tcfg))

    big = dict(LLAMA3_8B, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    n0 = tok.vocab_size
    extra = [
        {
            "id": i,
            "content": f"<|reserved_{i}|>",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": False,
        }
        for i in range(n0, big["vocab_size"])
    ]
    padded = dict(tok_json, added_tokens=list(tok_json.get("added_tokens", [])) + extra)
    d = folder / "llama3-8b-shape"
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(big, indent=1))
    (d / "tokenizer.json").write_text(json.dumps(padded))
    (d / "tokenizer_config.json").write_text(json.dumps(tcfg))
    from tokenizers import Tokenizer as HFTok

    t0 = time.time()
    check = HFTok.from_file(str(d / "tokenizer.json"))
    assert check.get_vocab_size(with_added_tokens=True) == big["vocab_size"], check.get_vocab_size()
    print(
        f"wrote {folder} (8B-shape tokenizer: {big['vocab_size']} ids, loads in {time.time() - t0:.1f}s)"
    )


# ----------------------------------------------------------------------------- run (GPU)


class Results:
    """Results written to ``$OUT/engine_gpu.json`` as they are measured (nested keys)."""

    def __init__(self, out: Path):
        self.path = out / "engine_gpu.json"
        self.data: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S")}

    def put(self, *keys, value):
        d = self.data
        for k in keys[:-1]:
            d = d.setdefault(k, {})
        d[keys[-1]] = value
        self.path.write_text(json.dumps(self.data, indent=1, default=str))


def log(msg: str) -> None:
    """Print ``msg`` with the wall-clock time, flushed."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def build_hf(folder: Path, torch, seed: int):
    """transformers' Llama from ``folder``'s config.json with random weights (its own
    initialisation, seeded), bf16 with SDPA attention, on the GPU."""
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(str(folder))
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, dtype=torch.bfloat16, attn_implementation="sdpa"
        )
    return model.eval()


GGUF_MODEL = "smollm2-135m-gguf"  # the embedded model's real weights, when --gguf names the file


def build_hf_gguf(path: Path, torch, dtype=None):
    """transformers' own GGUF loader (dequantizes Q4_1/Q8_0, undoes llama.cpp's Q/K permutation),
    bf16 on the GPU."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent),
        gguf_file=path.name,
        dtype=dtype or torch.bfloat16,
        attn_implementation="sdpa",
    )
    return model.to("cuda").eval()


def sample_text(engine, res, name):
    """One real chat request through the engine's tokenizer and chat template (greedy)."""
    from local_engine import SamplingParams

    tok = engine.tokenizer
    ids = tok.encode(
        tok.apply_chat_template(
            [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}],
            add_generation_prompt=True,
        )
    )
    engine.add_request("text0", ids, SamplingParams(temperature=0.0, max_tokens=40))
    out = None
    while engine.has_unfinished_requests():
        for o in engine.step():
            out = o
    res.put(name, "sample_text", value=out.outputs[0].text)
    log(f"{name} sample answer: {out.outputs[0].text!r}")


def random_prompts(torch, n, length, vocab, seed):
    """``n`` prompts of ``length`` random ids in ``[10, min(vocab, 49152) - 10)`` (seeded), so every id
    detokenizes with SmolLM2's tokenizer."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(10, min(vocab, 49152) - 10, (n, length), generator=g).tolist()


def engine_generate(engine, prompts, max_tokens, logprobs=None, tag="r"):
    """Run prompts to completion; returns (outputs by index, wall s, time all had a first token)."""
    from local_engine import SamplingParams

    params = SamplingParams(
        temperature=0.0, max_tokens=max_tokens, ignore_eos=True, logprobs=logprobs
    )
    t0 = time.perf_counter()
    for i, p in enumerate(prompts):
        engine.add_request(f"{tag}{i}", p, params)
    outs, first = {}, {}
    t_all_first = None
    while engine.has_unfinished_requests():
        for o in engine.step():
            if o.request_id not in first and o.outputs[0].token_ids:
                first[o.request_id] = time.perf_counter()
                if len(first) == len(prompts):
                    t_all_first = first[o.request_id]
            if o.finished:
                outs[int(o.request_id[len(tag) :])] = o
    t1 = time.perf_counter()
    return (
        [outs[i] for i in range(len(prompts))],
        t1 - t0,
        (t_all_first - t0) if t_all_first else None,
    )


def check_against_hf(engine, hf, torch, vocab, res, name, hf32_factory=None):
    """Greedy continuations from the engine (bf16, Triton, CUDA graphs), checked against the
    same weights in transformers, teacher-forced on the engine's tokens, in float32 (the
    reference) and in bf16 (the noise floor of bf16 arithmetic on this model).

    Passes when the engine's log-probabilities of its tokens stay within 2x transformers-bf16's
    own deviation from float32 (plus 0.02), and every greedy token is the float32 argmax or a
    near-tie: within twice that bf16 noise of the argmax (near-ties are counted)."""
    g = torch.Generator().manual_seed(7)
    shared = torch.randint(10, min(vocab, 49152) - 10, (256,), generator=g).tolist()
    prompts = [
        torch.randint(10, 40000, (37,), generator=g).tolist(),
        shared + torch.randint(10, 40000, (40,), generator=g).tolist(),
        shared + torch.randint(10, 40000, (129,), generator=g).tolist(),  # reuses the cached prefix
        torch.randint(10, 40000, (700,), generator=g).tolist(),
    ]
    n_new = 24
    outs, _, _ = engine_generate(engine, prompts[:2], n_new, logprobs=1, tag="c")
    outs2, _, _ = engine_generate(engine, prompts[2:], n_new, logprobs=1, tag="d")
    outs += outs2
    cached = outs[2].num_cached_tokens
    seqs = [(p, o.outputs[0].token_ids, o.outputs[0].logprobs) for p, o in zip(prompts, outs)]

    def teacher_forced(model):
        res_ = []
        with torch.inference_mode():
            for p, toks, _ in seqs:
                ids = torch.tensor([p + toks], device="cuda")
                res_.append(model(ids).logits[0, len(p) - 1 : len(p) - 1 + len(toks)].float())
        return res_

    logits16 = teacher_forced(hf)
    if hf32_factory is not None:  # a GGUF-loaded model refuses .float(): load it again in float32
        hf32 = hf32_factory()
        logits32 = teacher_forced(hf32)
        del hf32
    else:
        hf.float()
        logits32 = teacher_forced(hf)
        hf.to(torch.bfloat16)
    dev_ours, dev_hf16, dev_hf16_logit = 0.0, 0.0, 0.0
    for (_, toks, lps), l16, l32 in zip(seqs, logits16, logits32):
        lp32, lp16 = torch.log_softmax(l32, -1), torch.log_softmax(l16, -1)
        dev_hf16_logit = max(dev_hf16_logit, float((l16 - l32).abs().max()))
        for j, t in enumerate(toks):
            dev_hf16 = max(dev_hf16, abs(float(lp16[j, t] - lp32[j, t])))
            if lps and lps[j].get(t) is not None:
                dev_ours = max(dev_ours, abs(float(lps[j][t]) - float(lp32[j, t])))
    tie = 2 * dev_hf16_logit
    agree = near = bad = 0
    worst = []
    for (_, toks, _), l32 in zip(seqs, logits32):
        for j, t in enumerate(toks):
            top = int(l32[j].argmax())
            if top == t:
                agree += 1
                continue
            margin = float(l32[j, top] - l32[j, t])
            if margin <= tie:
                near += 1
            else:
                bad += 1
                worst.append((j, round(margin, 4)))
            break  # after a divergence the continuations differ; stop comparing
    passed = bad == 0 and dev_ours <= 2 * dev_hf16 + 0.02 and cached >= 256 - 16
    summary = dict(
        passed=passed,
        tokens_agree=agree,
        near_ties=near,
        mismatches=bad,
        worst=worst[:5],
        tie_margin_logits=tie,
        engine_logprob_dev_vs_fp32=dev_ours,
        hf_bf16_logprob_dev_vs_fp32=dev_hf16,
        hf_bf16_logit_dev_vs_fp32=dev_hf16_logit,
        prefix_cached_tokens=cached,
    )
    res.put(name, "check", value=summary)
    log(f"{name} check vs transformers fp32: {summary}")
    return passed


def start_decoding(engine, prompts, max_tokens: int, tag: str) -> None:
    """Add greedy requests (EOS ignored) and step until every one has its first token, so the
    next steps are pure decode steps of ``len(prompts)`` sequences."""
    from local_engine import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    for i, p in enumerate(prompts):
        engine.add_request(f"{tag}{len(prompts)}_{i}", p, params)
    while not all(
        len(st.samples[0].seq.output_token_ids) > 0
        for st in engine.output_processor.requests.values()
    ):
        engine.step()


def step_breakdown(engine, torch, vocab, res, name, batch, steps=20):
    """Per decode step: wall time, time inside forward_logits (synchronised) and the GPU time
    of the replayed graph alone (CUDA events)."""
    runner = engine.runner
    start_decoding(
        engine, random_prompts(torch, batch, PROMPT_LEN, vocab, seed=1000 + batch), steps + 40, "bd"
    )
    fwd, gpu = [], []
    orig = runner.forward_logits
    graphs = runner.graphs

    def timed(b):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = orig(b)
        torch.cuda.synchronize()
        fwd.append(time.perf_counter() - t0)
        return out

    runner.forward_logits = timed
    walls = []
    for _ in range(steps):
        t0 = time.perf_counter()
        engine.step()
        walls.append(time.perf_counter() - t0)
    runner.forward_logits = orig
    if graphs is not None:
        seq_n = batch
        b = graphs.sizes[__import__("bisect").bisect_left(graphs.sizes, seq_n)]
        replay, _ = graphs.graphs[b]
        for _ in range(10):
            a, z = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            replay()
            z.record()
            z.synchronize()
            gpu.append(a.elapsed_time(z) / 1e3)
    for rid in list(engine.output_processor.requests):
        engine.abort_request(rid)
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else None  # noqa: E731
    row = dict(
        step_ms=med(walls) * 1e3,
        forward_ms=med(fwd) * 1e3,
        graph_gpu_ms=(med(gpu) * 1e3) if gpu else None,
    )
    row["outside_forward_ms"] = row["step_ms"] - row["forward_ms"]
    res.put(name, "breakdown", str(batch), value=row)
    log(f"{name} decode step breakdown batch {batch}: {row}")


def kernel_profile(engine, torch, vocab, res, name, batch, steps=3):
    """GPU kernels of ``steps`` eager decode steps (CUDA graphs off, torch.profiler): per kernel
    name, launches and GPU microseconds per step, the top 15 by time; and the whole step's GPU
    time and kernel count."""
    from torch.profiler import ProfilerActivity, profile

    start_decoding(
        engine, random_prompts(torch, batch, PROMPT_LEN, vocab, seed=900 + batch), steps + 8, "pf"
    )
    graphs, engine.runner.graphs = engine.runner.graphs, None
    engine.step()  # warm-up at this shape
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            engine.step()
        torch.cuda.synchronize()
    engine.runner.graphs = graphs
    for rid in list(engine.output_processor.requests):
        engine.abort_request(rid)
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = getattr(e, "self_cuda_time_total", 0)
        if t and not e.key.startswith(("aten::", "cuda", "Memcpy", "Memset")) or "Memcpy" in e.key:
            rows.append((e.key[:90], e.count / steps, t / steps))
    rows.sort(key=lambda r: -r[2])
    total_us = sum(r[2] for r in rows)
    total_n = sum(r[1] for r in rows)
    res.put(
        name,
        "kernels",
        str(batch),
        value=dict(
            gpu_us_per_step=total_us,
            kernels_per_step=total_n,
            top=[dict(kernel=k, per_step=n, us=u) for k, n, u in rows[:15]],
        ),
    )
    log(f"{name} eager decode batch {batch}: {total_n:.0f} kernels, {total_us:.0f} us GPU per step")
    for k, n, u in rows[:15]:
        print(f"    {u:9.1f} us  {n:6.0f}x  {k}", flush=True)


def time_engine(engine, prompts, res, name, batch, label):
    """Engine output tok/s end to end (and in the decode phase) for ``prompts``, NEW_TOKENS each."""
    outs, wall, first = engine_generate(engine, prompts, NEW_TOKENS, tag=f"{label}{batch}_")
    n_out = sum(len(o.outputs[0].token_ids) for o in outs)
    decode_rate = (batch * (NEW_TOKENS - 1) / (wall - first)) if first else None
    row = dict(
        tok_s=n_out / wall,
        wall_s=wall,
        output_tokens=n_out,
        prefill_s=first,
        decode_tok_s=decode_rate,
    )
    res.put(name, label, str(batch), value=row)
    log(
        f"{name} {label} batch {batch}: {row['tok_s']:.0f} tok/s e2e, decode {decode_rate or 0:.0f} tok/s, "
        f"wall {wall:.2f}s, prefill {first or 0:.2f}s"
    )
    return row


def time_hf_generate(hf, torch, prompts, res, name, batch):
    """transformers ``generate`` (static batch, greedy, exactly NEW_TOKENS new tokens): output tok/s."""
    ids = torch.tensor(prompts, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = hf.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            pad_token_id=0,
        )
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    n_out = (out.shape[1] - ids.shape[1]) * batch
    row = dict(tok_s=n_out / wall, wall_s=wall, output_tokens=n_out)
    res.put(name, "hf_generate", str(batch), value=row)
    log(f"{name} hf generate batch {batch}: {row['tok_s']:.0f} tok/s, wall {wall:.2f}s")
    del out, ids
    return row


def time_hf_generate_batch(hf, torch, prompts, res, name, batch):
    """transformers ``generate_batch`` (continuous batching, greedy, NEW_TOKENS each): output tok/s."""
    from transformers import GenerationConfig

    gc_ = GenerationConfig(
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = hf.generate_batch(inputs=prompts, generation_config=gc_)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    n_out = sum(len(r.generated_tokens) for r in out.values())
    row = dict(tok_s=n_out / wall, wall_s=wall, output_tokens=n_out, requests=len(out))
    res.put(name, "hf_generate_batch", str(batch), value=row)
    log(
        f"{name} hf generate_batch batch {batch}: {row['tok_s']:.0f} tok/s, wall {wall:.2f}s, "
        f"{n_out} tokens from {len(out)} requests"
    )
    return row


def check_ops(torch, res) -> bool:
    """The fused kernels of local_engine.ops compiled on the GPU against the torch backend, bf16,
    at the 8B shapes (hidden 4096, 32/8 heads of 128, MLP 14,336) and SmolLM2's (576, 9/3 of 64,
    1536): relative error <= 1e-2 (bf16), no NaN, the residual stream updated in place."""
    from local_engine import ops
    from local_engine.models.llama import RotaryEmbedding

    g = torch.Generator(device="cuda").manual_seed(3)
    worst, ok = 0.0, True
    for hidden, H, Hk, D, inter in ((4096, 32, 8, 128, 14336), (576, 9, 3, 64, 1536)):
        for T in (1, 64, 515):
            x = torch.randn(T, hidden, device="cuda", generator=g).bfloat16()
            r = torch.randn(T, hidden, device="cuda", generator=g).bfloat16()
            w = (1 + 0.1 * torch.randn(hidden, device="cuda", generator=g)).bfloat16()
            want, want_h = ops.rms_norm(x, w, 1e-5, r, backend="torch")
            r2 = r.clone()
            got, got_h = ops.rms_norm(x, w, 1e-5, r2, backend="triton")
            errs = [
                float((got.float() - want.float()).norm() / want.float().norm()),
                float((r2.float() - want_h.float()).norm() / want_h.float().norm()),
            ]
            rope = RotaryEmbedding(D, 4096, 500000.0, None)
            rope.build_tables("cuda")
            qkv = torch.randn(T, (H + 2 * Hk) * D, device="cuda", generator=g).bfloat16()
            q, k, v = qkv.split([H * D, Hk * D, Hk * D], dim=-1)
            q, k, v = q.view(T, H, D), k.view(T, Hk, D), v.view(T, Hk, D)
            pos = torch.randint(0, 4096, (T,), device="cuda", generator=g)
            slots = torch.randperm(64 * 16, device="cuda", generator=g)[:T] if T <= 1024 else None
            caches = [
                torch.zeros(64, 16, Hk, D, device="cuda", dtype=torch.bfloat16) for _ in range(4)
            ]
            q_ref = ops.rotary_and_write_kv(
                q.clone(),
                k,
                v,
                pos,
                rope.cos,
                rope.sin,
                caches[0],
                caches[1],
                slots,
                backend="torch",
            )
            q_got = ops.rotary_and_write_kv(
                q.clone(),
                k,
                v,
                pos,
                rope.cos,
                rope.sin,
                caches[2],
                caches[3],
                slots,
                backend="triton",
            )
            errs += [
                float((q_got.float() - q_ref.float()).norm() / q_ref.float().norm()),
                float((caches[2].float() - caches[0].float()).norm() / caches[0].float().norm()),
                float((caches[3].float() - caches[1].float()).norm() / caches[1].float().norm()),
            ]
            gu = torch.randn(T, 2 * inter, device="cuda", generator=g).bfloat16()
            s_ref, s_got = (
                ops.silu_and_mul(gu, backend="torch"),
                ops.silu_and_mul(gu, backend="triton"),
            )
            errs.append(float((s_got.float() - s_ref.float()).norm() / s_ref.float().norm()))
            nan = any(bool(t.isnan().any()) for t in (got, r2, q_got, caches[2], caches[3], s_got))
            worst = max(worst, *errs)
            ok = ok and not nan and max(errs) <= 1e-2
    res.put("ops_check", value=dict(passed=ok, worst_rel_err=worst))
    log(
        f"fused ops on the GPU vs torch: {'passed' if ok else 'FAILED'}, worst relative error {worst:.2e}"
    )
    return ok


T_START = time.monotonic()


def time_left(deadline_s: float) -> float:
    """Seconds left before ``deadline_s`` (counted from the script's start)."""
    return deadline_s - (time.monotonic() - T_START)


def run(
    folder: Path,
    out: Path,
    models,
    skip_hf_batch: bool,
    deadline_s: float,
    skip_hf: bool = False,
    gguf: Path | None = None,
) -> int:
    """Phase A per model: check and time the engine, then transformers ``generate``; phase B
    (if time is left before ``deadline_s``): transformers ``generate_batch``."""
    import torch

    from local_engine.engine import LLMEngine

    res = Results(out)
    import transformers
    import triton

    res.put(
        "env",
        value=dict(
            gpu=torch.cuda.get_device_name(),
            torch=torch.__version__,
            triton=triton.__version__,
            transformers=transformers.__version__,
        ),
    )
    log(f"{res.data['env']}")
    ok = check_ops(torch, res)
    if GGUF_MODEL in models and gguf is None:
        raise SystemExit(f"{GGUF_MODEL} needs --gguf PATH (the embedded SmolLM2 file)")
    vocab_of = {
        name: (
            49152
            if name == GGUF_MODEL
            else json.loads((folder / name / "config.json").read_text())["vocab_size"]
        )
        for name in models
    }
    for name in models:
        d = folder / name
        vocab = vocab_of[name]
        try:
            t0 = time.time()
            hf = build_hf_gguf(gguf, torch) if name == GGUF_MODEL else build_hf(d, torch, seed=0)
            n_params = sum(p.numel() for p in hf.parameters())
            weight_bytes = n_params * 2
            log(
                f"{name}: transformers model built in {time.time() - t0:.1f}s, {n_params / 1e9:.3f}B params"
            )
            t0 = time.time()
            limits = dict(
                device="cuda",
                max_num_seqs=max(BATCHES),
                max_num_batched_tokens=8192,
                gpu_memory_utilization=0.5,
                max_model_len=4096,
            )
            if name == GGUF_MODEL:  # the engine reads the file itself (its own GGUF loader)
                engine = LLMEngine.from_model(str(gguf), **limits)
            else:
                engine = LLMEngine.from_config(d, weights=dict(hf.state_dict()), **limits)
            log(
                f"{name}: engine built in {time.time() - t0:.1f}s ({engine.kv_cache_manager.num_blocks} KV blocks,"
                f" graphs captured in {engine.runner.graphs.capture_seconds:.1f}s)"
            )
            res.put(
                name,
                "setup",
                value=dict(
                    params=n_params,
                    weight_bytes=weight_bytes,
                    kv_blocks=engine.kv_cache_manager.num_blocks,
                    graph_capture_s=engine.runner.graphs.capture_seconds,
                ),
            )
            hf32 = (
                (lambda: build_hf_gguf(gguf, torch, dtype=torch.float32))
                if name == GGUF_MODEL
                else None
            )
            if not check_against_hf(engine, hf, torch, vocab, res, name, hf32):
                log(f"{name}: CHECK FAILED; timing anyway")
                ok = False
            if name == GGUF_MODEL:
                sample_text(engine, res, name)
            # warm-up: compiles the prefill kernels (decode graphs are already captured)
            engine_generate(engine, random_prompts(torch, 4, 600, vocab, 99), 4, tag="w")
            for batch in BATCHES:
                # warm-up at this batch size (same prefill chunks and decode graph), then time
                engine_generate(
                    engine,
                    random_prompts(torch, batch, PROMPT_LEN, vocab, seed=500 + batch),
                    3,
                    tag=f"w{batch}_",
                )
                prompts = random_prompts(torch, batch, PROMPT_LEN, vocab, seed=batch)
                res.put(
                    name,
                    "floor_tok_s",
                    str(batch),
                    value=batch / (weight_bytes / (COPY_TBPS * 1e12)),
                )
                time_engine(engine, prompts, res, name, batch, "engine")
            for batch in (1, 64):
                step_breakdown(engine, torch, vocab, res, name, batch)
                kernel_profile(engine, torch, vocab, res, name, batch)
            graphs = engine.runner.graphs
            engine.runner.graphs = None
            for batch in (1, 64):
                engine_generate(
                    engine,
                    random_prompts(torch, batch, PROMPT_LEN, vocab, seed=700 + batch),
                    3,
                    tag=f"we{batch}_",
                )
                time_engine(
                    engine,
                    random_prompts(torch, batch, PROMPT_LEN, vocab, seed=batch + 1),
                    res,
                    name,
                    batch,
                    "engine_eager",
                )
            engine.runner.graphs = graphs
            del engine, graphs
            gc.collect()
            torch.cuda.empty_cache()
            if skip_hf:
                del hf
                gc.collect()
                torch.cuda.empty_cache()
                print_table(res.data)
                continue
            with torch.inference_mode():  # transformers warm-up
                w = torch.tensor(random_prompts(torch, 2, 64, vocab, 5), device="cuda")
                hf.generate(
                    input_ids=w,
                    attention_mask=torch.ones_like(w),
                    max_new_tokens=4,
                    do_sample=False,
                    pad_token_id=0,
                )
            for batch in BATCHES:
                if time_left(deadline_s) < 60:
                    res.put(name, "hf_generate", str(batch), value="not run: time")
                    continue
                time_hf_generate(
                    hf,
                    torch,
                    random_prompts(torch, batch, PROMPT_LEN, vocab, seed=batch),
                    res,
                    name,
                    batch,
                )
            del hf
            gc.collect()
            torch.cuda.empty_cache()
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            res.put(name, "error", value=f"{type(exc).__name__}: {exc}")
            ok = False
        print_table(res.data)
    if not skip_hf_batch and not skip_hf:
        for name in models:
            if time_left(deadline_s) < 90:
                res.put(name, "hf_generate_batch", value="not run: time")
                log(f"{name}: generate_batch not run (time)")
                continue
            try:
                hf = (
                    build_hf_gguf(gguf, torch)
                    if name == GGUF_MODEL
                    else build_hf(folder / name, torch, seed=0)
                )
                for batch in BATCHES:
                    if time_left(deadline_s) < 45:
                        res.put(name, "hf_generate_batch", str(batch), value="not run: time")
                        continue
                    time_hf_generate_batch(
                        hf,
                        torch,
                        random_prompts(torch, batch, PROMPT_LEN, vocab_of[name], seed=batch),
                        res,
                        name,
                        batch,
                    )
            except Exception as exc:  # noqa: BLE001 - record and go on
                res.put(name, "hf_generate_batch", "error", value=f"{type(exc).__name__}: {exc}")
                log(f"{name} hf generate_batch failed: {type(exc).__name__}: {exc}")
                traceback.print_exc()
            hf = None
            gc.collect()
            torch.cuda.empty_cache()
    print_table(res.data)
    return 0 if ok else 1


def print_table(data: dict) -> None:
    """The markdown table of bench/RESULTS.md from the results gathered so far."""
    print(
        "\n| model | batch | engine tok/s | engine decode tok/s | engine eager tok/s | HF generate tok/s "
        "| HF generate_batch tok/s | weights-once floor tok/s | engine / generate | engine / floor |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, m in data.items():
        if not isinstance(m, dict) or "engine" not in m:
            continue
        for b in map(str, BATCHES):
            e = m.get("engine", {}).get(b)
            hb_all = m.get("hf_generate_batch", {})
            if not e:
                continue
            ee = m.get("engine_eager", {}).get(b)
            hg = m.get("hf_generate", {}).get(b)
            hb = hb_all.get(b) if isinstance(hb_all, dict) else None
            fl = m.get("floor_tok_s", {}).get(b)

            def f(x):
                return f"{x['tok_s']:.0f}" if isinstance(x, dict) else ("-" if x is None else "err")

            print(
                f"| {name} | {b} | {e['tok_s']:.0f} | {e['decode_tok_s'] or 0:.0f} | {f(ee)} | {f(hg)} | {f(hb)} | "
                f"{fl:.0f} | {(e['tok_s'] / hg['tok_s']) if isinstance(hg, dict) else float('nan'):.1f}x | "
                f"{e['tok_s'] / fl:.2f} |"
            )


def main(argv=None) -> int:
    """``prepare`` (here) or ``run`` (on the GPU); returns the exit status (1 if a check failed)."""
    ap = argparse.ArgumentParser(description="engine vs transformers on a CUDA GPU")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="write the model folders (CPU, needs the embedded GGUF)")
    p.add_argument("--dir", default=".bench_models")
    r = sub.add_parser("run", help="run the benchmark (CUDA)")
    r.add_argument("--dir", default=".bench_models")
    r.add_argument("--out", default=os.environ.get("OUT", "."))
    r.add_argument("--models", default="llama3-8b-shape,smollm2-135m")
    r.add_argument("--skip-hf-batch", action="store_true", help="skip transformers generate_batch")
    r.add_argument(
        "--skip-hf",
        action="store_true",
        help="time the engine only (transformers is still built, for the check)",
    )
    r.add_argument(
        "--gguf",
        type=Path,
        default=None,
        help=f"the embedded SmolLM2 GGUF file, for the model {GGUF_MODEL} (real weights)",
    )
    r.add_argument(
        "--deadline-s",
        type=float,
        default=480.0,
        help="start no transformers measurement later than this many seconds into the run",
    )
    args = ap.parse_args(argv)
    if args.cmd == "prepare":
        prepare(Path(args.dir))
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return run(
        Path(args.dir),
        out,
        args.models.split(","),
        args.skip_hf_batch,
        args.deadline_s,
        args.skip_hf,
        args.gguf,
    )


if __name__ == "__main__":
    raise SystemExit(main())
