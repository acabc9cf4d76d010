"""Where a CPU decode step's time goes, on the real SmolLM2-135M-Instruct.

One request (a chat prompt, then ``--context`` filler tokens of context) decodes ``--steps``
tokens at batch 1 per weight dtype. Printed per weight dtype:

1. The step's wall time split by phase: the runner's ``prepare`` (batch tensors), the model's
   forward, the LM head, sampling, and the rest of ``LLMEngine.step`` (scheduler, KV-cache
   manager, detokenizer).
2. Time per module kind (inclusive, from ``torch.profiler`` ``record_function`` scopes that
   forward hooks put around every module; the hooks add a few microseconds each, so this
   table comes from a separate, hooked run).
3. The top aten operators by self CPU time, and "Python + dispatch" = forward wall time minus
   the sum of aten self times.
4. Bytes read per step (every weight the format stores once, the KV context, the embedding
   row) against the floor set by the same bytes at the read bandwidth of a plain ``sum``
   over a 512 MiB float32 buffer measured in the same run, same thread count.

Usage: ``PYTHONPATH=. .venv/bin/python bench/profile_cpu.py [--weight-dtype float32 int8]
[--threads 1] [--steps 32] [--context 200]``. Prints ``uptime`` first: the machine is shared.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

from local_engine.engine import LLMEngine  # noqa: E402
from local_engine.models.linear import Linear  # noqa: E402
from local_engine.sampling import SamplingParams  # noqa: E402


def read_bandwidth(threads: int, mib: int = 512, reps: int = 5) -> float:
    """Best-of-``reps`` bytes/s of ``torch.sum`` over a ``mib`` MiB float32 buffer."""
    torch.set_num_threads(threads)
    buf = torch.ones(mib * 2**20 // 4)
    buf.sum()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        buf.sum()
        best = min(best, time.perf_counter() - t)
    return buf.numel() * 4 / best


def weight_bytes_per_token(model) -> int:
    """Bytes of every stored linear weight (read once per decode step) plus one embedding row
    and the norm weights."""
    total = 0
    for m in model.modules():
        if isinstance(m, Linear):
            # a decode step reads the C++ kernel's panels where the layer has them
            stored = (m.weight, m.weight_t, m.qweight, m.scale) if m.panels is None else m.panels
            for t in stored:
                if t is not None:
                    total += t.numel() * t.element_size()
    emb = model.embed_tokens.weight
    total += emb.shape[1] * emb.element_size()
    for name, p in model.named_parameters():
        if "norm" in name:
            total += p.numel() * p.element_size()
    return total


class PhaseTimer:
    """Wraps the runner's methods to accumulate wall time per phase."""

    def __init__(self, engine):
        self.t = collections.Counter()
        runner = engine.runner
        model = runner.model
        for obj, name, label in (
            (runner, "prepare", "prepare"),
            (runner, "sample", "sample"),
            (model, "forward", "model forward"),
            (model, "compute_logits", "LM head"),
        ):
            self._wrap(obj, name, label)

    def _wrap(self, obj, name, label):
        fn = getattr(obj, name)

        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.t[label] += time.perf_counter() - t

        setattr(obj, name, timed)


def module_scopes(model):
    """Forward hooks that open a ``record_function`` scope per module kind; returns the handles."""
    handles = []
    names = {
        "self_attn.qkv_proj": "qkv_proj (linear)",
        "self_attn.o_proj": "o_proj (linear)",
        "mlp.gate_up_proj": "gate_up_proj (linear)",
        "mlp.down_proj": "down_proj (linear)",
        "input_layernorm": "rms_norm (+residual add)",
        "post_attention_layernorm": "rms_norm (+residual add)",
    }
    for full, m in model.named_modules():
        label = None
        for suffix, lab in names.items():
            if full.endswith(suffix):
                label = lab
        if full.endswith("self_attn"):
            label = "attention block (all)"
        if full.endswith(".mlp"):
            label = "mlp block (all)"
        if label is None:
            continue
        state = {}

        def pre(mod, args, label=label, state=state):
            state["rf"] = record_function(label)
            state["rf"].__enter__()

        def post(mod, args, out, state=state):
            state["rf"].__exit__(None, None, None)

        handles.append(m.register_forward_pre_hook(pre))
        handles.append(m.register_forward_hook(post))
    return handles


class _Scoped:
    """Replace ``module.name`` (a function the model calls) by a wrapper inside a
    ``record_function(label)`` scope; ``remove()`` restores it."""

    def __init__(self, module, name, label):
        self.module, self.name, self.fn = module, name, getattr(module, name)

        def scoped(*a, **k):
            with record_function(label):
                return self.fn(*a, **k)

        setattr(module, name, scoped)

    def remove(self):
        setattr(self.module, self.name, self.fn)


def function_scopes():
    """Scopes around the functions the model calls through :mod:`local_engine.ops` and
    :func:`local_engine.attention.paged_attention`."""
    import local_engine.models.llama as llama

    return [
        _Scoped(llama.ops, "rotary_and_write_kv", "rotary + KV write (ops)"),
        _Scoped(llama, "paged_attention", "paged_attention (torch reference)"),
        _Scoped(llama.ops, "silu_and_mul", "silu_and_mul (ops)"),
    ]


