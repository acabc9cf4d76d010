"""``promptcache demo``: the main job, end to end, on the local engine.

Starts ``promptcache serve`` in the background on a free loopback port, waits for ``/health``,
then plays one support-agent workload twice through the official ``openai`` client:

1. **naive** -- the way many applications assemble prompts: the current time at the top of
   the system prompt and the tool schemas pasted into it with ``json.dumps`` and no
   ``sort_keys`` (their key order shuffled per request, as when tools are collected from
   plugins at run time);
2. **built** -- the same content through ``promptcache.build(...)``: frozen system and tools
   first, canonical JSON, the time and the question in the ``dynamic`` layer, last.

Every request streams (so time to first token is measured) and is recorded in the ledger
through ``promptcache.wrap``. It prints one table: requests, prompt tokens, cached tokens, hit
rate, median TTFT and what the traffic would cost at a hosted model's prices, per run, and the
ratio of the medians. The engine is stopped at the end.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import promptcache
from promptcache.integrations.demo_workload import QUESTIONS, SYSTEM_PROMPT, TOOLS
from promptcache.ledger.pricing import price_for

DEFAULT_PRICE_MODEL = "gpt-5.4"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``promptcache demo``."""
    parser.add_argument(
        "--requests", type=int, default=10, help="requests per run (default 10, at least 2)"
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=8,
        help="output tokens per request (default 8: the demo is about the prompt)",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="model for the engine (default: the embedded SmolLM2-135M-Instruct)",
    )
    parser.add_argument(
        "--db",
        default=None,
        help="ledger path (default: the Tracker's default under your data directory)",
    )
    parser.add_argument(
        "--price-model",
        default=DEFAULT_PRICE_MODEL,
        help=f"hosted model whose prices value the traffic (default {DEFAULT_PRICE_MODEL})",
    )
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=180.0,
        help="seconds to wait for the engine's /health (default 180)",
    )


@dataclass
class RunStats:
    """What one run measured. Token counts are the local engine's (SmolLM2 tokenizer)."""

    name: str
    prompt_tokens: list[int] = field(default_factory=list)
    cached_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    ttft_s: list[float] = field(default_factory=list)

    @property
    def hit_rate(self) -> float:
        total = sum(self.prompt_tokens)
        return sum(self.cached_tokens) / total if total else 0.0

    @property
    def median_ttft(self) -> float:
        return statistics.median(self.ttft_s) if self.ttft_s else float("nan")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _say(msg: str) -> None:
    print(msg, flush=True)


def start_engine(model: str | None, timeout: float) -> tuple[subprocess.Popen, str, str]:
    """Start ``promptcache serve`` on a free loopback port and wait for ``/health``.

    Returns (process, base_url, log_path). Raises RuntimeError with the server's last log
    lines if it exits or does not become healthy within ``timeout`` seconds.
    """
    # lazy import of an optional dependency: httpx (the engine and dev extras)
    import httpx

    port = _free_port()
    log_path = os.path.join(tempfile.gettempdir(), f"promptcache-demo-engine-{port}.log")
    cmd = [sys.executable, "-m", "promptcache", "serve", "--host", "127.0.0.1", "--port", str(port)]
    cmd.append("--exit-with-parent")  # a demo stopped with SIGKILL leaves no server behind
    if model:
        cmd += ["--model", model]
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    dots = 0
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the engine exited with code {proc.returncode}:\n{_tail(log_path)}")
        try:
            if httpx.get(base + "/health", timeout=2.0).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() - t0 > timeout:
            proc.terminate()
            raise RuntimeError(
                f"the engine was not healthy after {timeout:.0f}s:\n{_tail(log_path)}"
            )
        dots += 1
        if dots % 10 == 0:
            _say(f"  ... loading the model ({time.monotonic() - t0:.0f}s)")
        time.sleep(0.5)
    _say(f"  engine ready on {base} in {time.monotonic() - t0:.1f}s")
    return proc, base + "/v1", log_path


def _tail(path: str, n: int = 15) -> str:
    try:
        with open(path) as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


