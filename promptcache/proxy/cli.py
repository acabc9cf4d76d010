"""``promptcache proxy``: record any client's calls by putting a local proxy in front of it.

``promptcache proxy --upstream anthropic|openai|gemini|URL [--port 8788] [--db PATH]
[--host 127.0.0.1] [--store-prompts] [-- CMD ...]``

Without a command it serves until Ctrl-C. With ``-- CMD ...`` it starts the proxy on a free
port (or ``--port``), runs the command with its base-URL variables pointed at the proxy
(``ANTHROPIC_BASE_URL``, ``OPENAI_BASE_URL``, ``GOOGLE_GEMINI_BASE_URL``; see
:func:`promptcache.proxy.upstreams.child_env`), stops the proxy when it exits and returns its
exit code. Exit 2 with one line: bad arguments, a missing ``[proxy]`` extra, a port in use.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from promptcache.proxy.server import ProxyServer

__all__ = ["add_arguments", "run", "missing_extra"]

#: What the proxy cannot run without (httptools and uvloop, also in the extra, only speed it up).
_EXTRA = ("httpx", "uvicorn", "starlette", "aiohttp")


def missing_extra() -> str | None:
    """The one line to print when the ``[proxy]`` extra is not installed, else None."""
    missing = [m for m in _EXTRA if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return (
        f"promptcache proxy needs the proxy extra (missing: {', '.join(missing)}): "
        "pip install 'promptcache[proxy]'"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``promptcache proxy``."""
    parser.add_argument(
        "--upstream",
        required=True,
        metavar="anthropic|openai|gemini|URL",
        help="where to forward: a provider's public API or an http(s):// base URL",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help="port to listen on (default 8788; with a command: a free port)",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only)",
    )
    parser.add_argument(
        "--db",
        metavar="PATH",
        help="ledger file or postgresql:// URL (default: $PROMPTCACHE_LEDGER or the user "
        "data directory)",
    )
    parser.add_argument(
        "--store-prompts",
        action="store_true",
        help="also store request text in the ledger (off: token counts and digests only)",
    )
    parser.add_argument(
        "--no-live", action="store_true", help="do not serve the live view at /_promptcache/"
    )
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="after --: a command to run with its base URL pointed at the proxy",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``promptcache proxy``; returns the exit code."""
    need = missing_extra()
    if need:
        print(need, file=sys.stderr)
        return 2
    from promptcache.proxy.server import ProxyServer, free_port, run_child
    from promptcache.proxy.upstreams import resolve

    try:
        upstream = resolve(args.upstream)
    except ValueError as e:
        print(f"promptcache proxy: {e}", file=sys.stderr)
        return 2
    command = list(args.command or [])
    if command and command[0] == "--":
        command = command[1:]
    port = args.port if args.port is not None else (free_port(args.host) if command else 8788)
    if not 0 <= port <= 65535:
        print(f"promptcache proxy: --port {port}: use 0..65535", file=sys.stderr)
        return 2
    server = ProxyServer(
        upstream,
        args.db,
        host=args.host,
        port=port,
        store_prompts=args.store_prompts,
        live=not args.no_live,
    )
    if not command:
        print(
            f"promptcache proxy: {server.url} -> {upstream.base_url} "
            f"(live view: {server.live_url}); Ctrl-C to stop",
            file=sys.stderr,
        )
        try:
            server.serve_forever()
        except KeyboardInterrupt:  # uvicorn re-raises the Ctrl-C it shut down on
            pass
        _summary(server)
        return 0
    try:
        server.start()
    except RuntimeError as e:
        print(f"promptcache proxy: {e} (is the port in use?)", file=sys.stderr)
        return 2
    try:
        code = run_child(server, command)
    finally:
        server.stop()
    _summary(server)
    return code


def _summary(server: ProxyServer) -> None:
    stats = server.ledger.stats
    line = f"promptcache proxy: {stats.written} call(s) recorded"
    if stats.failed or stats.dropped:
        line += f", {stats.failed + stats.dropped} NOT recorded (last error: {stats.last_error})"
    print(line, file=sys.stderr)
