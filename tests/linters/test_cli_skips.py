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
