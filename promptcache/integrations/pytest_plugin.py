"""Test your prompts against the local engine: a pytest plugin and helpers.

Registered through the ``pytest11`` entry point, so an application's test suite gets,
with nothing to configure:

* ``promptcache_engine`` (session-scoped): a :class:`LocalEngineServer` started on a free
  loopback port in the cache mode given by ``--promptcache-cache-mode`` (or the ini option
  ``promptcache_cache_mode``; default ``automatic``), stopped at the end of the session;
  ``--promptcache-disk-cache-dir DIR`` (ini ``promptcache_disk_cache_dir``) gives it a disk
  tier that survives the session, so the next run starts with its prefixes cached;
* ``promptcache_openai`` / ``promptcache_anthropic``: official clients pointed at it;
* ``promptcache_engine_factory``: ``factory(cache_mode="anthropic", extra_args=[...])``
  for other configurations (one server per distinct configuration, reused).

Example::

    from promptcache.integrations.pytest_plugin import assert_cache_hit

    def test_system_prompt_is_cached(promptcache_openai):
        kw = dict(model="local", messages=[{"role": "system", "content": BIG_PROMPT},
                                           {"role": "user", "content": "hi"}], max_tokens=1)
        promptcache_openai.chat.completions.create(**kw)
        assert_cache_hit(promptcache_openai.chat.completions.create(**kw), min_tokens=1024)

This module does not import torch: the engine runs in a subprocess (``promptcache
serve``), started with the current Python interpreter.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import pytest

__all__ = [
    "LocalEngineServer",
    "cached_tokens",
    "assert_cache_hit",
    "assert_cache_miss",
]

_LISTENING = re.compile(r"listening on (http://[^\s]+)")


class LocalEngineServer:
    """``promptcache serve`` in a subprocess on a free loopback port.

    Args:
        cache_mode: "automatic" | "anthropic" | "openai".
        model: a .gguf file or model folder (None: the embedded SmolLM2-135M-Instruct).
        api_key: require this key (clients made here send it).
        test_clock: start with ``--test-clock`` so :meth:`advance_clock` can expire
            emulated cache entries.
        extra_args: more ``promptcache serve`` options.
        startup_timeout: seconds to wait for the server to listen.

    Attributes:
        base_url: ``http://127.0.0.1:PORT`` once started (the Anthropic client's base URL;
            the OpenAI client's is ``base_url + "/v1"``).
        log_path: the server's combined stdout/stderr.

    Raises (``start``): RuntimeError with the server's last log lines when it exits or does
    not listen in time.
    """

    def __init__(
        self,
        cache_mode: str = "automatic",
        *,
        model: str | None = None,
        api_key: str | None = None,
        test_clock: bool = False,
        extra_args: Iterable[str] = (),
        startup_timeout: float = 300.0,
        env: dict | None = None,
    ):
        self.cache_mode = cache_mode
        self.model = model
        self.api_key = api_key
        self.test_clock = test_clock
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self.env = env
        self.base_url: str | None = None
        self.proc: subprocess.Popen | None = None
        self.log_path: str | None = None
        self._log: IO[bytes] | None = None

    # ---- process -------------------------------------------------------------------------
    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "promptcache",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--cache-mode",
            self.cache_mode,
            "--exit-with-parent",  # a killed test run leaves no server behind
        ]
        if self.model:
            cmd += ["--model", self.model]
        if self.api_key:
            cmd += ["--api-key", self.api_key]
        if self.test_clock:
            cmd.append("--test-clock")
        return cmd + self.extra_args

    def start(self) -> LocalEngineServer:
        fd, self.log_path = tempfile.mkstemp(prefix="promptcache-serve-", suffix=".log")
        os.close(fd)
        self._log = open(self.log_path, "wb")
        env = {**os.environ, **(self.env or {})}
        env.pop("PROMPTCACHE_API_KEY", None)
        self.proc = subprocess.Popen(
            self.command(), stdout=self._log, stderr=subprocess.STDOUT, env=env
        )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            m = _LISTENING.search(self.log_text())
            if m:
                self.base_url = m.group(1)
                self._wait_healthy(deadline)
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"promptcache serve exited with code {self.proc.returncode}:\n{self.tail()}"
                )
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"promptcache serve did not listen within {self.startup_timeout:.0f}s:\n{self.tail()}"
        )

    def _wait_healthy(self, deadline: float) -> None:
        # lazy import of an optional dependency: httpx (the engine and dev extras)
        import httpx

        while time.monotonic() < deadline:
            try:
                if httpx.get(self._url("/health"), timeout=5.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"promptcache serve was not healthy in time:\n{self.tail()}")

    def log_text(self) -> str:
        if not self.log_path:
            return ""
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self, timeout: float = 60.0) -> int | None:
        """SIGTERM (the server drains in-flight requests), then SIGKILL after ``timeout``
        seconds. Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._log:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def __enter__(self) -> LocalEngineServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- clients -------------------------------------------------------------------------
    def _url(self, path: str) -> str:
        """``base_url + path``; raises ``RuntimeError`` before :meth:`start`."""
        if self.base_url is None:
            raise RuntimeError("the local engine server is not started; call start() first")
        return self.base_url + path

    @property
    def openai_base_url(self) -> str:
        return self._url("/v1")

    def _key(self) -> str:
        return self.api_key or "local-test-key"

    def openai_client(self, **kwargs: Any) -> Any:
        # lazy import of an optional dependency: openai (the engine and dev extras)
        import openai

        return openai.OpenAI(base_url=self.openai_base_url, api_key=self._key(), **kwargs)

    def async_openai_client(self, **kwargs: Any) -> Any:
        # lazy import of an optional dependency: openai (the engine and dev extras)
        import openai

        return openai.AsyncOpenAI(base_url=self.openai_base_url, api_key=self._key(), **kwargs)

    def anthropic_client(self, **kwargs: Any) -> Any:
        # lazy import of an optional dependency: anthropic (the engine and dev extras)
        import anthropic

        return anthropic.Anthropic(base_url=self.base_url, api_key=self._key(), **kwargs)

    def async_anthropic_client(self, **kwargs: Any) -> Any:
        # lazy import of an optional dependency: anthropic (the engine and dev extras)
        import anthropic

        return anthropic.AsyncAnthropic(base_url=self.base_url, api_key=self._key(), **kwargs)

    def _headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def advance_clock(self, seconds: float) -> float:
        """Move the emulated cache clock forward (needs ``test_clock=True``)."""
        # lazy import of an optional dependency: httpx (the engine and dev extras)
        import httpx

        r = httpx.post(
            self._url("/v1/promptcache/clock/advance"),
            json={"seconds": seconds},
            headers=self._headers(),
            timeout=30,
        )
        r.raise_for_status()
        return float(r.json()["now"])

    def metrics(self) -> dict[str, float]:
        """``/metrics`` as {"name{label=...}": value} (samples of every family)."""
        # lazy import of an optional dependency: httpx (the engine and dev extras)
        import httpx

        # lazy import of an optional dependency: prometheus-client (the prometheus extra)
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(self._url("/metrics"), headers=self._headers(), timeout=30).text
        out: dict[str, float] = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
        return out


