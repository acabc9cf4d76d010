"""Stored data the conversation itself rewrites (issue 28): an ORM column that a tool the model
calls writes, read back into a cached prefix on every turn, is a per-conversation-write
volatile value (PC001 warning); the same store read where nothing cached follows it, never
written, or written only by an admin command stays unreported. Small projects written for
these tests; lines count from 1 at the first line of each dedented file."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from linters import lint_paths
from linters.config import LintConfig

MODELS = """
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Note(Base):
    __tablename__ = "notes"
    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[str]
    text: Mapped[str]
"""

MEMORY = """
from app.models import Note


def load_notes(session, user_id):
    row = session.query(Note).filter_by(user_id=user_id).first()
    return row.text if row else ""


def save_note(session, user_id, text):
    row = session.query(Note).filter_by(user_id=user_id).first()
    row.text = text
    session.commit()
"""

TOOLKIT = """
class Tool:
    def __init__(self, name, description, function):
        self.name = name
        self.description = description
        self.function = function
"""

TOOLS = """
from app.memory import save_note
from app.toolkit import Tool

TOOLS = [Tool(name="save_note", description="Remember a fact about the user.", function=save_note)]
"""

# 18 characters x 400 = 7,200 characters of static policy
AGENT_SYSTEM = """
import anthropic

from app.memory import load_notes

POLICY = "Answer in French. " * 400


def reply(session, user_id, question):
    system = "Notes about the user:\\n" + load_notes(session, user_id) + "\\n\\n" + POLICY
    return anthropic.Anthropic().messages.create(
        model="m", max_tokens=100, system=system, messages=[{"role": "user", "content": question}]
    )
"""

AGENT_LAST_MESSAGE = """
import anthropic

from app.memory import load_notes

POLICY = "Answer in French. " * 400


def reply(session, user_id, question):
    notes = load_notes(session, user_id)
    return anthropic.Anthropic().messages.create(
        model="m",
        max_tokens=100,
        system=POLICY,
        messages=[{"role": "user", "content": f"Notes: {notes}\\n\\n{question}"}],
    )
"""

ADMIN = """
import sys

from app.db import Session
from app.memory import save_note


def main():
    save_note(Session(), sys.argv[1], sys.argv[2])


if __name__ == "__main__":
    main()
