"""A prompt split at a marker string into a cached and an uncached block
(linters/flow/sentinels.py): what a builder places after the marker is past the last
breakpoint; what it places before keeps its finding. Small programs written for these tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

from linters import lint_paths
from linters.config import LintConfig

# The splitter: the part before the marker carries the breakpoint, the part after none.
LLM = """
import anthropic

SPLIT_AT = "<!-- volatile below -->"


def system_blocks(text: str) -> list[dict]:
    if SPLIT_AT not in text:
        return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]
    head, tail = text.split(SPLIT_AT, 1)
    return [
        {"type": "text", "text": head, "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": tail},
    ]
"""

# The builder: sections flagged ``volatile=True`` go after the marker (its class constant,
# "\n" around it, stripped: the same text as the splitter's constant, a different object).
PROMPT = """
from datetime import datetime

RULES = "Answer in French; cite the source of every figure you give. " * 60


class Sections:
    MARK = "\\n<!-- volatile below -->\\n"

    def __init__(self) -> None:
        self._items: list[tuple[str, str, bool]] = []

    def add(self, title: str, body: str, *, volatile: bool = False) -> "Sections":
        self._items.append((title, body, volatile))
        return self

    def render(self) -> str:
        parts: list[str] = []
        marked = False
        for title, body, volatile in self._items:
            if volatile and not marked:
                marked = True
                parts.append(self.MARK.strip())
            parts.append(f"# {title}\\n{body}")
        return "\\n\\n".join(parts)


def system_prompt() -> str:
    s = Sections()
    s.add("Rules", RULES)
    now = datetime.now().strftime("%H:%M")
    s.add("Clock", f"It is {now}.", volatile=True)
    return s.render()
"""

CORE = """
import anthropic

from app.llm import system_blocks
from app.prompt import system_prompt


def reply(question: str):
    return anthropic.Anthropic().messages.create(
        model="m",
        max_tokens=100,
        system=system_blocks(system_prompt()),
        messages=[{"role": "user", "content": question}],
    )
