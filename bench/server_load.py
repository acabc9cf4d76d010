"""Load benchmark (not a test): many concurrent streaming clients against ``promptcache serve``.

Two runs in one invocation, same server, same request count and shape:

* **shared** — every client's system prompt is one of ``--prompts`` shared prompts (the
  way an application sends one frozen prefix), then its own question;
* **unshared** (the peer) — the same text, but a per-client nonce at the very start of the
  system prompt, so no request can reuse another's KV blocks.

Each client streams with ``stream_options.include_usage`` through the official
``openai`` client (``AsyncOpenAI``). Bounded in count (``--clients``) and time
(``--time-limit`` seconds per run: unfinished streams are cancelled, and counted). It
prints p50/p99 time to first token, requests per second, the reported cache hit rate,
errors (target 0) and KV blocks still held after the run (target 0), and the peer/shared
ratios.

Usage::

    python bench/server_load.py                      # starts its own server (CPU)
    python bench/server_load.py --url http://127.0.0.1:8000
    python bench/server_load.py --clients 200 --max-tokens 8 --device cuda
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import openai  # noqa: E402

from promptcache.integrations.pytest_plugin import LocalEngineServer  # noqa: E402

TOPICS = [
    "kettles",
    "bicycles",
    "tax returns",
    "garden tools",
    "train tickets",
    "phone plans",
    "insurance",
    "printers",
]


def system_prompt(k: int, words: int) -> str:
    topic = TOPICS[k % len(TOPICS)]
    body = " ".join(
        f"Rule {i}: answer questions about {topic} politely and in one sentence."
        for i in range(words // 10)
    )
    return f"You are support agent {k} for {topic}. {body}"


@dataclass
class RunResult:
    name: str
    requests: int
    wall_s: float = 0.0
    ttft_s: list = field(default_factory=list)
    ok: int = 0
    errors: int = 0
    incomplete: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    blocks_held_after: float = float("nan")
    error_samples: list = field(default_factory=list)

    def pct(self, q: float) -> float:
        if not self.ttft_s:
            return float("nan")
        xs = sorted(self.ttft_s)
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]

    @property
    def rps(self) -> float:
        return self.ok / self.wall_s if self.wall_s else float("nan")

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


async def one_client(
    client: openai.AsyncOpenAI, messages, max_tokens: int, res: RunResult, t0: float
) -> None:
    try:
        stream = await client.chat.completions.create(
            model="local",
            messages=messages,
            max_tokens=max_tokens,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        first = None
        usage = None
        async for chunk in stream:
            if first is None and chunk.choices and chunk.choices[0].delta.content:
                first = time.monotonic()
            if chunk.usage is not None:
                usage = chunk.usage
        if first is not None:
            res.ttft_s.append(first - t0)
        if usage is None:
            raise RuntimeError("no usage chunk")
        res.prompt_tokens += usage.prompt_tokens
        res.cached_tokens += usage.prompt_tokens_details.cached_tokens
        res.ok += 1
    except asyncio.CancelledError:
        res.incomplete += 1
        raise
    except Exception as exc:  # noqa: BLE001 - counted and sampled
        res.errors += 1
        if len(res.error_samples) < 3:
            res.error_samples.append(f"{type(exc).__name__}: {exc}"[:200])


async def run_load(
    base_url: str,
    name: str,
    clients: int,
    prompts: int,
    words: int,
    max_tokens: int,
    time_limit: float,
    unshared: bool,
) -> RunResult:
    res = RunResult(name, clients)
    limits = httpx.Limits(max_connections=clients + 8, max_keepalive_connections=clients + 8)
    client = openai.AsyncOpenAI(
        base_url=base_url + "/v1",
        api_key="bench",
        max_retries=0,
        timeout=time_limit + 60,
        http_client=openai.DefaultAsyncHttpxClient(limits=limits),
    )
    jobs = []
    for i in range(clients):
        sys_text = system_prompt(i % prompts, words)
        if unshared:
            sys_text = f"[{uuid.uuid4().hex}] " + sys_text
        messages = [
            {"role": "system", "content": sys_text},
            {"role": "user", "content": f"Question {i}: what should I know first?"},
        ]
        jobs.append(messages)
    t0 = time.monotonic()
    tasks = [asyncio.ensure_future(one_client(client, m, max_tokens, res, t0)) for m in jobs]
    done, pending = await asyncio.wait(tasks, timeout=time_limit)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    res.wall_s = time.monotonic() - t0
    await client.close()
    return res


def blocks_held(base_url: str, timeout: float = 30.0) -> float:
    """KV blocks held once the server is idle again (running and waiting both 0)."""
    from prometheus_client.parser import text_string_to_metric_families

    deadline = time.monotonic() + timeout
    while True:
        vals = {}
        for fam in text_string_to_metric_families(
            httpx.get(base_url + "/metrics", timeout=30).text
        ):
            for s in fam.samples:
                vals[s.name] = s.value
        idle = (
            vals.get("promptcache_num_requests_running", 1) == 0
            and vals.get("promptcache_num_requests_waiting", 1) == 0
        )
        if idle or time.monotonic() > deadline:
            return vals.get("promptcache_kv_cache_blocks_used", float("nan"))
        time.sleep(0.5)


def warm_up(base_url: str, prompts: int, words: int) -> None:
    c = openai.OpenAI(base_url=base_url + "/v1", api_key="bench", max_retries=0, timeout=600)
    for k in range(prompts):
        c.chat.completions.create(
            model="local",
            max_tokens=1,
            messages=[
                {"role": "system", "content": system_prompt(k, words)},
                {"role": "user", "content": "warm-up"},
            ],
        )


def fmt(x: float, nd: int = 2) -> str:
    return "nan" if x != x else f"{x:.{nd}f}"


def print_table(results: list[RunResult]) -> None:
    head = (
        "run",
        "requests",
        "ok",
        "errors",
        "incomplete",
        "p50 TTFT s",
        "p99 TTFT s",
        "req/s",
        "cached/prompt",
        "KV blocks held after",
    )
    rows = [
        (
            r.name,
            str(r.requests),
            str(r.ok),
            str(r.errors),
            str(r.incomplete),
            fmt(r.pct(0.5)),
            fmt(r.pct(0.99)),
            fmt(r.rps),
            fmt(r.hit_rate, 3),
            fmt(r.blocks_held_after, 0),
        )
        for r in results
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
    if len(results) == 2 and results[0].ok and results[1].ok:
        s, u = results
        print(
            f"\npeer/shared ratios: p50 TTFT {fmt(u.pct(0.5) / s.pct(0.5))}x, "
            f"p99 TTFT {fmt(u.pct(0.99) / s.pct(0.99))}x, req/s {fmt(u.rps / s.rps)}x"
        )
    for r in results:
        for e in r.error_samples:
            print(f"  {r.name} error: {e}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=None, help="an already running server (default: start one)")
    ap.add_argument(
        "--clients", type=int, default=200, help="concurrent streaming clients per run (200)"
    )
    ap.add_argument("--prompts", type=int, default=4, help="distinct shared system prompts (4)")
    ap.add_argument(
        "--words", type=int, default=120, help="approximate words per system prompt (120)"
    )
    ap.add_argument("--max-tokens", type=int, default=8, help="output tokens per request (8)")
    ap.add_argument(
        "--time-limit", type=float, default=300.0, help="seconds per run before cancelling (300)"
    )
    ap.add_argument("--no-peer", action="store_true", help="skip the unshared peer run")
    ap.add_argument("--device", default="cpu", help="engine device when starting a server (cpu)")
    ap.add_argument(
        "--max-num-seqs", type=int, default=64, help="engine batch limit when starting a server"
    )
    args = ap.parse_args(argv)

    server = None
    base = args.url
    if base is None:
        print(f"starting promptcache serve (device {args.device}) ...", flush=True)
        server = LocalEngineServer(
            "automatic",
            extra_args=["--device", args.device, "--max-num-seqs", str(args.max_num_seqs)],
        ).start()
        base = server.base_url
    try:
        warm_up(base, args.prompts, args.words)
        results = []
        runs = [("shared", False)] + ([] if args.no_peer else [("unshared (peer)", True)])
        for name, unshared in runs:
            print(f"run {name}: {args.clients} clients ...", flush=True)
            r = asyncio.run(
                run_load(
                    base,
                    name,
                    args.clients,
                    args.prompts,
                    args.words,
                    args.max_tokens,
                    args.time_limit,
                    unshared,
                )
            )
            r.blocks_held_after = blocks_held(base)
            results.append(r)
        print(
            f"\nserver_load: {args.clients} concurrent streaming clients, {args.prompts} shared system "
            f"prompts of ~{args.words} words, max_tokens={args.max_tokens}, limit {args.time_limit:.0f}s/run"
        )
        print_table(results)
    finally:
        if server is not None:
            server.stop()
    bad = sum(r.errors for r in results) if "results" in dir() else 1
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
