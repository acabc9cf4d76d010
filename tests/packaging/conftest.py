"""The packaging tests' session fixture: the sdist and the wheel, built once (see _dist.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from ._dist import ROOT, Dist, make_venv, pip_install, tracked_files


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout (the packaged files are compared with git ls-files)")
    pytest.importorskip("build", reason="the packaging tests need the dev extra (build)")
    src = tmp_path_factory.mktemp("src")
    for rel in tracked_files():
        dst = src / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dst)
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return Dist(sdist=sdist, wheel=wheel)


@pytest.fixture(scope="session")
def sdk_bin(dist, tmp_path_factory):
    """The bin folder of a fresh venv holding ``pip install promptcache`` (the built wheel and
    the SDK's own dependencies, no extra)."""
    bin_dir = make_venv(tmp_path_factory.mktemp("sdk-venv") / "venv")
    pip_install(bin_dir, str(dist.wheel))
    return bin_dir
