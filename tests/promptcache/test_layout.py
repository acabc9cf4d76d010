"""The SDK's layout (issue 27): subpackages by capability, old module paths that still import
with a deprecation warning, the public names, and units a reader can hold."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import promptcache
from promptcache._compat import MOVED

ROOT = Path(__file__).resolve().parents[2]
SUBPACKAGES = [
    "prompt",
    "providers",
    "misses",
    "compose",
    "ledger",
    "reports",
    "simulation",
    "integrations",
]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_module_path_warns_and_is_the_new_module(old):
    new = importlib.import_module(MOVED[old])
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mod = importlib.import_module(old)
    assert mod is new
    assert mod.__spec__.name == MOVED[old]  # the module's own spec is kept
    (w,) = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert f"{old} moved to {MOVED[old]}" in str(w.message)


def test_old_paths_named_by_the_functions_keep_working_without_a_warning():
    # `promptcache.build` / `.check` are the public functions and the 0.1 modules
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from promptcache.build import Prompt, build
        from promptcache.check import check
        from promptcache.ledger import Tracker
        from promptcache.prompt import PromptLayers
    assert promptcache.build is build and promptcache.check is check
    assert Prompt.__module__ == "promptcache.compose.build"
    assert Tracker.__module__ == "promptcache.ledger.tracker"
    assert PromptLayers.__module__ == "promptcache.prompt.layers"


def test_every_public_name_resolves():
    for name in promptcache.__all__:
        assert getattr(promptcache, name) is not None, name


def test_at_most_twelve_modules_at_the_top_level():
    top = [p.name for p in (ROOT / "promptcache").glob("*.py")]
    assert len(top) <= 12, top


@pytest.mark.parametrize("sub", SUBPACKAGES)
def test_each_subpackage_says_what_it_owns_and_may_import(sub):
    doc = importlib.import_module(f"promptcache.{sub}").__doc__ or ""
    assert len(doc.split()) >= 40, f"promptcache.{sub} needs an __init__ docstring paragraph"
    assert "import" in doc  # what it may import


def _long_functions(package: str, limit: int = 100) -> list[str]:
    out = []
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > limit:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines})")
    return out


@pytest.mark.parametrize("package", ["promptcache", "linters"])
def test_no_function_over_100_lines(package):
    assert _long_functions(package) == []


def test_importing_the_sdk_loads_neither_torch_nor_the_engine():
    code = (
        "import sys, promptcache, promptcache.integrations.clients, promptcache.reports.report;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'local_engine')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
