"""The repository passes its own linter (with the excludes in pyproject.toml), the way a
user's pre-commit hook would run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_repository_lints_clean():
    proc = subprocess.run(
        [sys.executable, "-m", "promptcache", "lint", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "no findings" in proc.stdout
