"""Benchmarks of ``promptcache proxy`` (issue 29) -- run once, prints markdown tables.

    PYTHONPATH=. python bench/proxy.py latency     # added latency, 1/16/64 streaming clients
    PYTHONPATH=. python bench/proxy.py throughput  # small non-streamed calls: req/s, CPU/request
    PYTHONPATH=. python bench/proxy.py soak        # 10,000 proxied calls: RSS, ledger count
    PYTHONPATH=. python bench/proxy.py import      # 100 MB synthetic Claude Code folder

Every server is its own process (upstream, relay, proxy with its recorder process), all on
loopback; the load generator is this process:

- *upstream*: a stub ASGI app on uvicorn (httptools, uvloop) answering
  ``/v1/chat/completions`` at once: a small JSON body, or 8 SSE chunks and ``[DONE]`` with
  usage -- no model time, so what is measured is the HTTP path, and the stub is not the
  bottleneck (its CPU per request is the *server floor*: uvicorn with a no-op app);
- *direct* (no extra hop), *relay* (the peer: a plain asyncio TCP relay on uvloop, the least
  an extra hop in Python costs) and *proxy* (``promptcache proxy`` with its ledger);
- the load generator: ``c`` concurrent aiohttp clients (httpx's client costs 0.4-1.5 ms of CPU
  a request and would take most of the 2 cores), each request timed to its first body byte
  (TTFB) and to its end (total). Its CPU per request on *direct* is the *client floor*. Targets
  are interleaved in rounds so that drift hits all.

Added latency = percentile(target) - percentile(direct) over the same round structure. CPU per
request is read from /proc (psutil) for each hop's processes: the proxy's own and its recorder
process's, apart. The load average is printed with each table (the box is shared).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
# the repository first; a PYTHONPATH already set (wheels carried to a GPU host) is kept after it
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
}

USAGE = {
    "prompt_tokens": 3000,
    "completion_tokens": 8,
    "total_tokens": 3008,
    "prompt_tokens_details": {"cached_tokens": 2944},
}


# -- processes ---------------------------------------------------------------------------


def upstream_app(ttfb_s: float = 0.0, gap_s: float = 0.0) -> Any:
    """The stub upstream; a stream waits about ``ttfb_s`` before its first chunk and about
    ``gap_s`` between chunks (a model's prefill and decode pace; each wait 0.5x to 1.5x,
    uniform, as a model's timing varies with the prompt and the batch, so that closed-loop
    clients do not stay in lockstep; drawn from a generator seeded with the request's number,
    so request ``i`` waits the same on every target), a plain call answers at once."""
    import random
    import re

    number = re.compile(rb"question (\d+)")
    base = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}
    chunks = [
        f"data: {json.dumps({**base, 'choices': [{'index': 0, 'delta': {'content': 'tok'}}]})}\n\n".encode()
        for _ in range(8)
    ]
    chunks.append(f"data: {json.dumps({**base, 'choices': [], 'usage': USAGE})}\n\n".encode())
    chunks.append(b"data: [DONE]\n\n")
    plain = json.dumps(
        {
            "id": "c1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok"},
                    "finish_reason": "stop",
                }
            ],
            "usage": USAGE,
        }
    ).encode()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            m = await receive()
            body += m.get("body", b"")
            if not m.get("more_body"):
                break
        if b'"stream": true' in body or b'"stream":true' in body:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")],
                }
            )
            m = number.search(body)
            rng = random.Random(int(m.group(1)) if m else 0)
            if ttfb_s:
                await asyncio.sleep(ttfb_s * rng.uniform(0.5, 1.5))
            for k, c in enumerate(chunks):
                if gap_s and k:
                    await asyncio.sleep(gap_s * rng.uniform(0.5, 1.5))
                await send({"type": "http.response.body", "body": c, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(plain)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": plain, "more_body": False})

    return app


def serve_upstream(port: int, ttfb_s: float, gap_s: float) -> None:
    import uvicorn

    uvicorn.run(
        upstream_app(ttfb_s, gap_s),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        http="httptools",
        # paced: asyncio's timers (float time at the request's arrival; libuv's count from a
        # cached millisecond clock, which would round a hop's delay up to the next 1 ms tick)
        loop="asyncio" if ttfb_s or gap_s else "uvloop",
        lifespan="off",
    )


def serve_relay(listen: int, to: int) -> None:
    import uvloop

    async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            w.close()

    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection("127.0.0.1", to)
        await asyncio.gather(pipe(cr, uw), pipe(ur, cw))

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", listen)
        async with server:
            await server.serve_forever()

    uvloop.run(main())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited: {proc.args}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open")


class Stack:
    """upstream + relay + proxy processes (ports, the proxy's pid and ledger path)."""

    def __init__(self, db: str, ttfb_s: float = 0.0, gap_s: float = 0.0) -> None:
        self.up, self.relay, self.proxy = free_port(), free_port(), free_port()
        self.db = db
        self.procs = [
            subprocess.Popen(
                [PY, __file__, "_upstream", str(self.up), str(ttfb_s), str(gap_s)], env=ENV
            ),
            subprocess.Popen([PY, __file__, "_relay", str(self.relay), str(self.up)], env=ENV),
            subprocess.Popen(
                [
                    PY,
                    "-m",
                    "promptcache",
                    "proxy",
                    "--upstream",
                    f"http://127.0.0.1:{self.up}",
                    "--port",
                    str(self.proxy),
                    "--db",
                    db,
                ],
                env=ENV,
                stderr=subprocess.DEVNULL,
            ),
        ]
        for port, p in zip((self.up, self.relay, self.proxy), self.procs):
            wait_port(port, p)

    @property
    def proxy_pid(self) -> int:
        return self.procs[2].pid

    def pids(self) -> dict[str, list[int]]:
        """Processes of each hop: the upstream's for direct; the proxy's and its recorder's."""
        import psutil

        kids = [c.pid for c in psutil.Process(self.proxy_pid).children(recursive=True)]
        return {
            "direct": [self.procs[0].pid],
            "relay": [self.procs[1].pid],
            "proxy": [self.proxy_pid],
            "recorder": kids,
        }

    def urls(self) -> dict[str, str]:
        return {
            name: f"http://127.0.0.1:{p}"
            for name, p in (("direct", self.up), ("relay", self.relay), ("proxy", self.proxy))
        }

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(30)


# -- load ---------------------------------------------------------------------------------


def body(stream: bool, i: int) -> bytes:
    return json.dumps(
        {
            "model": "gpt-4o",
            "stream": stream,
            "stream_options": {"include_usage": True},
            "messages": [
                {"role": "system", "content": "You are terse. " * 200},
                {"role": "user", "content": f"question {i}"},
            ],
        }
    ).encode()


HEADERS = {"content-type": "application/json", "authorization": "Bearer sk-bench"}


async def _load(
    urls: dict[str, str], conc: int, n: int, stream: bool, make_body: Any = None
) -> dict[str, list[tuple[float, float]]]:
    import aiohttp

    bodies = [(make_body or body)(stream, i) for i in range(n)]
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in urls}

    async def target(name: str, url: str) -> None:
        conn = aiohttp.TCPConnector(limit=conc)
        async with aiohttp.ClientSession(connector=conn, auto_decompress=False) as session:
            counter = iter(range(n))

            async def worker() -> None:
                for i in counter:
                    t0 = time.perf_counter()
                    first = None
                    async with session.post(
                        url + "/v1/chat/completions", data=bodies[i], headers=HEADERS
                    ) as r:
                        while await r.content.readany():
                            if first is None:
                                first = time.perf_counter()
                        assert r.status == 200, r.status
                    t1 = time.perf_counter()
                    out[name].append(((first or t1) - t0, t1 - t0))

            await asyncio.gather(*(worker() for _ in range(conc)))

    await asyncio.gather(*(target(name, url) for name, url in urls.items()))
    return out


