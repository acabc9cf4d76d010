"""Dispatch tables of the project's functions (``factory()`` over ``self.factories.items()``)
and breakpoints that pile up in a history kept across calls (``self.messages``): small
programs written for these tests, each asserting the exact finding (rule, line, severity)
or its absence. Lines count from 1 at the first line of the dedented source."""

from __future__ import annotations

import textwrap
from pathlib import Path

from linters import lint_paths
from linters.config import LintConfig
from linters.runner import lint_source


def found(src: str, code: str | None = None) -> list[tuple[int, str, str]]:
    text = textwrap.dedent(src).lstrip("\n")
    return [
        (f.line, f.code, f.severity)
        for f in lint_source(text, "t.py", LintConfig())
        if code is None or f.code == code
    ]


# -- dispatch tables -----------------------------------------------------------------------

CONTEXT = """
from datetime import datetime


class PromptContext:
    def __init__(self, tz):
        self.tz = tz

    @property
    def factories(self):
        return {
            "name": self.get_name,
            "current_datetime": self.get_current_datetime,
        }

    def get_context(self, variables):
        context = {}
        for key, factory in self.factories.items():
            if key in variables:
                context[key] = factory()
        return context

    def get_name(self):
        return "Bob"

    def get_current_datetime(self):
        return datetime.now().strftime(FORMAT)
"""

AGENT = """
import anthropic

from app.ctx import PromptContext

TEMPLATE = "Now: {current_datetime}. " + "You answer questions about the manual. " * 60


def reply(history, ctx: PromptContext):
    context = ctx.get_context(["current_datetime"])
    system = TEMPLATE.format(**context)
    return anthropic.Anthropic().messages.create(
        model="claude-sonnet-4-5", max_tokens=100, system=system, messages=history
    )
"""


def _project(
    tmp_path: Path, fmt: str, context: str = CONTEXT, note: str = "PromptContext"
) -> list[tuple[str, int, str, str]]:
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ctx.py").write_text(textwrap.dedent(context).lstrip("\n").replace("FORMAT", repr(fmt)))
    agent = textwrap.dedent(AGENT).lstrip("\n").replace("ctx: PromptContext", f"ctx: {note}")
    (pkg / "agent.py").write_text("from typing import Optional\n" + agent)
    report = lint_paths([tmp_path], LintConfig(root=tmp_path))
    return [(Path(f.path).name, f.line, f.code, f.severity) for f in report.findings]


def test_a_bound_method_of_a_dispatch_property_reaches_the_system_prompt(tmp_path):
    # get_current_datetime() (ctx.py line 25) prints seconds; the table entry runs when
    # factory() is called (line 18); the value enters the prompt at agent.py line 11
    # (`**context`), reached through the parameter annotated with the project class
    got = _project(tmp_path, "%A %H:%M:%S")
    assert got == [("agent.py", 11, "PC001", "warning")]  # line 1 is the typing import


def test_an_optional_or_quoted_annotation_names_the_class_too(tmp_path):
    for i, note in enumerate(
        ("Optional[PromptContext]", "PromptContext | None", '"PromptContext"')
    ):
        root = tmp_path / str(i)
        root.mkdir()
        assert _project(root, "%H:%M:%S", note=note) == [("agent.py", 11, "PC001", "warning")]


def test_an_unannotated_parameter_is_not_followed(tmp_path):
    # nothing says which class `ctx` is: the method is not guessed
    assert _project(tmp_path, "%H:%M:%S", note="object") == []


def test_a_dispatch_table_of_constant_functions_is_not_reported(tmp_path):
    # the same table, every entry returning constants
    ctx = CONTEXT.replace("datetime.now().strftime(FORMAT)", '"Monday"')
    assert _project(tmp_path, "", ctx) == []


def test_a_dispatch_entry_printing_the_day_is_info(tmp_path):
    # "%A, %d %B %Y" changes once a day: info, not a warning
    assert _project(tmp_path, "%A, %d %B %Y") == [("agent.py", 11, "PC001", "info")]


