"""``promptcache serve --disk-cache-dir``: an application's pytest session run twice with the
folder kept (the CI shape, through the plugin's ``--promptcache-disk-cache-dir``). The first
session's server writes its cached blocks to the folder when it stops; the second session's
first request finds its whole cached prefix there: the usage field ``promptcache_cache_tiers``
reports it under ``"disk"`` and ``/metrics`` counts it under ``tier="disk"``.

Expected counts: a prompt's cached tokens are its length minus one, rounded down to whole
16-token blocks (the engine always computes the last token); in the second session nothing is
in memory yet, so all of them come from disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BLOCK = 16
ROOT = Path(__file__).resolve().parents[3]

APP_TEST = textwrap.dedent(
    """
    import json, os
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    SYSTEM = "You are the help desk of a bicycle shop; answer in one short sentence. " * 6

    def test_first_request(promptcache_openai, promptcache_engine):
        r = promptcache_openai.chat.completions.create(
            model="local", max_tokens=1, temperature=0,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}])
        text = httpx.get(promptcache_engine.base_url + "/metrics", timeout=30).text
        disk_hits = [s.value for f in text_string_to_metric_families(text) for s in f.samples
                     if s.name == "promptcache_prefix_cache_tier_hits_tokens_total"
                     and s.labels.get("tier") == "disk"]
        with open(os.environ["RESULT_FILE"], "w") as fh:
            json.dump({"prompt_tokens": r.usage.prompt_tokens,
                       "tiers": r.usage.model_extra["promptcache_cache_tiers"],
                       "metric_disk_hits": disk_hits}, fh)
    """
)


def session(tmp_path: Path, disk: Path, name: str) -> dict:
    result = tmp_path / f"{name}.json"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--promptcache-disk-cache-dir",
            str(disk),
            str(tmp_path / "app"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, "RESULT_FILE": str(result), "PYTHONPATH": str(ROOT)},
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(result.read_text())


@pytest.mark.slow
def test_a_second_ci_session_starts_warm_from_the_disk_tier(tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "test_app.py").write_text(APP_TEST)
    disk = tmp_path / "kv"
    first = session(tmp_path, disk, "first")
    n = first["prompt_tokens"]
    assert first["tiers"] == {"gpu": 0, "cpu": 0, "disk": 0}
    assert list(disk.rglob("*.kvb"))  # written back when the server stopped
    second = session(tmp_path, disk, "second")
    expected = (n - 1) // BLOCK * BLOCK
    assert second["prompt_tokens"] == n and expected > 0
    assert second["tiers"] == {"gpu": 0, "cpu": 0, "disk": expected}
    assert second["metric_disk_hits"] == [expected]
