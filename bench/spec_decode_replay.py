"""Load-independent view of prompt lookup on the real SmolLM2: the greedy outputs of the
``bench/spec_decode_cpu.py`` workloads, recorded once, replayed through the engine's own
speculative planner (``SpeculativeDecoder.plan`` / ``account``: the lookup, the cost model,
the backoffs) with a step-time model instead of the model.

Greedy speculative decoding emits exactly the tokens of plain greedy decoding, so which drafts
are accepted is known from the recorded output: a replay step accepts the drafts' longest
prefix that agrees with it. A step of ``B`` sequences computing ``x`` tokens beyond one each
costs ``T(B) * (1 + (c_B - 1) * x / (K * B))``, with ``c_B`` the cost of a verification of
``K + 1`` tokens a sequence over a decode step (``--c1`` at batch 1, ``--c8`` above: measured
by ``bench/spec_decode_cpu.py``'s floor) and ``T(B) = B ** 0.75`` (this CPU: a batch-8 decode
step 4.5-5.5x a batch-1 one, bench/RESULTS.md); the cost model learns these times from the
replayed steps as it does from real ones. Speedup = the plain steps' time over the replay's.

Also printed: every decode position of the recorded outputs by the length of the longest
earlier occurrence of its suffix (1..8 tokens; 8 = 8 or more) and how often the 4 tokens that
followed the most recent one would be accepted (the numbers behind
``policy.MatchAcceptance``).

Usage: ``python bench/spec_decode_replay.py [--refs build/spec_decode_refs.json]`` (records
the outputs there first if the file is missing: ~5 minutes on this CPU). Prints tables;
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from local_engine.sampling import SamplingParams  # noqa: E402
from local_engine.sequence import Sequence  # noqa: E402
from local_engine.spec_decode import decoder as decoder_mod  # noqa: E402
from local_engine.spec_decode.config import SpeculativeConfig  # noqa: E402
from local_engine.spec_decode.decoder import SpeculativeDecoder, StepShape  # noqa: E402
from local_engine.spec_decode.ngram import NgramProposer  # noqa: E402

K = 4
WORKLOADS = ("rewrite", "quote", "chat")
#: Policies replayed (attributes of the decoder, as bench/spec_decode_cpu.py's columns).
#: "clairvoyant": every step verifies exactly the lookup's drafts that will be accepted and
#: none when the first would be rejected (the bound of any drafting policy over this lookup).
POLICIES = {
    "shipped": {},
    "session 2": {"match_model": False, "lookup_backoff": False},
    "shipped, lookup 1..5": {"lookup_min": 1},
    "clairvoyant (bound)": {"adaptive": False, "oracle": True},
    "clairvoyant, lookup 1..5": {"adaptive": False, "oracle": True, "lookup_min": 1},
}


def record(path: Path, gen_tokens: int, threads: int, weight_dtype: str | None) -> dict:
    """Greedy outputs of every workload's 8 prompts, each run alone (no speculation), as in
    bench/spec_decode_cpu.py's batch-1 rows (a batch of 8 can differ at near-ties)."""
    from spec_decode_cpu import workloads

    from local_engine.engine import LLMEngine

    eng = LLMEngine.from_model(
        None, num_kv_blocks=2048, num_threads=threads, weight_dtype=weight_dtype
    )
    wl, _ = workloads(eng.tokenizer)
    out = {}
    for name in WORKLOADS:
        p = SamplingParams(temperature=0, max_tokens=gen_tokens)
        fin = {}
        for i, ids in enumerate(wl[name]):
            eng.add_request(f"{name}{i}", ids, p)
            while eng.has_unfinished_requests():
                for o in eng.step():
                    if o.finished:
                        fin[o.request_id] = o
        out[name] = [
            {"prompt": wl[name][i], "out": list(fin[f"{name}{i}"].outputs[0].token_ids)}
            for i in range(len(wl[name]))
        ]
        print(f"recorded {name}", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out))
    return out


def by_match_length(refs, tokens: int):
    """{n: [positions, first draft accepted, drafts accepted]} over every decode position."""
    p = NgramProposer(1, 8)
    stats: dict[int, list[int]] = {}
    for name in WORKLOADS:
        for r in refs[name]:
            prompt, out = r["prompt"], r["out"][:tokens]
            for j in range(1, len(out) - K):
                drafts, n = p.lookup(prompt + out[:j], K)
                if not n:
                    continue
                a = 0
                while a < len(drafts) and drafts[a] == out[j + a]:
                    a += 1
                s = stats.setdefault(n, [0, 0, 0])
                s[0] += 1
                s[1] += a > 0
                s[2] += a
    return stats