# ---- assertions -----------------------------------------------------------------------------


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def cached_tokens(response: Any) -> int:
    """Cached prompt tokens reported by a response (or its ``usage``): OpenAI Chat
    Completions / Completions (``prompt_tokens_details.cached_tokens``), OpenAI Responses
    (``input_tokens_details.cached_tokens``) or Anthropic (``cache_read_input_tokens``);
    SDK objects or plain dicts.

    Raises:
        ValueError: no usage found (e.g. a stream without ``include_usage``).
    """
    usage = _get(response, "usage") if _get(response, "usage") is not None else response
    if usage is None:
        raise ValueError(
            "the response carries no usage (streams need stream_options.include_usage)"
        )
    if _get(usage, "cache_read_input_tokens") is not None:  # Anthropic
        return int(_get(usage, "cache_read_input_tokens"))
    for details in ("prompt_tokens_details", "input_tokens_details"):  # OpenAI
        d = _get(usage, details)
        if d is not None:
            return int(_get(d, "cached_tokens") or 0)
    if _get(usage, "prompt_tokens") is not None or _get(usage, "input_tokens") is not None:
        return 0
    raise ValueError(f"no usage found in {type(response).__name__}")


def assert_cache_hit(response: Any, min_tokens: int = 1) -> int:
    """Assert the response read at least ``min_tokens`` prompt tokens from the cache;
    returns the cached count. The failure message gives the usage seen."""
    n = cached_tokens(response)
    if n < min_tokens:
        usage = _get(response, "usage") or response
        raise AssertionError(
            f"expected a prompt-cache hit of at least {min_tokens} tokens, got {n} "
            f"(usage: {usage!r})"
        )
    return n


