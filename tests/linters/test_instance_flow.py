"""Values stored in an instance by one method and read back by another (``b.add(x)`` ...
``b.build()``), an optional argument's fallback, and a model's reply: small programs written
for these tests, each asserting the exact finding or its absence. Lines count from 1 at the
first line of the dedented source."""

from __future__ import annotations

import textwrap
from pathlib import Path

from linters import lint_paths
from linters.config import LintConfig
from linters.runner import lint_source


def found(src: str) -> list[tuple[int, str, str]]:
    text = textwrap.dedent(src).lstrip()
    return [(f.line, f.code, f.severity) for f in lint_source(text, "t.py", LintConfig())]


BUILDER = """
class Builder:
    def __init__(self):
        self._parts = []

    def add(self, title, text):
        self._parts.append((title, text))
        return self

    def build(self):
        return "\\n\\n".join(f"## {t}\\n{x}" for t, x in self._parts)
"""


def test_a_clock_stored_in_a_builder_reaches_the_system_prompt():
    src = (
        """
    import anthropic
    from datetime import datetime
    """
        + textwrap.indent(BUILDER, "    ")
        + """
    def ask(q):
        b = Builder()
        b.add("Now", datetime.now().strftime("%H:%M"))
        b.add("Rules", "Answer in French.")
        return anthropic.Anthropic().messages.create(
            model="m", system=b.build(), messages=[{"role": "user", "content": q}])
    """
    )
    got = found(src)
    # reported where the clock is read, in the add() call of line 17 (line 1 is the import)
    assert got == [(17, "PC001", "warning")]
    text = textwrap.dedent(src).lstrip()
    f = lint_source(text, "t.py", LintConfig())[0]
    assert "stored on line 17 by `b.add()`" in f.message


def test_a_builder_of_constants_only_is_not_reported():
    src = (
        """
    import anthropic
    """
        + textwrap.indent(BUILDER, "    ")
        + """
    def ask(q):
        b = Builder()
        b.add("Rules", "Answer in French.")
        return anthropic.Anthropic().messages.create(
            model="m", system=b.build(), messages=[{"role": "user", "content": q}])
    """
    )
    assert found(src) == []


def test_another_instance_does_not_mix_in():
    # the clock goes into `log`, not into the builder the prompt comes from
    src = (
        """
    import anthropic
    from datetime import datetime
    """
        + textwrap.indent(BUILDER, "    ")
        + """
    def ask(q):
        b = Builder()
        log = Builder()
        log.add("Now", datetime.now().isoformat())
        b.add("Rules", "Answer in French.")
        return anthropic.Anthropic().messages.create(
            model="m", system=b.build(), messages=[{"role": "user", "content": q}])
    """
    )
    assert found(src) == []


def test_the_builder_in_another_module_rewritten_clawbolt_shape(tmp_path: Path):
    # the rewritten shape of mozilla-ai/clawbolt before 58144319: a section builder class
    # and a minute clock section in the prompt module, the agent in another module with an
    # optional override of the whole prompt
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "prompt.py").write_text(
        textwrap.dedent(
            """
            import datetime


            class SectionBuilder:
                def __init__(self):
                    self._sections = []

                def add_section(self, heading, content):
                    self._sections.append((heading, content))
                    return self

                def build(self):
                    return "\\n\\n".join(f"## {h}\\n{c}" for h, c in self._sections if c)


            def local_time_section(tz):
                now = datetime.datetime.now(datetime.UTC)
                return now.strftime("%A, %Y-%m-%d %I:%M %p") + f" ({tz})"


            async def build_system_prompt(user):
                builder = SectionBuilder()
                builder.add_section("Identity", "You are a helpful assistant for trades.")
                builder.add_section("Current date and time", local_time_section(user.tz))
                builder.add_section("Rules", "Always confirm before sending.")
                return builder.build()
            """
        ).lstrip()
    )
    (pkg / "agent.py").write_text(
        textwrap.dedent(
            """
            from langchain_core.messages import HumanMessage, SystemMessage

            from app.prompt import build_system_prompt


            class Agent:
                def __init__(self, user, llm):
                    self.user = user
                    self.llm = llm

                async def run(self, text, history, system_prompt_override=None):
                    system_prompt = system_prompt_override or await build_system_prompt(self.user)
                    messages = [SystemMessage(content=system_prompt), *history, HumanMessage(text)]
                    return await self.llm.ainvoke(messages)
            """
        ).lstrip()
    )
    report = lint_paths([tmp_path], LintConfig(root=tmp_path))
    got = [(Path(f.path).name, f.line, f.code, f.severity) for f in report.findings]
    # reported where the prompt enters the system message (agent.py line 13), the hop
    # naming the add_section() call of prompt.py line 24 that stored the clock
    assert got == [("agent.py", 13, "PC001", "warning")]
    msg = report.findings[0].message
    assert "(stored on app/prompt.py:24 by `builder.add_section()`)" in msg


def test_a_fallback_behind_an_optional_argument_is_the_default_path():
    # `override or build()`: with override=None by default, the clock runs on every call
    # that leaves it out, so the rate stays per request (not "one code path only")
    src = """
    import anthropic
    from datetime import datetime
    def ask(q, system_override=None):
        system = system_override or f"Now: {datetime.now()}. Rules: answer in French."
        return anthropic.Anthropic().messages.create(
            model="m", system=system, messages=[{"role": "user", "content": q}])
    """
    assert found(src) == [(6, "PC001", "warning")]


def test_a_fallback_behind_a_required_value_stays_one_path_only():
    src = """
    import anthropic
    from datetime import datetime
    def ask(q, stored_at):
        stamp = stored_at or datetime.now().isoformat()
        return anthropic.Anthropic().messages.create(
            model="m", system=f"Memory saved {stamp}. Rules: answer in French.",
            messages=[{"role": "user", "content": q}])
    """
    assert found(src) == [(6, "PC001", "info")]


def test_the_models_reply_does_not_carry_the_prompts_clock():
    # the clock is in the last user message; the reply (tool calls chosen by the model)
    # picks the tools of the next system prompt: the reply is not the clock
    src = """
    import anthropic
    from datetime import datetime
    client = anthropic.Anthropic()
    def turn(q, history, tools):
        msgs = history + [{"role": "user", "content": f"[{datetime.now()}] {q}"}]
        reply = client.messages.create(model="m", system="Rules.", messages=msgs)
        names = [b.name for b in reply.content if b.type == "tool_use"]
        active = [t for t in tools if t["name"] in names]
        hints = "\\n".join(t["hint"] for t in active)
        return client.messages.create(
            model="m", system="Tool hints:\\n" + hints + "\\nRules.",
            messages=[{"role": "user", "content": q}])
    """
    assert found(src) == []
