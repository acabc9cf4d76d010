"""Issue 28, misses the aside check found on real code (bench/lint_aside.md): the shapes
of three historical cache fixes, as small programs written for these tests. Each pair
asserts the finding on the shape before the fix and its absence (or info) after it.

- markers set by a serializer's per-block helper inside its loops (browser-use 378738082);
- a set's order reaching a Gemini ``tool_config`` through a tuple returned by a function
  of another module (pydantic-ai 69df8a51c);
- a clock to the second in a system prompt built by ``prompt = prompt.format(...)``, where
  the parameter's own value is no stable alternative (aider 36663cf04).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from linters import lint_paths
from linters.config import LintConfig
from linters.flow.project import absolute
from linters.runner import lint_source


def lint(src: str) -> list:
    return lint_source(textwrap.dedent(src).lstrip(), "t.py", LintConfig())


def found(src: str) -> list[tuple[int, str, str]]:
    return [(f.line, f.code, f.severity) for f in lint(src)]


# -- cache_control set by a per-block helper in a loop -------------------------------------

_SERIALIZER = """
from anthropic.types import CacheControlEphemeralParam, TextBlockParam, ToolUseBlockParam

class Wire:
    @staticmethod
    def _marker(on: bool):
        return CacheControlEphemeralParam(type="ephemeral") if on else None

    @staticmethod
    def _text(part, on: bool) -> TextBlockParam:
        return TextBlockParam(type="text", text=part.text, cache_control=Wire._marker(on))

    @staticmethod
    def content(parts, on: bool = False):
        blocks = []
        for {target} in {iterable}:
            if part.kind == "text":
                blocks.append(Wire._text(part, {text_flag}))
        return blocks

    @staticmethod
    def tool_uses(calls, on: bool = False):
        blocks = []
        for {call_target} in {calls}:
            blocks.append(
                ToolUseBlockParam(
                    type="tool_use", id=call.id, name=call.name, input=call.args,
                    cache_control=Wire._marker({call_flag}),
                )
            )
        return blocks