"""


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip())


def lint(root: Path) -> list:
    return lint_paths([root], LintConfig(root=root)).findings


def assert_as_before(got: list) -> None:
    """Only what the linter said before this rate existed: the user's notes are a
    per-user value ahead of 7,202 characters of static text ("\n\n" + the policy), PC004
    (cached once per user), with nothing about a stored value."""
    assert [(Path(f.path).name, f.line, f.code, f.severity) for f in got] == [
        ("agent.py", 9, "PC004", "warning")
    ]
    assert "7202 characters" in got[0].message
    assert "stored" not in got[0].message


def test_a_note_a_tool_writes_read_ahead_of_static_text_is_a_warning(tmp_path):
    write(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/models.py": MODELS,
            "app/memory.py": MEMORY,
            "app/toolkit.py": TOOLKIT,
            "app/tools.py": TOOLS,
            "app/agent.py": AGENT_SYSTEM,
        },
    )
    got = lint(tmp_path)
    assert [(Path(f.path).name, f.line, f.code, f.severity) for f in got] == [
        ("agent.py", 9, "PC001", "warning")
    ]
    msg = got[0].message
    # the store, the write (memory.py line 11: ``row.text = text``) and the tool (memory.py
    # line 9: ``def save_note``, exposed by tools.py)
    assert "the stored `Note.text`, written during the conversation at app/memory.py:11" in msg
    assert "reached from the tool `save_note` at app/memory.py:9" in msg
    # static text of the system prompt after the note: 2 + 7,200 = 7,202 characters, 4 a
    # token (the 22 of "Notes about the user:\n" before it are no cacheable prefix alone)
    assert (
        "(~1800 tokens of static text after it in the system prompt are written anew with it)"
        in msg
    )


def test_the_same_note_in_the_last_user_message_is_not_reported(tmp_path):
    write(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/models.py": MODELS,
            "app/memory.py": MEMORY,
            "app/toolkit.py": TOOLKIT,
            "app/tools.py": TOOLS,
            "app/agent.py": AGENT_LAST_MESSAGE,
        },
    )
    assert lint(tmp_path) == []


def test_a_store_nothing_in_the_project_writes_is_not_reported(tmp_path):
    read_only = MEMORY.split("\n\ndef save_note")[0] + "\n"
    write(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/models.py": MODELS,
            "app/memory.py": read_only,
            "app/agent.py": AGENT_SYSTEM,
        },
    )
    assert_as_before(lint(tmp_path))


def test_a_store_written_only_by_an_admin_command_is_not_reported(tmp_path):
    write(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/models.py": MODELS,
            "app/memory.py": MEMORY,
            "app/admin.py": ADMIN,
            "app/agent.py": AGENT_SYSTEM,
        },
    )
    assert_as_before(lint(tmp_path))


def test_a_decorated_tool_and_a_listing_of_rows(tmp_path):
    """``@tool`` (langchain) adds a row with ``session.get`` + assignment; the prompt lists
    every note through ``session.scalars(select(Note)).all()``."""
    write(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/models.py": MODELS,
            "app/notes.py": """
            from langchain_core.tools import tool
            from sqlalchemy import select

            from app.db import Session
            from app.models import Note


            @tool
            def edit_note(note_id: int, text: str) -> str:
                \"\"\"Replace the text of a saved note.\"\"\"
                with Session() as session:
                    note = session.get(Note, note_id)
                    note.text = text
                    session.commit()
                return "ok"


            def all_notes(session) -> str:
                lines = []
                for note in session.scalars(select(Note)).all():
                    lines.append(f"- {note.text}")
                return "\\n".join(lines)
            """,
            "app/agent.py": """
            from openai import OpenAI

            from app.notes import all_notes

            RULES = "You are a careful assistant. Cite your sources. " * 100


            def reply(session, question):
                system = f"Saved notes:\\n{all_notes(session)}\\n\\n{RULES}"
                return OpenAI().chat.completions.create(
                    model="m",
                    messages=[
                        {"role": "system", "content": system},
                        {"role": "user", "content": question},
                    ],
                )
            """,
        },
    )
    got = lint(tmp_path)
    # reported where the listing enters the system text (line 9)
    assert [(Path(f.path).name, f.line, f.code, f.severity) for f in got] == [
        ("agent.py", 9, "PC001", "warning")
    ]
    assert "the stored `Note.text`, written during the conversation at app/notes.py:13" in (
        got[0].message
    )
    assert "reached from the tool `edit_note` at app/notes.py:9" in got[0].message


# The shape of clawbolt's agent before a956485a (rewritten, not copied): a memory document
# per user read on every turn through a cached store object, written by the agent's
# workspace file tool (a computed column, in a worker thread), and added as a section of
# the system prompt ahead of the static instructions.
CLAW_MODELS = """
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class MemoryDoc(Base):
    __tablename__ = "memory_docs"
    id: Mapped[int] = mapped_column(primary_key=True)
    owner: Mapped[str]
    memory_md: Mapped[str]
    log_md: Mapped[str]
"""

CLAW_STORE = """
from app.db import SessionLocal
from app.models import MemoryDoc


class DocStore:
    def __init__(self, owner: str) -> None:
        self.owner = owner

    def read_memory(self) -> str:
        db = SessionLocal()
        try:
            doc = db.query(MemoryDoc).filter_by(owner=self.owner).first()
            if doc is None:
                return ""
            return (doc.memory_md or "").strip()
        finally:
            db.close()

    async def memory_context(self) -> str:
        return self.read_memory()


_stores: dict[str, DocStore] = {}


def store_for(owner: str) -> DocStore:
    return _stores.setdefault(owner, DocStore(owner))


async def memory_context(owner: str) -> str:
    store = store_for(owner)
    return await store.memory_context()
"""

CLAW_TOOLS = """
import asyncio

from app.db import SessionLocal
from app.models import MemoryDoc
from app.toolkit import Tool

COLUMNS = {"MEMORY.md": "memory_md", "LOG.md": "log_md"}


