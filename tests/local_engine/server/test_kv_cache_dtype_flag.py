"""``promptcache serve --kv-cache-dtype`` and the KV format in ``/metrics``."""

from __future__ import annotations

import argparse

import pytest

from local_engine.metrics import EngineMetrics
from local_engine.server.cli import add_arguments
from local_engine.server.metrics import ServerMetrics


def _parser():
    p = argparse.ArgumentParser(prog="promptcache serve")
    add_arguments(p)
    return p


def test_flag_accepts_the_three_formats_and_defaults_to_auto():
    assert _parser().parse_args([]).kv_cache_dtype == "auto"
    for name in ("auto", "fp8", "int8"):
        assert _parser().parse_args(["--kv-cache-dtype", name]).kv_cache_dtype == name


def test_unknown_format_exits_2_naming_the_choices(capsys):
    with pytest.raises(SystemExit) as exc:
        _parser().parse_args(["--kv-cache-dtype", "fp4"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--kv-cache-dtype" in err and "'auto', 'fp8', 'int8'" in err


def test_metrics_name_the_kv_format_and_block_count():
    snap = EngineMetrics(
        prefix_cache_queries=0,
        prefix_cache_hits=0,
        kv_usage=0.0,
        num_blocks=2741,
        num_free_blocks=2741,
        num_running=0,
        num_waiting=0,
        num_preemptions=0,
        num_evictions=0,
        prompt_tokens=0,
        generation_tokens=0,
        requests_finished=0,
        kv_cache_dtype="int8",
        block_size=16,
    )
    text = ServerMetrics().render(snap).decode()
    assert 'promptcache_kv_cache_info{block_size="16",dtype="int8"} 1.0' in text, text
    assert "promptcache_kv_cache_blocks_total 2741.0" in text
