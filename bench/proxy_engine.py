"""Added latency of ``promptcache proxy`` with the local engine as the upstream (issue 29).

    # the engine started here from a model folder (bench/proxy_engine_model.py writes one)
    PYTHONPATH=. python bench/proxy_engine.py --model DIR [--device cpu|cuda]
    # or a running engine
    PYTHONPATH=. python bench/proxy_engine.py --engine-url http://127.0.0.1:8000

Three targets, each its own process, all on loopback: *direct* (the engine, ``promptcache
serve``), *relay* (a plain asyncio TCP relay on uvloop: the least an extra hop in Python
costs; bench/proxy.py's) and *proxy* (``promptcache proxy --upstream <engine>`` with its
ledger and recorder process). The load generator (this process, aiohttp, uvloop) sends
streaming chat completions -- a shared ~600-token system prompt (a prefix-cache hit after the
first call), a numbered question, ``--max-tokens`` new tokens, greedy, so request *i* makes
the same tokens on every target -- with 1, 16 and 64 concurrent clients, the targets
interleaved in ``--rounds`` rounds of the same requests. Per request: time to the first body
byte (TTFB) and to the end (total); added = percentile(target) - percentile(direct) over the
same requests. Requests/s = requests / wall time of the target's runs. The proxy's and its
recorder's CPU time per request (psutil) and the load average are printed with the table; at
the end every proxied call must be in the ledger once.

The direct engine's own time dominates (model compute, its scheduler); what the proxy adds is
an HTTP hop, a queue put per call, and CPU the engine's process may compete for on a small
host: on 2 shared cores the figures are noisy, on a 16-core GPU host they are the hop's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import proxy as pb  # noqa: E402  (bench/proxy.py: processes, load generator, percentiles)

SYSTEM = "You are terse. Answer in one short sentence. " * 60  # ~600 tokens, shared


def engine_body(max_tokens: int) -> Any:
    """``(stream, i) -> bytes``: request *i*, a streamed greedy chat completion."""

    def make(stream: bool, i: int) -> bytes:
        return json.dumps(
            {
                "model": "bench",
                "stream": stream,
                "stream_options": {"include_usage": True},
                "max_tokens": max_tokens,
                "temperature": 0,
                "messages": [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"question {i}: what is {i} + {i}?"},
                ],
            }
        ).encode()

    return make


def wait_health(url: str, proc: subprocess.Popen | None, timeout: float) -> None:
    """Until ``GET url/health`` answers 200 (the engine answers 503 while loading)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"engine exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url}/health not 200 after {timeout:.0f} s")


class EngineStack:
    """The engine (started from ``model``, or at ``engine_url``), the relay and the proxy."""

    def __init__(self, db: str, args: argparse.Namespace, log_dir: str) -> None:
        self.procs: list[subprocess.Popen] = []
        self.engine_proc = None
        if args.engine_url:
            self.engine = args.engine_url.rstrip("/")
            self.up = int(self.engine.rsplit(":", 1)[1])
        else:
            self.up = pb.free_port()
            self.engine = f"http://127.0.0.1:{self.up}"
            cmd = [pb.PY, "-m", "promptcache", "serve", "--model", args.model]
            cmd += ["--port", str(self.up), "--device", args.device]
            cmd += ["--max-model-len", str(args.max_model_len), "--log-level", "warning"]
            cmd += list(args.engine_arg)
            self.engine_proc = subprocess.Popen(
                cmd,
                env=pb.ENV,
                stdout=open(os.path.join(log_dir, "engine.log"), "w"),
                stderr=subprocess.STDOUT,
            )
        t0 = time.monotonic()
        wait_health(self.engine, self.engine_proc, args.start_timeout)
        self.engine_start_s = time.monotonic() - t0
        self.relay, self.proxy = pb.free_port(), pb.free_port()
        self.db = db
        self.procs = [
            subprocess.Popen(
                [pb.PY, pb.__file__, "_relay", str(self.relay), str(self.up)], env=pb.ENV
            ),
            subprocess.Popen(
                [pb.PY, "-m", "promptcache", "proxy", "--upstream", self.engine]
                + ["--port", str(self.proxy), "--db", db],
                env=pb.ENV,
                stderr=open(os.path.join(log_dir, "proxy.log"), "w"),
            ),
        ]
        for port, p in zip((self.relay, self.proxy), self.procs):
            pb.wait_port(port, p)

    def urls(self) -> dict[str, str]:
        return {
            "direct": self.engine,
            "relay": f"http://127.0.0.1:{self.relay}",
            "proxy": f"http://127.0.0.1:{self.proxy}",
        }

    def proxy_pids(self) -> tuple[list[int], list[int]]:
        """(the proxy's process, its recorder process(es))."""
        import psutil

        pid = self.procs[1].pid
        return [pid], [c.pid for c in psutil.Process(pid).children(recursive=True)]

    def stop(self) -> None:
        for p in self.procs + ([self.engine_proc] if self.engine_proc else []):
            p.terminate()
        for p in self.procs + ([self.engine_proc] if self.engine_proc else []):
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()


