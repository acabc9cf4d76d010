"""``--fix`` and ``--diff`` for PC002: libcst adds ``sort_keys=True`` and keeps the layout."""

from __future__ import annotations

import textwrap

import pytest

from linters.cli import main
from linters.config import LintConfig
from linters.fix import fix_source
from linters.runner import lint_source

# issue 28: PC002 only where key order can differ between requests, e.g. a dict built by
# iterating a set
HEAD = "import json\nimport anthropic\nD = {k: 1 for k in set(NAMES)}\n"
CALL = 'anthropic.Anthropic().messages.create(model="m", system=PROMPT, messages=[])\n'


def fixed(body: str) -> str:
    src = (HEAD + textwrap.dedent(body) + CALL).encode()
    findings = lint_source(src, "t.py", LintConfig())
    assert [f.code for f in findings] == ["PC002"], findings
    out, n = fix_source(src, findings)
    assert n == 1
    after = out.decode()
    assert lint_source(out, "t.py", LintConfig()) == []  # the fix removes the finding
    return after[len(HEAD) : -len(CALL)]


def test_single_line_call():
    assert (
        fixed("def f(d):\n    return d\nPROMPT = 'Data: ' + json.dumps(D)  # keep me\n")
        == "def f(d):\n    return d\nPROMPT = 'Data: ' + json.dumps(D, sort_keys=True)  # keep me\n"
    )


def test_existing_keywords_are_kept():
    body = "def f(d):\n    return d\nPROMPT = json.dumps(D, indent=2, ensure_ascii=False)\n"
    assert fixed(body).endswith("json.dumps(D, indent=2, ensure_ascii=False, sort_keys=True)\n")


def test_multiline_call_with_trailing_comma_gets_its_own_line():
    body = textwrap.dedent("""\
        def f(d):
            return d
        PROMPT = "Catalog:" + json.dumps(
            D,
            indent=2,  # pretty
        )
    """)
    assert fixed(body).endswith(
        textwrap.dedent("""\
        PROMPT = "Catalog:" + json.dumps(
            D,
            indent=2,  # pretty
            sort_keys=True,
        )
    """)
    )


def test_multiline_single_argument():
    body = textwrap.dedent("""\
        def f(d):
            return d
        PROMPT = "Catalog:" + json.dumps(
            D,
        )
    """)
    assert fixed(body).endswith("json.dumps(\n    D,\n    sort_keys=True,\n)\n")


def test_explicit_false_and_orjson_are_reported_but_not_fixed():
    src = (
        HEAD + "import orjson\ndef f(d):\n    return d\n"
        "PROMPT = json.dumps(D, sort_keys=False) + orjson.dumps(D).decode()\n" + CALL
    ).encode()
    findings = lint_source(src, "t.py", LintConfig())
    assert [(f.code, f.fix) for f in findings] == [("PC002", None), ("PC002", None)]
    assert fix_source(src, findings) == (src, 0)


def test_cli_fix_writes_and_reports_what_is_left(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    src = (
        HEAD + "from datetime import datetime\ndef f(d):\n    return d\n"
        "PROMPT = json.dumps(D) + str(datetime.now())\n" + CALL
    )
    (tmp_path / "a.py").write_text(src)
    assert main(["a.py", "--fix"]) == 1  # PC001 has no automatic fix
    out = capsys.readouterr().out.splitlines()
    assert [ln.split()[1] for ln in out[:-1]] == ["PC001"]
    assert out[-1] == "fixed 1 finding; found 1 finding in 1 file, 1 file checked."
    assert "json.dumps(D, sort_keys=True)" in (tmp_path / "a.py").read_text()
    assert main(["a.py", "--fix"]) == 1
    assert (tmp_path / "a.py").read_text().count("sort_keys") == 1


def test_cli_diff_prints_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    src = HEAD + "def f(d):\n    return d\nPROMPT = json.dumps(D)\n" + CALL
    (tmp_path / "a.py").write_text(src)
    assert main(["a.py", "--diff"]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        "--- a/a.py",
        "+++ b/a.py",
        "@@ -3,5 +3,5 @@",
        " D = {k: 1 for k in set(NAMES)}",
        " def f(d):",
        "     return d",
        "-PROMPT = json.dumps(D)",
        "+PROMPT = json.dumps(D, sort_keys=True)",
        ' anthropic.Anthropic().messages.create(model="m", system=PROMPT, messages=[])',
    ]
    assert (tmp_path / "a.py").read_text() == src
    (tmp_path / "a.py").write_text(src.replace("json.dumps(D)", "json.dumps(D, sort_keys=True)"))
    assert main(["a.py", "--diff"]) == 0
    assert capsys.readouterr().out == ""


def test_cli_fix_with_diff_behaves_like_ruff(tmp_path, monkeypatch, capsys):
    # issue 31: `--fix --diff` prints the fix as a unified diff, writes nothing, and exits 1
    # when there would be changes (as `ruff check --fix --diff` does)
    monkeypatch.chdir(tmp_path)
    src = HEAD + "PROMPT = json.dumps(D)\n" + CALL
    (tmp_path / "a.py").write_text(src)
    assert main(["a.py", "--fix", "--diff"]) == 1
    out = capsys.readouterr().out
    assert "-PROMPT = json.dumps(D)\n+PROMPT = json.dumps(D, sort_keys=True)\n" in out
    assert (tmp_path / "a.py").read_text() == src


def test_schema_is_never_resorted(tmp_path):
    # issue 28: a schema's field order is what the model reads: reported, never re-sorted
    src = (
        HEAD + "schema = {k: {'type': 'string'} for k in set(NAMES)}\n"
        "PROMPT = json.dumps(schema)\n" + CALL
    ).encode()
    findings = lint_source(src, "t.py", LintConfig())
    assert [(f.code, f.fix) for f in findings] == [("PC002", None)]


@pytest.mark.parametrize("enc_line", ["", "# -*- coding: utf-8 -*-\n"])
def test_fix_preserves_crlf_and_unicode(enc_line):
    src = (
        (enc_line + HEAD + "def f(d):\n    return d\nPROMPT = 'Café: ' + json.dumps(D)\n" + CALL)
        .replace("\n", "\r\n")
        .encode()
    )
    findings = lint_source(src, "t.py", LintConfig())
    out, n = fix_source(src, findings)
    assert n == 1
    assert out == src.replace(b"json.dumps(D)", b"json.dumps(D, sort_keys=True)")
