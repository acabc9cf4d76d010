"""False-positive kinds found on the projects issue 28 kept aside (bench/lint_aside.md),
each as a small program written for these tests, asserting the exact finding or its absence:
scaffold templates that do not parse, a pydantic-ai system prompt evaluated once per
conversation, and stakes counted from the volatile value to the end of the cached prefix."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from linters.cli import main
from linters.config import LintConfig
from linters.runner import lint_source


def lint(src: str) -> list:
    return lint_source(textwrap.dedent(src).lstrip(), "t.py", LintConfig())


def found(src: str) -> list[tuple[int, str, str]]:
    return [(f.line, f.code, f.severity) for f in lint(src)]


# -- a file that does not parse is not a cache-busting finding ----------------------------

SCAFFOLD = """\
from pkg.base import Base, step


class {{agent_class}}(Base):
    @step
    def run(self):
        return "{{ greeting }}"
"""
JINJA = """\
import os
{% if with_logging %}
import logging
{% endif %}
"""


@pytest.fixture
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_template_that_does_not_parse_is_an_info_notice(proj, capsys):
    write(proj / "pkg" / "templates" / "agent.py", SCAFFOLD)
    write(proj / "pkg" / "templates" / "{{pkg_name}}" / "setup.py", JINJA)
    write(proj / "pkg" / "ok.py", "SYSTEM = 'You are helpful.'\n")
    assert main(["."]) == 0  # only info findings: the run does not fail
    lines = capsys.readouterr().out.splitlines()
    template = (
        "PC900 [info] not checked: the file does not parse; it is a template (`{{...}}` or "
        "`{%...%}` placeholders), not Python (syntax error: "
    )
    assert lines[0].startswith("pkg/templates/agent.py:4:")
    assert template in lines[0]
    assert lines[1].startswith("pkg/templates/{{pkg_name}}/setup.py:2:")
    assert template in lines[1]
    assert lines[2] == (
        "found 2 findings in 2 files, 3 files read: 1 checked, 2 do not parse (PC900, not checked)."
    )


def test_a_real_syntax_error_stays_visible_as_info(proj, capsys):
    write(proj / "app.py", "def ask(q:\n    return q\n")
    assert main(["--format", "json", "app.py"]) == 0
    out = capsys.readouterr().out
    assert '"severity": "info"' in out and '"files_not_parsed": 1' in out
    assert "not checked: the file does not parse (syntax error: " in out
    assert "template" not in out


# -- pydantic-ai: a plain @agent.system_prompt runs once per conversation -------------------

AGENT = """
from datetime import datetime
from pydantic_ai import Agent

helper = Agent("openai:gpt-4o", instructions="Answer briefly.")

@helper.{decorator}
def context() -> str:
    return f"You help users of the shell. The time now is {{datetime.now()}}. Be concise."
"""
ONCE = (
    "`datetime.now()` (the clock) reaches the `@system_prompt` function's result: it is "
    "evaluated once per conversation (pydantic-ai replays a system prompt that is not "
    "`dynamic=True` from the message history): one cache write per conversation; move it "
    "into the user message if that write matters"
)


def test_a_plain_system_prompt_function_changes_once_per_conversation():
    out = lint(AGENT.format(decorator="system_prompt"))
    assert [(f.line, f.code, f.severity, f.message) for f in out] == [(8, "PC001", "info", ONCE)]
    assert found(AGENT.format(decorator="system_prompt(dynamic=False)")) == [(8, "PC001", "info")]


@pytest.mark.parametrize(
    "decorator",
    ["system_prompt(dynamic=True)", "system_prompt(dynamic=fresh)", "instructions"],
)
def test_a_dynamic_system_prompt_or_instructions_change_per_request(decorator):
    out = lint(AGENT.format(decorator=decorator))
    assert [(f.line, f.code, f.severity) for f in out] == [(8, "PC001", "warning")]
    assert "the cached prefix changes on every request" in out[0].message


# -- stakes: only the text after the volatile value is written anew -------------------------

JUDGE = """
from datetime import datetime
from langchain_core.messages import HumanMessage, SystemMessage

STEPS = "Check each step of the trace. " * {steps}
REPLY = "Reply in JSON. " * {reply}


def judge_messages(trace, history):
    now = datetime.now().strftime("%Y-%m-%d %H:%M")
    system = f"{{STEPS}}\\nThe current time is {{now}}.\\n{{REPLY}}"
    return [SystemMessage(content=system), {history}HumanMessage(content=trace)]
