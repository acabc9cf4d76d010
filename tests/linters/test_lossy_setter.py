"""PC012: text read from a property's str view of content blocks and assigned back through a
setter that turns a str into one text block, dropping a cache breakpoint among the blocks.

The shape of strands-agents/sdk-python before 2eaff9c2 (a skills hook appending to
``agent.system_prompt``), written here as a small package: an assistant class whose
``system`` property joins its blocks' text and whose setter rebuilds ``[{"text": value}]``,
an event dataclass naming the assistant through a ``TYPE_CHECKING`` import of the package's
re-export, and a plugin in a third module doing the read-modify-write.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from linters import lint_paths
from linters.config import LintConfig
from linters.runner import lint_source

ASSISTANT = textwrap.dedent("""
    from typing import TypedDict


    class CacheMark(TypedDict):
        type: str


    class Block(TypedDict, total=False):
        text: str
        cachePoint: CacheMark


    class Assistant:
        def __init__(self, client, system: str | list[Block]) -> None:
            self.client = client
            self.system = system

        @property
        def system(self) -> str | None:
            return self._text

        @property
        def system_blocks(self) -> list[Block] | None:
            return list(self._blocks) if self._blocks is not None else None

        @system.setter
        def system(self, value: str | list[Block] | None) -> None:
            self._text, self._blocks = self._split(value)

        def _split(self, value):
            if isinstance(value, str):
                return value, [{"text": value}]
            if value is None:
                return None, None
            return "\\n".join(b["text"] for b in value if "text" in b), value

        def ask(self, question: str):
            return self.client.converse(
                modelId="anthropic.claude-sonnet-4-5",
                system=self._blocks,
                messages=[{"role": "user", "content": [{"text": question}]}],
            )
""").lstrip()

EVENTS = textwrap.dedent("""
    from dataclasses import dataclass
    from typing import TYPE_CHECKING

    if TYPE_CHECKING:
        from . import Assistant


    @dataclass
    class Turn:
        assistant: "Assistant"
        question: str
""").lstrip()

GLOSSARY = textwrap.dedent("""
    from .events import Turn


    class Glossary:
        def __init__(self, terms: dict[str, str]) -> None:
            self.terms = terms
            self.last = ""

        def render(self) -> str:
            return "\\n".join(f"{k}: {v}" for k, v in self.terms.items())

        def before_turn(self, turn: Turn) -> None:
            assistant = turn.assistant
            current = assistant.system or ""
            if self.last:
                current = current.replace(self.last, "")
            self.last = f"\\n\\n<glossary>{self.render()}</glossary>"
            assistant.system = current + self.last
