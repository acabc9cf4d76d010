"""``promptcache lint report.html`` (issue 17): a file that is neither Python nor a request
payload is not parsed as Python (no PC900); it is skipped and the run says so."""

from __future__ import annotations

import pytest

from linters.cli import main

BAD = (
    "from datetime import datetime\nimport anthropic\n"
    "def ask(q):\n"
    "    return anthropic.Anthropic().messages.create(model='m', "
    "system=f'Now: {datetime.now()}', messages=[])\n"
)


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "report.html").write_text("<!doctype html><html><body>$0.01</body></html>")
    (tmp_path / "notes.md").write_text("# notes\n")
    (tmp_path / "app.py").write_text(BAD)
    (tmp_path / "tool").write_text("#!/usr/bin/env python3\n" + BAD)
    return tmp_path


def test_named_html_is_skipped_and_said(proj, capsys):
    assert main(["report.html"]) == 0
    cap = capsys.readouterr()
    assert "PC900" not in cap.out
    assert "skipped report.html: not a Python file" in cap.err


def test_mixed_named_files_lint_the_python_and_list_the_skips(proj, capsys):
    assert main(["report.html", "notes.md", "app.py", "tool"]) == 1
    cap = capsys.readouterr()
    assert "app.py:4:" in cap.out and "tool:5:" in cap.out  # a python shebang is Python
    assert "PC900" not in cap.out
    assert "skipped report.html" in cap.err and "skipped notes.md" in cap.err


def test_a_folder_walk_skips_non_python_silently(proj, capsys):
    assert main(["."]) == 1
    cap = capsys.readouterr()
    assert "app.py:4:" in cap.out and "report.html" not in cap.out + cap.err


def test_a_named_tests_folder_the_defaults_skip_is_said(proj, capsys):
    """``promptcache lint tests/unit``: every file is a test, so nothing is linted; one line
    on stderr says why and names ``--include-tests`` (exit 0, as nothing was found)."""
    unit = proj / "tests" / "unit"
    unit.mkdir(parents=True)
    (unit / "test_ask.py").write_text(BAD)
    (unit / "conftest.py").write_text("")
    assert main(["tests/unit"]) == 0
    cap = capsys.readouterr()
    assert cap.err.splitlines() == [
        "promptcache lint: skipped tests/unit: its 2 Python files are tests, examples, docs "
        "or evaluation code, skipped by default; pass --include-tests to lint them"
    ]
    assert "0 files checked" in cap.out
    assert main(["--include-tests", "tests/unit"]) == 1  # the clock in test_ask.py
    cap = capsys.readouterr()
    assert "skipped" not in cap.err and "test_ask.py:4:" in cap.out


def test_a_named_folder_the_exclude_setting_removes_is_said(proj, capsys):
    (proj / "pyproject.toml").write_text('[tool.promptcache.lint]\nexclude = ["vendor/"]\n')
    (proj / "vendor").mkdir()
    (proj / "vendor" / "client.py").write_text(BAD)
    assert main(["vendor"]) == 0
    cap = capsys.readouterr()
    assert cap.err.splitlines() == [
        "promptcache lint: skipped vendor: excluded by the `exclude` setting in pyproject.toml"
    ]


def test_a_named_folder_without_python_says_nothing_more(proj, capsys):
    (proj / "assets").mkdir()
    (proj / "assets" / "logo.svg").write_text("<svg/>")
    assert main(["assets"]) == 0
    assert capsys.readouterr().err == ""