def load_many(
    urls: dict[str, str], conc: int, n: int, stream: bool, make_body: Any = None
) -> dict[str, list[tuple[float, float]]]:
    """``n`` requests to each of ``urls`` by ``conc`` concurrent clients each, all targets at
    the same time (uvloop): ``(TTFB s, total s)`` per request, by target name. ``make_body``:
    ``(stream, i) -> bytes`` (default :func:`body`)."""
    import uvloop

    return uvloop.run(_load(urls, conc, n, stream, make_body))


def load(
    url: str, conc: int, n: int, stream: bool, make_body: Any = None
) -> list[tuple[float, float]]:
    """``n`` requests to ``url`` by ``conc`` concurrent clients: ``(TTFB s, total s)`` each."""
    return load_many({"x": url}, conc, n, stream, make_body)["x"]


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def cpu_s(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        t = psutil.Process(pid).cpu_times()
        total += t.user + t.system
    return total


def loadavg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def ledger_count(db: str) -> int:
    import sqlite3

    con = sqlite3.connect(db)
    try:
        return int(con.execute("SELECT COUNT(*) FROM requests").fetchone()[0])
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


def wait_ledger(db: str, n: int, timeout: float = 120.0) -> float:
    """Seconds until the ledger holds ``n`` records (raises after ``timeout``)."""
    t0 = time.perf_counter()
    while ledger_count(db) < n:
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError(f"ledger has {ledger_count(db)} of {n} records")
        time.sleep(0.05)
    return time.perf_counter() - t0


#: The latency run's upstream pace: first chunk after ~PACE_TTFB_S, the next 9 ~PACE_GAP_S
#: apart (a fast hosted model: prefill, then ~100 chunks/s; +-50% each), so the load stays
#: below saturation and the added latency is the hop's, not a queue's.
PACE_TTFB_S, PACE_GAP_S = 0.050, 0.010


def cmd_latency() -> None:
    """Streaming TTFB and total at 1, 16 and 64 clients against the paced upstream: the
    targets one after another in 4 interleaved rounds, each round the same requests."""
    with tempfile.TemporaryDirectory() as d:
        st = Stack(os.path.join(d, "l.db"), PACE_TTFB_S, PACE_GAP_S)
        try:
            urls = st.urls()
            rows = []
            loads = []
            for conc, per_round in ((1, 75), (16, 480), (64, 960)):
                res: dict[str, list[tuple[float, float]]] = {k: [] for k in urls}
                for url in urls.values():  # warm-up
                    load(url, conc, conc * 4, True)
                for _ in range(4):
                    for name, url in urls.items():
                        res[name] += load(url, conc, per_round, True)
                loads.append(f"{conc} clients: {loadavg()}")
                base = res["direct"]
                for name in ("direct", "relay", "proxy"):
                    r = res[name]
                    ttfb, tot = [a for a, _ in r], [b for _, b in r]
                    row = [conc, name, len(r)]
                    for xs, bs in ((ttfb, [a for a, _ in base]), (tot, [b for _, b in base])):
                        for q in (0.5, 0.99):
                            row.append(pct(xs, q) * 1e3)
                            row.append((pct(xs, q) - pct(bs, q)) * 1e3)
                    rows.append(row)
            print(
                "| clients | target | requests | TTFB p50 ms | +p50 | TTFB p99 ms | "
                "+p99 | total p50 ms | +p50 | total p99 ms | +p99 |"
            )
            print("|---|---|---|---|---|---|---|---|---|---|---|")
            for r in rows:
                print(
                    "| "
                    + " | ".join([str(r[0]), r[1], str(r[2])] + [f"{x:.2f}" for x in r[3:]])
                    + " |"
                )
            print("\nload average (1/5/15 min) after each: " + "; ".join(loads))
        finally:
            st.stop()


def cmd_throughput() -> None:
    """Small non-streamed calls at 1, 16 and 64 clients: requests/s and the CPU per request of
    each hop's processes; the floors (server: the stub upstream, a no-op app on uvicorn;
    client: this load generator on direct) from the same run. On a shared 2-core host the
    wall-clock rate is set by the neighbours as much as by the hop: 1 / CPU per request says
    what one free core sustains."""
    import psutil

    me = psutil.Process()
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "l.db")
        st = Stack(db)
        try:
            urls = st.urls()
            for url in urls.values():  # warm-up
                load(url, 16, 400, False)
            wait_ledger(db, 400)
            recorded = 400
            print(
                "| clients | target | requests | seconds | requests/s | seconds until all "
                "recorded | CPU ms/request: hop | recorder | load generator | requests/s per "
                "free core (hop) | load avg |"
            )
            print("|---|---|---|---|---|---|---|---|---|---|---|")
            floors: dict[str, float] = {}
            for conc, n in ((1, 1000), (16, 4000), (64, 4000)):
                for name, url in urls.items():
                    pids = st.pids()
                    c0, r0, g0 = cpu_s(pids[name]), cpu_s(pids["recorder"]), sum(me.cpu_times()[:2])
                    t0 = time.perf_counter()
                    r = load(url, conc, n, False)
                    dt = time.perf_counter() - t0
                    rec_ms = rec_s = "-"
                    if name == "proxy":
                        recorded += n
                        wait_ledger(db, recorded)  # every call written before the next run
                        rec_s = f"{time.perf_counter() - t0:.2f}"
                        rec_ms = f"{(cpu_s(pids['recorder']) - r0) / n * 1e3:.3f}"
                    hop = (cpu_s(pids[name]) - c0) / n
                    gen = (sum(me.cpu_times()[:2]) - g0) / n
                    if name == "direct" and conc == 16:
                        floors = {"server": hop, "client": gen}
                    print(
                        f"| {conc} | {name} | {len(r)} | {dt:.2f} | {len(r) / dt:.0f} | {rec_s} | "
                        f"{hop * 1e3:.3f} | {rec_ms} | {gen * 1e3:.3f} | {1 / hop:.0f} | "
                        f"{loadavg()} |"
                    )
            print(
                f"\nfloors at 16 clients: server (uvicorn httptools+uvloop, no-op app) "
                f"{floors['server'] * 1e3:.3f} ms, client (aiohttp) {floors['client'] * 1e3:.3f} ms "
                f"CPU per request; ledger: {ledger_count(db)} records for {recorded} proxied calls"
            )
        finally:
            st.stop()