def _write_sync(owner: str, column: str, content: str) -> None:
    with SessionLocal() as db:
        doc = db.query(MemoryDoc).filter_by(owner=owner).first()
        setattr(doc, column, content)
        db.commit()


def workspace_tools(owner: str) -> list[Tool]:
    async def write_file(path: str, content: str) -> str:
        await asyncio.to_thread(_write_sync, owner, COLUMNS[path], content)
        return f"Wrote {path}"

    return [Tool(name="write_file", description="Write a workspace file.", function=write_file)]
"""

CLAW_PROMPT = """
from app.store import memory_context

INSTRUCTIONS = "Keep replies short and friendly; confirm every booking twice. " * 60


class PromptBuilder:
    def __init__(self) -> None:
        self._sections: list[tuple[str, str]] = []

    def add_section(self, heading: str, content: str) -> "PromptBuilder":
        self._sections.append((heading, content))
        return self

    def build(self) -> str:
        return "\\n\\n".join(f"## {h}\\n{c}" for h, c in self._sections if c)


async def agent_system_prompt(owner: str) -> str:
    builder = PromptBuilder()
    memory = await memory_context(owner)
    builder.add_section("Your Memory", memory or "(nothing saved yet)")
    builder.add_section("Instructions", INSTRUCTIONS)
    return builder.build()
"""

CLAW_CORE = """
import anthropic

from app.prompt import agent_system_prompt


async def handle(owner: str, history: list, text: str):
    system = await agent_system_prompt(owner)
    return await anthropic.AsyncAnthropic().messages.create(
        model="m",
        max_tokens=1000,
        system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        messages=[*history, {"role": "user", "content": text}],
    )
"""


def test_the_shape_of_a_real_memory_section_before_its_fix(tmp_path):
    files = {
        "app/__init__.py": "",
        "app/models.py": CLAW_MODELS,
        "app/store.py": CLAW_STORE,
        "app/toolkit.py": TOOLKIT,
        "app/tools.py": CLAW_TOOLS,
        "app/prompt.py": CLAW_PROMPT,
        "app/core.py": CLAW_CORE,
    }
    write(tmp_path, files)
    got = lint(tmp_path)
    assert [(Path(f.path).name, f.line, f.code, f.severity) for f in got] == [
        ("core.py", 11, "PC001", "warning")
    ]
    msg = got[0].message
    # every column of the row is written (``setattr`` with a computed name, tools.py line 13),
    # reached from the nested ``write_file`` (line 18) through ``asyncio.to_thread``
    assert (
        "the stored `MemoryDoc.memory_md`, written during the conversation at app/tools.py:13"
        in msg
    )
    assert "reached from the tool `write_file` at app/tools.py:18" in msg

    # the fix moves the memory after the static text, into the user's turn: nothing left
    files["app/prompt.py"] = CLAW_PROMPT.replace(
        '    memory = await memory_context(owner)\n    builder.add_section("Your Memory", memory or "(nothing saved yet)")\n',
        "",
    )
    files["app/core.py"] = CLAW_CORE.replace(
        "from app.prompt import agent_system_prompt",
        "from app.prompt import agent_system_prompt\nfrom app.store import memory_context",
    ).replace(
        '{"role": "user", "content": text}',
        '{"role": "user", "content": f"{await memory_context(owner)}\\n\\n{text}"}',
    )
    write(tmp_path, files)
    assert lint(tmp_path) == []


def test_a_clock_and_a_tool_written_note_at_one_use_make_one_finding(tmp_path):
    write(
        tmp_path,
        {
            "app/__init__.py": "",
            "app/models.py": MODELS,
            "app/memory.py": MEMORY,
            "app/toolkit.py": TOOLKIT,
            "app/tools.py": TOOLS,
            "app/agent.py": """
            import anthropic
            from datetime import datetime

            from app.memory import load_notes

            POLICY = "Answer in French. " * 400


            def build_system(session, user_id):
                now = datetime.now().isoformat()
                return f"Now: {now}\\nNotes: {load_notes(session, user_id)}\\n\\n{POLICY}"


            def reply(session, user_id, question):
                system = build_system(session, user_id)
                return anthropic.Anthropic().messages.create(
                    model="m", max_tokens=100, system=system,
                    messages=[{"role": "user", "content": question}],
                )
            """,
        },
    )
    got = lint(tmp_path)
    # both values reach the request through ``system`` (set on line 15): one finding at
    # its use on line 17, the faster rate (the clock, per request) first
    assert [(Path(f.path).name, f.line, f.code, f.severity) for f in got] == [
        ("agent.py", 17, "PC001", "warning")
    ]
    msg = got[0].message
    assert msg.index("(the clock)") < msg.index("; also ") < msg.index("the stored `Note.text`")


PROFILE_MODELS = """
from sqlmodel import Field, SQLModel


