"""Benchmark (not a test): per-request overhead of ``promptcache.build(...)`` + a renderer
with a ~10,000-token frozen prefix reused across calls, against plain string and dict
assembly of the same request in the same run.

    .venv/bin/python bench/sdk_build.py [--requests 3000] [--history 10]

Each request has a new dynamic question (so nothing per-request is memoized); the frozen
system prompt and tools are the same objects every time, as in an application that defines
them once. Prints one table: mean and p50/p99 microseconds per request, and the ratio to the
plain dict assembly. The first (cold) build, which canonicalizes, scans and counts the frozen
prefix, is reported separately.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import promptcache
from promptcache.integrations.demo_workload import QUESTIONS, SYSTEM_PROMPT, TOOLS
from promptcache.prompt.tokens import count_tokens

MODEL = "claude-sonnet-4-6"


def frozen_system(target_tokens: int = 10_000) -> str:
    """The demo's policy prompt repeated (with section numbers) to about ``target_tokens``
    cl100k tokens."""
    parts, i = [], 0
    while True:
        parts.append(f"## Part {i + 1}\n{SYSTEM_PROMPT}")
        text = "\n\n".join(parts)
        if count_tokens(text, "gpt-4").tokens >= target_tokens:
            return text
        i += 1


def history(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n // 2):
        out.append({"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]})
        out.append({"role": "assistant", "content": f"Answer number {i}: see the policy."})
    return out


def anthropic_tools() -> list[dict[str, Any]]:
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "input_schema": t["function"]["parameters"],
        }
        for t in TOOLS
    ]


def run(label: str, fn: Callable[[int], Any], n: int) -> dict[str, Any]:
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return {
        "label": label,
        "mean": statistics.fmean(samples) * 1e6,
        "p50": samples[len(samples) // 2] * 1e6,
        "p99": samples[int(len(samples) * 0.99)] * 1e6,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--history", type=int, default=10, help="history messages per request")
    args = ap.parse_args()

    system = frozen_system()
    tools = anthropic_tools()
    hist = history(args.history)
    sys_tokens = count_tokens(system, "gpt-4").tokens
    cache_control = {"type": "ephemeral"}

    def q(i: int) -> str:
        return f"{QUESTIONS[i % len(QUESTIONS)]} (request {i})"

    # peers: what an application writes by hand
    def plain_string(i: int) -> Any:
        return system + "\n\n" + "\n".join(json.dumps(t) for t in tools) + "\n\n" + q(i)

    def plain_dict(i: int) -> Any:
        return {
            "model": MODEL,
            "max_tokens": 1024,
            "system": [{"type": "text", "text": system, "cache_control": cache_control}],
            "tools": tools,
            "messages": hist + [{"role": "user", "content": q(i)}],
        }

    def built_anthropic(i: int) -> Any:
        return promptcache.build(
            system=system, tools=tools, messages=hist, dynamic=q(i)
        ).to_anthropic(MODEL)

    def built_openai(i: int) -> Any:
        return promptcache.build(system=system, tools=tools, messages=hist, dynamic=q(i)).to_openai(
            "gpt-4o"
        )

    conv = promptcache.Conversation(system=system, tools=tools)
    conv.append(*hist)

    def conversation_anthropic(i: int) -> Any:
        return conv.prompt(dynamic=q(i)).to_anthropic(MODEL)

    def build_only(i: int) -> Any:
        return promptcache.build(system=system, tools=tools, messages=hist, dynamic=q(i))

    t0 = time.perf_counter()
    built_anthropic(-1)
    cold_ms = (time.perf_counter() - t0) * 1e3

    for fn in (
        plain_string,
        plain_dict,
        build_only,
        built_anthropic,
        built_openai,
        conversation_anthropic,
    ):  # warm-up
        for i in range(50):
            fn(i)
    rows = [
        run("plain string concat (+json.dumps tools)", plain_string, args.requests),
        run("plain dict (Anthropic kwargs by hand)", plain_dict, args.requests),
        run("promptcache.build", build_only, args.requests),
        run("promptcache.build + to_anthropic", built_anthropic, args.requests),
        run("promptcache.build + to_openai", built_openai, args.requests),
        run("Conversation.prompt + to_anthropic", conversation_anthropic, args.requests),
    ]
    base = rows[1]["mean"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"python {platform.python_version()} on {os.cpu_count()} CPUs, load average {load:.2f}")
    print(
        f"frozen prefix: system {sys_tokens} cl100k tokens + {len(tools)} tools; history "
        f"{len(hist)} messages; {args.requests} requests; cold first build {cold_ms:.1f} ms"
    )
    print(f"{'assembly':<42}{'mean us':>10}{'p50 us':>10}{'p99 us':>10}{'x plain dict':>14}")
    for r in rows:
        print(
            f"{r['label']:<42}{r['mean']:>10.1f}{r['p50']:>10.1f}{r['p99']:>10.1f}"
            f"{r['mean'] / base:>14.1f}"
        )
    target = rows[3]["mean"]
    print(
        f"\nbuild + to_anthropic: {target:.1f} us per request "
        f"({'under' if target < 100 else 'OVER'} the 100 us target)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