def rss_mb(pid: int) -> float:
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


def cmd_soak() -> None:
    """10,000 proxied calls at 16 clients, 10 x (500 streamed from the paced upstream, then
    500 plain at once): RSS of the proxy and of its recorder, and how many calls the ledger
    holds, after each 1,000 and once the recorder is done. (At a closed-loop maximum rate the
    recorder falls behind and holds the backlog: see the throughput run's "seconds until all
    recorded".)"""
    import sqlite3

    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "l.db")
        st = Stack(db, PACE_TTFB_S, PACE_GAP_S)
        try:
            url = st.urls()["proxy"]
            samples = []
            done = 0
            for _ in range(10):  # 10 x 1,000 calls, half streamed
                load(url, 16, 500, True)
                load(url, 16, 500, False)
                done += 1000
                pids = st.pids()
                samples.append(
                    (
                        done,
                        ledger_count(db),
                        rss_mb(st.proxy_pid),
                        sum(rss_mb(p) for p in pids["recorder"]),
                    )
                )
            wait_ledger(db, done)
            pids = st.pids()
            samples.append(
                (
                    done,
                    ledger_count(db),
                    rss_mb(st.proxy_pid),
                    sum(rss_mb(p) for p in pids["recorder"]),
                )
            )
        finally:
            st.stop()
        con = sqlite3.connect(db)
        n, distinct = con.execute(
            "SELECT COUNT(*), COUNT(DISTINCT record_id) FROM requests"
        ).fetchone()
        print("| calls so far | recorded so far | proxy RSS MiB | recorder RSS MiB |")
        print("|---|---|---|---|")
        for k, c, v, w in samples:
            print(f"| {k} | {c} | {v:.1f} | {w:.1f} |")
        print(f"\nledger: {n} records, {distinct} distinct record ids (10000 calls sent)")


