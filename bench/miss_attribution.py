"""Miss attribution: precision/recall per cause on a trace with causes injected at known
places, and the per-request overhead of attribution in ``wrap()``.

Run:  .venv/bin/python bench/miss_attribution.py [--conversations 24] [--overhead-iters 300]

1. **Trace.** Conversations of an agent loop (Anthropic Messages bodies with tool schemas,
   a ~1,500-token system prompt, cache breakpoints; and OpenAI Chat bodies with automatic
   caching), each request's usage computed by the provider-rule emulator the local engine
   uses (:mod:`promptcache.simulation.emulation`: ``anthropic_usage``/``openai_usage`` on a
   :class:`~promptcache.simulation.emulation.CacheState` with a manual clock) from this script's own
   rendering of the body into tokens (4-character chunks of the JSON, one content block per
   tool / system block / message). Causes are injected at known turns: a tool added, a
   schema's keys reordered, a timestamp in the system prompt, an earlier message edited
   (``prefix_changed``), a pause past the TTL (``ttl_expired``), short conversations
   (``below_minimum``), a turn sent without markers (``no_breakpoint``), a burst of more
   than 20 blocks with only the newest marked (``breakpoint_moved``; ``partial`` when a
   system breakpoint still hits), the provider evicting the newest entry (``partial``) or
   all of the conversation's entries (``provider_unknown``). Every request is recorded with
   ``Tracker.record(usage, request=body, ...)``; the recorded ``miss_cause`` is compared
   with the injected label: precision and recall per cause. The trace is attributed twice:
   in one process (the lineage's previous request in memory) and with the memory dropped
   before every request (the predecessor read back from the ledger's digest chains, as a
   new process would).
2. **Overhead.** A 20,000-token Anthropic request (tools, a long system prompt, 60 turns):
   p50 of ``Tracker.attribute`` (the digest chain, reusing the previous request's unchanged
   segments, plus the classification) for the next turn of the loop, as ``wrap()`` calls it
   per request; the cold case (no previous request in memory: every segment digested); and,
   measured in the same run, the peer (``json.loads`` of the request body, which ``wrap()``
   already does for every call) and the floor (one SHA-1 pass over the body bytes, the
   digest the chain uses).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import sys
import tempfile
import time
import zlib
from collections import Counter
from hashlib import sha1
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from promptcache import Tracker, Usage  # noqa: E402
from promptcache.misses.cause import CAUSES  # noqa: E402
from promptcache.simulation.emulation import (  # noqa: E402
    Breakpoint,
    CacheState,
    ManualClock,
    PromptLayout,
    anthropic_usage,
    openai_usage,
)

ANTHROPIC_MODEL = "claude-sonnet-4-5"  # minimum 1,024 tokens (limits.py)
OPENAI_MODEL = "gpt-4o"
WORDS = (
    "order invoice refund warranty shipping tracking carrier parcel customer address "
    "payment receipt policy return exchange discount coupon inventory supplier"
).split()


def text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def tool(name: str, rng: random.Random) -> dict:
    return {
        "name": name,
        "description": text(rng, 12),
        "input_schema": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["order_id"],
        },
    }


# ---- rendering to tokens (independent of promptcache.misses.digest_chain) ----------------------


def _tokens(s: str) -> list[int]:
    return [zlib.crc32(s[i : i + 4].encode()) for i in range(0, len(s), 4)]


def anthropic_layout(body: dict) -> PromptLayout:
    toks: list[int] = []
    ends: list[int] = []
    bps: list[Breakpoint] = []

    def block(s: str, marker: Any) -> None:
        toks.extend(_tokens(s))
        ends.append(len(toks))
        if marker is not None:
            bps.append(Breakpoint(len(toks), marker.get("ttl", "5m")))

    for t in body.get("tools", []):
        block(
            json.dumps({k: v for k, v in t.items() if k != "cache_control"}), t.get("cache_control")
        )
    for b in body.get("system", []):
        block(b["text"], b.get("cache_control"))
    for m in body["messages"]:
        for part in m["content"]:
            block(m["role"] + ":" + part["text"], part.get("cache_control"))
    return PromptLayout(toks, ends, bps)


def openai_layout(body: dict) -> PromptLayout:
    toks: list[int] = []
    for t in body.get("tools", []):
        toks.extend(_tokens(json.dumps(t)))
    for m in body["messages"]:
        toks.extend(_tokens(m["role"] + ":" + m["content"]))
    return PromptLayout(toks)


# ---- the trace ---------------------------------------------------------------------------


class Conversation:
    """One agent loop; ``step(label)`` returns the next body for an injected label."""

    def __init__(self, cid: int, rng: random.Random, *, flavor: str) -> None:
        self.cid, self.rng, self.flavor = cid, rng, flavor
        short = flavor == "short"
        self.tools = [tool(f"c{cid}_t{i}", rng) for i in range(3)]
        self.system = f"[conversation {cid}] " + text(rng, 40 if short else 1200)
        self.history: list[tuple[str, str]] = [("user", text(rng, 20))]
        self.system_marked = flavor in ("A", "A1h", "short")
        self.system_ttl = "1h" if flavor == "A1h" else "5m"

    def turn(self, n_blocks: int = 2) -> None:
        for _ in range(n_blocks // 2):
            self.history.append(("assistant", text(self.rng, 15)))
            self.history.append(("user", "tool result: " + text(self.rng, 25)))

    def anthropic_body(self, *, markers: bool = True) -> dict:
        system: dict = {"type": "text", "text": self.system}
        if markers and self.system_marked:
            system["cache_control"] = {"type": "ephemeral", "ttl": self.system_ttl}
        msgs = [{"role": r, "content": [{"type": "text", "text": t}]} for r, t in self.history]
        if markers:
            msgs[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
        return {
            "model": ANTHROPIC_MODEL,
            "max_tokens": 64,
            "tools": copy.deepcopy(self.tools),
            "system": [system],
            "messages": msgs,
        }

    def openai_body(self) -> dict:
        fns = [
            {
                "type": "function",
                "function": {"name": t["name"], "parameters": copy.deepcopy(t["input_schema"])},
            }
            for t in self.tools
        ]
        msgs = [{"role": "system", "content": self.system}] + [
            {"role": r, "content": t} for r, t in self.history
        ]
        return {"model": OPENAI_MODEL, "tools": fns, "messages": msgs}


def evict(state: CacheState, partition: Any, *, keep_below: int | None) -> None:
    """The provider dropping entries (memory pressure): a partition's entries longer than
    ``keep_below`` tokens (the newest, longest part of the prefix), or all of them."""
    for k in [k for k in state._entries if k[0] == partition]:
        if keep_below is None or state._entries[k].length > keep_below:
            del state._entries[k]


PREFIX_EDITS = ("tool_added", "schema_reordered", "timestamp", "history_edited")


def build_trace(n_conv: int, seed: int = 0) -> list[tuple[str, dict, Usage, float, str, str]]:
    """(label, body, usage, ts, lineage, api) per request."""
    rng = random.Random(seed)
    clock = ManualClock(1_800_000_000.0)
    state = CacheState(clock)
    out: list[tuple[str, dict, Usage, float, str, str]] = []
    flavors = ["A", "B", "A1h", "openai", "short", "A", "B", "openai"]
    for cid in range(n_conv):
        flavor = flavors[cid % len(flavors)]
        conv = Conversation(cid, rng, flavor=flavor)
        lineage = f"conv-{cid}"
        api = "chat.completions" if flavor == "openai" else "messages"
        part = ("p", cid)
        if flavor == "short":
            plan = ["below_minimum"] * 4
        elif flavor == "openai":
            plan = [
                "cold",
                "hit",
                "hit",
                "prefix_changed",
                "hit",
                "ttl_expired",
                "hit",
                "partial",
                "hit",
                "provider_unknown",
                "hit",
                "prefix_changed",
                "hit",
                "hit",
            ]
        else:
            burst = "partial" if flavor.startswith("A") else "breakpoint_moved"
            plan = [
                "cold",
                "hit",
                "hit",
                "prefix_changed",
                "hit",
                "no_breakpoint",
                "hit",
                "ttl_expired",
                "hit",
                burst,
                "hit",
                "provider_unknown",
                "hit",
                "prefix_changed",
                "hit",
                "partial",
                "hit",
                "prefix_changed",
                "hit",
                "prefix_changed",
                "hit",
            ]
        edits = iter(rng.sample(PREFIX_EDITS, len(PREFIX_EDITS)) * 3)
        for i, label in enumerate(plan):
            gap = rng.uniform(2, 40)
            markers = True
            if i:
                conv.turn(2)
            if label == "prefix_changed":
                edit = next(edits)
                if edit == "tool_added":
                    conv.tools.append(tool(f"x{i}", rng))
                elif edit == "schema_reordered":
                    s = conv.tools[1]["input_schema"]
                    s["properties"] = dict(reversed(list(s["properties"].items())))
                elif edit == "timestamp":
                    conv.system = f"Now: 2026-12-01T09:{i:02d}:00Z. " + conv.system
                else:
                    r, t = conv.history[0]
                    conv.history[0] = (r, t + " (edited)")
            elif label == "ttl_expired":
                gap = rng.uniform(320, 900) if flavor != "A1h" else rng.uniform(320, 3000)
            elif label == "no_breakpoint":
                markers = False
            elif label in ("breakpoint_moved",) or (label == "partial" and i == 9):
                conv.turn(24)  # 25+ blocks since the last marked one
            elif label == "partial":
                # keep what the previous request read or wrote up to its first breakpoint
                # (Anthropic: the system entry; flavor B: the previous turns' entries;
                # OpenAI: the first 128-token steps)
                if api == "chat.completions":
                    keep = 1400
                elif conv.system_marked:
                    keep = len(_tokens(conv.system)) + sum(
                        len(_tokens(json.dumps(t))) for t in conv.tools
                    )
                else:  # only the newest entry goes: the turn before is still there
                    keep = max(e.length for k, e in state._entries.items() if k[0] == part) - 1
                evict(state, part, keep_below=keep)
            elif label == "provider_unknown":
                evict(state, part, keep_below=None)
            clock.advance(gap)
            if api == "messages":
                body = conv.anthropic_body(markers=markers)
                cu = anthropic_usage(
                    state, anthropic_layout(body), min_cacheable_tokens=1024, partition=part
                )
                usage = Usage(
                    uncached_input_tokens=cu.uncached_tokens,
                    cache_read_tokens=cu.cache_read_tokens,
                    cache_write_tokens=cu.cache_write_total,
                    cache_write_by_ttl=dict(cu.cache_write_tokens),
                    provider="anthropic",
                    model=ANTHROPIC_MODEL,
                )
            else:
                body = conv.openai_body()
                cu = openai_usage(state, openai_layout(body), partition=part)
                usage = Usage(
                    uncached_input_tokens=cu.uncached_tokens,
                    cache_read_tokens=cu.cache_read_tokens,
                    provider="openai",
                    model=OPENAI_MODEL,
                )
            out.append((label, body, usage, clock.now(), lineage, api))
    return out


def precision_recall(pairs: list[tuple[str, str | None]]) -> dict[str, tuple[int, float, float]]:
    out = {}
    for cause in CAUSES:
        tp = sum(1 for t, p in pairs if t == cause and p == cause)
        fp = sum(1 for t, p in pairs if t != cause and p == cause)
        fn = sum(1 for t, p in pairs if t == cause and p != cause)
        n = tp + fn
        if n or fp:
            prec = tp / (tp + fp) if tp + fp else 0.0
            rec = tp / n if n else 0.0
            out[cause] = (n, prec, rec)
    return out


def attribute_trace(trace: list, path: str, *, forget: bool) -> list[tuple[str, str | None]]:
    t = Tracker(path)
    for _label, body, usage, ts, lineage, api in trace:
        if forget:
            t.attributor.forget()  # as a new process: the predecessor comes from the ledger
        t.record(usage, request=body, api=api, ts=ts, lineage=lineage, provider=usage.provider)
    got = [(r.miss_cause) for r in t.records()]
    t.close()
    return [(lab, g) for (lab, *_), g in zip(trace, got)]


# ---- overhead ----------------------------------------------------------------------------


def big_request(rng: random.Random, turns: int) -> dict:
    conv = Conversation(999, rng, flavor="A")
    conv.tools = [tool(f"tool_{i}", rng) for i in range(12)]
    conv.system = text(rng, 6000)
    conv.turn(2 * turns)
    return conv.anthropic_body(), conv


def p50(f: Any, iters: int, setup: Any = None) -> float:
    ts = []
    for _ in range(iters):
        arg = setup() if setup else None
        t0 = time.perf_counter()
        f(arg)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def overhead(iters: int) -> list[tuple[str, float]]:
    rng = random.Random(1)
    prev_body, conv = big_request(rng, 60)
    conv.turn(2)
    cur_body = conv.anthropic_body()
    cur_raw = json.dumps(cur_body).encode()
    u = Usage(
        uncached_input_tokens=30,
        cache_read_tokens=19_000,
        cache_write_tokens=500,
        cache_write_by_ttl={"5m": 500},
        provider="anthropic",
        model=ANTHROPIC_MODEL,
    )
    with tempfile.TemporaryDirectory() as d:
        t = Tracker(os.path.join(d, "l.db"))
        t.attribute(json.loads(json.dumps(prev_body)), u, ts=1000.0, api="messages", lineage="L")
        seeded = t.attributor.last("L")
        assert seeded is not None

        def steady_step(b: dict) -> None:
            t.attributor._last["L"] = seeded  # the previous turn is the lineage's latest
            t.attribute(b, u, ts=1010.0, api="messages", lineage="L")

        def cold_step(b: dict) -> None:
            t.attributor.forget()
            t.attributor.attribute(b, "messages", u, 1010.0, lineage="L")

        def fresh() -> dict:  # new objects each time, as wrap() parses each request anew
            return json.loads(cur_raw)

        steady = p50(steady_step, iters, setup=fresh)
        cold = p50(cold_step, max(20, iters // 5), setup=fresh)
        peer = p50(lambda _: json.loads(cur_raw), iters)
        floor = p50(lambda _: sha1(cur_raw).digest(), iters)
        write = p50(
            lambda b: t.record(u, request=b, api="messages", ts=1010.0, lineage="W"),
            max(20, iters // 5),
            setup=fresh,
        )
        t.close()
    tokens_est = u.prompt_tokens
    print(
        f"request: {len(cur_raw):,} bytes of JSON, {tokens_est:,} prompt tokens, "
        f"{len(cur_body['messages'])} messages, {len(cur_body['tools'])} tools"
    )
    return [
        ("attribution in wrap(), next turn of the loop (previous request in memory)", steady),
        ("attribution, cold (no previous request in memory: every segment digested)", cold),
        ("peer: json.loads of the request body (wrap() already does it)", peer),
        ("floor: one SHA-1 pass over the body bytes (the chain's digest)", floor),
        ("Tracker.record with attribution (incl. the SQLite commit)", write),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conversations", type=int, default=40)
    ap.add_argument("--overhead-iters", type=int, default=300)
    args = ap.parse_args()
    print(f"load average: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    trace = build_trace(args.conversations)
    labels = Counter(lab for lab, *_ in trace)
    print(
        f"trace: {len(trace)} requests, {args.conversations} conversations; injected: "
        + ", ".join(f"{c} {labels[c]}" for c in CAUSES if labels[c])
    )
    with tempfile.TemporaryDirectory() as d:
        results = {
            "in one process": attribute_trace(trace, os.path.join(d, "a.db"), forget=False),
            "predecessor from the ledger": attribute_trace(
                trace, os.path.join(d, "b.db"), forget=True
            ),
        }
    for name, pairs in results.items():
        pr = precision_recall(pairs)
        print(f"\nprecision / recall per cause ({name}):\n")
        print("| cause | injected | precision | recall |")
        print("|---|---:|---:|---:|")
        for cause, (n, p, r) in pr.items():
            print(f"| {cause} | {n} | {p:.3f} | {r:.3f} |")
        wrong = Counter((t, p) for t, p in pairs if t != p)
        if wrong:
            print(
                "confusions (injected -> attributed): "
                + ", ".join(f"{t}->{p} x{n}" for (t, p), n in wrong.most_common())
            )
    rows = overhead(args.overhead_iters)
    base = rows[2][1]
    print("\n| step | p50 µs | / peer |")
    print("|---|---:|---:|")
    for name, us in rows:
        print(f"| {name} | {us:,.1f} | {us / base:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
