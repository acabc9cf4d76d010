"""Extras match each install (issue 31): the table of import names in promptcache/extras.py is
pyproject.toml's extras, and a command run without the extra it needs says which one in one
line with exit code 2. Missing packages are simulated with ``sys.modules[name] = None`` (what
``import`` and ``importlib.util.find_spec`` read as "not installed"); the real SDK-only
install is tests/packaging/test_sdk_only_venv.py."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # the SDK's dependency on 3.10
    import tomli as tomllib

from promptcache import extras
from promptcache.cli import main

ROOT = Path(__file__).resolve().parents[2]
# distribution name (as pyproject.toml spells it) -> import name, where they differ
IMPORT_NAMES = {
    "prometheus-client": "prometheus_client",
    "opentelemetry-api": "opentelemetry",
    "openai-agents": "agents",
    "pydantic-ai-slim": "pydantic_ai",
}


def _import_name(requirement: str) -> str:
    dist = re.split(r"[\[<>=;! ]", requirement, maxsplit=1)[0]
    return IMPORT_NAMES.get(dist, dist.replace("-", "_"))


def test_extra_modules_are_pyprojects_extras():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for extra, modules in extras.EXTRA_MODULES.items():
        own = [r for r in declared[extra] if not r.startswith("promptcache[")]
        assert tuple(_import_name(r) for r in own) == modules, extra
    assert set(declared) - set(extras.EXTRA_MODULES) == {"dev"}
    # [gpu] is the engine plus triton; [engine] never pulls triton
    assert "promptcache[engine]" in declared["gpu"]
    assert "triton" not in extras.EXTRA_MODULES["engine"]


def test_extra_for_module():
    assert extras.extra_for_module("triton.language") == "gpu"
    assert extras.extra_for_module("pydantic") == "engine"  # fastapi's dependency
    assert extras.extra_for_module("starlette") == "proxy"  # the smallest extra with it
    assert extras.extra_for_module("starlette", prefer="engine") == "engine"  # fastapi's
    assert extras.extra_for_module("prometheus_client") == "prometheus"  # the smallest extra
    assert extras.extra_for_module("prometheus_client", prefer="engine") == "engine"
    assert extras.extra_for_module("psycopg") == "postgres"
    assert extras.extra_for_module("promptcache.nope") is None


def _hide(monkeypatch, *names):
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("argv", [["serve", "--help"], ["serve"], ["demo", "--help"], ["demo"]])
def test_engine_commands_without_the_engine_extra(monkeypatch, capsys, argv):
    _hide(monkeypatch, "torch", "fastapi")
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    line = _one_line(cap.err)
    assert line == (
        f"promptcache {argv[0]}: error: needs the engine extra (torch, fastapi not installed): "
        "pip install 'promptcache[engine]'"
    )


def test_kv_plan_presets_need_no_extra(monkeypatch, capsys):
    _hide(monkeypatch, *extras.EXTRA_MODULES["engine"])
    assert main(["kv-plan", "--model", "smollm2-135m", "--context", "4096"]) == 0
    # SmolLM2-135M: 30 layers x 3 KV heads x 64 dims x 2 (K and V) x 2 bytes (bf16) per token
    assert f"{30 * 3 * 64 * 2 * 2:,} B" in capsys.readouterr().out


def test_kv_plan_on_a_gguf_file_names_the_engine_extra(monkeypatch, capsys, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    _hide(monkeypatch, "gguf")
    assert main(["kv-plan", "--model", str(model), "--context", "4096"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line == (
        "promptcache kv-plan: error: needs the engine extra (gguf not installed): "
        "pip install 'promptcache[engine]'"
    )


def test_a_missing_module_of_this_package_keeps_its_traceback(monkeypatch):
    from promptcache import cli

    monkeypatch.setitem(cli.SUBCOMMANDS, "report", ("promptcache.no_such_module", "x"))
    with pytest.raises(ModuleNotFoundError):
        main(["report"])


def test_a_postgres_ledger_without_psycopg_names_the_postgres_extra(monkeypatch, capsys):
    _hide(monkeypatch, "psycopg")
    assert main(["report", "--db", "postgresql://u:p@127.0.0.1:1/x"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.endswith("needs the postgres extra (psycopg): pip install 'promptcache[postgres]'")