def test_a_module_table_of_functions_called_by_key():
    # `HANDLERS[kind]()`: each entry may run; `now_text` reads the clock to the minute; as
    # for a direct call of a function of the same module, reported where the clock is read
    # (line 6)
    src = """
    import anthropic
    from datetime import datetime


    def now_text():
        return datetime.now().strftime("%H:%M")


    def rules_text():
        return "Answer briefly."


    HANDLERS = {"now": now_text, "rules": rules_text}


    def ask(kind, q):
        system = HANDLERS[kind]() + " You answer questions about the manual." * 60
        return anthropic.Anthropic().messages.create(
            model="m", max_tokens=10, system=system, messages=[{"role": "user", "content": q}]
        )
    """
    assert found(src, "PC001") == [(6, "PC001", "warning")]


def test_a_list_of_functions_iterated_and_called():
    # `for part in PARTS: text += part()`: the uuid of `session_tag` reaches the prompt,
    # reported where it is made (line 6)
    src = """
    import uuid
    import anthropic


    def session_tag():
        return str(uuid.uuid4())


    def persona():
        return "You are a careful reviewer."


    PARTS = [persona, session_tag]


    def ask(q):
        system = ""
        for part in PARTS:
            system += part() + "\\n"
        system += "Review the diff line by line." * 60
        return anthropic.Anthropic().messages.create(
            model="m", max_tokens=10, system=system, messages=[{"role": "user", "content": q}]
        )
    """
    assert found(src, "PC001") == [(6, "PC001", "warning")]


def test_a_callback_parameter_is_not_a_table():
    # a function handed in by the caller is not resolved (nothing to follow)
    src = """
    import anthropic


    def ask(make_prefix, q):
        system = make_prefix() + " You answer questions about the manual." * 60
        return anthropic.Anthropic().messages.create(
            model="m", max_tokens=10, system=system, messages=[{"role": "user", "content": q}]
        )
    """
    assert found(src, "PC001") == []


def test_a_day_format_chosen_by_a_parameter_is_one_path_only():
    # `fmt = FULL if with_time else DAY`: to the second on one path, per day on the other;
    # the caller passes `datetime.now()` into the parameter (line 14): info
    src = """
    import anthropic
    from datetime import datetime


    def pretty(d, with_time=True):
        fmt = "%A %d %B %Y %H:%M:%S" if with_time else "%A %d %B %Y"
        return d.strftime(fmt)


    STATIC = " You answer questions about the manual." * 60


    def ask(q):
        system = "Today: " + pretty(datetime.now(), with_time=False) + STATIC
        return anthropic.Anthropic().messages.create(
            model="m", max_tokens=10, system=system, messages=[{"role": "user", "content": q}]
        )
    """
    assert found(src, "PC001") == [(14, "PC001", "info")]


def test_a_day_format_applied_to_a_parameter_caps_the_callers_clock():
    # `d.strftime("%Y-%m-%d")` of the argument: the caller's `datetime.now()` is per day
    src = """
    import anthropic
    from datetime import datetime


    def day(d):
        return d.strftime("%Y-%m-%d")


    STATIC = " You answer questions about the manual." * 60


    def ask(q):
        system = "Today: " + day(datetime.now()) + STATIC
        return anthropic.Anthropic().messages.create(
            model="m", max_tokens=10, system=system, messages=[{"role": "user", "content": q}]
        )
    """
    assert found(src, "PC001") == [(13, "PC001", "info")]


# -- breakpoints piling up in a history kept across calls (PC010) --------------------------

KEPT = """
import copy

SYSTEM = {"role": "system", "content": "You review code."}
MARK = {"cache_control": {"type": "ephemeral"}}


def apply_caching(messages):
    for idx in range(len(messages))[-2:]:
        msg = messages[idx]
        if isinstance(msg["content"], list):
            block = msg["content"][-1]
            BODY


class Agent:
    def __init__(self):
        self.messages = []

    def step(self, text):
        self.messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
        messages = [SYSTEM] + self.messages
        return apply_caching(messages)
"""


def _kept(body: str) -> str:
    return KEPT.replace("BODY", body)


def test_markers_written_into_the_instances_history_by_update():
    # `[SYSTEM] + self.messages` (line 21) shares the dicts of self.messages, which grows
    # (line 20); `block.update(MARK)` (line 12) marks the last two of them in place; reported
    # where the moving item is taken (line 9)
    assert found(_kept("block.update(MARK)"), "PC010") == [(9, "PC010", "warning")]
    text = textwrap.dedent(_kept("block.update(MARK)")).lstrip("\n")
    (f,) = [f for f in lint_source(text, "t.py", LintConfig()) if f.code == "PC010"]
    assert "`self.messages` copied into it at line 21 in `step()`" in f.message
    assert "(`apply_caching()`, line 12)" in f.message


