"""Every Python block of the README runs as written (issues 17 and 31): a doc-snippet runner.

Each fenced ``python`` block is one test, named by its line in README.md:

- a block that defines ``test_*`` functions is a test module (the README's pytest example): it
  is saved as ``test_readme_block.py`` and run with pytest in a fresh interpreter, where the
  package's pytest plugin starts its own engine, as it would in a user's project;
- any other block runs as a script in a fresh interpreter, with the local engine the package's
  pytest plugin started for this session: the README's ``http://127.0.0.1:8000`` becomes that
  engine's address, and ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL`` (with a placeholder key)
  point a client made with no arguments at it too. Its ledger is a fresh file. A fragment that
  uses the names the README's prose gives it and does not define them -- ``tracker`` (a
  ``promptcache.Tracker()``), ``base_url`` and ``model`` (your server; the Frameworks section)
  -- runs after three lines that define them for the local engine; any other undefined name
  fails the block.

A block passes when it exits 0 with no traceback, no raw repr of a promptcache object, and no
DeprecationWarning naming a promptcache module path. A new README section is covered with no
change here; the first walk-through's table is also checked for a priced row (no $0, no n/a).
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
_FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def readme_python_blocks() -> list[tuple[int, str]]:
    """(line of the opening fence, code) for each fenced ``python`` block of README.md."""
    text = README.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _FENCE.finditer(text)]


def _is_test_module(code: str) -> bool:
    return re.search(r"^def test_\w*\(", code, re.M) is not None


BLOCKS = readme_python_blocks()
# names the README's prose defines for a fragment, and their definition against the engine
CONTEXT = {
    "tracker": "tracker = promptcache.Tracker()",
    "base_url": "base_url = {openai_base_url!r}",
    "model": 'model = "SmolLM2-135M-Instruct"',
}


def free_names(code: str) -> set[str]:
    """Names ``code`` reads but never binds (assignments, imports, defs, arguments) and that
    are not builtins."""
    bound, read = set(dir(builtins)), set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).partition(".")[0])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
    return read - bound


def with_context(code: str, openai_base_url: str) -> str:
    """``code`` preceded by the definitions of the :data:`CONTEXT` names it leaves free."""
    free = free_names(code) & set(CONTEXT)
    if not free:
        return code
    lines = ["import promptcache"] + [
        CONTEXT[n].format(openai_base_url=openai_base_url) for n in sorted(free)
    ]
    return "\n".join(lines) + "\n" + code


def test_free_names():
    code = "import httpx, openai\nhttp = promptcache.wrap(httpx.Client(), tracker)\n"
    code += "openai.OpenAI(base_url=base_url).chat.completions.create(model=model)\n"
    assert free_names(code) == {"promptcache", "tracker", "base_url", "model"}
    assert free_names("def f(x):\n    return x\nprint(f(1))\n") == set()


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 3
    assert any(_is_test_module(code) for _, code in BLOCKS)


def _check_output(text: str) -> None:
    assert "Traceback" not in text, text[-3000:]
    assert not re.search(r"\b(SummaryRow|Explanation|Tracker)\(", text), text[-3000:]
    assert not re.search(r"DeprecationWarning: promptcache\.", text), text[-3000:]


def _env(tmp_path: Path, base_url: str | None) -> dict[str, str]:
    env = {**os.environ, "PROMPTCACHE_LEDGER": str(tmp_path / "ledger.db")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if base_url is not None:
        env.update(
            OPENAI_BASE_URL=f"{base_url}/v1",
            OPENAI_API_KEY="local",
            ANTHROPIC_BASE_URL=base_url,
            ANTHROPIC_API_KEY="local",
            OPENAI_AGENTS_DISABLE_TRACING="1",  # the Agents SDK exports no trace from a test
        )
    return env


def _check_walkthrough_table(out: str) -> None:
    """The first snippet's ``tracker.summary(by="model")`` and ``prompt.explain(...)``."""
    row = next(x for x in out.splitlines() if x.startswith("gpt-5.4"))
    assert "$0.000000" not in row and "n/a" not in row
    assert re.search(r"\$0\.00[0-9]{4}", row)  # priced: a cost above zero
    assert out.count("cached for the next request") == 1  # the explain() text, printed once


@pytest.mark.slow  # each block in its own interpreter; the script blocks share one engine
@pytest.mark.parametrize(
    "code",
    [pytest.param(code, id=f"README.md:{line}") for line, code in BLOCKS],
)
def test_readme_python_block_runs_as_written(request, tmp_path, code):
    if _is_test_module(code):
        path = tmp_path / "test_readme_block.py"
        path.write_text(code)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=_env(tmp_path, None)
        )
        text = proc.stdout + proc.stderr
        assert proc.returncode == 0, text[-3000:]
        n_tests = len(re.findall(r"^def test_\w*\(", code, re.M))
        assert re.search(rf"\b{n_tests} passed\b", proc.stdout), text[-3000:]
        assert not re.search(r"DeprecationWarning: promptcache\.", text), text[-3000:]
        return
    engine = request.getfixturevalue("promptcache_engine")
    path = tmp_path / "snippet.py"
    code = with_context(code, f"{engine.base_url}/v1")
    path.write_text(code.replace("http://127.0.0.1:8000", engine.base_url))
    proc = subprocess.run(
        # shown, so that a README snippet on a deprecated promptcache path fails below
        [sys.executable, "-W", "default::DeprecationWarning", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env=_env(tmp_path, engine.base_url),
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    _check_output(text)
    if "tracker.summary(" in code and "gpt-5.4" in code:
        _check_walkthrough_table(proc.stdout)