def parse_plan(text: str) -> list[tuple[int, int]]:
    """``"1:16,16:192"`` -> ``[(1, 16), (16, 192)]``: clients and requests per round.

    Raises:
        ValueError: not ``clients:requests`` pairs of positive integers.
    """
    plan = []
    for part in text.split(","):
        c, n = part.split(":")
        if int(c) < 1 or int(n) < int(c):
            raise ValueError(f"--plan {part!r}: clients >= 1 and requests >= clients")
        plan.append((int(c), int(n)))
    return plan


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure; returns the rows (also printed as a table)."""
    make = engine_body(args.max_tokens)
    with tempfile.TemporaryDirectory() as d:
        log_dir = args.log_dir or d
        os.makedirs(log_dir, exist_ok=True)
        st = EngineStack(os.path.join(d, "l.db"), args, log_dir)
        rows, proxied = [], 0
        try:
            urls = st.urls()
            for conc, per_round in args.plan:
                res: dict[str, list[tuple[float, float]]] = {k: [] for k in urls}
                secs = dict.fromkeys(urls, 0.0)
                for url in urls.values():  # warm-up: the system prompt cached, connections open
                    pb.load(url, conc, conc * 2, True, make)
                proxied += conc * 2
                own, rec = st.proxy_pids()
                c0, r0 = pb.cpu_s(own), pb.cpu_s(rec)
                for _ in range(args.rounds):
                    for name, url in urls.items():
                        t0 = time.perf_counter()
                        res[name] += pb.load(url, conc, per_round, True, make)
                        secs[name] += time.perf_counter() - t0
                n_proxy = len(res["proxy"])
                proxied += n_proxy
                cpu = ((pb.cpu_s(own) - c0) / n_proxy * 1e3, (pb.cpu_s(rec) - r0) / n_proxy * 1e3)
                base = res["direct"]
                for name in urls:
                    r = res[name]
                    row: dict[str, Any] = {"clients": conc, "target": name, "requests": len(r)}
                    row["req_s"] = len(r) / secs[name]
                    for i, label in ((0, "ttfb"), (1, "total")):
                        xs, bs = [x[i] for x in r], [x[i] for x in base]
                        for q in (0.5, 0.99):
                            row[f"{label}_p{int(q * 100)}"] = pb.pct(xs, q) * 1e3
                            row[f"{label}_add_p{int(q * 100)}"] = (
                                pb.pct(xs, q) - pb.pct(bs, q)
                            ) * 1e3
                    if name == "proxy":
                        row["cpu_ms"] = cpu
                    row["load"] = pb.loadavg()
                    rows.append(row)
            wait_s = pb.wait_ledger(st.db, proxied, timeout=120)
            recorded = pb.ledger_count(st.db)
        finally:
            st.stop()
    out = {
        "rows": rows,
        "proxied": proxied,
        "recorded": recorded,
        "ledger_wait_s": wait_s,
        "engine_start_s": st.engine_start_s,
    }
    print_table(out, args)
    return out


def print_table(out: dict[str, Any], args: argparse.Namespace) -> None:
    """Print the run's table: per client count and target (direct, relay, proxy), TTFB and total
    latency percentiles and the added ms."""
    print(
        f"engine: {args.engine_url or args.model} on {args.device}; {args.max_tokens} new tokens, "
        f"{args.rounds} rounds; engine ready in {out['engine_start_s']:.0f} s"
    )
    print(
        "\n| clients | target | requests | req/s | TTFB p50 ms | +p50 | TTFB p99 ms | +p99 | "
        "total p50 ms | +p50 | total p99 ms | +p99 | CPU ms/req proxy; recorder | load avg |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in out["rows"]:
        cpu = "; ".join(f"{x:.3f}" for x in r["cpu_ms"]) if "cpu_ms" in r else "-"
        vals = [r[k] for k in ("ttfb_p50", "ttfb_add_p50", "ttfb_p99", "ttfb_add_p99")]
        vals += [r[k] for k in ("total_p50", "total_add_p50", "total_p99", "total_add_p99")]
        print(
            f"| {r['clients']} | {r['target']} | {r['requests']} | {r['req_s']:.1f} | "
            + " | ".join(f"{v:.2f}" for v in vals)
            + f" | {cpu} | {r['load']} |"
        )
    print(
        f"\nledger: {out['recorded']} records for {out['proxied']} proxied calls "
        f"(all in {out['ledger_wait_s']:.1f} s after the last)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="model folder or .gguf for promptcache serve")
    src.add_argument("--engine-url", help="a running engine (http://host:port)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--max-tokens", type=int, default=16, help="new tokens per request")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--plan",
        type=parse_plan,
        default=parse_plan("1:16,16:192,64:384"),
        help="clients:requests per round, comma-separated",
    )
    ap.add_argument("--start-timeout", type=float, default=600.0)
    ap.add_argument("--engine-arg", action="append", default=[], help="extra serve argument")
    ap.add_argument("--log-dir", help="keep engine.log and proxy.log here")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)
    out = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0 if out["recorded"] == out["proxied"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
