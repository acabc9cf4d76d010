"""The published pre-commit hook stops a commit that busts the cache and lets a clean one in.

Runs the real ``pre-commit`` (a dev dependency) in a temporary git repository:

- fast: the repository uses ``repo: local`` with ``language: system`` pointing at this
  checkout's ``promptcache`` script, with the same ``id``/``types`` as the published hook;
- fast: the README's ``repo: local`` snippet as written, with ``promptcache`` found on PATH as
  in a user's activated virtual environment;
- slow: the README's remote snippet, its URL replaced by a fresh clone of this checkout and its
  ``<full commit sha>`` by that clone's HEAD, so pre-commit clones it and pip-installs it from
  ``.pre-commit-hooks.yaml`` exactly as a user's project would (needs the package index).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRE_COMMIT = Path(sys.executable).with_name("pre-commit")
PROMPTCACHE = Path(sys.executable).with_name("promptcache")

BAD = textwrap.dedent("""\
    from datetime import datetime
    import anthropic
    client = anthropic.Anthropic()
    def ask(q):
        return client.messages.create(model="m", system=f"Now: {datetime.now()}", messages=[{"role": "user", "content": q}])
""")
GOOD = BAD.replace('system=f"Now: {datetime.now()}"', 'system="You are helpful."')


def readme_precommit_snippets() -> list[str]:
    """The README's ``yaml`` blocks that configure the promptcache-lint hook."""
    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"^```yaml\n(.*?)^```", readme, re.S | re.M)
    return [b for b in blocks if "id: promptcache-lint" in b]


def test_readme_snippets_pin_nothing_that_does_not_exist():
    local, remote = readme_precommit_snippets()
    assert "repo: local" in local and "language: system" in local
    (rev,) = re.findall(r"^\s*rev:\s*(.+?)\s*(?:#.*)?$", remote, re.M)
    tags = _git(REPO, "tag", "--list").stdout.split()
    assert rev == "<full commit sha>" or rev in tags, rev  # a placeholder or a real tag


def test_published_manifest():
    from pre_commit.clientlib import load_manifest

    (hook,) = load_manifest(str(REPO / ".pre-commit-hooks.yaml"))
    assert hook["id"] == "promptcache-lint"
    assert hook["entry"] == "promptcache lint --force-exclude"
    assert hook["language"] == "python"
    assert hook["types"] == ["python"]


def _git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=check)


def _new_repo(tmp_path: Path, config: str) -> tuple[Path, dict]:
    repo = tmp_path / "app"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "dev@example.com")
    _git(repo, "config", "user.name", "Dev")
    _git(repo, "config", "commit.gpgsign", "false")
    (repo / ".pre-commit-config.yaml").write_text(config)
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "pc-home"), PRE_COMMIT_COLOR="never")
    env["PATH"] = f"{PRE_COMMIT.parent}{os.pathsep}{env.get('PATH', '')}"
    subprocess.run(
        [str(PRE_COMMIT), "install"], cwd=repo, env=env, check=True, capture_output=True, text=True
    )
    _git(repo, "add", ".pre-commit-config.yaml")
    return repo, env


def _commit_cycle(repo: Path, env: dict, timeout: int) -> None:
    (repo / "app.py").write_text(BAD)
    _git(repo, "add", "app.py")
    bad = subprocess.run(
        ["git", "commit", "-m", "bad"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    out = bad.stdout + bad.stderr
    assert bad.returncode != 0, out
    assert "promptcache lint" in out and "Failed" in out
    assert "app.py:5:" in out and "PC001" in out
    assert _git(repo, "rev-parse", "--verify", "HEAD", check=False).returncode != 0  # no commit

    (repo / "app.py").write_text(GOOD)
    _git(repo, "add", "app.py")
    good = subprocess.run(
        ["git", "commit", "-m", "good"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    out = good.stdout + good.stderr
    assert good.returncode == 0, out
    assert "Passed" in out
    assert _git(repo, "log", "--format=%s").stdout.split() == ["good"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_local_hook_stops_bad_commit(tmp_path):
    config = textwrap.dedent(f"""\
        repos:
          - repo: local
            hooks:
              - id: promptcache-lint
                name: promptcache lint
                entry: {PROMPTCACHE} lint
                language: system
                types: [python]
    """)
    repo, env = _new_repo(tmp_path, config)
    _commit_cycle(repo, env, timeout=120)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_readme_local_hook_as_written(tmp_path):
    """The README's first snippet, unchanged; ``promptcache`` on PATH runs this checkout."""
    local, _ = readme_precommit_snippets()
    repo, env = _new_repo(tmp_path, local)
    env["PATH"] = f"{PROMPTCACHE.parent}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    _commit_cycle(repo, env, timeout=120)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_readme_remote_hook_from_a_fresh_clone(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=300)
    head = _git(clone, "rev-parse", "HEAD").stdout.strip()
    if _git(clone, "show", f"{head}:.pre-commit-hooks.yaml", check=False).returncode != 0:
        pytest.fail(".pre-commit-hooks.yaml is not committed at HEAD; commit it first")
    _, remote = readme_precommit_snippets()
    url = re.search(r"repo:\s*(\S+)", remote).group(1)
    config = remote.replace(url, str(clone)).replace("<full commit sha>", head)
    repo, env = _new_repo(tmp_path, config)
    _commit_cycle(repo, env, timeout=1500)