def start_request(engine, context: int, steps: int, rid: str):
    tok = engine.tokenizer
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": "Tell me about bees."}]))
    filler = tok.encode(" the bee hive honey" * (context // 4 + 1))[:context]
    engine.add_request(
        rid,
        filler + ids,
        SamplingParams(temperature=0.0, max_tokens=steps * 3 + 8, ignore_eos=True),
    )
    while engine.scheduler.waiting or not engine.scheduler.running:
        engine.step()
    for _ in range(4):
        engine.step()  # warm-up decode steps


def finish(engine):
    for r in list(engine.output_processor.requests):
        engine.abort_request(r)
    while engine.has_unfinished_requests():
        engine.step()


def profile_dtype(weight_dtype: str, threads: int, steps: int, context: int, bandwidth: float):
    engine = LLMEngine.from_model(
        None, num_kv_blocks=256, num_threads=threads, weight_dtype=weight_dtype
    )
    model = engine.runner.model
    kv_per_token = engine.model_config.kv_bytes_per_token(4)

    # 1. phases, best of 3 runs of `steps` steps
    timer = PhaseTimer(engine)
    best = None
    for rep in range(3):
        start_request(engine, context, steps, f"p{rep}")
        timer.t.clear()
        t = time.perf_counter()
        for _ in range(steps):
            engine.step()
        wall = time.perf_counter() - t
        if best is None or wall < best[0]:
            best = (wall, dict(timer.t))
        finish(engine)
    wall, phases = best
    step_ms = wall / steps * 1e3
    ctx = context + 30
    weights = weight_bytes_per_token(model)
    kv = ctx * kv_per_token
    print(f"\n### weight_dtype={weight_dtype}, {threads} thread(s), context ~{ctx} tokens")
    print(f"decode step {step_ms:.1f} ms = {1e3 / step_ms:.1f} tok/s (best of 3 x {steps} steps)")
    print("\n| phase | ms / step | share |\n|---|---:|---:|")
    rest = wall - sum(phases.values())
    for k, v in list(phases.items()) + [("engine step rest (scheduler, KV manager, detok)", rest)]:
        print(f"| {k} | {v / steps * 1e3:.2f} | {v / wall:.0%} |")
    fwd = (phases.get("model forward", 0) + phases.get("LM head", 0)) / steps
    print(
        f"\nbytes read per step: weights {weights / 1e6:.1f} MB + KV {kv / 1e6:.2f} MB; "
        f"floor at {bandwidth / 1e9:.1f} GB/s = {(weights + kv) / bandwidth * 1e3:.1f} ms "
        f"({bandwidth / (weights + kv):.0f} tok/s); forward + head achieve "
        f"{(weights + kv) / fwd / 1e9:.1f} GB/s; the step is {(weights + kv) / bandwidth * 1e3 / step_ms:.2f} of the floor"
    )

    # 2-3. operator and module profile (a separate, hooked run)
    start_request(engine, context, steps, "prof")
    handles = module_scopes(model) + function_scopes()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t = time.perf_counter()
        for _ in range(steps):
            engine.step()
        hooked_wall = time.perf_counter() - t
    for h in handles:
        h.remove()
    finish(engine)
    events = prof.key_averages()
    scopes = [e for e in events if not e.key.startswith("aten::") and "(" in e.key]
    if any(layer._fused for layer in model.layers):
        print(
            "\n(each decoder layer ran as one C++ call, local_engine/ops/cpu/layer.py: the hooks"
            " below see only the modules outside it; compare PROMPTCACHE_CPU_KERNELS=0)"
        )
    print(
        f"\n| module (inclusive, hooked run {hooked_wall / steps * 1e3:.1f} ms/step) | ms / step | calls / step |"
    )
    print("|---|---:|---:|")
    for e in sorted(scopes, key=lambda e: -e.cpu_time_total):
        print(f"| {e.key} | {e.cpu_time_total / 1e3 / steps:.2f} | {e.count / steps:.0f} |")
    aten = [e for e in events if e.key.startswith("aten::")]
    self_total = sum(e.self_cpu_time_total for e in aten) / 1e3 / steps
    n_ops = sum(e.count for e in aten) / steps
    print(
        f"\naten operators: {n_ops:.0f} calls / step, self time {self_total:.2f} ms / step; "
        f"Python + dispatch outside them: {hooked_wall / steps * 1e3 - self_total:.2f} ms / step"
    )
    print("\n| aten op | self ms / step | calls / step |\n|---|---:|---:|")
    for e in sorted(aten, key=lambda e: -e.self_cpu_time_total)[:12]:
        print(f"| {e.key} | {e.self_cpu_time_total / 1e3 / steps:.2f} | {e.count / steps:.0f} |")
    return step_ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weight-dtype", nargs="+", default=["float32", "bfloat16", "int8"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--context", type=int, default=200, help="filler tokens before the prompt")
    args = ap.parse_args()
    print("#", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(
        f"# torch {torch.__version__}, {os.cpu_count()} CPUs, capability {torch.backends.cpu.get_cpu_capability()}"
    )
    bw = read_bandwidth(args.threads)
    print(
        f"# read bandwidth (sum over 512 MiB float32, {args.threads} thread(s)): {bw / 1e9:.1f} GB/s"
    )
    for wd in args.weight_dtype:
        profile_dtype(wd, args.threads, args.steps, args.context, bw)
    print("\n#", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