def make_claude_folder(root: Path, target_bytes: int) -> tuple[int, int]:
    """A synthetic Claude Code projects folder of about ``target_bytes``: sessions of 200
    turns, each turn a user line with a tool result (~2 kB) and an assistant response written
    as 3 lines (thinking, text, tool_use) sharing one message.id. Returns (files, calls)."""
    files = calls = size = 0
    s = 0
    while size < target_bytes:
        proj = root / f"-home-u-proj{s % 20}"
        proj.mkdir(parents=True, exist_ok=True)
        sid = f"00000000-0000-4000-8000-{s:012d}"
        lines = []
        read = 0
        for t in range(200):
            ts = f"2026-11-{1 + s % 28:02d}T10:{t // 60 % 60:02d}:{t % 60:02d}.000Z"
            lines.append(
                json.dumps(
                    {
                        "type": "user",
                        "sessionId": sid,
                        "timestamp": ts,
                        "isSidechain": False,
                        "message": {
                            "role": "user",
                            "content": [
                                {"type": "tool_result", "tool_use_id": "t", "content": "x" * 2000}
                            ],
                        },
                    }
                )
            )
            usage = {
                "input_tokens": 3,
                "cache_creation_input_tokens": 700,
                "cache_read_input_tokens": read,
                "output_tokens": 120,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": 700,
                    "ephemeral_1h_input_tokens": 0,
                },
            }
            for block in (
                {"type": "thinking", "thinking": "y" * 400},
                {"type": "text", "text": "z" * 300},
                {"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": "ls"}},
            ):
                lines.append(
                    json.dumps(
                        {
                            "type": "assistant",
                            "sessionId": sid,
                            "timestamp": ts,
                            "isSidechain": False,
                            "requestId": f"req_{s}_{t}",
                            "message": {
                                "id": f"msg_{s}_{t}",
                                "model": "claude-sonnet-4-5-20250929",
                                "role": "assistant",
                                "content": [block],
                                "usage": usage,
                            },
                        }
                    )
                )
            read += 700
            calls += 1
        text = "\n".join(lines) + "\n"
        (proj / f"{sid}.jsonl").write_text(text)
        size += len(text)
        files += 1
        s += 1
    return files, calls