"""


def test_markers_set_by_a_helper_on_every_block_of_a_loop():
    # before the fix: every text part and every tool call of a message carries a marker
    src = _SERIALIZER.format(
        target="part",
        iterable="parts",
        text_flag="on",
        call_target="call",
        calls="calls",
        call_flag="on",
    )
    got = lint(src)
    # line 17: the helper call in the loop over `parts`; line 27: the keyword in the loop
    # over `calls` (lines counted in the dedented source, first line 1)
    assert [(f.line, f.code, f.severity) for f in got] == [
        (17, "PC005", "warning"),
        (27, "PC005", "warning"),
    ]
    assert "`cache_control` is set on every item of `parts`" in got[0].message
    assert "through `Wire._text()`, which sets it on line 10" in got[0].message
    assert "more than 4 items the request carries more than 4 breakpoints" in got[0].message
    assert "`cache_control` is set on every item of `calls`" in got[1].message


def test_markers_only_on_the_last_block_are_not_reported():
    # after the fix: the flag is ANDed with "is the last item", which changes per item
    src = _SERIALIZER.format(
        target="i, part",
        iterable="enumerate(parts)",
        text_flag="on and i == len(parts) - 1",
        call_target="i, call",
        calls="enumerate(calls)",
        call_flag="on and i == len(calls) - 1",
    )
    assert found(src) == []


def test_a_helper_whose_marker_follows_the_item_is_not_reported():
    # the per-message loop: each message's own flag decides, not the loop's constant
    src = """
    def _block(msg):
        return {"type": "text", "text": msg.text, "cache_control": msg.marker}

    def serialize(msgs):
        out = []
        for msg in msgs:
            out.append(_block(msg))
        return out
    """
    assert found(src) == []


# -- a set's order in a Gemini tool_config, through a tuple from another module ----------


def _write_gemini(tmp_path: Path, allowed: str) -> None:
    # a package, the helper imported relatively, as a provider adapter imports it
    models = tmp_path / "pkg" / "models"
    models.mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (models / "__init__.py").write_text("")
    (models / "_choice.py").write_text(
        textwrap.dedent(
            """
            from typing import Literal

            Picked = Literal["auto", "any"] | tuple[Literal["auto", "any"], set[str]]

            def pick(settings: dict) -> Picked:
                wanted = settings.get("tool_choice")
                if isinstance(wanted, list):
                    return ("any", set(wanted))
                return "auto"
            """
        ).lstrip()
    )
    (models / "gemini.py").write_text(
        textwrap.dedent(
            """
            from google.genai.types import (
                FunctionCallingConfigDict,
                GenerateContentConfigDict,
                ToolConfigDict,
            )

            from ._choice import pick

            class Gemini:
                def _tool_config(self, settings, declared):
                    allowed: list[str] = []
                    picked = pick(settings)
                    if isinstance(picked, tuple):
                        mode, names = picked
                        allowed = ALLOWED
                    config = ToolConfigDict()
                    calling: FunctionCallingConfigDict = {"mode": "ANY"}
                    if allowed:
                        calling["allowed_function_names"] = allowed
                    config["function_calling_config"] = calling
                    return [{"function_declarations": declared}], config or None

                async def send(self, contents, settings, declared):
                    tools, tool_config = self._tool_config(settings, declared)
                    config = GenerateContentConfigDict(tools=tools, tool_config=tool_config)
                    return await self.client.aio.models.generate_content(
                        model="gemini-2.5-flash", contents=contents, config=config
                    )
            """
        )
        .lstrip()
        .replace("ALLOWED", allowed)
    )


def test_set_order_reaches_allowed_function_names_through_a_returned_tuple(tmp_path):
    _write_gemini(tmp_path, "list(names)")
    report = lint_paths([tmp_path], LintConfig(root=tmp_path))
    assert [(Path(f.path).name, f.line, f.code, f.severity) for f in report.findings] == [
        ("gemini.py", 15, "PC003", "warning")
    ]
    msg = report.findings[0].message
    assert msg.startswith("`list(names)` iterates a set, building the tool configuration")
    assert "set order differs between processes (PYTHONHASHSEED)" in msg


def test_names_kept_in_declaration_order_are_not_reported(tmp_path):
    # the fix: iterate the ordered declarations, keep those in the set
    _write_gemini(tmp_path, "[n for n in declared if n in names]")
    report = lint_paths([tmp_path], LintConfig(root=tmp_path))
    assert report.findings == []


def test_set_element_of_a_returned_tuple_in_one_module():
    src = """
    from google.genai import types
    def chosen(enabled):
        return "any", {name for name in enabled}
    def config(enabled):
        mode, names = chosen(enabled)
        return types.GenerateContentConfig(
            tool_config=types.ToolConfig(
                function_calling_config=types.FunctionCallingConfig(
                    mode=mode, allowed_function_names=list(names))))
    """
    assert found(src) == [(9, "PC003", "warning")]


def test_the_ordered_element_of_a_returned_tuple_is_not_a_set():
    src = """
    from google.genai import types
    def chosen(enabled):
        return set(enabled), sorted(enabled)
    def config(enabled):
        _unused, names = chosen(enabled)
        return types.GenerateContentConfigDict(
            tool_config={"function_calling_config": {"allowed_function_names": list(names)}})
    """
    assert found(src) == []


def test_one_element_of_a_set_known_to_hold_one_is_not_an_order():
    src = """
    from google.genai import types
    def config(enabled):
        mode, names = "any", set(enabled)
        if len(names) == 1:
            return types.ToolConfig(
                function_calling_config=types.FunctionCallingConfig(
                    mode=mode, allowed_function_names=[next(iter(names))]))
        return types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(
                mode=mode, allowed_function_names=list(names)))
    """
    # only the second: the first set has one element, so one order
    assert found(src) == [(10, "PC003", "warning")]


def test_a_project_type_named_like_a_google_config_is_not_a_request():
    # strands-agents defines its own `ToolConfig` TypedDict; a random tool-use id in it
    # is not in any Gemini request
    src = """
    import random
    from typing import TypedDict
    class ToolConfig(TypedDict):
        tools: list
    def direct_call(name, specs):
        tool_id = f"tooluse_{name}_{random.randint(100, 999)}"
        return ToolConfig(tools=[{"toolSpec": s, "id": tool_id} for s in specs])
    """
    assert found(src) == []


@pytest.mark.parametrize(
    "qual,path,expected",
    [
        ("._choice.pick", "pkg/models/gemini.py", "pkg.models._choice.pick"),
        ("..tools.Tool", "pkg/models/gemini.py", "pkg.tools.Tool"),
        (".gemini.Gemini", "pkg/models/__init__.py", "pkg.models.gemini.Gemini"),
        ("...too.far", "pkg/a.py", "...too.far"),
        ("os.path.join", "pkg/a.py", "os.path.join"),
    ],
)
def test_relative_imports_are_made_absolute(qual, path, expected):
    # PEP 328: one dot is the importing module's package, each further dot one level up
    assert absolute(qual, path) == expected


# -- a clock in a prompt rebuilt from the parameter it overwrites ------------------------

_FORMATTER = """
import litellm
from datetime import datetime

MAIN = "Act as an expert software developer. {platform} " + "Follow the rules. " * 40

class Coder:
    def fmt_system(self, prompt):
        env = "- Shell: bash\\n"
