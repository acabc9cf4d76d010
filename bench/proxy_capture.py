"""A logging relay for ``bench/agent_clis.sh``: what a proxy forwarded, call by call.

    python bench/proxy_capture.py --port 8101 --upstream http://127.0.0.1:8000 --out DIR

Each request is relayed to ``--upstream`` unchanged (aiohttp, no decompression; hop-by-hop
headers aside) and its response streamed back as it arrives. One JSON line per call is
appended to ``DIR/calls.jsonl``: time, method, path with query, status, request body length
and SHA-256, response body length, the request's model and whether it streamed, and the
names of its headers (never their values: no API key is written anywhere). The request
body itself goes to ``DIR/NNN.json`` for reading what a CLI sent.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any

HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade"}


def make_app(upstream: str, out: Path) -> Any:
    """An aiohttp app relaying every request to ``upstream`` unchanged, saving each request body as
    ``out/NNN.json`` and logging each (method, path, status, byte counts, SHA-256 of the body)
    as a JSON line."""
    import aiohttp
    from aiohttp import web

    n = [0]
    session: dict[str, aiohttp.ClientSession] = {}

    async def relay(req: web.Request) -> web.StreamResponse:
        body = await req.read()
        n[0] += 1
        k = n[0]
        try:
            doc = json.loads(body) if body else {}
        except ValueError:
            doc = {}
        (out / f"{k:03d}.json").write_bytes(body)
        if "s" not in session:
            session["s"] = aiohttp.ClientSession(auto_decompress=False)
        headers = {h: v for h, v in req.headers.items() if h.lower() not in HOP}
        got, status = 0, 0
        resp: web.StreamResponse = web.Response(status=502)  # upstream unreachable
        try:
            async with session["s"].request(
                req.method, upstream + req.path_qs, data=body or None, headers=headers
            ) as r:
                status = r.status
                resp = web.StreamResponse(
                    status=r.status,
                    headers={h: v for h, v in r.headers.items() if h.lower() not in HOP},
                )
                await resp.prepare(req)
                async for chunk in r.content.iter_any():
                    got += len(chunk)
                    await resp.write(chunk)
                await resp.write_eof()
        except (ConnectionError, aiohttp.ClientError):
            pass  # the client left once it had what it needed (Codex after response.completed)
        finally:
            log(k, req, body, doc, status, got)
        return resp

    def log(k: int, req: web.Request, body: bytes, doc: Any, status: int, got: int) -> None:
        line = {
            "n": k,
            "t": round(time.time(), 3),
            "method": req.method,
            "path": req.path_qs,
            "status": status,
            "bytes": len(body),
            "sha256": hashlib.sha256(body).hexdigest(),
            "response_bytes": got,
            "model": doc.get("model") if isinstance(doc, dict) else None,
            "stream": doc.get("stream") if isinstance(doc, dict) else None,
            "header_names": sorted(h.lower() for h in req.headers),
        }
        with (out / "calls.jsonl").open("a") as f:
            f.write(json.dumps(line) + "\n")

    app = web.Application(client_max_size=64 << 20)
    app.router.add_route("*", "/{tail:.*}", relay)
    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    from aiohttp import web

    a.out.mkdir(parents=True, exist_ok=True)
    web.run_app(make_app(a.upstream.rstrip("/"), a.out), host="127.0.0.1", port=a.port, print=None)


if __name__ == "__main__":
    main()