def ambiguous_choices(refs, tokens: int):
    """At positions whose longest earlier suffix match (1..16 tokens) occurred more than once
    with different next tokens: how often the next token is the one after the most recent
    occurrence (what the lookup drafts), the most frequent one (ties: the most recent), the
    earliest, or any of them. {workload: Counter}."""
    from collections import Counter

    res: dict[str, Counter] = {}
    for name in WORKLOADS:
        c = res.setdefault(name, Counter())
        for r in refs[name]:
            prompt, out = r["prompt"], r["out"][:tokens]
            for j in range(1, len(out) - 1):
                t = prompt + out[:j]
                L = len(t)
                n, ends = 0, []
                while n < 16:
                    suf = t[L - n - 1 :]
                    e = [x for x in range(n, L - 1) if t[x - n : x + 1] == suf]
                    if not e:
                        break
                    n, ends = n + 1, e
                nxt = [t[x + 1] for x in ends]
                if len(set(nxt)) < 2:
                    continue
                truth, freq = out[j], Counter(nxt)
                top = max(freq.values())
                c["positions"] += 1
                c["most recent"] += nxt[-1] == truth
                c["most frequent"] += next(x for x in reversed(nxt) if freq[x] == top) == truth
                c["earliest"] += nxt[0] == truth
                c["any"] += truth in nxt
    return res


def make_decoder(policy: dict) -> SpeculativeDecoder:
    runner = SimpleNamespace(device="cpu", spec_graphs=None, num_blocks=1 << 20, block_size=16)
    dec = SpeculativeDecoder(
        SpeculativeConfig("ngram", K), SimpleNamespace(seed=0), runner, None, 1 << 16
    )
    dec.oracle = False
    for key, value in policy.items():
        if key == "lookup_min":
            dec.ngram = NgramProposer(value, dec.spec.prompt_lookup_max)
        else:
            setattr(dec, key, value)
    return dec


def step_time(b: int, extra: int, c1: float, c8: float) -> float:
    c = c1 if b == 1 else c8
    return b**0.75 * (1.0 + (c - 1.0) * extra / (K * b))


