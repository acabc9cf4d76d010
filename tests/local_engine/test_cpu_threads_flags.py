"""``num_threads`` (automatic, logged) and the CPU flags of ``promptcache serve``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest
import torch

from local_engine.engine import cpu_threads


def _serve(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "promptcache", "serve", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_requested_threads_are_used_and_logged(caplog):
    with caplog.at_level(logging.INFO, logger="local_engine"):
        assert cpu_threads(3) == 3
    assert "CPU threads: 3 (set by num_threads / serve --threads)" in caplog.text


def test_automatic_threads_subtract_busy_cores_and_are_logged(caplog, monkeypatch):
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(4)
        monkeypatch.setattr(os, "cpu_count", lambda: 4)
        monkeypatch.setattr(os, "getloadavg", lambda: (1.4, 0.0, 0.0))
        with caplog.at_level(logging.INFO, logger="local_engine"):
            assert cpu_threads(None) == 3  # 4 cores, about 1 busy
        assert "CPU threads: 3 (auto: 4 cores, 1-minute load average 1.4" in caplog.text
        monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 0.0, 0.0))
        assert cpu_threads(None) == 1  # never below one
    finally:
        torch.set_num_threads(saved)


def test_serve_threads_must_be_positive():
    p = _serve("--threads", "0", "--port", "0")
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "promptcache serve: error: --threads 0 must be at least 1"
    ]


def test_serve_weight_dtype_choices_and_cpu_only():
    p = _serve("--weight-dtype", "int4")
    assert p.returncode == 2 and "invalid choice" in p.stderr and "Traceback" not in p.stderr
    p = _serve("--weight-dtype", "int8", "--device", "cuda", "--port", "0")
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "promptcache serve: error: --weight-dtype is CPU-only; drop it with --device cuda"
    ]


@pytest.mark.slow
def test_serve_threads_and_weight_dtype_reach_the_engine(tmp_path):
    from promptcache.integrations.pytest_plugin import LocalEngineServer

    env = {"PROMPTCACHE_WEIGHT_CACHE_DIR": str(tmp_path / "weights")}
    with LocalEngineServer(
        extra_args=["--threads", "1", "--weight-dtype", "bfloat16"], env=env
    ) as srv:
        r = srv.openai_client().chat.completions.create(
            model="local", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
        )
        assert r.choices[0].message.content is not None
        log = srv.log_text()
    assert "CPU threads: 1 (set by num_threads / serve --threads)" in log
    assert "(float32, weights bfloat16, 1 threads)" in log  # activations stay float32