"""
CLOCK = (
    "`now` (set on line 9) from `datetime.now()` (the clock) reaches a system message: the "
    "cached prefix changes on every request; move it after the static text, into the last "
    "user message"
)


def judged(steps: int, reply: int, history: str = "") -> list[tuple[int, str, str]]:
    out = lint(JUDGE.format(steps=steps, reply=reply, history=history))
    assert [(f.line, f.code) for f in out] == [(10, "PC001")]
    assert out[0].message.startswith(CLOCK)
    return [(f.severity, f.message[len(CLOCK) :]) for f in out]


def test_a_clock_near_the_end_of_a_single_turn_system_message_counts_what_follows_it():
    # after the clock: ".\n" + 64 * 15 characters = 962 -> 240 tokens (4 a token); before it
    # 170 * 30 + 21 = 5121 characters (1280 tokens, cached either way): the loss is 240
    # tokens, below the 1,024-token minimum
    assert judged(170, 64) == [
        (
            "info",
            " (~240 tokens of static text after it in a system message, the end of the cached "
            "prefix, are written anew with it; below the 1024-token minimum a cache needs, the "
            "text before it is served from a prefix cache)",
        )
    ]


def test_a_clock_with_enough_text_after_it_stays_a_warning():
    # after: 2 + 300 * 15 = 4502 characters -> 1125 tokens
    assert judged(170, 300) == [
        (
            "warning",
            " (~1125 tokens of static text after it in a system message are written anew with "
            "it; a prefix cache still serves the text before it)",
        )
    ]


def test_a_history_after_the_system_message_keeps_it_a_warning():
    assert judged(170, 64, "*history, ") == [
        (
            "warning",
            " (~240 tokens of static text after it in a system message, and the conversation "
            "after it, are written anew with it; a prefix cache still serves the text before it)",
        )
    ]


def test_short_text_before_the_clock_leaves_the_level_to_its_rate():
    # before 10 * 30 + 21 = 321 characters (80 tokens): no cacheable prefix on its own, so
    # the loss is not only the text after the clock; the rate decides (per minute)
    assert judged(10, 64) == [
        (
            "warning",
            " (~240 tokens of static text after it in a system message are written anew with it)",
        )
    ]


# -- a type's JSON schema is fixed by the type, not per request ------------------------------

SCHEMA = """
import json
import anthropic
from pydantic import TypeAdapter

RULES = "Reply with one JSON object and nothing else; no prose before or after it. " * 2


def extract(output_type, text):
    schema = {schema}
    system = f"Follow this JSON schema:\\n{{schema}}\\n\\n{{RULES}}"
    return anthropic.Anthropic().messages.create(
        model="m", system=system, messages=[{{"role": "user", "content": text}}]
    )
"""


@pytest.mark.parametrize(
    "schema",
    [
        "output_type.model_json_schema()",
        "json.dumps(output_type.model_json_schema(), indent=2)",
        "TypeAdapter(output_type).json_schema()",
        "output_type.schema_json()",
        "output_type.__name__",
    ],
)
def test_a_types_json_schema_before_static_text_is_not_per_request(schema):
    assert found(SCHEMA.format(schema=schema)) == []


def test_per_request_text_before_static_text_is_still_reported():
    # the control: the request's own text in the same place; after it "\n\n" + 2 x 74
    # characters of RULES = 150 static characters
    out = lint(SCHEMA.format(schema="text.upper()"))
    assert [(f.line, f.code, f.severity) for f in out] == [(10, "PC004", "info")]
    assert out[0].message.startswith(
        "`schema` (`text` (a parameter)) is per-request and comes before 150 characters of "
        "static text in the system prompt"
    )


def test_an_agents_system_prompt_keyword_changes_once_per_conversation():
    src = """
    from datetime import datetime
    from pydantic_ai import Agent

    def chat_agent(model):
        now = datetime.now()
        return Agent(model, system_prompt=f"Today is {now}. You help with the user's shell.")
    """
    out = lint(src)
    assert [(f.line, f.code, f.severity) for f in out] == [(6, "PC001", "info")]
    assert "it is evaluated once per conversation (pydantic-ai replays" in out[0].message
    # instructions are re-sent on every request: per request as before
    assert found(src.replace("system_prompt=", "instructions=")) == [(6, "PC001", "warning")]