STAMP
        prompt = prompt.format(platform=env)
        return prompt

    def send(self, history, question):
        msgs = [dict(role="system", content=self.fmt_system(MAIN)), *history]
        msgs.append(dict(role="user", content=question))
        return litellm.completion(model="claude-sonnet-4-6", messages=msgs)
"""


def test_a_clock_in_a_prompt_formatted_over_its_parameter_is_a_warning():
    stamp = (
        '        now = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")\n'
        '        env += f"- Current date/time: {now}"'
    )
    got = lint(_FORMATTER.replace("STAMP", stamp))
    # `prompt = prompt.format(...)` replaces the parameter on every path: the parameter's
    # own value is not a stable alternative, so this is not "one code path only"
    assert [(f.line, f.code, f.severity) for f in got] == [(10, "PC001", "warning")]
    assert "the cached prefix changes on every request" in got[0].message
    assert "one code path only" not in got[0].message


def test_the_clock_kept_only_where_a_slower_value_is_the_other_path_is_info():
    # the fix: the day when caching, the clock only on the other path
    stamp = (
        "        if self.cache_prompts:\n"
        '            now = datetime.now().strftime("%Y-%m-%d")\n'
        '            env += f"- Current date: {now}"\n'
        "        else:\n"
        '            now = datetime.now().strftime("%Y-%m-%dT%H:%M:%S")\n'
        '            env += f"- Current date/time: {now}"'
    )
    got = lint(_FORMATTER.replace("STAMP", stamp))
    assert [(f.line, f.code, f.severity) for f in got] == [
        (11, "PC001", "info"),
        (14, "PC001", "info"),
    ]
    assert "changes once a day" in got[0].message
    assert "on one code path only" in got[1].message


def test_a_comprehension_variable_is_not_the_enclosing_name():
    # strands-agents' executor: an outer `tool_spec` (of the called tool) and the
    # comprehension's own `tool_spec` (each registered tool) on one line
    src = """
    import uuid
    import anthropic
    def ask(q, specs):
        spec = {"name": f"call-{uuid.uuid4()}"}
        print(spec)
        tools = [{"name": spec["name"], "input_schema": {}} for spec in specs]
        return anthropic.Anthropic().messages.create(
            model="m", tools=tools, messages=[{"role": "user", "content": q}])
    """
    assert found(src) == []


def test_a_field_of_a_returned_record_carries_only_its_own_value():
    # pydantic-ai's Responses adapter: one builder returns the request's fields as a record;
    # the set goes into `tool_choice`, not into `instructions`
    src = """
    from dataclasses import dataclass
    import openai
    @dataclass
    class Params:
        instructions: str
        tool_choice: dict
    def build(names: set[str]) -> Params:
        allowed = [{"type": "function", "name": n} for n in names]
        return Params(instructions="Answer briefly.", tool_choice={"tools": allowed})
    def send(q, names: set[str]):
        p = build(names)
        return openai.OpenAI().responses.create(
            model="m", instructions=p.instructions, tool_choice=p.tool_choice, input=q)
    """
    got = lint(src)
    assert [(f.line, f.code, f.severity) for f in got] == [(8, "PC003", "warning")]
    assert "building the tool choice" in got[0].message


def test_a_class_attribute_named_like_the_module_it_calls_does_not_loop(tmp_path):
    # open-chat-studio: `actions = actions.ActionsColumn(...)` in a class body, `actions`
    # also the imported module; following the receiver must not follow that assignment
    (tmp_path / "tables.py").write_text(
        textwrap.dedent(
            """
            from django_tables2 import actions
            from llm import ask
            class Table:
                actions = actions.ActionsColumn(actions=[actions.edit_action(url_name="e")])
                def explain(self, q):
                    return ask(f"Explain the system table. {q}")
            """
        ).lstrip()
    )
    (tmp_path / "llm.py").write_text(
        "import anthropic\n"
        "def ask(system_text):\n"
        "    return anthropic.Anthropic().messages.create(model='m', system=system_text,"
        " messages=[{'role': 'user', 'content': 'go'}])\n"
    )
    assert lint_paths([tmp_path], LintConfig(root=tmp_path)).findings == []


def test_a_value_rebuilt_from_a_clock_on_one_path_stays_info():
    # `stamp = stamp.strip()` replaces both branches' values: the clock still comes from one
    # path only, as the branches say
    src = """
    import anthropic
    from datetime import datetime
    def rebuild(agent, q, update):
        if update:
            stamp = datetime.now().isoformat()
        else:
            stamp = agent.created_at
        stamp = stamp.strip()
        return anthropic.Anthropic().messages.create(
            model="m", system=f"Memory edited {stamp}. Rules...",
            messages=[{"role": "user", "content": q}])
    """
    got = lint(src)
    assert [(f.line, f.code, f.severity) for f in got] == [(10, "PC001", "info")]
    assert "on one code path only" in got[0].message
