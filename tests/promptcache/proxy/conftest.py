"""Fixtures of the proxy tests: the fake upstream (module-scoped) and a proxy in front of it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fake_upstream import Upstream  # noqa: E402

from promptcache.proxy.server import ProxyServer  # noqa: E402
from promptcache.proxy.upstreams import resolve  # noqa: E402


@pytest.fixture(scope="module")
def upstream():
    with Upstream() as up:
        yield up


@pytest.fixture()
def proxy(upstream, tmp_path):
    server = ProxyServer(resolve(upstream.url), str(tmp_path / "ledger.db"), port=0).start()
    yield server
    server.stop()
