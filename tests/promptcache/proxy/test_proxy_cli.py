"""``promptcache proxy`` on the command line: usage errors, the missing extra, ``-- CMD``."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from promptcache import Tracker
from promptcache.cli import main

ROOT = Path(__file__).resolve().parents[3]


def test_bad_upstream_is_one_line_and_exit_2(capsys):
    assert main(["proxy", "--upstream", "ftp://x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "use anthropic, openai, gemini or an http(s):// URL" in err[0]


def test_missing_extra_says_which_in_one_line(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "uvicorn" else real(n, *a)
    )
    assert main(["proxy", "--upstream", "openai"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "promptcache proxy needs the proxy extra (missing: uvicorn): "
        "pip install 'promptcache[proxy]'"
    ]


def test_wrapping_a_command_points_it_at_the_proxy(upstream, tmp_path):
    child = tmp_path / "child.py"
    child.write_text(
        textwrap.dedent(
            """
            import os, sys, openai
            base = os.environ["OPENAI_BASE_URL"]
            assert base.endswith("/v1") and base.startswith("http://127.0.0.1:"), base
            assert os.environ["ANTHROPIC_BASE_URL"] == base[:-3]
            c = openai.OpenAI(api_key="k")  # reads OPENAI_BASE_URL like every openai SDK
            r = c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
            print(r.choices[0].message.content)
            sys.exit(3)
            """
        )
    )
    db = tmp_path / "l.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for k in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        env.pop(k, None)
    r = subprocess.run(
        [sys.executable, "-m", "promptcache", "proxy", "--upstream", upstream.url, "--db", str(db),
         "--", sys.executable, str(child)],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
    )
    assert r.returncode == 3, r.stderr
    assert r.stdout.strip() == "ok"
    assert "promptcache proxy: 1 call(s) recorded" in r.stderr
    assert Tracker(str(db)).count() == 1