def cmd_import() -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "projects"
        files, calls = make_claude_folder(root, 100 * 2**20)
        mb = sum(f.stat().st_size for f in root.rglob("*.jsonl")) / 2**20
        db = os.path.join(d, "l.db")
        code = (
            "import resource, sys, time\n"
            "from pathlib import Path\n"
            "from promptcache import Tracker\n"
            "from promptcache.transcripts.claude_code import read_claude_code\n"
            "from promptcache.transcripts.importer import import_calls\n"
            "from promptcache.transcripts.jsonl import Skipped\n"
            "t0 = time.perf_counter()\n"
            "with Tracker(sys.argv[2]) as t:\n"
            "    r = import_calls(t, read_claude_code(Path(sys.argv[1]), Skipped()), 'claude-code')\n"
            "dt = time.perf_counter() - t0\n"
            "print(r.calls, r.new, dt, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)\n"
        )
        out = []
        for _ in range(2):  # the second run is the idempotent re-import
            r = subprocess.run(
                [PY, "-c", code, str(root), db], env=ENV, capture_output=True, text=True
            )
            assert r.returncode == 0, r.stderr
            out.append(r.stdout.split())
        print(
            "| run | folder MB | files | calls | new records | seconds | calls/s | MB/s | peak RSS MiB |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for name, (n, new, dt, rss) in zip(("first import", "re-import"), out):
            print(
                f"| {name} | {mb:.0f} | {files} | {n} | {new} | {float(dt):.1f} | "
                f"{int(n) / float(dt):.0f} | {mb / float(dt):.1f} | {float(rss):.0f} |"
            )
        assert int(out[0][0]) == calls


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "latency"
    if what == "_upstream":
        serve_upstream(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]))
    elif what == "_relay":
        serve_relay(int(sys.argv[2]), int(sys.argv[3]))
    else:
        {
            "latency": cmd_latency,
            "throughput": cmd_throughput,
            "soak": cmd_soak,
            "import": cmd_import,
        }[what]()