"""


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip())


def lint(root: Path) -> list:
    return lint_paths([root], LintConfig(root=root)).findings


def program(**changed: str) -> dict[str, str]:
    files = {"app/__init__.py": "", "app/llm.py": LLM, "app/prompt.py": PROMPT, "app/core.py": CORE}
    files.update({f"app/{k}.py": v for k, v in changed.items()})
    return files


def where(got: list) -> list[tuple[str, int, str, str]]:
    return [(Path(f.path).name, f.line, f.code, f.severity) for f in got]


# The clock section added BEFORE the rules, unflagged: it sits ahead of 3,720 characters of
# static rules in the cached block (62 characters x 60).
CLOCK_FIRST = PROMPT.replace(
    '    s.add("Rules", RULES)\n    now = datetime.now().strftime("%H:%M")\n'
    '    s.add("Clock", f"It is {now}.", volatile=True)\n',
    '    now = datetime.now().strftime("%H:%M")\n    s.add("Clock", f"It is {now}.")\n'
    '    s.add("Rules", RULES)\n',
)


def test_a_clock_after_the_marker_the_project_splits_at_is_not_reported(tmp_path):
    write(tmp_path, program())
    assert lint(tmp_path) == []


def test_a_clock_before_the_marker_keeps_its_warning(tmp_path):
    assert CLOCK_FIRST != PROMPT
    write(tmp_path, program(prompt=CLOCK_FIRST))
    got = lint(tmp_path)
    # the clock, to the minute (per request), reaches the system prompt at core.py line 11
    # (``system=system_blocks(system_prompt())``)
    assert where(got) == [("core.py", 11, "PC001", "warning")]
    assert "(the clock)" in got[0].message
    assert "stored on app/prompt.py:" in got[0].message


def test_a_splitter_that_marks_both_parts_defines_no_boundary(tmp_path):
    both = LLM.replace(
        '{"type": "text", "text": tail}',
        '{"type": "text", "text": tail, "cache_control": {"type": "ephemeral"}}',
    )
    assert both != LLM
    write(tmp_path, program(llm=both))
    got = lint(tmp_path)
    assert where(got) == [("core.py", 11, "PC001", "warning")]
    assert "(the clock)" in got[0].message


def test_a_marker_the_project_never_splits_at_defines_no_boundary(tmp_path):
    whole = """
    def system_blocks(text: str) -> list[dict]:
        return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]
    """
    write(tmp_path, program(llm=whole))
    got = lint(tmp_path)
    assert where(got) == [("core.py", 11, "PC001", "warning")]


def test_a_splitter_at_another_text_defines_no_boundary(tmp_path):
    # same constant name, different text: matched by value, never by name
    other = LLM.replace('"<!-- volatile below -->"', '"<!-- dynamic below -->"')
    write(tmp_path, program(llm=other))
    got = lint(tmp_path)
    assert where(got) == [("core.py", 11, "PC001", "warning")]


def test_a_partition_and_a_cache_point_block_split_the_same_way(tmp_path):
    # Bedrock's shape: the cachePoint block follows the cached text, the rest after it
    bedrock = """
    SPLIT_AT = "<!-- volatile below -->"


    def system_blocks(text: str) -> list[dict]:
        head, _sep, tail = text.partition(SPLIT_AT)
        return [{"text": head}, {"cachePoint": {"type": "default"}}, {"text": tail}]
    """
    write(tmp_path, program(llm=bedrock))
    assert lint(tmp_path) == []


def test_a_slice_at_the_marker_index_splits_the_same_way(tmp_path):
    sliced = """
    SPLIT_AT = "<!-- volatile below -->"


    def system_blocks(text: str) -> list[dict]:
        i = text.find(SPLIT_AT)
        return [
            {"type": "text", "text": text[:i], "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": text[i + len(SPLIT_AT):]},
        ]
    """
    write(tmp_path, program(llm=sliced))
    assert lint(tmp_path) == []


def test_a_clock_after_the_marker_ahead_of_a_message_history_keeps_its_warning(tmp_path):
    # past the system block's breakpoint, but the earlier turns follow it in the request:
    # a provider's prefix cache of the history (automatic, or a later breakpoint) starts
    # over whenever the clock changes
    core = CORE.replace("def reply(question: str):", "def reply(history: list, question: str):")
    core = core.replace('messages=[{"role"', 'messages=[*history, {"role"')
    assert core.count("*history") == 1
    write(tmp_path, program(core=core))
    got = lint(tmp_path)
    assert where(got) == [("core.py", 11, "PC001", "warning")]
    assert "(the clock)" in got[0].message


# The marker written into the text itself: an f-string, ``+`` and ``sep.join([...])``.
INLINE = """
from datetime import datetime

from app.llm import SPLIT_AT

RULES = "Answer in French; cite the source of every figure you give. " * 60


def system_prompt() -> str:
    now = datetime.now().strftime("%H:%M")
    return {text}
"""


def test_a_clock_after_the_marker_in_an_fstring_a_sum_or_a_join(tmp_path):
    for text in (
        'f"{RULES}\\n{SPLIT_AT}\\nIt is {now}."',
        'RULES + "\\n" + SPLIT_AT + "\\nIt is " + now',
        '"\\n".join([RULES, SPLIT_AT, f"It is {now}."])',
    ):
        write(tmp_path, program(prompt=INLINE.replace("{text}", text)))
        assert lint(tmp_path) == [], text


def test_a_clock_before_the_marker_in_an_fstring_a_sum_or_a_join(tmp_path):
    for text in (
        'f"It is {now}.\\n{RULES}\\n{SPLIT_AT}"',
        '"It is " + now + "\\n" + RULES + SPLIT_AT',
        '"\\n".join([f"It is {now}.", RULES, SPLIT_AT])',
    ):
        write(tmp_path, program(prompt=INLINE.replace("{text}", text)))
        got = lint(tmp_path)
        assert where(got) == [("core.py", 11, "PC001", "warning")], text
        assert "(the clock)" in got[0].message