def test_markers_written_by_setdefault_and_a_literal_update():
    for body in (
        'block.setdefault("cache_control", {"type": "ephemeral"})',
        'block.update({"cache_control": {"type": "ephemeral"}})',
        'block.update(cache_control={"type": "ephemeral"})',
        'block["cache_control"] = {"type": "ephemeral"}',
    ):
        assert found(_kept(body), "PC010") == [(9, "PC010", "warning")], body


def test_an_update_without_the_marker_is_not_a_mark():
    assert found(_kept('block.update({"type": "text"})'), "PC010") == []


def test_a_budget_counted_first_is_fine():
    # the markers already in the history are counted against the limit before marking
    src = _kept("block.update(MARK)").replace(
        "    for idx in range(len(messages))[-2:]:",
        """    used = 0
    for m in messages:
        for b in m["content"] if isinstance(m["content"], list) else []:
            if "cache_control" in b:
                used += 1
    if used >= 4:
        return messages
    for idx in range(len(messages))[-2:]:""",
    )
    assert found(src, "PC010") == []


def test_a_list_that_never_grows_is_not_a_history():
    # self.examples is set once: its last item is the same dict every call, marked once
    src = (
        _kept("block.update(MARK)")
        .replace("self.messages.append(", "print(")
        .replace("self.messages = []", "self.messages = [dict(SYSTEM)]")
    )
    assert found(src, "PC010") == []


def test_the_marker_on_a_copy_of_the_message_is_fine():
    # the history list is copied per call and the marked message is deep-copied first
    src = """
    import copy


    class Agent:
        def __init__(self):
            self.messages = []

        def step(self, text):
            self.messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
            messages = [*self.messages]
            last = copy.deepcopy(messages[-1])
            last["content"][-1].update({"cache_control": {"type": "ephemeral"}})
            messages[-1] = last
            return messages
    """
    assert found(src, "PC010") == []


def test_marking_a_fresh_message_is_fine():
    # the marked dict is made in this call; only the list around it is shared
    src = """
    class Agent:
        def __init__(self):
            self.messages = []

        def step(self, text):
            new = {"role": "user", "content": [{"type": "text", "text": text}]}
            new["content"][-1].update({"cache_control": {"type": "ephemeral"}})
            messages = self.messages + [new]
            self.messages.append({"role": "user", "content": text})
            return messages
    """
    assert found(src, "PC010") == []


def test_the_callers_list_copied_by_concatenation():
    # `history + [question]` is a new list of the caller's dicts; the mark is in place
    src = """
    def build(history, question):
        messages = history + [{"role": "user", "content": question}]
        messages[-2]["content"][-1].setdefault("cache_control", {"type": "ephemeral"})
        return messages
    """
    assert found(src, "PC010") == [(3, "PC010", "warning")]


def test_a_day_format_inside_the_builder_caps_the_clock_its_caller_passes():
    # the system prompt is built from parameter `d` printed to the day (line 8); the caller
    # passes `datetime.now()` (line 15): reported there, once a day (info), not per request
    src = """
    import anthropic
    from datetime import datetime

    STATIC = " You answer questions about the manual." * 60


    def build(d, q):
        system = "Today: " + d.strftime("%Y-%m-%d") + STATIC
        return anthropic.Anthropic().messages.create(
            model="m", max_tokens=10, system=system, messages=[{"role": "user", "content": q}]
        )


    def ask(q):
        return build(datetime.now(), q)
    """
    assert found(src, "PC001") == [(15, "PC001", "info")]


def test_a_bound_method_picked_by_a_condition_and_called_later():
    # `make = self.stamp if verbose else self.plain`: either may run; stamp() reads a uuid
    # (line 6), reported where it is made
    src = """
    import uuid
    import anthropic

    class Prompt:
        def stamp(self):
            return "Session " + str(uuid.uuid4())

        def plain(self):
            return "Session"

        def ask(self, q, verbose):
            make = self.stamp if verbose else self.plain
            system = make() + " You answer questions about the manual." * 60
            return anthropic.Anthropic().messages.create(
                model="m", max_tokens=10, system=system, messages=[{"role": "user", "content": q}]
            )
    """
    assert found(src, "PC001") == [(6, "PC001", "warning")]