def replay(dec, items, max_tokens: int, c1: float, c8: float) -> tuple[float, float]:
    """(plain time, replay time) of greedy decoding ``items`` [(prompt, output)] in one batch."""
    seqs, refs = [], []
    for i, (prompt, out) in enumerate(items):
        s = Sequence(f"s{i}", f"s{i}", 0, list(prompt), SamplingParams(temperature=0))
        s.all_token_ids.append(out[0])  # the first token comes from the prefill
        s.num_computed_tokens = s.num_tokens - 1
        s.max_total_len = len(prompt) + max_tokens
        seqs.append(s)
        refs.append(out[:max_tokens])
    ref_of = {id(s): r for s, r in zip(seqs, refs)}
    running, t_spec = list(seqs), 0.0
    while running:
        dec.plan(running)
        drafts, accepted = [], []
        for s in running:
            d = s.spec_token_ids[: s.num_lookahead_tokens]
            ref, j, a = ref_of[id(s)], s.num_output_tokens, 0
            while a < len(d) and d[a] == ref[j + a]:
                a += 1
            if dec.oracle:
                d = d[:a]  # (a = 0: no verification)
            drafts.append(list(d))
            accepted.append(a)
        extra = sum(len(d) for d in drafts)
        dt = step_time(len(running), extra, c1, c8)
        dec.observe(StepShape(len(running), extra, True), dt)
        dec.account(running, drafts, accepted)
        t_spec += dt
        for s, a in zip(running, accepted):
            j = s.num_output_tokens
            s.all_token_ids.extend(ref_of[id(s)][j : j + a + 1])
            s.num_computed_tokens = s.num_tokens - 1
            s.spec_token_ids, s.num_lookahead_tokens = [], 0
        running = [s for s in running if s.num_output_tokens < len(ref_of[id(s)])]
    lens = sorted(len(r) - 1 for r in refs)  # plain: one token a step, the batch shrinking
    t_plain, done = 0.0, 0
    for i, n in enumerate(lens):
        t_plain += (n - done) * step_time(len(lens) - i, 0, c1, c8)
        done = n
    return t_plain, t_spec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--refs", type=Path, default=ROOT / "build" / "spec_decode_refs.json")
    ap.add_argument("--gen-tokens", type=int, default=128, help="tokens recorded per prompt")
    ap.add_argument("--max-tokens", type=int, default=48, help="tokens replayed per prompt")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--weight-dtype",
        default=None,
        help="weights of the recording run: float32 (default), "
        "bfloat16 (greedy outputs differ: record them to another --refs file)",
    )
    ap.add_argument(
        "--costs",
        default="1.0/1.0,1.1/1.25,1.6/1.3,2.2/1.5",
        help="c1/c8 pairs: a K+1-token verification over a decode step at batch 1 / 8",
    )
    ap.add_argument(
        "--choices",
        action="store_true",
        help="also: at ambiguous matches, which earlier continuation was right (slow, ~1 min)",
    )
    args = ap.parse_args()
    print("uptime:", os.popen("uptime").read().strip())
    refs = json.loads(args.refs.read_text()) if args.refs.exists() else None
    if refs is None:
        refs = record(args.refs, args.gen_tokens, args.threads, args.weight_dtype)
    stats = by_match_length(refs, args.gen_tokens)
    print(f"\nevery decode position of the recorded outputs ({args.gen_tokens} tokens each):")
    print(
        "| longest earlier suffix match | positions | first draft accepted | mean accepted of 4 |"
    )
    print("|---|---|---|---|")
    for n, (c, f, a) in sorted(stats.items()):
        label = f"{n}+" if n == 8 else str(n)
        print(f"| {label} | {c} | {f / c:.2f} | {a / c:.2f} |")
    if args.choices:
        print("\nambiguous matches (the longest match continued differently before):")
        print("| workload | positions | most recent | most frequent | earliest | any |")
        print("|---|---|---|---|---|---|")
        for name, c in ambiguous_choices(refs, args.gen_tokens).items():
            print(
                f"| {name} | {c['positions']} | {c['most recent']} | {c['most frequent']} | "
                f"{c['earliest']} | {c['any']} |"
            )
    gm = lambda xs: math.prod(xs) ** (1 / len(xs))  # noqa: E731
    print(
        f"\nreplay, {args.max_tokens} tokens a prompt; each policy's decoder first replays "
        "every prompt once (warm cost model and match-length estimates), then is measured"
    )
    print(
        "| c1 / c8 | policy | quote, batch 1, prompt 0 | quote, batch 1, geo-mean of 8 | "
        "chat, batch 1, geo-mean | rewrite, batch 1, prompt 0 | quote, batch 8 | chat, batch 8 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for pair in args.costs.split(","):
        c1, c8 = (float(x) for x in pair.split("/"))
        for pname, policy in POLICIES.items():
            dec = make_decoder(policy)
            backoff = decoder_mod.MAX_BACKOFF_STEPS
            for name in WORKLOADS:  # warm-up pass
                for r in refs[name]:
                    replay(dec, [(r["prompt"], r["out"])], args.max_tokens, c1, c8)
            single = {}
            for name in WORKLOADS:
                single[name] = [
                    (lambda t: t[0] / t[1])(
                        replay(dec, [(r["prompt"], r["out"])], args.max_tokens, c1, c8)
                    )
                    for r in refs[name]
                ]
            batch8 = {}
            for name in ("quote", "chat"):
                items = [(r["prompt"], r["out"]) for r in refs[name]]
                tp, ts = replay(dec, items, args.max_tokens, c1, c8)
                batch8[name] = tp / ts
            assert decoder_mod.MAX_BACKOFF_STEPS == backoff
            print(
                f"| {c1} / {c8} | {pname} | {single['quote'][0]:.2f}x | "
                f"{gm(single['quote']):.2f}x | {gm(single['chat']):.2f}x | "
                f"{single['rewrite'][0]:.2f}x | {batch8['quote']:.2f}x | {batch8['chat']:.2f}x |",
                flush=True,
            )
    print("uptime:", os.popen("uptime").read().strip())


if __name__ == "__main__":
    main()
