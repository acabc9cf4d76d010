"""Server configuration and the per-app state the routes share."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from promptcache.simulation.emulation import ManualClock

from .cached_contents import CachedContentStore
from .diagnostics import DiagnosticsStore
from .emulation import CacheEmulator
from .metrics import ServerMetrics
from .response_store import ResponseStore

#: default request-body limit: 32 MiB, the Messages API's documented request size limit
#: (https://platform.claude.com/docs/en/api/overview#request-size-limits, 2026-11-29)
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024


@dataclass
class ServerConfig:
    """What ``promptcache serve`` sets on the HTTP side.

    Attributes:
        cache_mode: "provider" (each API path its own provider's rules) | "automatic" |
            "anthropic" | "openai" | "gemini" | "bedrock" (see :mod:`.emulation`).
        api_key: when set, every route but ``/health`` needs ``Authorization: Bearer KEY``
            or ``x-api-key: KEY``.
        max_body_bytes: larger request bodies get 413.
        anthropic_min_cache_tokens: minimum cacheable prompt length for models missing from
            the documented table (None: 1,024).
        test_clock: emulation clock that only moves through ``POST
            /v1/promptcache/clock/advance`` (for tests of TTL expiry).
        log_prompts: include prompt text in the per-request log line (off by default).
        drain_timeout: seconds SIGTERM waits for in-flight requests.
        served_model_name: the id listed by ``/v1/models`` (default: the engine's).
    """

    cache_mode: str = "provider"
    api_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    anthropic_min_cache_tokens: int | None = None
    test_clock: bool = False
    log_prompts: bool = False
    drain_timeout: float = 30.0
    served_model_name: str | None = None


@dataclass
class ServerState:
    engine: Any  # AsyncEngine
    config: ServerConfig
    emulator: CacheEmulator
    metrics: ServerMetrics = field(default_factory=ServerMetrics)
    diagnostics: DiagnosticsStore = field(default_factory=DiagnosticsStore)
    clock: ManualClock | None = None
    responses: ResponseStore = field(default_factory=ResponseStore)
    cached_contents: CachedContentStore = field(init=False)
    started: float = field(default_factory=time.time)

    @classmethod
    def build(cls, engine: Any, config: ServerConfig) -> ServerState:
        """The state for ``engine`` (an :class:`AsyncEngine`) and ``config``: a cache emulator for
        the configured mode, on a manual clock when ``config.test_clock``."""
        clock = ManualClock() if config.test_clock else None
        emulator = CacheEmulator(
            config.cache_mode, clock=clock, anthropic_min_tokens=config.anthropic_min_cache_tokens
        )
        return cls(engine=engine, config=config, emulator=emulator, clock=clock)

    def __post_init__(self) -> None:
        self.cached_contents = CachedContentStore(self.emulator.state.clock)

    @property
    def tokenizer(self):
        return self.engine.engine.tokenizer

    @property
    def model_name(self) -> str:
        return self.config.served_model_name or self.engine.engine.model_name

    @property
    def max_model_len(self) -> int:
        return int(self.engine.engine.max_model_len)


def new_id(prefix: str) -> str:
    """A provider-style id: ``chatcmpl-…``, ``cmpl-…``, ``msg_…``."""
    return prefix + secrets.token_hex(12)
