"""Helpers of the packaging tests: the files git tracks, fresh virtual environments, pip.

The ``dist`` fixture (conftest.py) builds the sdist and the wheel once per session from a copy of
the files git tracks (plus new files not yet committed, minus ignored ones), so that what a CI
checkout holds is what is packaged. The build is ``python -m build`` (the ``build`` dev
dependency): the sdist first, then the wheel built *from the sdist* in an isolated environment,
as pip does for a user installing the sdist.
"""

from __future__ import annotations

import os
import subprocess
import venv
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_PACKAGES = ("promptcache", "linters", "local_engine")


def tracked_files(*paths: str) -> list[str]:
    """Paths (relative to the repository root, posix) that git tracks or would track under
    ``paths``: committed or staged files plus untracked ones that .gitignore does not exclude,
    without files deleted from the working tree."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(p for p in out.splitlines() if (ROOT / p).is_file())


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path


def make_venv(path: Path) -> Path:
    """A fresh virtual environment with pip (no system site-packages); returns its bin folder."""
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / ("Scripts" if os.name == "nt" else "bin")


def pip_install(bin_dir: Path, *args: str, timeout: int = 1500) -> None:
    """``pip install -q ARGS`` in the environment of ``bin_dir``; fails the test with pip's tail."""
    proc = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
