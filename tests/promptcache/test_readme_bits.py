"""Small things a new user hits (issue 17): the README's pre-commit snippet pins a release
tag (pre-commit warns on a branch such as ``main``), and ``report --html`` into a missing
folder fails before printing anything."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import promptcache
from promptcache import Tracker, Usage
from promptcache.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_readme_pre_commit_snippet_pins_a_tag_and_says_why():
    readme = (ROOT / "README.md").read_text()
    block = next(
        b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "promptcache-lint" in b
    )
    (repo,) = yaml.safe_load(block)
    assert repo["rev"] == f"v{promptcache.__version__}"
    assert "mutable" in readme and "pre-commit autoupdate" in readme


def test_report_html_into_a_missing_folder_fails_before_printing(tmp_path, capsys):
    db = tmp_path / "l.db"
    t = Tracker(db)
    t.record(Usage(uncached_input_tokens=10, output_tokens=1), model="gpt-5.4")
    t.close()
    bad = tmp_path / "no" / "such" / "x.html"
    assert main(["report", "--db", str(db), "--html", str(bad)]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    err = cap.err.strip()
    assert "\n" not in err and "no such directory" in err and str(bad) in err
    assert main(["report", "--db", str(db), "--html", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