def assert_cache_miss(response: Any) -> None:
    """Assert no prompt tokens were read from the cache."""
    n = cached_tokens(response)
    if n:
        raise AssertionError(f"expected no prompt-cache hit, got {n} cached tokens")


# ---- the pytest plugin ------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("promptcache", "promptcache local engine")
    group.addoption(
        "--promptcache-cache-mode",
        default=None,
        choices=["automatic", "anthropic", "openai"],
        help="cache mode of the promptcache_engine fixture's server",
    )
    group.addoption(
        "--promptcache-model", default=None, help="model for the promptcache_engine server"
    )
    parser.addini(
        "promptcache_cache_mode",
        "cache mode of the promptcache_engine fixture",
        default="automatic",
    )
    group.addoption(
        "--promptcache-disk-cache-dir",
        default=None,
        help="disk tier folder of the promptcache_engine server (kept between runs: a second "
        "CI run starts with the first one's prefixes cached)",
    )
    parser.addini(
        "promptcache_disk_cache_dir",
        "disk tier folder of the promptcache_engine fixture's server (default: none)",
        default="",
    )


@pytest.fixture(scope="session")
def promptcache_engine_factory(
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., LocalEngineServer]]:
    """``factory(cache_mode="automatic", **LocalEngineServer kwargs)`` -> a started server,
    one per distinct configuration for the whole session."""
    servers: dict[tuple, LocalEngineServer] = {}

    def factory(cache_mode: str = "automatic", **kwargs: Any) -> LocalEngineServer:
        kwargs.setdefault("model", request.config.getoption("--promptcache-model"))
        key = (cache_mode, tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
        if key not in servers:
            servers[key] = LocalEngineServer(cache_mode, **kwargs).start()
        return servers[key]

    yield factory
    for s in servers.values():
        s.stop()


@pytest.fixture(scope="session")
def promptcache_engine(
    request: pytest.FixtureRequest,
    promptcache_engine_factory: Callable[..., LocalEngineServer],
) -> LocalEngineServer:
    """The local engine on a free loopback port, in the configured cache mode."""
    mode = request.config.getoption("--promptcache-cache-mode") or request.config.getini(
        "promptcache_cache_mode"
    )
    disk = request.config.getoption("--promptcache-disk-cache-dir") or request.config.getini(
        "promptcache_disk_cache_dir"
    )
    if disk:
        return promptcache_engine_factory(
            mode or "automatic", extra_args=["--disk-cache-dir", disk]
        )
    return promptcache_engine_factory(mode or "automatic")


@pytest.fixture(scope="session")
def promptcache_openai(promptcache_engine: LocalEngineServer) -> Any:
    """An ``openai.OpenAI`` client for :func:`promptcache_engine`."""
    return promptcache_engine.openai_client()


@pytest.fixture(scope="session")
def promptcache_anthropic(promptcache_engine: LocalEngineServer) -> Any:
    """An ``anthropic.Anthropic`` client for :func:`promptcache_engine`."""
    return promptcache_engine.anthropic_client()
