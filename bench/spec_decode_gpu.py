"""Speculative decoding on a CUDA GPU: what speculating costs when nothing is accepted, and the
measured speedup against the formula's, on Meta-Llama-3-8B's shape with random weights.

Run on the GPU machine with the folder ``bench/engine_gpu.py prepare`` writes (config.json and
tokenizer, no weights; the weights are drawn on the GPU by ``LLMEngine.from_config``)::

    python bench/spec_decode_gpu.py --dir .bench_models --out $OUT

Random weights accept no real draft, so the drafter is controlled instead (one engine, one set
of weights, requests told apart by ``SamplingParams.num_speculative_tokens``):

- ``off``: no speculation (K = 0 per request; decode steps replay CUDA graphs), and the same
  with a second engine in eager mode (``enforce_eager``), for the graphs' share;
- ``reject-all``: K = 4 drafts every step that are never the greedy token: every step verifies
  5 positions and emits 1 token, so its tokens/s against ``off`` is the cost of speculating
  when nothing is accepted (target: at most 10 % slower);
- ``forced acceptance a``: the reject-all drafts verified for real, then accepted with
  probability ``a`` each, independently (the i.i.d. acceptance the formula assumes): the
  throughput a drafter of that acceptance would give (the emitted tokens are the drafts);
- ``ngram``: prompt lookup as shipped (random-weight greedy output often loops, so it finds
  matches in the model's own output).

Formula (Leviathan et al. 2023, eq. 1; Chen et al. 2023): tokens per verification step
``E = (1 - a**(K+1)) / (1 - a)`` for per-position acceptance probability ``a`` (estimated as
accepted / positions tested, see :class:`Counting`); expected speedup ``E / cost`` where
``cost`` is a verification step's time over a decode step's: 1 in the formula's idealisation
("verifying K tokens costs about one step"), and the ``reject-all`` measurement here.

512-token prompts (random ids), 128 new tokens, greedy, EOS ignored, at batch 1 and 64; decode
tokens/s = tokens generated after every request has its first token / that time.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

K = 4
PROMPT_LEN, NEW_TOKENS = 512, 128
if "--tiny-test" in sys.argv:  # a quick CPU check of this script
    sys.argv.remove("--tiny-test")
    PROMPT_LEN, NEW_TOKENS = 40, 12


class RejectAll:
    """Drafts ``k`` tokens that differ from the greedy continuation at every position."""

    def __init__(self, oracle):
        self.oracle = oracle

    def propose(self, token_ids, k):
        return [(t + 1) % self.oracle.vocab for t in self.oracle.truth(token_ids, k)]


class Counting:
    """Wraps a verifier and counts, over drafted steps, the drafts accepted and the positions
    tested (accepted ones plus the first rejected one): ``accepted / tested`` is the estimate
    of the per-position acceptance probability ``a`` of the formula (the maximum-likelihood
    estimate under its i.i.d. assumption), unlike accepted / drafted."""

    def __init__(self, inner):
        self.inner, self.accepted, self.tested = inner, 0, 0

    def __call__(self, logits, drafts, qs, params, gens):
        out = self.inner(logits, drafts, qs, params, gens)
        for d, a in zip(drafts, out.num_accepted):
            if d:
                self.accepted += a
                self.tested += a + (a < len(d))
        return out


class ForcedAcceptance:
    """Runs the real verification (its cost), then accepts each draft with probability
    ``alpha`` independently (the i.i.d. acceptance the formula assumes) and emits the drafts up
    to the first "rejection" plus the verifier's last token: a throughput model of a drafter
    with acceptance ``alpha``, not a sampler (the tokens are the drafts')."""

    def __init__(self, real, alpha: float, seed: int):
        self.real, self.alpha, self.rng = real, alpha, random.Random(seed)

    def __call__(self, logits, drafts, qs, params, gens):
        out = self.real(logits, drafts, qs, params, gens)
        for i, d in enumerate(drafts):
            a = 0
            while a < len(d) and self.rng.random() < self.alpha:
                a += 1
            out.num_accepted[i] = a
            out.token_ids[i] = list(d[:a]) + [out.token_ids[i][-1]]
            out.logprobs[i] = [None] * (a + 1)
            out.sampled_logprob[i] = [0.0] * (a + 1)
        return out


class Oracle:
    """Drafts the greedy continuation recorded from the ``off`` run, each position right with
    probability ``alpha`` independently (seeded), else off by one id."""

    def __init__(self, continuations: dict, vocab: int, alpha: float = 1.0, seed: int = 0):
        self.cont, self.vocab, self.alpha = continuations, vocab, alpha
        self.rng = random.Random(seed)

    def truth(self, token_ids, k):
        prompt, cont = self.cont[tuple(token_ids[:16])]
        done = len(token_ids) - len(prompt)
        out = cont[done : done + k]
        return out + [0] * (k - len(out))

    def propose(self, token_ids, k):
        return [
            t if self.rng.random() < self.alpha else (t + 1) % self.vocab
            for t in self.truth(token_ids, k)
        ]


class PathCounter:
    """Counts the forward passes of a runner by path: decode graph, verification graph,
    eager (a mixed or cut step)."""

    def __init__(self, runner):
        self.counts = {"decode_graph": 0, "verify_graph": 0, "eager": 0}
        self._wrap(runner, "forward_logits", None)
        for attr, key in (("graphs", "decode_graph"), ("spec_graphs", "verify_graph")):
            g = getattr(runner, attr, None)
            if g is not None:
                self._wrap(g, "run", key)

    def _wrap(self, obj, name, key):
        inner = getattr(obj, name)

        def wrapped(*a, **kw):
            self.counts["eager" if key is None else key] += 1
            if key is not None:
                self.counts["eager"] -= 1  # counted as a forward_logits call already
            return inner(*a, **kw)

        setattr(obj, name, wrapped)

    def reset(self):
        for k in self.counts:
            self.counts[k] = 0


def generate(engine, prompts, k):
    from local_engine.sampling import SamplingParams

    params = SamplingParams(
        temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True, num_speculative_tokens=k
    )
    if engine.runner.device.type == "cuda":
        import torch

        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i, p in enumerate(prompts):
        engine.add_request(f"g{i}", p, params)
    final = {}
    while engine.has_unfinished_requests():
        for o in engine.step():
            if o.finished:
                final[o.request_id] = o
    t1 = time.perf_counter()
    outs = [final[f"g{i}"] for i in range(len(prompts))]
    first = max(o.metrics.first_token_time for o in outs)
    last = max(o.metrics.finish_time for o in outs)
    after_first = sum(len(o.outputs[0].token_ids) for o in outs) - len(outs)
    m = [o.metrics for o in outs]
    drafted = sum(x.num_draft_tokens for x in m)
    return dict(
        wall_s=t1 - t0,
        tok_s=len(outs) * NEW_TOKENS / (t1 - t0),
        decode_tok_s=after_first / (last - first),
        drafted=drafted,
        accepted=sum(x.num_accepted_tokens for x in m),
        steps=sum(x.num_verify_steps for x in m),
        acceptance=(sum(x.num_accepted_tokens for x in m) / drafted) if drafted else None,
    ), [o.outputs[0].token_ids for o in outs]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--deadline-s", type=float, default=280)
    ap.add_argument("--model", default="llama3-8b-shape", help="folder under --dir")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-eager", action="store_true", help="skip the eager-engine peer rows")
    args = ap.parse_args()
    t_start = time.time()
    import torch

    from local_engine.engine import LLMEngine
    from local_engine.spec_decode import decoder

    folder = args.dir / args.model
    limits = dict(
        device=args.device,
        max_num_seqs=64,
        num_kv_blocks=4096,
        max_model_len=1024,
        seed=0,
        speculative={"method": "ngram", "num_speculative_tokens": K},
    )
    dev_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    res = {"device": dev_name, "model": args.model, "torch": torch.__version__, "runs": []}
    out_file = args.out / "spec_decode_gpu.json"

    def save():
        args.out.mkdir(parents=True, exist_ok=True)
        out_file.write_text(json.dumps(res, indent=1))

    t0 = time.time()
    eng = LLMEngine.from_config(folder, **limits)
    print(f"engine built in {time.time() - t0:.1f}s", flush=True)
    vocab = eng.model_config.vocab_size
    ngram = eng.spec.ngram
    rng = torch.Generator().manual_seed(0)
    for b in [int(x) for x in args.batches.split(",")]:
        prompts = [torch.randint(0, vocab, (PROMPT_LEN,), generator=rng).tolist() for _ in range(b)]
        generate(eng, prompts[: min(b, 4)], 0)  # warm-up (graphs, allocator) at this batch
        r_off, toks = generate(eng, prompts, 0)
        cont = {tuple(p[:16]): (p, t) for p, t in zip(prompts, toks)}
        reject = RejectAll(Oracle(cont, vocab))
        eng.spec.ngram = reject
        generate(eng, prompts[: min(b, 4)], K)  # warm-up of the verification path
        runs = [("off", r_off)]
        real_sampler = eng.spec.sampler
        shipped_backoff = decoder.MAX_BACKOFF_STEPS
        # (name, drafter, forced alpha, backoff cap, cost model on, pad to K)
        plan = [("reject-all, always verify", reject, None, 0, False, True)]
        plan.append(("reject-all, as shipped", reject, None, shipped_backoff, True, None))
        plan.append(("reject-all, previous (backoff 16, no pad)", reject, None, 16, False, False))
        plan += [(f"forced acceptance {a}, always", reject, a, 0, False, True) for a in (0.5, 0.8)]
        plan.append(("forced acceptance 0.8, as shipped", reject, 0.8, shipped_backoff, True, None))
        plan.append(("ngram, as shipped", ngram, None, shipped_backoff, True, None))
        paths = PathCounter(eng.runner)
        for name, drafter, alpha, backoff, adaptive, pad in plan:
            eng.spec.ngram = drafter
            eng.spec.adaptive, eng.spec.pad = adaptive, pad
            decoder.MAX_BACKOFF_STEPS = backoff
            counting = Counting(
                real_sampler if alpha is None else ForcedAcceptance(real_sampler, alpha, b)
            )
            eng.spec.sampler = counting
            paths.reset()
            r, t = generate(eng, prompts, K)
            r["paths"] = dict(paths.counts)
            r["alpha_hat"] = counting.accepted / counting.tested if counting.tested else None
            # greedy tokens equal to the run without speculation (bf16: a near-tie may differ)
            r["same_tokens"] = sum(x == y for x, y in zip(t, toks))
            runs.append((name, r))
            print(name, json.dumps(r), flush=True)
        decoder.MAX_BACKOFF_STEPS = shipped_backoff
        eng.spec.sampler, eng.spec.ngram = real_sampler, ngram
        eng.spec.adaptive, eng.spec.pad = True, None
        cost = r_off["decode_tok_s"] / runs[1][1]["decode_tok_s"]
        for name, r in runs:
            a = r.get("alpha_hat")
            e = (1 - a ** (K + 1)) / (1 - a) if a is not None and a < 1 else (K + 1 if a else 1)
            r.update(
                batch=b,
                mode=name,
                speedup=r["decode_tok_s"] / r_off["decode_tok_s"],
                formula_ideal=e,
                formula_measured_cost=e / cost,
                verify_cost=cost,
            )
            res["runs"].append(r)
            print(json.dumps(r), flush=True)
        save()
        if time.time() - t_start > args.deadline_s:
            break
    del eng
    torch.cuda.empty_cache()
    if not args.no_eager and time.time() - t_start < args.deadline_s - 60:  # graphs' share
        e2 = LLMEngine.from_config(folder, **dict(limits, enforce_eager=True))
        rng = torch.Generator().manual_seed(0)
        for b in [int(x) for x in args.batches.split(",")]:
            prompts = [
                torch.randint(0, vocab, (PROMPT_LEN,), generator=rng).tolist() for _ in range(b)
            ]
            generate(e2, prompts[: min(b, 4)], 0)
            r, _ = generate(e2, prompts, 0)
            r.update(batch=b, mode="off eager")
            res["runs"].append(r)
            print(json.dumps(r), flush=True)
            save()
    save()
    print()
    print(
        "| batch | mode | decode tok/s | vs off | accepted/drafted | measured tokens/verify step "
        "| formula tokens/verify step "
        "| formula speedup, verify = 1 step | formula, measured verify cost "
        "| same tokens as off | forwards: decode graph / verify graph / eager |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in res["runs"]:
        acc = "-" if r.get("acceptance") is None else f"{r['acceptance']:.2f}"
        vs = f"{r['speedup']:.2f}x" if "speedup" in r else "-"
        mal = f"{1 + r['accepted'] / r['steps']:.2f}" if r.get("steps") else "-"
        if r.get("drafted"):
            e, f1, f2 = (
                f"{r['formula_ideal']:.2f} (a={r['alpha_hat']:.2f})",
                f"{r['formula_ideal']:.2f}x",
                f"{r['formula_measured_cost']:.2f}x",
            )
        else:
            e = f1 = f2 = "-"
        print(
            f"| {r['batch']} | {r['mode']} | {r['decode_tok_s']:.0f} | {vs} | {acc} | {mal} | {e} | "
            f"{f1} | {f2} | {r.get('same_tokens', '-')}/{r['batch']} | "
            + (" / ".join(str(v) for v in r["paths"].values()) if "paths" in r else "-")
            + " |"
        )


if __name__ == "__main__":
    main()
