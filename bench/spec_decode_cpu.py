"""CPU benchmark of speculative decoding (prompt lookup, K=4) against no speculation on the
embedded SmolLM2-135M-Instruct, greedy.

Workloads (chat-templated; ``--max-tokens`` output tokens each):

* ``rewrite``: "rewrite this function with one change" over a ~600-token function shipped in
  this repository (``Scheduler._schedule_waiting``), a different rename per request;
* ``quote``: answer by quoting a shipped document (``docs/rules/PC001.md``), a different
  question per request;
* ``chat``: open questions with nothing to copy.

For each workload, batch 1 (one request alone) and batch 8 (eight at once): output tokens/s
over the whole run (the prompts' blocks are prefix-cache hits: each set is run once untimed
first) and over decode only (first token to last), the
acceptance rate and the mean accepted length (tokens per verification step), with
speculation off (the peer: the same engine, ``num_speculative_tokens=0`` per request) and on,
best of ``--repeats``. A batch's requests share the function or the document as a cached
prefix (the request's own instruction comes last). The floor beside them: the time of
one decode forward of 1 token per sequence and of the K + 1 tokens a verification computes,
measured in the same run, and the expected speedup of the speculative-decoding formula
(Leviathan et al. 2023, eq. 1 with a drafter of cost 0: ``(1 - a**(K+1)) / (1 - a)`` tokens
per step for acceptance rate ``a``, over the verification's cost relative to a decode step).

Columns beside "ngram" (the shipped policy), same engine and run, interleaved: the session-2
policy (drafts priced by the sequence's own acceptance, every sequence looked up every step),
with ``--previous`` the session-1 policy, with ``--lookup-min-1`` prompt lookup of 1..5-token
suffixes, with ``--lookup-min-2`` of 2..5-token suffixes (the default before session 3b).
Load-independent views: "step-count" (forwards counted, a verification priced at the 5-token
floor ratio) and "priced-step" (every forward priced by the floor measured for its
shape, 1..K+1 tokens a sequence). ``--trace`` prints where each mode's decode sequence-steps
went: waiting (a backoff), no match, refused by the cost model, or verified and how many drafts
were accepted, by match length.

Usage: ``.venv/bin/python bench/spec_decode_cpu.py [--max-tokens 96] [--repeats 2]``. Not a
test: it prints, it does not assert.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from local_engine.engine import LLMEngine  # noqa: E402
from local_engine.sampling import SamplingParams  # noqa: E402
from local_engine.scheduler import ScheduledSequence, Scheduler, SchedulerOutput  # noqa: E402
from local_engine.sequence import Sequence  # noqa: E402
from local_engine.spec_decode.ngram import NgramProposer  # noqa: E402

K = 4
#: The speculative decoder's settings per column (attributes of ``engine.spec``): as shipped;
#: the session-2 policy (drafts priced by the sequence's acceptance, every sequence indexed and
#: looked up every step); the session-1 policy (no cost model, backoff cap 16).
SHIPPED = {"adaptive": True, "match_model": True, "lookup_backoff": True}
SESSION2 = {"match_model": False, "lookup_backoff": False}
PREVIOUS = {"adaptive": False, "match_model": False, "lookup_backoff": False, "max_backoff": 16}
RENAMES = [
    ("num_seqs", "seq_count"),
    ("budget", "token_budget"),
    ("idx", "position"),
    ("hits", "cached_blocks"),
    ("num_new", "new_tokens"),
    ("pending", "in_flight"),
    ("copies", "block_copies"),
    ("need", "blocks_needed"),
]
QUESTIONS = [
    ("PC001", "What does this rule detect?"),
    ("PC001", "Why does it cost money?"),
    ("PC001", "What is the fix?"),
    ("PC001", "Show the bad example."),
    ("PC001", "Show the good example."),
    ("PC001", "What is the rule's name?"),
    ("PC001", "When does the rule not apply?"),
    ("PC001", "What is the first sentence?"),
]
CHAT = [
    "Tell me a short story about a lighthouse keeper.",
    "Explain photosynthesis to a ten-year-old.",
    "What are three tips for learning to play the guitar?",
    "Describe your ideal weekend in the mountains.",
    "Why is the sky blue? Answer in a paragraph.",
    "Write a short poem about the sea at night.",
    "What should I cook for dinner tonight, and why?",
    "Give me advice for my first job interview.",
]


def workloads(tok):
    func = inspect.getsource(Scheduler._schedule_waiting)
    func = "\n".join(line[4:] for line in func.splitlines())  # dedent the method

    def chat(text):
        return tok.encode(
            tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        )

    # the shared text first, the request's own part last: the 8 requests of a batch share the
    # function's (or the document's) blocks in the prefix cache
    rewrite = [
        chat(
            f"Here is a Python function:\n\n```python\n{func}\n```\n\nRewrite it with one "
            f"change: rename the variable `{a}` to `{b}`. Output the whole function and nothing "
            "else."
        )
        for a, b in RENAMES
    ]
    doc = (ROOT / "docs" / "rules" / "PC001.md").read_text()
    quote = [
        chat(f"{doc}\n\nAnswer by quoting the document above word for word: {q}")
        for _rule, q in QUESTIONS
    ]
    return {"rewrite": rewrite, "quote": quote, "chat": [chat(c) for c in CHAT]}, len(
        tok.encode(func)
    )


class StepProfile:
    """Wraps an engine's speculative ``plan`` and its runner's ``forward_logits`` to add up the
    host seconds of planning (prompt lookup, the cost model) and the forwards' seconds and
    counts, split into plain decode forwards and verification forwards, and the shape of each
    forward (sequences, tokens computed beyond one each) for :func:`priced_steps`."""

    def __init__(self, engine):
        self.reset()
        spec, runner = engine.spec, engine.runner
        plan, fwd = spec.plan, runner.forward_logits

        def timed_plan(running, waiting=True):
            t = time.perf_counter()
            plan(running, waiting)
            self.plan_s += time.perf_counter() - t

        def timed_forward(batch):
            t = time.perf_counter()
            out = fwd(batch)
            key = "plain" if batch.logits_rows is None else "verify"
            self.fwd_s[key] += time.perf_counter() - t
            self.fwd_n[key] += 1
            rows = batch.logits_rows
            if batch.is_decode or rows is not None:
                n = len(batch.sample_rows)
                self.shapes.append((n, 0 if rows is None else sum(rows) - len(rows)))
            return out

        spec.plan, runner.forward_logits = timed_plan, timed_forward

    def reset(self):
        self.plan_s = 0.0
        self.fwd_s = {"plain": 0.0, "verify": 0.0}
        self.fwd_n = {"plain": 0, "verify": 0}
        self.shapes: list[tuple[int, int]] = []

    def summary(self):
        n = sum(self.fwd_n.values()) or 1
        parts = [f"plan {self.plan_s / n * 1e6:.0f} us/step"]
        for key in ("plain", "verify"):
            c = self.fwd_n[key]
            if c:
                parts.append(f"{key} {c} x {self.fwd_s[key] / c * 1e3:.1f} ms")
        return ", ".join(parts)


def priced_steps(shapes, curve):
    """Decode and verification forwards priced in plain decode steps of the same batch: a
    forward of ``n`` sequences computing ``x`` tokens beyond one each costs ``curve(1 + x /
    n)``, the floor's measured cost of ``1 + x / n`` tokens a sequence over one (linear
    between the measured whole numbers); a load-independent time."""
    total = 0.0
    for n, x in shapes:
        m = 1.0 + x / n
        lo = int(m)
        hi = min(lo + 1, len(curve))
        total += curve[lo - 1] + (curve[hi - 1] - curve[lo - 1]) * (m - lo)
    return total


class StepTrace:
    """Per sequence-step record of prompt lookup in the engine's speculative decoder (wraps
    ``plan`` and ``account``): for each decode, whether it was waiting (a backoff), found no
    match, had its drafts refused by the cost model, or verified them, and then how many
    were accepted."""

    def __init__(self, engine):
        spec = engine.spec
        self.spec = spec
        self.on = False
        self.reset()
        plan, account = spec.plan, spec.account

        def traced_plan(running, waiting=True):
            if not self.on:
                return plan(running, waiting)
            before = {}
            for seq in running:
                st = spec._state.get(seq)
                before[id(seq)] = bool(st is not None and (st.wait or st.lookup_wait))
            plan(running, waiting)
            for seq in running:
                if seq.num_computed_tokens != seq.num_tokens - 1:
                    continue  # prefill
                st = spec._state.get(seq)
                if st is None:
                    continue
                if seq.spec_token_ids[: len(seq.spec_token_ids) - seq.num_spec_pad]:
                    self._pending[id(seq)] = st.match_len
                elif before[id(seq)]:
                    self.counts["waiting"] += 1
                elif st.match_len:
                    self.counts["refused"] += 1
                    self.refused_len[st.match_len] = self.refused_len.get(st.match_len, 0) + 1
                else:
                    self.counts["no match / not looked up"] += 1

        def traced_account(seqs, drafts, num_accepted):
            if self.on:
                for seq, d, a in zip(seqs, drafts, num_accepted):
                    n = self._pending.pop(id(seq), None)
                    if d and n is not None:
                        key = "rejected at 1" if a == 0 else f"accepted {a}/{len(d)}"
                        self.counts[key] = self.counts.get(key, 0) + 1
                        t = self.by_len.setdefault(n, [0, 0, 0])
                        t[0] += 1
                        t[1] += a > 0
                        t[2] += a
            return account(seqs, drafts, num_accepted)

        spec.plan, spec.account = traced_plan, traced_account

    def reset(self):
        self.counts = {"waiting": 0, "no match / not looked up": 0, "refused": 0}
        self.by_len: dict[int, list[int]] = {}
        self.refused_len: dict[int, int] = {}
        self._pending: dict[int, int] = {}

    def summary(self):
        total = sum(self.counts.values()) or 1
        parts = [f"{k} {v} ({v / total:.0%})" for k, v in sorted(self.counts.items()) if v]
        lens = ", ".join(
            f"n={n}: {t[0]} verified, first accepted {t[1] / t[0]:.2f}, mean accepted "
            f"{t[2] / t[0]:.2f}"
            for n, t in sorted(self.by_len.items())
        )
        ref = ", ".join(f"n={n}: {c}" for n, c in sorted(self.refused_len.items()))
        return (
            f"{total} decode sequence-steps: " + "; ".join(parts) + f"\n      by match length: "
            f"{lens or '-'}\n      refused by match length: {ref or '-'}"
        )


def run(engine, prompts, max_tokens, k):
    """Returns (total seconds, decode seconds, output tokens, drafted, accepted, verify steps,
    token ids); ``k`` = 0 runs without speculation."""
    p = SamplingParams(temperature=0, max_tokens=max_tokens, num_speculative_tokens=k)
    t0 = time.perf_counter()
    for i, ids in enumerate(prompts):
        engine.add_request(f"r{i}", ids, p)
    final = {}
    while engine.has_unfinished_requests():
        for o in engine.step():
            if o.finished:
                final[o.request_id] = o
    t1 = time.perf_counter()
    first = min(o.metrics.first_token_time for o in final.values())
    last = max(o.metrics.finish_time for o in final.values())
    toks = sum(len(o.outputs[0].token_ids) for o in final.values())
    m = [o.metrics for o in final.values()]
    return (
        t1 - t0,
        last - first,
        toks,
        sum(x.num_draft_tokens for x in m),
        sum(x.num_accepted_tokens for x in m),
        sum(x.num_verify_steps for x in m),
        [o.outputs[0].token_ids for o in sorted(final.values(), key=lambda o: o.request_id)],
    )


def forward_floor(engine, batch, new_tokens, context, reps=5):
    """Best seconds of one forward over ``batch`` sequences of ``context`` cached tokens, each
    computing ``new_tokens`` (1 = a decode step, K + 1 = a verification)."""
    kv = engine.kv_cache_manager
    seqs = [
        Sequence(
            f"f{i}", f"f{i}", 0, list(range(100, 100 + context + new_tokens)), SamplingParams()
        )
        for i in range(batch)
    ]
    for s in seqs:
        assert kv.allocate_slots(s, context + new_tokens) is not None
    sched = SchedulerOutput([ScheduledSequence(s, context, new_tokens) for s in seqs])
    tables = kv.block_table_array([s.seq_id for s in seqs])
    best = float("inf")
    try:
        for _ in range(reps):
            batch_in = engine.runner.prepare(sched, tables)
            if new_tokens > 1:  # all rows' logits, as a verification needs
                batch_in.meta.logits_indices = torch.arange(batch * new_tokens)
            t = time.perf_counter()
            engine.runner.forward_logits(batch_in)
            best = min(best, time.perf_counter() - t)
    finally:
        for s in seqs:
            kv.free(s)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workloads", default="rewrite,quote,chat")
    ap.add_argument("--weight-dtype", default=None, help="float32 (default), bfloat16, int8")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument(
        "--previous",
        action="store_true",
        help="also the session-1 policy (no cost model, backoff cap 16) as a column",
    )
    ap.add_argument(
        "--lookup-min-1",
        action="store_true",
        help="also prompt lookup of 1..5-token suffixes (the shipped policy otherwise) as a column",
    )
    ap.add_argument(
        "--lookup-min-2",
        action="store_true",
        help="also prompt lookup of 2..5-token suffixes (the default before session 3b) as a column",
    )
    ap.add_argument(
        "--trace",
        action="store_true",
        help="print where each speculating mode's decode sequence-steps went (waiting, no "
        "match, refused, verified and how many accepted, by match length)",
    )
    args = ap.parse_args()
    print("uptime:", os.popen("uptime").read().strip())
    # prefix caching on, and every prompt set run once before timing (both engines), so the
    # timed runs measure generation rather than recomputing the same prompts
    common = dict(num_kv_blocks=1024, num_threads=args.threads, weight_dtype=args.weight_dtype)
    off = LLMEngine.from_model(None, **common)
    on = LLMEngine.from_model(
        None, speculative={"method": "ngram", "num_speculative_tokens": K}, **common
    )
    wl, func_tokens = workloads(off.tokenizer)
    print(
        f"SmolLM2-135M fp32 activations, weights {on.config.cpu_weight_dtype()}, "
        f"{torch.get_num_threads()} thread(s), greedy, max_tokens="
        f"{args.max_tokens}, ngram K={K} (prompt_lookup {on.spec.spec.prompt_lookup_min}.."
        f"{on.spec.spec.prompt_lookup_max}); function = {func_tokens} tokens"
    )
    batches = [int(x) for x in args.batches.split(",")]
    from local_engine.spec_decode import decoder

    prof = StepProfile(on)
    trace = StepTrace(on)
    floors, curves = {}, {}
    for b in batches:
        # 1 .. K + 1 tokens a sequence, interleaved rounds, best of each
        best_t = [float("inf")] * (K + 1)
        for _round in range(2):
            for m in range(1, K + 2):
                best_t[m - 1] = min(best_t[m - 1], forward_floor(off, b, m, 600, reps=3))
        d1, dk = best_t[0], best_t[K]
        floors[b] = dk / d1
        curves[b] = [t / d1 for t in best_t]
        print(
            f"floor batch {b}: decode forward {d1 * 1e3:.1f} ms, verification forward "
            f"({K + 1} tokens/seq) {dk * 1e3:.1f} ms, ratio {dk / d1:.2f}; 1..{K + 1} tokens a "
            "sequence: " + " ".join(f"{c:.2f}" for c in curves[b])
        )
    rows = []
    extra: dict = {}
    shipped = on.spec.ngram
    shipped_backoff = decoder.MAX_BACKOFF_STEPS
    for name in args.workloads.split(","):
        for b in batches:
            prompts = wl[name][:b]
            best = {}
            outs = {}
            profs = {}
            counts: dict = {}
            shapes: dict = {}
            run(on, prompts, 1, 0)  # warm the prefix cache
            modes = [("off", 0, {}), ("ngram", K, {})]
            modes.append(("session 2", K, SESSION2))
            if args.previous:
                modes.append(("previous", K, PREVIOUS))
            if args.lookup_min_1:
                modes.append(("ngram 1..5", K, {"ngram": NgramProposer(1, shipped.max_n)}))
            if args.lookup_min_2:
                modes.append(("ngram 2..5", K, {"ngram": NgramProposer(2, shipped.max_n)}))
            traces = {}
            for _ in range(args.repeats):
                for mode, k, attrs in modes:
                    for key, value in {**SHIPPED, "ngram": shipped, **attrs}.items():
                        if key != "max_backoff":
                            setattr(on.spec, key, value)
                    decoder.MAX_BACKOFF_STEPS = attrs.get("max_backoff", shipped_backoff)
                    prof.reset()
                    trace.reset()
                    trace.on = mode != "off"
                    r = run(on, prompts, args.max_tokens, k)
                    outs[mode] = r[6]
                    if mode not in best or r[1] < best[mode][1]:
                        best[mode] = r
                        profs[mode] = prof.summary()
                        counts[mode] = dict(prof.fwd_n)
                        shapes[mode] = list(prof.shapes)
                        traces[mode] = trace.summary()
            trace.on = False
            for key, value in {**SHIPPED, "ngram": shipped}.items():
                setattr(on.spec, key, value)
            decoder.MAX_BACKOFF_STEPS = shipped_backoff
            for mode in best:
                print(f"  {name} b={b} {mode}: {profs[mode]}", flush=True)
                if args.trace and mode in traces:
                    print(f"    trace: {traces[mode]}", flush=True)
            priced = {m: priced_steps(shapes[m], curves[b]) for m in best}
            for mode in best:
                if mode in ("off", "ngram"):
                    continue
                p_ = best[mode]
                print(
                    f"  {mode}: decode tok/s {p_[2] / p_[1]:.1f} "
                    f"({(p_[2] / p_[1]) / (best['off'][2] / best['off'][1]):.2f}x), "
                    f"accepted/drafted {p_[4] / p_[3] if p_[3] else 0:.2f}, priced-step "
                    f"speedup {priced['off'] / priced[mode]:.2f}x, same tokens "
                    f"{outs[mode] == outs['off']}",
                    flush=True,
                )
                extra[(name, b, mode)] = (
                    (p_[2] / p_[1]) / (best["off"][2] / best["off"][1]),
                    priced["off"] / priced[mode],
                )
            same = outs["off"] == outs["ngram"]
            o, s = best["off"], best["ngram"]
            acc = s[4] / s[3] if s[3] else 0.0
            mal = 1 + s[4] / s[5] if s[5] else 1.0
            a = min(acc, 0.999)
            formula = ((1 - a ** (K + 1)) / (1 - a)) / floors[b] if s[3] else 1.0
            # load-independent view: forwards counted, a verification priced at the floor's
            # ratio (every sequence verifying: an upper bound for mixed steps)
            co, cs = counts["off"], counts["ngram"]
            step_model = (co["plain"] + co["verify"]) / (cs["plain"] + cs["verify"] * floors[b])
            priced_model = priced["off"] / priced["ngram"]
            rows.append(
                (
                    name,
                    b,
                    o[2] / o[0],
                    s[2] / s[0],
                    o[2] / o[1],
                    s[2] / s[1],
                    (s[2] / s[1]) / (o[2] / o[1]),
                    acc,
                    mal,
                    formula,
                    same,
                    step_model,
                    priced_model,
                )
            )
            print("row:", rows[-1], flush=True)
    print()
    others = sorted(
        {m for (_w, _b, m) in extra},
        key=["session 2", "previous", "ngram 1..5", "ngram 2..5"].index,
    )
    print(
        "| workload | batch | tok/s off | tok/s ngram | decode tok/s off | decode tok/s ngram "
        "| decode speedup | acceptance | mean accepted len | formula speedup | same tokens "
        "| step-count speedup | priced-step speedup | "
        + " | ".join(f"{m}: decode / priced-step speedup" for m in others)
        + " |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(others))
    for r in rows:
        print(
            f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.1f} | {r[4]:.1f} | {r[5]:.1f} | "
            f"{r[6]:.2f}x | {r[7]:.2f} | {r[8]:.2f} | {r[9]:.2f}x | {r[10]} | {r[11]:.2f}x | "
            f"{r[12]:.2f}x | "
            + " | ".join(
                "{:.2f}x / {:.2f}x".format(*extra[(r[0], r[1], m)])
                if (r[0], r[1], m) in extra
                else "-"
                for m in others
            )
            + " |"
        )
    print("uptime:", os.popen("uptime").read().strip())


if __name__ == "__main__":
    main()
