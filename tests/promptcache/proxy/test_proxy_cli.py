"""``promptcache proxy`` on the command line: usage errors, the missing extra, ``-- CMD``."""

from __future__ import annotations

import importlib.util
import json
import os
import re
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
            import os, sys, anthropic, openai
            base = os.environ["OPENAI_BASE_URL"]
            assert base.endswith("/v1") and base.startswith("http://127.0.0.1:"), base
            assert os.environ["ANTHROPIC_BASE_URL"] == base[:-3]
            assert os.environ["GOOGLE_GEMINI_BASE_URL"] == base[:-3]
            c = openai.OpenAI(api_key="k")  # reads OPENAI_BASE_URL
            r = c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
            a = anthropic.Anthropic(api_key="k")  # reads ANTHROPIC_BASE_URL
            m = a.messages.create(model="claude-sonnet-4-5", max_tokens=5,
                                  messages=[{"role": "user", "content": "x"}])
            print(r.choices[0].message.content, m.content[0].text)
            sys.exit(3)
            """
        )
    )
    db = tmp_path / "l.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for k in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        env.pop(k, None)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "promptcache",
            "proxy",
            "--upstream",
            upstream.url,
            "--db",
            str(db),
            "--",
            sys.executable,
            str(child),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert r.returncode == 3, r.stderr
    assert r.stdout.strip() == "ok ok"
    assert "promptcache proxy: 2 call(s) recorded" in r.stderr
    assert [x.api for x in Tracker(str(db)).records()] == ["chat.completions", "messages"]


def test_the_readme_curl_example_goes_through_the_proxy(proxy, upstream):
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\npromptcache proxy --upstream anthropic.*?```", readme, re.S).group(0)
    curl = block[block.index("curl ") : block.rindex("```")].strip()
    curl = curl.replace("http://127.0.0.1:8788", proxy.url)
    r = subprocess.run(
        ["bash", "-c", curl],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OPENAI_API_KEY": "sk-readme"},
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["choices"][0]["message"]["content"] == "ok"
    seen = dict(upstream.app.seen[-1]["headers"])
    assert seen[b"authorization"] == b"Bearer sk-readme"


def test_sigterm_stops_the_proxy_like_ctrl_c(upstream, tmp_path):
    """``kill PID`` (SIGTERM, what service managers and benchmarks send) used to kill the
    proxy before it flushed: no exit line, and its recorder process printed a BrokenPipeError
    traceback reporting to a parent that was gone. Now: the call is in the ledger, the exit
    line counts it, exit 0, no traceback."""
    import signal
    import socket
    import time

    import openai

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = str(tmp_path / "l.db")
    proc = subprocess.Popen(
        [sys.executable, "-m", "promptcache", "proxy", "--upstream", upstream.url]
        + ["--port", str(port), "--db", db],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        oc = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="dummy")
        oc.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "promptcache proxy: 1 call(s) recorded" in err
    assert Tracker(db).count() == 1
