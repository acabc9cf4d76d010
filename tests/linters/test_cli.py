"""The command line: exit statuses, output formats, selection, config, files and folders."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from linters.cli import main

BAD = textwrap.dedent("""\
    from datetime import datetime
    import anthropic
    client = anthropic.Anthropic()
    def ask(q):
        return client.messages.create(model="m", system=f"Now: {datetime.now()}", messages=[{"role": "user", "content": q}])
""")
BAD_JSON = textwrap.dedent("""\
    import json
    import anthropic
    def ask(q, **profile):
        return anthropic.Anthropic().messages.create(model="m", system="Profile: " + json.dumps(profile), messages=[])
""")
CLEAN = "import anthropic\nSYSTEM = 'You are helpful.'\n"
# 1-based columns counted on the source lines themselves
COL = BAD.splitlines()[4].index("datetime.now()") + 1
END = COL + len("datetime.now()")
JCOL = BAD_JSON.splitlines()[3].index("json.dumps(profile)") + 1
JEND = JCOL + len("json.dumps(profile)")


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_exit_statuses_and_text_output(proj, capsys):
    write(proj / "bad.py", BAD)
    write(proj / "ok.py", CLEAN)
    assert main(["ok.py"]) == 0
    assert capsys.readouterr().out == "no findings, 1 file checked.\n"
    assert main(["bad.py", "ok.py"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(
        f"bad.py:5:{COL}: PC001 `datetime.now()` (the clock) reaches the system prompt"
    )
    assert out[-1] == "found 1 finding in 1 file, 2 files checked."


def test_usage_errors_are_one_line_exit_2(proj, capsys):
    assert main(["missing.py"]) == 2
    err = capsys.readouterr().err
    assert err == "promptcache lint: error: no such file or directory: missing.py\n"
    write(proj / "ok.py", CLEAN)
    assert main(["--select", "PC0x9", "ok.py"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    with pytest.raises(SystemExit) as exc:
        main(["--format", "xml", "ok.py"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_select_and_ignore(proj, capsys):
    write(proj / "a.py", BAD)
    write(proj / "b.py", BAD_JSON)
    assert main(["-q", "."]) == 1
    codes = [ln.split()[1] for ln in capsys.readouterr().out.splitlines()]
    assert codes == ["PC001", "PC002"]
    assert main(["-q", "--select", "PC002", "."]) == 1
    assert [ln.split()[1] for ln in capsys.readouterr().out.splitlines()] == ["PC002"]
    assert main(["-q", "--ignore", "PC001,PC002", "."]) == 0
    assert main(["-q", "--select", "PC00", "--ignore", "PC002", "."]) == 1
    assert [ln.split()[1] for ln in capsys.readouterr().out.splitlines()] == ["PC001"]


def test_json_format(proj, capsys):
    write(proj / "b.py", BAD_JSON)
    assert main(["--format", "json", "b.py"]) == 1
    doc = json.loads(capsys.readouterr().out)
    data = doc["findings"]
    # issue 28: JSON output carries the summary the text output prints
    assert doc["summary"] == {
        "files_checked": 1,
        "files_not_parsed": 0,
        "findings": 1,
        "fixable": 1,
        "by_rule": {"PC002": 1},
        "by_severity": {"warning": 1},
    }
    assert data == [
        {
            "code": "PC002",
            "name": "unsorted-json-in-prompt",
            "severity": "warning",
            "message": data[0]["message"],
            "path": "b.py",
            "line": 4,
            "column": JCOL,
            "end_line": 4,
            "end_column": JEND,
            "fixable": True,
            # issue 31: resolves for a pip user (prints the installed rule page)
            "doc": "promptcache lint --explain PC002",
        }
    ]


def test_sarif_format(proj, capsys):
    write(proj / "a.py", BAD)
    assert main(["--format", "sarif", "a.py"]) == 1
    log = json.loads(capsys.readouterr().out)
    assert log["version"] == "2.1.0"
    run = log["runs"][0]
    assert run["tool"]["driver"]["name"] == "promptcache-lint"
    ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert ids[:8] == [f"PC00{i}" for i in range(1, 9)]
    (res,) = run["results"]
    assert res["ruleId"] == "PC001" and ids[res["ruleIndex"]] == "PC001"
    region = res["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 5, "startColumn": COL, "endLine": 5, "endColumn": END}
    assert res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "a.py"
    assert res["level"] == "warning"
    # issue 31: no link that may not resolve; the installed rule page travels in the log
    rule = run["tool"]["driver"]["rules"][0]
    assert "helpUri" not in rule
    assert rule["help"]["markdown"].startswith("# PC001: volatile-in-prefix\n")
    assert rule["help"]["text"] == "Run `promptcache lint --explain PC001`."


def test_explain_prints_the_installed_rule_page(capsys):
    assert main(["--explain", "pc002"]) == 0
    assert capsys.readouterr().out.startswith("# PC002: unsorted-json-in-prompt\n")
    assert main(["--explain", "PC999"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("promptcache lint: error: --explain: unknown rule code 'PC999'")
    assert err.count("\n") == 1


def test_github_format_escapes(proj, capsys):
    write(proj / "a,b.py", BAD)
    assert main(["--format", "github", "a,b.py"]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(
        f"::warning file=a%2Cb.py,line=5,col={COL},endLine=5,endColumn={END},title=PC001::PC001 "
    )


def test_folders_recurse_respect_gitignore_and_skip_venvs(proj, capsys):
    subprocess.run(["git", "init", "-q"], cwd=proj, check=True)
    write(proj / ".gitignore", "generated/\nscratch_*.py\n")
    write(proj / "app" / "main.py", BAD)
    write(proj / "app" / "scratch_1.py", BAD)
    write(proj / "generated" / "out.py", BAD)
    write(proj / "app" / ".gitignore", "!scratch_keep.py\nlocal.py\n")
    write(proj / "app" / "scratch_keep.py", BAD)
    write(proj / "app" / "local.py", BAD)
    write(proj / ".venv" / "lib" / "x.py", BAD)
    write(proj / "env2" / "pyvenv.cfg", "home = /usr\n")
    write(proj / "env2" / "y.py", BAD)
    write(proj / "notes.txt", "datetime.now()")
    assert main(["-q", "."]) == 1
    paths = sorted({ln.split(":")[0] for ln in capsys.readouterr().out.splitlines()})
    assert paths == ["app/main.py", "app/scratch_keep.py"]
    assert main(["-q", "--no-respect-gitignore", "."]) == 1
    paths = sorted({ln.split(":")[0] for ln in capsys.readouterr().out.splitlines()})
    assert paths == [
        "app/local.py",
        "app/main.py",
        "app/scratch_1.py",
        "app/scratch_keep.py",
        "generated/out.py",
    ]
    # a file named explicitly is read even when ignored
    assert main(["-q", "generated/out.py"]) == 1


def test_exclude_option_and_symlink_loops(proj, capsys):
    write(proj / "app" / "a.py", BAD)
    write(proj / "vendor" / "v.py", BAD)
    (proj / "app" / "loop").symlink_to(proj / "app", target_is_directory=True)
    assert main(["-q", "--exclude", "vendor/", "."]) == 1
    assert [ln.split(":")[0] for ln in capsys.readouterr().out.splitlines()] == ["app/a.py"]


def test_pyproject_config(proj, capsys):
    write(proj / "pkg" / "a.py", BAD)
    write(proj / "pkg" / "b.py", BAD_JSON)
    write(proj / "tests" / "t.py", BAD)
    write(proj / "migrations" / "m.py", BAD)
    write(
        proj / "pyproject.toml",
        textwrap.dedent("""\
        [project]
        name = "x"
        [tool.promptcache.lint]
        ignore = ["PC002"]
        exclude = ["migrations/"]
        per-file-ignores = { "tests/**" = ["PC001"] }
    """),
    )
    assert main(["-q", "."]) == 1
    assert [ln.split(":")[0] for ln in capsys.readouterr().out.splitlines()] == ["pkg/a.py"]
    assert main(["-q", "--isolated", "."]) == 1  # tests/ is skipped by default
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["-q", "--isolated", "--include-tests", "."]) == 1
    assert len(capsys.readouterr().out.splitlines()) == 4
    # a subfolder finds the pyproject above it
    os.chdir(proj / "pkg")
    assert main(["-q", "b.py"]) == 0


@pytest.mark.parametrize(
    "table,needle",
    [
        ('colour = "red"', "unknown key 'colour'"),
        ('select = "PC001"', "select must be a list"),
        ('ignore = ["PC777"]', "unknown rule code 'PC777'"),
        ("min-static-chars = -1", "min-static-chars must be >= 0"),
        ('provider = "acme"', "provider must be one of"),
    ],
)
def test_bad_config_is_a_usage_error(proj, capsys, table, needle):
    write(proj / "a.py", CLEAN)
    write(proj / "pyproject.toml", f"[tool.promptcache.lint]\n{table}\n")
    assert main(["a.py"]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_broken_toml_is_a_usage_error(proj, capsys):
    write(proj / "a.py", CLEAN)
    write(proj / "cfg.toml", "[tool.promptcache.lint\n")
    assert main(["--config", "cfg.toml", "a.py"]) == 2
    assert "invalid TOML" in capsys.readouterr().err


def test_parse_error_is_reported_not_raised(proj, capsys):
    write(proj / "broken.py", "def f(:\n")
    write(
        proj / "latin.py",
        "# -*- coding: latin-1 -*-\nx = 'caf\xe9'\n".encode("latin-1").decode("latin-1"),
    )
    (proj / "latin.py").write_bytes("# -*- coding: latin-1 -*-\nx = 'caf\xe9'\n".encode("latin-1"))
    (proj / "undecodable.py").write_bytes(b"x = '\xff\xfe'\n")
    # a file that does not parse is an info notice (not checked), not a failing finding
    assert main(["."]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[1:3] for ln in lines[:-1]] == [["PC900", "[info]"], ["PC900", "[info]"]]
    assert lines[0].startswith("broken.py:1:")
    assert lines[1].startswith("undecodable.py:1:")
    assert lines[-1] == (
        "found 2 findings in 2 files, 3 files read: 1 checked, 2 do not parse (PC900, not checked)."
    )


def test_list_rules(capsys):
    assert main(["--list-rules"]) == 0
    out = capsys.readouterr().out
    assert "PC002  unsorted-json-in-prompt [fix]:" in out and "PC900  parse-error" in out


def test_jobs_give_the_same_findings(proj, capsys):
    for i in range(6):
        write(proj / f"m{i}.py", BAD if i % 2 else BAD_JSON)
    assert main(["-q", "."]) == 1
    one = capsys.readouterr().out
    assert main(["-q", "-j", "2", "."]) == 1
    assert capsys.readouterr().out == one


@pytest.mark.parametrize(
    "argv",
    [
        [sys.executable, "-m", "linters"],
        [str(Path(sys.executable).with_name("promptcache")), "lint"],
    ],
)
def test_entry_points(proj, argv):
    write(proj / "a.py", BAD)
    res = subprocess.run(argv + ["a.py"], capture_output=True, text=True, cwd=proj)
    assert res.returncode == 1, res.stderr
    assert res.stdout.startswith(f"a.py:5:{COL}: PC001 ")
    res = subprocess.run(argv + ["nope.py"], capture_output=True, text=True, cwd=proj)
    assert res.returncode == 2 and res.stderr.count("\n") == 1
