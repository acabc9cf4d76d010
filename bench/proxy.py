"""Benchmarks of ``promptcache proxy`` (issue 29) -- run once, prints markdown tables.

    PYTHONPATH=. python bench/proxy.py latency     # added latency, 1/16/64 streaming clients
    PYTHONPATH=. python bench/proxy.py throughput  # small non-streamed requests/s
    PYTHONPATH=. python bench/proxy.py soak        # 10,000 proxied calls: RSS, ledger count
    PYTHONPATH=. python bench/proxy.py import      # 100 MB synthetic Claude Code folder

Every process is separate (upstream, relay, proxy, load generator), all on loopback:

- *upstream*: a minimal ASGI server (uvicorn, h11) answering ``/v1/chat/completions`` at once:
  a small JSON body, or 8 SSE chunks and ``[DONE]`` with usage -- no model time, so what is
  measured is the HTTP path;
- *direct* (the floor: no extra hop), *relay* (the peer: a plain asyncio TCP relay, the least
  an extra hop in Python costs) and *proxy* (``promptcache proxy`` with its ledger);
- the load generator: ``c`` concurrent httpx clients, each request timed to its first body
  byte (TTFB) and to its end (total). Targets are interleaved in rounds so drift hits all.

Added latency = percentile(target) - percentile(direct) over the same round structure.
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
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

USAGE = {
    "prompt_tokens": 3000,
    "completion_tokens": 8,
    "total_tokens": 3008,
    "prompt_tokens_details": {"cached_tokens": 2944},
}


# -- processes ---------------------------------------------------------------------------


def upstream_app() -> Any:
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
            for c in chunks:
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


def serve_upstream(port: int) -> None:
    import uvicorn

    uvicorn.run(
        upstream_app(),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        http="h11",
        lifespan="off",
    )


def serve_relay(listen: int, to: int) -> None:
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

    asyncio.run(main())


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

    def __init__(self, db: str) -> None:
        self.up, self.relay, self.proxy = free_port(), free_port(), free_port()
        self.db = db
        self.procs = [
            subprocess.Popen([PY, __file__, "_upstream", str(self.up)], env=ENV),
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


async def load(url: str, conc: int, n: int, stream: bool) -> list[tuple[float, float]]:
    import httpx

    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    out: list[tuple[float, float]] = []
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        counter = iter(range(n))

        async def worker() -> None:
            for i in counter:
                t0 = time.perf_counter()
                first = None
                async with client.stream(
                    "POST",
                    url + "/v1/chat/completions",
                    content=body(stream, i),
                    headers={
                        "content-type": "application/json",
                        "authorization": "Bearer sk-bench",
                    },
                ) as r:
                    async for chunk in r.aiter_raw():
                        if first is None and chunk:
                            first = time.perf_counter()
                t1 = time.perf_counter()
                out.append(((first or t1) - t0, t1 - t0))

        await asyncio.gather(*(worker() for _ in range(conc)))
    return out


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def cmd_latency() -> None:
    with tempfile.TemporaryDirectory() as d:
        st = Stack(os.path.join(d, "l.db"))
        try:
            urls = st.urls()
            rows = []
            for conc, per_round in ((1, 100), (16, 400), (64, 640)):
                res: dict[str, list[tuple[float, float]]] = {k: [] for k in urls}
                for url in urls.values():  # warm-up
                    asyncio.run(load(url, conc, conc * 4, True))
                for _ in range(4):
                    for name, url in urls.items():
                        res[name] += asyncio.run(load(url, conc, per_round, True))
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
                "| clients | target | requests | TTFB p50 ms | +p50 | TTFB p99 ms | +p99 | "
                "total p50 ms | +p50 | total p99 ms | +p99 |"
            )
            print("|---|---|---|---|---|---|---|---|---|---|---|")
            for r in rows:
                print(
                    "| "
                    + " | ".join([str(r[0]), r[1], str(r[2])] + [f"{x:.2f}" for x in r[3:]])
                    + " |"
                )
        finally:
            st.stop()


def cpu_s(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def cmd_throughput() -> None:
    """Requests/s at 32 clients, and CPU seconds per request of the hop's own process (the
    upstream's for direct): on a shared host the CPU per request says what one free core
    would sustain (1 / cpu per request) when wall-clock rates are set by the neighbours."""
    with tempfile.TemporaryDirectory() as d:
        st = Stack(os.path.join(d, "l.db"))
        try:
            pids = {"direct": st.procs[0].pid, "relay": st.procs[1].pid, "proxy": st.proxy_pid}
            print(
                "| target | clients | requests | seconds | requests/s | CPU ms per request "
                "(hop process) | requests/s per free core |"
            )
            print("|---|---|---|---|---|---|---|")
            for name, url in st.urls().items():
                asyncio.run(load(url, 32, 200, False))  # warm-up
                c0, t0 = cpu_s(pids[name]), time.perf_counter()
                r = asyncio.run(load(url, 32, 3000, False))
                dt, cpu = time.perf_counter() - t0, cpu_s(pids[name]) - c0
                per = cpu / len(r)
                print(
                    f"| {name} | 32 | {len(r)} | {dt:.2f} | {len(r) / dt:.0f} | "
                    f"{per * 1e3:.3f} | {1 / per:.0f} |"
                )
        finally:
            st.stop()


def cmd_recording_cost() -> None:
    """CPU per proxied request of the proxy's process (event loop and ledger writer), with
    recording on and off, the proxy in this process and the load in another."""
    import psutil

    from promptcache.proxy.server import ProxyServer
    from promptcache.proxy.upstreams import resolve

    up = free_port()
    upstream = subprocess.Popen([PY, __file__, "_upstream", str(up)], env=ENV)
    wait_port(up, upstream)
    print("| recording | requests | CPU ms per request (proxy process) |")
    print("|---|---|---|")
    try:
        for on in (True, False):
            with tempfile.TemporaryDirectory() as d:
                ps = ProxyServer(
                    resolve(f"http://127.0.0.1:{up}"),
                    os.path.join(d, "l.db"),
                    port=free_port(),
                    live=False,
                )
                if not on:
                    ps.app.recorder = None
                ps.start()
                here = str(Path(__file__).parent)
                code = (
                    f"import sys, asyncio; sys.path.insert(0, {here!r}); import proxy as b; "
                    f"asyncio.run(b.load({ps.url!r}, 32, int(sys.argv[1]), False))"
                )
                subprocess.run([PY, "-c", code, "300"], env=ENV, check=True)
                ps.ledger.flush(60)
                me = psutil.Process()
                c0 = sum(me.cpu_times()[:2])
                subprocess.run([PY, "-c", code, "3000"], env=ENV, check=True)
                ps.ledger.flush(60)
                per = (sum(me.cpu_times()[:2]) - c0) / 3000
                print(f"| {'on' if on else 'off'} | 3000 | {per * 1e3:.2f} |")
                ps.stop()
    finally:
        upstream.terminate()


def rss_mb(pid: int) -> float:
    import psutil

    return psutil.Process(pid).memory_info().rss / 2**20


def cmd_soak() -> None:
    import sqlite3

    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "l.db")
        st = Stack(db)
        try:
            url = st.urls()["proxy"]
            samples = []
            done = 0
            for _ in range(10):  # 10 x 1,000 calls, half streamed
                asyncio.run(load(url, 16, 500, True))
                asyncio.run(load(url, 16, 500, False))
                done += 1000
                samples.append((done, rss_mb(st.proxy_pid)))
            time.sleep(3)  # let the writer finish
        finally:
            st.stop()
        con = sqlite3.connect(db)
        n, distinct = con.execute(
            "SELECT COUNT(*), COUNT(DISTINCT record_id) FROM requests"
        ).fetchone()
        print("| calls so far | proxy RSS MiB |")
        print("|---|---|")
        for k, v in samples:
            print(f"| {k} | {v:.1f} |")
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
        serve_upstream(int(sys.argv[2]))
    elif what == "_relay":
        serve_relay(int(sys.argv[2]), int(sys.argv[3]))
    else:
        {
            "latency": cmd_latency,
            "throughput": cmd_throughput,
            "soak": cmd_soak,
            "import": cmd_import,
            "recording-cost": cmd_recording_cost,
        }[what]()