""").lstrip()


def lint_package(tmp_path: Path, assistant: str = ASSISTANT, glossary: str = GLOSSARY) -> list:
    files = {
        "app/__init__.py": 'from .assistant import Assistant\n\n__all__ = ["Assistant"]\n',
        "app/assistant.py": assistant,
        "app/events.py": EVENTS,
        "app/glossary.py": glossary,
    }
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    found = lint_paths([tmp_path], LintConfig(root=tmp_path)).findings
    return [f for f in found if f.code == "PC012"]


def line_of(text: str, fragment: str) -> int:
    """1-based line of the one line of ``text`` holding ``fragment``."""
    lines = text.splitlines()
    hits = [i + 1 for i, line in enumerate(lines) if fragment in line]
    assert len(hits) == 1, (fragment, hits)
    return hits[0]


def test_read_modify_write_of_the_text_view_is_reported_with_its_hops(tmp_path: Path) -> None:
    (f,) = lint_package(tmp_path)
    assert (Path(f.path).relative_to(tmp_path).as_posix(), f.line, f.severity) == (
        "app/glossary.py",
        line_of(GLOSSARY, "assistant.system = current"),
        "warning",
    )
    read = line_of(GLOSSARY, 'current = assistant.system or ""')
    setter = line_of(ASSISTANT, "self._text, self._blocks = self._split(value)") - 1
    block = line_of(ASSISTANT, 'return value, [{"text": value}]')
    marker = line_of(ASSISTANT, "cachePoint: CacheMark")
    request = line_of(ASSISTANT, "system=self._blocks")
    m = f.message
    assert f"`assistant.system` is read as text (line {read})" in m
    assert f"the setter of `Assistant.system` (app/assistant.py:{setter})" in m
    assert (
        f"content blocks in `_blocks` with one text block (`[{{'text': value}}]`, line {block}" in m
    )
    assert (
        f"a breakpoint among them (`cachePoint`, a key of `Block`, app/assistant.py:{marker})" in m
    )
    assert f"the blocks are read at app/assistant.py:{request}" in m
    assert m.endswith("edit the blocks (`assistant.system_blocks`) and assign the list instead")


def test_augmented_assignment_is_a_read_modify_write(tmp_path: Path) -> None:
    glossary = GLOSSARY.replace(
        "assistant.system = current + self.last", "assistant.system += self.last"
    )
    (f,) = lint_package(tmp_path, glossary=glossary)
    assert f.line == line_of(glossary, "assistant.system += self.last")


def test_a_setter_that_keeps_the_other_blocks_is_not_reported(tmp_path: Path) -> None:
    keeps = ASSISTANT.replace(
        'return value, [{"text": value}]',
        'return value, [b for b in self._blocks or [] if "text" not in b] + [{"text": value}]',
    )
    assert lint_package(tmp_path, assistant=keeps) == []


def test_a_setter_that_checks_the_blocks_first_is_not_reported(tmp_path: Path) -> None:
    # llama_index's ChatMessage.content setter: one text block only when the message holds
    # at most one text block, an error otherwise (nothing is dropped silently)
    checks = ASSISTANT.replace(
        "        if isinstance(value, str):\n            return value,",
        "        if isinstance(value, str) and len(self._blocks or []) <= 1:\n"
        "            return value,",
    )
    assert checks != ASSISTANT
    assert lint_package(tmp_path, assistant=checks) == []


def test_blocks_that_cannot_carry_a_breakpoint_are_not_reported(tmp_path: Path) -> None:
    plain = ASSISTANT.replace("cachePoint: CacheMark", "image: bytes")
    assert plain != ASSISTANT
    assert lint_package(tmp_path, assistant=plain) == []


def test_assigning_a_new_prompt_is_not_reported(tmp_path: Path) -> None:
    # a new text, not made from the old one: the caller replaces the prompt on purpose
    glossary = GLOSSARY.replace(
        "assistant.system = current + self.last",
        "assistant.system = self.render() + self.last",
    )
    assert lint_package(tmp_path, glossary=glossary) == []


def test_a_plain_attribute_is_not_reported(tmp_path: Path) -> None:
    start = ASSISTANT.index("    @property\n    def system(self)")
    end = ASSISTANT.index("    def ask(")
    plain = ASSISTANT[:start] + ASSISTANT[end:]
    assert "@property" not in plain
    assert lint_package(tmp_path, assistant=plain) == []


def test_the_write_in_the_branch_without_blocks_is_not_reported(tmp_path: Path) -> None:
    # the fixed shape (strands 2eaff9c2): edit the blocks when there are any; the text path
    # runs only when the assistant holds no blocks, so there is nothing to drop
    fixed = GLOSSARY.replace(
        '        current = assistant.system or ""\n',
        "            blocks = assistant.system_blocks\n"
        "            if blocks is not None:\n"
        '                assistant.system = [*blocks, {"text": self.render()}]\n'
        "                return\n"
        '        current = assistant.system or ""\n',
    )
    assert lint_package(tmp_path, glossary=fixed) == []
    guarded = GLOSSARY.replace(
        '        current = assistant.system or ""\n',
        "        blocks = assistant.system_blocks\n"
        "        if blocks is not None:\n"
        '            assistant.system = [*blocks, {"text": self.render()}]\n'
        "        else:\n"
        '            assistant.system = (assistant.system or "") + self.render()\n'
        '        current = ""\n',
    ).replace("assistant.system = current + self.last", "self.last = current")
    assert lint_package(tmp_path, glossary=guarded) == []


def test_one_module_alone() -> None:
    src = ASSISTANT + textwrap.dedent(
        """
        def add_rules(assistant: Assistant, rules: str) -> None:
            assistant.system = f"{assistant.system}\\n\\n{rules}"
        """
    )
    found = [f for f in lint_source(src, "one.py") if f.code == "PC012"]
    assert [f.line for f in found] == [len(src.rstrip().splitlines())]


def test_the_branch_that_has_blocks_is_still_reported(tmp_path: Path) -> None:
    # the test reads the blocks, but the text write runs where they are present
    glossary = GLOSSARY.replace(
        "        assistant.system = current + self.last\n",
        "        if assistant.system_blocks:\n            assistant.system = current + self.last\n",
    )
    (f,) = lint_package(tmp_path, glossary=glossary)
    assert f.line == line_of(glossary, "assistant.system = current + self.last")


def test_a_method_of_the_class_itself_is_reported() -> None:
    src = ASSISTANT.replace(
        "    def ask(self, question: str):\n",
        "    def add_note(self, note: str) -> None:\n"
        '        self.system = self.system.rstrip() + "\\n" + note\n'
        "\n"
        "    def ask(self, question: str):\n",
    )
    found = [f for f in lint_source(src, "one.py") if f.code == "PC012"]
    assert [f.line for f in found] == [line_of(src, "self.system = self.system.rstrip()")]
    assert "`self.system` is read as text" in found[0].message
