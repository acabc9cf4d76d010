"""Issue 28: every false-positive kind and every miss it lists, as small programs written for
these tests, each asserting the exact finding or its absence."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from linters.config import LintConfig
from linters.files import discover
from linters.runner import lint_source


def lint(src: str) -> list:
    return lint_source(textwrap.dedent(src).lstrip(), "t.py", LintConfig())


def found(src: str) -> list[tuple[int, str, str]]:
    return [(f.line, f.code, f.severity) for f in lint(src)]


# -- false positives ----------------------------------------------------------------------


def test_telemetry_and_event_ids_are_not_prompt_text():
    # an AG-UI-style event id and a message id next to (not in) the system content
    src = """
    import uuid
    import anthropic
    from ag_ui.core import TextMessageStartEvent
    SYSTEM = "You are a support agent for a hosting company."
    def ask(q, emit):
        emit(TextMessageStartEvent(message_id=str(uuid.uuid4()), role="assistant"))
        msgs = [{"role": "system", "content": SYSTEM, "id": str(uuid.uuid4())},
                {"role": "user", "content": q}]
        return anthropic.Anthropic().messages.create(model="m", messages=msgs)
    """
    assert found(src) == []


def test_id_as_bookkeeping_key_is_not_volatile():
    src = """
    import anthropic
    TOOLS = [{"name": "search", "input_schema": {}}, {"name": "fetch", "input_schema": {}}]
    def ask(q):
        seen = {}
        for t in TOOLS + TOOLS:
            seen[id(t)] = t
        return anthropic.Anthropic().messages.create(
            model="m", tools=list(seen.values()), messages=[{"role": "user", "content": q}])
    """
    assert found(src) == []


def test_id_rendered_into_the_system_prompt_is_reported():
    src = """
    import anthropic
    def ask(q, session):
        return anthropic.Anthropic().messages.create(
            model="m", system=f"Session {id(session)}. Be brief.",
            messages=[{"role": "user", "content": q}])
    """
    assert found(src) == [(4, "PC001", "warning")]


def test_order_preserving_filter_of_own_tool_dict_is_not_reported():
    src = """
    import anthropic
    TOOLS = {
        "search": {"name": "search", "description": "Search", "input_schema": {}},
        "fetch": {"name": "fetch", "description": "Fetch", "input_schema": {}},
    }
    def ask(q, names):
        chosen = {k: v for k, v in TOOLS.items() if k in names}
        return anthropic.Anthropic().messages.create(
            model="m", tools=list(chosen.values()), messages=[{"role": "user", "content": q}])
    """
    assert found(src) == []


def test_a_date_is_info_with_honest_text_and_one_finding_per_root_cause():
    src = """
    import anthropic
    from datetime import datetime
    def today():
        return datetime.now().strftime("%Y-%m-%d")
    def ask(q):
        day = today()
        return anthropic.Anthropic().messages.create(
            model="m",
            system=f"Date: {day}. Rules...",
            messages=[{"role": "system", "content": f"Again {day}"},
                      {"role": "user", "content": q}])
    """
    got = lint(src)
    assert [(f.line, f.code, f.severity) for f in got] == [(9, "PC001", "info")]
    assert "changes once a day: one cache write per day" in got[0].message
    assert "also reaches a prefix on line 10" in got[0].message


@pytest.mark.parametrize(
    "expr,severity",
    [
        ("datetime.now():%Y-%m-%d", "info"),
        ("datetime.now():%H:%M", "warning"),
        ("datetime.now().date()", "info"),
        ("time.strftime('%Y-%m-%d')", "info"),
        ("time.strftime('%Y-%m-%d %H')", "warning"),
        ("datetime.now().hour", "warning"),
    ],
)
def test_rate_follows_the_printed_fields(expr, severity):
    src = f"""
    import time
    import anthropic
    from datetime import datetime
    def ask(q):
        return anthropic.Anthropic().messages.create(
            model="m", system=f"Now {{{expr}}}. Rules...",
            messages=[{{"role": "user", "content": q}}])
    """
    assert found(src) == [(6, "PC001", severity)]


@pytest.mark.parametrize(
    "expr",
    ["getpass.getuser()", "platform.platform()", "datetime.now().year", "START"],
)
def test_per_process_values_are_not_reported(expr):
    src = f"""
    import getpass
    import platform
    import anthropic
    from datetime import datetime
    START = datetime.now()
    def ask(q):
        return anthropic.Anthropic().messages.create(
            model="m", system=f"User {{{expr}}}. Rules...",
            messages=[{{"role": "user", "content": q}}])
    """
    # START is computed once, at import: per process like the others
    assert found(src) == []


def test_a_clock_on_one_path_only_is_info():
    # a stored timestamp normally, the clock only as a fallback: the code avoids the clock
    src = """
    import anthropic
    from datetime import datetime
    def rebuild(agent, q, update):
        if update:
            stamp = datetime.now().isoformat()
        else:
            stamp = agent.created_at
        return anthropic.Anthropic().messages.create(
            model="m", system=f"Memory edited {stamp}. Rules...",
            messages=[{"role": "user", "content": q}])
    """
    got = lint(src)
    assert [(f.line, f.code, f.severity) for f in got] == [(9, "PC001", "info")]
    assert "on one code path only" in got[0].message


def test_a_list_appended_to_is_not_a_clock_on_one_path_only():
    src = """
    import anthropic
    from datetime import datetime
    def ask(q):
        notes = []
        notes.append(f"The current time is {datetime.now()}.")
        return anthropic.Anthropic().messages.create(
            model="m", system="Rules...\\n" + "\\n".join(notes),
            messages=[{"role": "user", "content": q}])
    """
    assert found(src) == [(5, "PC001", "warning")]


def test_an_id_passed_to_a_search_call_does_not_make_its_results_volatile():
    # holdout false positive (autogen): a random user id selects memories; it is not text
    src = """
    import uuid
    import anthropic
    class Memory:
        def __init__(self, client, user_id=None):
            self.client = client
            self.user_id = user_id or str(uuid.uuid4())
        def ask(self, q):
            hits = self.client.search(q, user_id=self.user_id, limit=5)
            text = "\\n".join(h["memory"] for h in hits)
            return anthropic.Anthropic().messages.create(
                model="m", system="Relevant memories:\\n" + text,
                messages=[{"role": "user", "content": q}])
    """
    assert found(src) == []


def test_a_set_keyed_lookup_table_does_not_order_the_prompt():
    # holdout false positive (skyvern): a dict built from a set, used only for lookups
    src = """
    import re
    import anthropic
    TAGS = frozenset({"script", "style", "title"})
    CLOSE = {name: re.compile(f"</{name}>") for name in TAGS}
    def ask(tag, q):
        pattern = CLOSE[tag].pattern + CLOSE.get(tag).pattern
        return anthropic.Anthropic().messages.create(
            model="m", system="Strip " + pattern, messages=[{"role": "user", "content": q}])
    """
    assert found(src) == []


def test_tests_examples_docs_and_eval_folders_are_skipped_by_default(tmp_path):
    for rel in (
        "pkg/app.py",
        "tests/test_app.py",
        "examples/demo.py",
        "docs/conf.py",
        "eval/harness.py",
        "pkg/test_unit.py",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    cfg = LintConfig(root=tmp_path)
    names = [t.display for t in discover([str(tmp_path)], cfg, cwd=tmp_path)]
    assert names == ["pkg/app.py"]
    wide = LintConfig(root=tmp_path, include_tests=True)
    assert len(discover([str(tmp_path)], wide, cwd=tmp_path)) == 6
    # named files (what pre-commit passes): linted as named, unless --force-exclude
    named = [str(tmp_path / rel) for rel in ("pkg/app.py", "tests/test_app.py", "docs/conf.py")]
    assert len(discover(named, cfg, cwd=tmp_path)) == 3
    forced = discover(named, cfg, cwd=tmp_path, force_exclude=True)
    assert [t.display for t in forced] == ["pkg/app.py"]
    assert len(discover(named, wide, cwd=tmp_path, force_exclude=True)) == 3


def test_python_312_syntax_is_not_a_syntax_error():
    # PEP 701 f-string (same quotes nested) and PEP 695 type parameters on any Python
    src = 'names = ["a"]\nprint(f"{", ".join(names)}")\ndef first[T](xs: list[T]) -> T:\n    return xs[0]\n'
    assert lint_source(src, "new.py", LintConfig()) == []


# -- misses ---------------------------------------------------------------------------------


def test_shell_output_before_a_long_static_system_prompt():
    src = """
    import subprocess
    import anthropic
    RULES = "Follow the repository conventions. " * 40
    def ask(q):
        status = subprocess.check_output(["git", "status"], text=True)
        return anthropic.Anthropic().messages.create(
            model="m", system=status + RULES, messages=[{"role": "user", "content": q}])
    """
    got = lint(src)
    assert [(f.line, f.code, f.severity) for f in got] == [(7, "PC001", "warning")]
    assert "shell output read at request time" in got[0].message
    # 35 characters x 40 = 1,400 static characters, about 350 tokens at 4 characters a token
    assert (
        "~350 tokens of static text after it in the system prompt are written anew"
        in got[0].message
    )


def test_set_order_in_allowed_function_names():
    src = """
    from google.genai import types
    def config(enabled):
        names = set(enabled)
        return types.GenerateContentConfig(
            tool_config=types.ToolConfig(
                function_calling_config=types.FunctionCallingConfig(
                    mode="ANY", allowed_function_names=list(names))))
    """
    assert found(src) == [(7, "PC003", "warning")]


def test_set_listing_built_in_one_module_reaches_the_system_prompt_in_another(tmp_path):
    (tmp_path / "repo_map.py").write_text(
        "def listing(files):\n    return '\\n'.join(set(files))\n"
    )
    (tmp_path / "chat.py").write_text(
        "import anthropic\nfrom repo_map import listing\n"
        "def ask(q, files):\n"
        "    return anthropic.Anthropic().messages.create(model='m', system=listing(files),"
        " messages=[{'role': 'user', 'content': q}])\n"
    )
    from linters import lint_paths

    report = lint_paths([tmp_path], LintConfig(root=tmp_path))
    # reported where the listing enters the request, with the hop into the other module
    assert [(Path(f.path).name, f.line, f.code) for f in report.findings] == [
        ("chat.py", 4, "PC003")
    ]
    assert "`listing()` returning `'\\n'.join(set(files))` joins a set at repo_map.py:2" in (
        report.findings[0].message
    )


def test_a_clock_passed_to_a_prompt_builder_in_another_module(tmp_path):
    (tmp_path / "llm.py").write_text(
        "import anthropic\n"
        "def ask(system_text, q):\n"
        "    return anthropic.Anthropic().messages.create(model='m', system=system_text,"
        " messages=[{'role': 'user', 'content': q}])\n"
    )
    (tmp_path / "app.py").write_text(
        "from datetime import datetime\n"
        "from llm import ask\n"
        "def handle(q):\n"
        "    return ask(f'Rules. Now {datetime.now()}', q)\n"
    )
    from linters import lint_paths

    report = lint_paths([tmp_path], LintConfig(root=tmp_path))
    assert [(Path(f.path).name, f.line, f.code, f.severity) for f in report.findings] == [
        ("app.py", 4, "PC001", "warning")
    ]
    assert "passed to `ask()` as `system_text` (llm.py)" in report.findings[0].message


def test_cache_control_on_every_block_in_a_loop():
    src = """
    import anthropic
    def ask(blocks, q):
        for b in blocks:
            b["cache_control"] = {"type": "ephemeral"}
        return anthropic.Anthropic().messages.create(
            model="m", system=blocks, messages=[{"role": "user", "content": q}])
    """
    # the count is the run-time length of `blocks`: a warning, not a certain rejection
    assert found(src) == [(4, "PC005", "warning")]


def test_cache_control_in_a_bounded_loop_or_with_break_is_not_reported():
    src = """
    import anthropic
    def ask(blocks, msgs, q):
        for b in blocks[-2:]:
            b["cache_control"] = {"type": "ephemeral"}
        for m in reversed(msgs):
            if m["role"] == "user":
                m["cache_control"] = {"type": "ephemeral"}
                break
        return anthropic.Anthropic().messages.create(
            model="m", system=blocks, messages=msgs + [{"role": "user", "content": q}])
    """
    assert found(src) == []


def test_cache_control_in_a_loop_that_returns_after_marking_is_not_reported():
    # `return` right after the first marker ends the loop like `break`: one breakpoint
    src = """
    def mark(message):
        for block in reversed(message["content"]):
            block["cache_control"] = {"type": "ephemeral"}
            return True
        return False
    """
    assert found(src) == []


def test_fixed_task_after_the_growing_history():
    # 63 characters x 80 = 5,040 characters (~1,260 tokens) re-sent after the history
    src = """
    import anthropic
    TASK = "Refactor the module so that every function has a docstring. ok " * 80
    def step(history):
        msgs = [*history, {"role": "user", "content": TASK}]
        return anthropic.Anthropic().messages.create(model="m", messages=msgs)
    """
    got = lint(src)
    assert [(f.line, f.code, f.severity) for f in got] == [(4, "PC004", "warning")]
    assert "5040 characters" in got[0].message and "`history`" in got[0].message


def test_short_static_turn_after_history_is_info():
    src = """
    import anthropic
    def step(history, q):
        msgs = history + [{"role": "user", "content": "Continue with the next step."}]
        return anthropic.Anthropic().messages.create(model="m", messages=msgs)
    """
    assert found(src) == [(3, "PC004", "info")]