def stop_engine(proc: subprocess.Popen) -> None:
    """SIGTERM the engine and wait up to 20 s for it to drain, then SIGKILL."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def naive_request(question: str, model: str, rng: random.Random) -> dict[str, Any]:
    """Assemble a request the naive way (what ``promptcache lint`` flags as PC001/PC002)."""
    now = _dt.datetime.now().isoformat()
    tools = []
    for tool in TOOLS:
        fn: dict[str, Any] = dict(tool["function"])
        props = list(fn["parameters"]["properties"].items())
        rng.shuffle(props)  # plugin-registered tools: property order differs per request
        fn["parameters"] = {**fn["parameters"], "properties": dict(props)}
        tools.append(json.dumps(fn))  # no sort_keys
    system = f"Current time: {now}\n\n{SYSTEM_PROMPT}\n\nAvailable tools:\n" + "\n".join(tools)
    return {
        "model": model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
    }


def built_request(question: str, model: str) -> dict[str, Any]:
    """Assemble the same request with ``promptcache.build``: frozen layers first, canonical
    JSON, the clock and the question in the dynamic layer."""

    now = _dt.datetime.now().isoformat()
    prompt = promptcache.build(
        system=SYSTEM_PROMPT,
        tools=TOOLS,
        dynamic=f"Current time: {now}\n\n{question}",
    )
    return prompt.to_openai(model)


def play(
    name: str, make: Callable[[str], dict[str, Any]], client: Any, n: int, max_tokens: int
) -> RunStats:
    """Send ``n`` streaming chat requests built by ``make(question)``; measure each."""
    stats = RunStats(name)
    for i in range(n):
        question = QUESTIONS[i % len(QUESTIONS)]
        kwargs = make(question)
        t0 = time.perf_counter()
        ttft = None
        usage = None
        stream = client.chat.completions.create(
            **kwargs,
            max_tokens=max_tokens,
            temperature=0.0,
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            if ttft is None and chunk.choices and (chunk.choices[0].delta.content or ""):
                ttft = time.perf_counter() - t0
            if chunk.usage is not None:
                usage = chunk.usage
        if ttft is None:  # no text at all (e.g. immediate stop): first chunk time is all we have
            ttft = time.perf_counter() - t0
        if usage is None:
            raise RuntimeError(
                "the server sent no usage chunk despite stream_options.include_usage"
            )
        details = usage.prompt_tokens_details
        cached = (details.cached_tokens or 0) if details is not None else 0
        stats.prompt_tokens.append(usage.prompt_tokens)
        stats.cached_tokens.append(cached)
        stats.output_tokens.append(usage.completion_tokens)
        stats.ttft_s.append(ttft)
        _say(
            f"  [{name} {i + 1:2d}/{n}] prompt {usage.prompt_tokens:5d} tok, "
            f"cached {cached:5d}, TTFT {ttft * 1000:7.0f} ms"
        )
    return stats


def _traffic_cost(stats: RunStats, price_model: str) -> Decimal | None:
    """USD the same token counts would cost at ``price_model``'s bundled prices, cache reads
    at the cache-read price (OpenAI-style usage: prompt tokens include cached ones)."""
    try:
        total = Decimal(0)
        for p, c, o in zip(stats.prompt_tokens, stats.cached_tokens, stats.output_tokens):
            usage = promptcache.normalize_usage(
                "openai",
                {
                    "prompt_tokens": p,
                    "completion_tokens": o,
                    "total_tokens": p + o,
                    "prompt_tokens_details": {"cached_tokens": c},
                },
            )
            total += promptcache.cost(usage, model=price_model).total
        return total
    except Exception as exc:  # pricing is a nice-to-have in the demo; say why it is missing
        _say(f"  (cost not shown: {exc})")
        return None


def print_table(naive: RunStats, built: RunStats, price_model: str) -> None:
    """Print the side-by-side table (tokens, hit rate, median TTFT in ms, cost in USD at
    ``price_model``'s bundled prices) and the ratios."""
    rows: list[tuple[str, Callable[[Any], str]]] = [
        ("requests", lambda s: f"{len(s.prompt_tokens)}"),
        ("prompt tokens", lambda s: f"{sum(s.prompt_tokens):,}"),
        ("cached tokens", lambda s: f"{sum(s.cached_tokens):,}"),
        ("hit rate", lambda s: f"{s.hit_rate:.2f}"),
        ("median TTFT (ms)", lambda s: f"{s.median_ttft * 1000:.0f}"),
    ]
    costs = {s.name: _traffic_cost(s, price_model) for s in (naive, built)}
    if all(v is not None for v in costs.values()):
        rows.append((f"cost at {price_model} (USD)", lambda s: f"{costs[s.name]:.4f}"))
    w0 = max(len(r[0]) for r in rows) + 2
    print()
    print(f"{'':<{w0}}{'naive':>12}{'promptcache.build':>20}")
    for label, fmt in rows:
        print(f"{label:<{w0}}{fmt(naive):>12}{fmt(built):>20}")
    ratio = naive.median_ttft / built.median_ttft if built.median_ttft else float("nan")
    print(f"\nmedian TTFT ratio (naive / built): {ratio:.1f}x")
    cost_naive, cost_built = costs["naive"], costs["built"]
    if cost_naive and cost_built is not None:
        print(
            f"cost ratio (built / naive): {cost_built / cost_naive:.2f} "
            "(hosted prices applied to the local engine's token counts)"
        )


def run(args: argparse.Namespace) -> int:
    """Run ``promptcache demo``: 0 on success, 2 on a usage error or an engine that does not
    start (one line), 1 when a request fails (the engine log's path is printed)."""
    if args.requests < 2:
        print("promptcache demo: error: --requests must be at least 2", file=sys.stderr)
        return 2
    try:
        # lazy import of an optional dependency: openai (the engine and dev extras)
        import openai
    except ImportError:
        print(
            "promptcache demo: error: the demo needs the engine extra: "
            "pip install 'promptcache[engine]'",
            file=sys.stderr,
        )
        return 2

    t_start = time.monotonic()
    _say("promptcache demo: starting the local engine (promptcache serve) ...")
    try:
        proc, base_url, log_path = start_engine(args.model, args.startup_timeout)
    except RuntimeError as exc:
        print(f"promptcache demo: error: {exc}", file=sys.stderr)
        return 2
    try:
        tracker = promptcache.Tracker(args.db)

        try:  # record the local traffic at the hosted model's prices
            price = price_for(args.price_model)
        except LookupError as exc:
            print(f"promptcache demo: error: {exc}", file=sys.stderr)
            return 2

        def client_for(run_name: str) -> Any:
            # One wrapped client per run, so the ledger can tell the runs apart.
            client = openai.OpenAI(
                base_url=base_url, api_key="local-demo", max_retries=0, timeout=120
            )
            return promptcache.wrap(
                client,
                tracker,
                provider="local",
                price=price,
                metadata={"demo_run": run_name, "priced_as": args.price_model},
            )

        naive_client, built_client = client_for("naive"), client_for("built")
        model = naive_client.models.list().data[0].id
        rng = random.Random(0)
        _say(f"run 1/2: naive prompts ({args.requests} requests)")
        naive = play(
            "naive",
            lambda q: naive_request(q, model, rng),
            naive_client,
            args.requests,
            args.max_tokens,
        )
        _say(f"run 2/2: promptcache.build ({args.requests} requests)")
        built = play(
            "built", lambda q: built_request(q, model), built_client, args.requests, args.max_tokens
        )
        print_table(naive, built, args.price_model)
        print(
            f"\nrecorded in the ledger at {tracker.path}; see it with\n"
            f"  promptcache report --db {tracker.path} --by metadata.demo_run"
        )
        print(f"finished in {time.monotonic() - t_start:.0f}s")
        return 0
    except Exception as exc:
        print(
            f"promptcache demo: error: {type(exc).__name__}: {exc}\nengine log: {log_path}",
            file=sys.stderr,
        )
        return 1
    finally:
        stop_engine(proc)
