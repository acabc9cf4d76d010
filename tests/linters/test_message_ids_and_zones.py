"""Two false-positive kinds from the independent tryout (pydantic-ai): a fresh id given to a
system message object the model never reads, and the time zone's name taken from a clock
reading. Small programs written for these tests; lines count from 1 at the first line."""

from __future__ import annotations

import textwrap

from linters.config import LintConfig
from linters.runner import lint_source


def found(src: str) -> list[tuple[int, str, str]]:
    text = textwrap.dedent(src).lstrip()
    return [(f.line, f.code, f.severity) for f in lint_source(text, "t.py", LintConfig())]


def test_a_fresh_id_of_a_system_message_object_is_not_prompt_text():
    src = """
    import uuid
    from ag_ui.core import SystemMessage

    def to_ag_ui(parts):
        return [SystemMessage(id=str(uuid.uuid4()), content="\\n".join(parts))]
    """
    assert found(src) == []


def test_a_clock_in_the_text_of_a_system_message_object_is_reported():
    src = """
    import uuid
    from datetime import datetime
    from langchain_core.messages import SystemMessage

    def system(rules):
        return SystemMessage(id=str(uuid.uuid4()), content=f"Now {datetime.now()}. " + rules)
    """
    assert found(src) == [(6, "PC001", "warning")]


def test_the_zone_name_of_a_clock_reading_is_per_process():
    # the zone's name is the machine's: per process, so no PC001 (only PC004's info note
    # that a computed value comes before static text may remain)
    src = """
    import anthropic
    from datetime import datetime, timezone

    def ask(q):
        now = datetime.now(timezone.utc)
        tz = now.astimezone().tzinfo
        name = tz.tzname(now) if tz else ""
        system = f"Time zone: {name}. Rules: answer in French, cite sources, be brief."
        return anthropic.Anthropic().messages.create(
            model="m", system=system, messages=[{"role": "user", "content": q}])
    """
    assert [f for f in found(src) if f[1] == "PC001" or f[2] != "info"] == []
