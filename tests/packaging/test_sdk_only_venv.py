"""``pip install promptcache`` alone (issue 31): the built wheel in a fresh virtual environment
with the SDK's own dependencies and no extra. Every CLI verb's ``--help`` either prints its help
or, for a verb that needs an extra, one line naming it with exit code 2 -- never a traceback;
the SDK's own verbs do their job."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

from promptcache.cli import REQUIRES_EXTRA, SUBCOMMANDS


def _run(bin_dir, *args, cwd=None):
    return subprocess.run(
        [str(bin_dir / "promptcache"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


@pytest.mark.slow  # builds the wheel, makes a venv and installs the SDK's dependencies
def test_no_extra_is_installed(sdk_bin):
    code = "import importlib.util as u; print([m for m in ('torch', 'triton', 'pydantic', "
    code += "'fastapi', 'numpy') if u.find_spec(m)])"
    proc = subprocess.run([str(sdk_bin / "python"), "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("verb", sorted(SUBCOMMANDS))
def test_each_verbs_help(sdk_bin, tmp_path, verb):
    proc = _run(sdk_bin, verb, "--help", cwd=tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr
    extra = REQUIRES_EXTRA.get(verb)
    if extra is None:
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"usage: promptcache {verb}"), proc.stdout[:300]
        return
    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"promptcache {verb}: error: needs the {extra} extra (")
    assert line.endswith(f"pip install 'promptcache[{extra}]'")


@pytest.mark.slow
def test_sdk_verbs_work(sdk_bin, tmp_path):
    bad = tmp_path / "app.py"
    bad.write_text(
        textwrap.dedent("""\
            from datetime import datetime
            import anthropic
            client = anthropic.Anthropic()
            client.messages.create(model="m", system=f"Now: {datetime.now()}", messages=[])
        """)
    )
    lint = _run(sdk_bin, "lint", str(bad), cwd=tmp_path)
    assert lint.returncode == 1 and "app.py:4:" in lint.stdout and "PC001" in lint.stdout
    db = tmp_path / "ledger.db"
    record = (
        "import sys, promptcache; t = promptcache.Tracker(sys.argv[1]); "
        "t.record(promptcache.Usage(uncached_input_tokens=1000, output_tokens=10), model='m-x'); "
        "t.close()"
    )
    subprocess.run([str(sdk_bin / "python"), "-c", record, str(db)], check=True, timeout=120)
    report = _run(sdk_bin, "report", "--db", str(db), "--json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    (row,) = json.loads(report.stdout)["rows"]
    assert (row["key"], row["requests"], row["uncached_input_tokens"]) == ("m-x", 1, 1000)
    plan = _run(sdk_bin, "kv-plan", "--model", "smollm2-135m", "--context", "1k", cwd=tmp_path)
    # SmolLM2-135M: 30 layers x 3 KV heads x 64 dims x 2 (K and V) x 2 bytes (bf16) per token
    assert plan.returncode == 0 and f"{30 * 3 * 64 * 2 * 2:,} B" in plan.stdout
