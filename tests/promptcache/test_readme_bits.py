"""Small things a new user hits (issue 17): ``report --html`` into a missing folder fails before
printing anything. (The README's pre-commit snippets are run in tests/linters/test_precommit.py.)"""

from __future__ import annotations

from promptcache import Tracker, Usage
from promptcache.cli import main


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
