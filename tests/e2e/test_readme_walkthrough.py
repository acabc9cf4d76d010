"""The README's Python snippets, pasted as written, run against the local engine with no
traceback, no raw repr and no $0 for a priced model (issue 17's walk-through).

The README points its clients at ``http://127.0.0.1:8000``; here that address is replaced
by the test engine's (the package's pytest plugin starts one on a free port)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


@pytest.mark.slow  # starts the engine and runs each snippet in its own interpreter
def test_readme_snippets_run_as_written(promptcache_engine, tmp_path):
    blocks = readme_python_blocks()
    assert len(blocks) >= 2
    env = {**os.environ, "PROMPTCACHE_LEDGER": str(tmp_path / "ledger.db")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    outputs = []
    for i, code in enumerate(blocks):
        code = code.replace("http://127.0.0.1:8000", promptcache_engine.base_url)
        path = tmp_path / f"snippet{i}.py"
        path.write_text(code)
        proc = subprocess.run(
            [sys.executable, str(path)], capture_output=True, text=True, timeout=600, env=env
        )
        text = proc.stdout + proc.stderr
        assert proc.returncode == 0, text[-3000:]
        assert "Traceback" not in text, text[-3000:]
        assert not re.search(r"\b(SummaryRow|Explanation|Tracker)\(", text), text
        outputs.append(proc.stdout)
    table = outputs[0]
    row = next(x for x in table.splitlines() if x.startswith("gpt-5.4"))
    assert "$0.000000" not in row and "n/a" not in row
    assert re.search(r"\$0\.00[0-9]{4}", row)  # priced: a cost above zero
    assert "cached for the next request" in table  # the explain() text, printed once
    assert table.count("cached for the next request") == 1