class Profile(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    user_id: str
    summary: str = ""
    last_seen: str = ""
"""

PROFILE_STORE = """
from sqlalchemy import update
from sqlmodel import select

from app.models import Profile


def profile_summary(session, user_id):
    profile = session.exec(select(Profile).where(Profile.user_id == user_id)).first()
    return profile.summary


def save_summary(session, user_id, text):
    session.execute(update(Profile).where(Profile.user_id == user_id).values(summary=text))


def touch(session, user_id, when):
    session.execute(update(Profile).where(Profile.user_id == user_id).values(last_seen=when))
"""

PROFILE_AGENT = """
from openai import OpenAI

from app.store import profile_summary, save_summary, touch

RULES = "You are a careful assistant. Cite your sources. " * 100


def summarize(session, user_id, history):
    save_summary(session, user_id, history[-1]["content"][:500])


def turn(session, user_id, history, text, when):
    system = f"What you know about the user: {profile_summary(session, user_id)}\\n\\n{RULES}"
    reply = OpenAI().chat.completions.create(
        model="m",
        messages=[{"role": "system", "content": system}, *history, {"role": "user", "content": text}],
    )
    touch(session, user_id, when)
    summarize(session, user_id, history)
    return reply
"""


def test_a_summary_the_turn_itself_rewrites_is_a_warning(tmp_path):
    """No tool: the agent loop that builds the prompt also runs a summarizing step that
    rewrites the stored summary (``update(Profile)....values(summary=...)``)."""
    files = {
        "app/__init__.py": "",
        "app/models.py": PROFILE_MODELS,
        "app/store.py": PROFILE_STORE,
        "app/agent.py": PROFILE_AGENT,
    }
    write(tmp_path, files)
    got = lint(tmp_path)
    assert [(Path(f.path).name, f.line, f.code, f.severity) for f in got] == [
        ("agent.py", 13, "PC001", "warning")
    ]
    msg = got[0].message
    # the write (store.py line 13) and the turn that runs it and builds the prompt
    # (agent.py line 12, ``def turn``)
    assert "the stored `Profile.summary`, written during the conversation at app/store.py:13" in msg
    assert "by `turn()` at app/agent.py:12, which also builds this prompt" in msg

    # the turn writes only another column (``last_seen``): the summary changes only when
    # something outside the conversation writes it; PC004 as before (per-user text ahead
    # of 4,802 static characters: "\n\n" + 48 x 100), nothing about a stored value
    files["app/agent.py"] = PROFILE_AGENT.replace("    summarize(session, user_id, history)\n", "")
    write(tmp_path, files)
    got = lint(tmp_path)
    assert [(Path(f.path).name, f.line, f.code) for f in got] == [("agent.py", 13, "PC004")]
    assert "4802 characters" in got[0].message and "stored" not in got[0].message


# The shape of clawbolt's fix a956485a (rewritten): sections flagged ``dynamic=True`` go after
# a marker (a class constant, stripped) that the LLM service splits the system text at,
# the breakpoint on the part before it only; the memory section moves after the marker.
CLAW_PROMPT_FIXED = """
from app.store import memory_context

INSTRUCTIONS = "Keep replies short and friendly; confirm every booking twice. " * 60


class PromptBuilder:
    BOUNDARY = "\\n<!-- CACHE_BOUNDARY -->\\n"

    def __init__(self) -> None:
        self._sections: list[tuple[str, str, bool]] = []

    def add_section(self, heading: str, content: str, *, dynamic: bool = False) -> "PromptBuilder":
        self._sections.append((heading, content, dynamic))
        return self

    def build(self) -> str:
        parts: list[str] = []
        hit = False
        for heading, content, dynamic in self._sections:
            if not content:
                continue
            if dynamic and not hit:
                hit = True
                parts.append(self.BOUNDARY.strip())
            parts.append(f"## {heading}\\n{content}")
        return "\\n\\n".join(parts)


async def agent_system_prompt(owner: str) -> str:
    builder = PromptBuilder()
    builder.add_section("Instructions", INSTRUCTIONS)
    memory = await memory_context(owner)
    builder.add_section("Your Memory", memory or "(nothing saved yet)", dynamic=True)
    return builder.build()
"""

CLAW_LLM_SERVICE = """
from typing import Any

_BOUNDARY = "<!-- CACHE_BOUNDARY -->"


def system_with_caching(system: str) -> list[dict[str, Any]]:
    if _BOUNDARY in system:
        stable, dynamic = system.split(_BOUNDARY, 1)
        blocks: list[dict[str, Any]] = [
            {"type": "text", "text": stable.strip(), "cache_control": {"type": "ephemeral"}},
        ]
        dynamic = dynamic.strip()
        if dynamic:
            blocks.append({"type": "text", "text": dynamic})
        return blocks
    return [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]
"""

CLAW_CORE_SPLIT = """
import anthropic

from app.llm_service import system_with_caching
from app.prompt import agent_system_prompt


async def handle(owner: str, history: list, text: str):
    system = await agent_system_prompt(owner)
    return await anthropic.AsyncAnthropic().messages.create(
        model="m",
        max_tokens=1000,
        system=system_with_caching(system),
        messages=[*history, {"role": "user", "content": text}],
    )
"""


def test_the_shape_of_a_real_memory_section_moved_after_a_cache_boundary(tmp_path):
    files = {
        "app/__init__.py": "",
        "app/models.py": CLAW_MODELS,
        "app/store.py": CLAW_STORE,
        "app/toolkit.py": TOOLKIT,
        "app/tools.py": CLAW_TOOLS,
        "app/prompt.py": CLAW_PROMPT,
        "app/llm_service.py": CLAW_LLM_SERVICE,
        "app/core.py": CLAW_CORE_SPLIT,
    }
    write(tmp_path, files)
    got = lint(tmp_path)
    # before the fix: the memory section ahead of the instructions, one block, one breakpoint
    # (the splitter finds no marker): the stored memory reaches `system=` on core.py line 12
    assert [(Path(f.path).name, f.line, f.code, f.severity) for f in got] == [
        ("core.py", 12, "PC001", "warning")
    ]
    assert "the stored `MemoryDoc.memory_md`" in got[0].message
    before = got[0].message
    # the fix: the memory after the marker the service splits at, past the system block's
    # breakpoint, but still ahead of the whole message history (`*history`), whose cached
    # prefix each memory write re-writes: what the project's own later fix 797fcdec
    # ("emit dynamic system content after history to keep the message-history cache")
    # repaired. The finding stays, word for word.
    files["app/prompt.py"] = CLAW_PROMPT_FIXED
    write(tmp_path, files)
    got = lint(tmp_path)
    assert [(Path(f.path).name, f.line, f.code, f.severity) for f in got] == [
        ("core.py", 12, "PC001", "warning")
    ]
    # the same finding (line numbers aside: the sections moved)
    assert re.sub(r":\d+", ":N", got[0].message) == re.sub(r":\d+", ":N", before)
    # the same request without a history (one user message): nothing cached follows the
    # marker, so nothing is reported
    files["app/core.py"] = CLAW_CORE_SPLIT.replace("*history, ", "")
    write(tmp_path, files)
    assert lint(tmp_path) == []
    # and the memory section unflagged (before the marker, in the cached block): reported
    files["app/prompt.py"] = CLAW_PROMPT_FIXED.replace(
        '"(nothing saved yet)", dynamic=True)', '"(nothing saved yet)")'
    )
    write(tmp_path, files)
    got = lint(tmp_path)
    assert [(Path(f.path).name, f.line, f.code, f.severity) for f in got] == [
        ("core.py", 12, "PC001", "warning")
    ]
