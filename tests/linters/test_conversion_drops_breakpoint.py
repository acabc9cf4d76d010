"""PC015: a message converter rebuilds each message from its role and content and, on a
branch for a role the project marks at message level, drops the message's ``cache_control``.

The shape of All-Hands-AI/OpenHands before 0c2924453f (tool results rebuilt as user
messages for models without native function calling), written as a small package: a message
class whose serializer puts ``cache_control`` on the message dict for tool messages only
(through a flag set under a role test), and a converter module that loops over the
serialized messages and rebuilds them per role.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from linters import lint_paths
from linters.config import LintConfig
from linters.runner import lint_source

SERIALIZER = textwrap.dedent("""
    class Turn:
        def __init__(self, role: str, parts: list[dict], cached: bool = False) -> None:
            self.role = role
            self.parts = parts
            self.cached = cached

        def to_dict(self) -> dict:
            parts = []
            move_up = False
            for part in self.parts:
                part = dict(part)
                if self.role == "tool" and self.cached:
                    move_up = True
                    part.pop("cache_control", None)
                parts.append(part)
            out = {"role": self.role, "content": parts}
            if move_up:
                out["cache_control"] = {"type": "ephemeral"}
            return out
""").lstrip()

CONVERTER = textwrap.dedent("""
    def to_plain(messages: list[dict], prefix: str) -> list[dict]:
        plain = []
        for msg in messages:
            role = msg["role"]
            content = msg["content"]
            if role == "system":
                plain.append({"role": "system", "content": content})
            elif role == "tool":
                if isinstance(content, list):
                    content = [{"type": "text", "text": prefix}] + content
                plain.append({"role": "user", "content": content})
            else:
                plain.append({"role": role, "content": content})
        return plain
""").lstrip()

KEPT = CONVERTER.replace(
    '            plain.append({"role": "user", "content": content})\n',
    '            if "cache_control" in msg:\n'
    '                content[-1]["cache_control"] = msg["cache_control"]\n'
    '            plain.append({"role": "user", "content": content})\n',
)
assert KEPT != CONVERTER


def lint_package(tmp_path: Path, serializer: str = SERIALIZER, converter: str = CONVERTER) -> list:
    files = {"app/__init__.py": "", "app/turns.py": serializer, "app/convert.py": converter}
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    found = lint_paths([tmp_path], LintConfig(root=tmp_path)).findings
    return [f for f in found if f.code == "PC015"]


def line_of(text: str, fragment: str) -> int:
    """1-based line of the one line of ``text`` holding ``fragment``."""
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if fragment in line]
    assert len(hits) == 1, (fragment, hits)
    return hits[0]


def test_tool_branch_dropping_the_key_is_reported_with_the_write(tmp_path: Path) -> None:
    (f,) = lint_package(tmp_path)
    rel = Path(f.path).relative_to(tmp_path).as_posix()
    line = line_of(CONVERTER, 'plain.append({"role": "user", "content": content})')
    assert (rel, f.line, f.code, f.severity) == ("app/convert.py", line, "PC015", "warning")
    write = line_of(SERIALIZER, 'out["cache_control"] = {"type": "ephemeral"}')
    assert "`to_plain()` rebuilds each `msg`" in f.message
    assert "the `tool` branch" in f.message
    assert f"`to_dict()` sets on `tool` messages (app/turns.py:{write})" in f.message
    assert "list `plain`" in f.message


def test_copying_the_key_on_the_tool_branch_is_not_reported(tmp_path: Path) -> None:
    # the other branches still drop nothing the project sets: only tool messages carry it
    assert lint_package(tmp_path, converter=KEPT) == []


def test_spreading_the_message_is_not_reported(tmp_path: Path) -> None:
    spread = CONVERTER.replace(
        'plain.append({"role": "user", "content": content})',
        'plain.append({**msg, "role": "user", "content": content})',
    )
    assert lint_package(tmp_path, converter=spread) == []


def test_block_level_marks_only_are_not_reported(tmp_path: Path) -> None:
    # the key on a content block, not on the message: the converter keeps the blocks
    blocks = SERIALIZER.replace(
        'out["cache_control"] = {"type": "ephemeral"}',
        'parts[-1]["cache_control"] = {"type": "ephemeral"}',
    )
    assert lint_package(tmp_path, serializer=blocks) == []


def test_branch_for_a_role_never_marked_is_not_reported(tmp_path: Path) -> None:
    # the project marks only tool messages; this converter rebuilds only system messages
    system_only = textwrap.dedent("""
        def to_plain(messages: list[dict]) -> list[dict]:
            plain = []
            for msg in messages:
                if msg["role"] == "system":
                    plain.append({"role": "system", "content": msg["content"]})
                else:
                    plain.append(msg)
            return plain
    """).lstrip()
    assert lint_package(tmp_path, converter=system_only) == []


def test_unguarded_mark_reports_every_rebuilding_branch() -> None:
    # marked for any role (no role test on the write): the system branch drops it too
    src = textwrap.dedent("""
        def serialize(role, text):
            out = {"role": role, "content": [{"type": "text", "text": text}]}
            out["cache_control"] = {"type": "ephemeral"}
            return out


        def rename(messages):
            renamed = []
            for m in messages:
                if m["role"] == "system":
                    renamed.append({"role": "developer", "content": m["content"]})
                else:
                    renamed.append(m)
            return renamed
    """).lstrip()
    got = [(f.line, f.code, f.severity) for f in lint_source(src, "one.py") if f.code == "PC015"]
    assert got == [(11, "PC015", "warning")]


def test_own_read_on_another_branch_is_the_evidence_without_a_write() -> None:
    src = textwrap.dedent("""
        def rebuild(messages):
            out = []
            for m in messages:
                if m["role"] == "tool":
                    content = list(m["content"])
                    if "cache_control" in m:
                        content[-1]["cache_control"] = m["cache_control"]
                    out.append({"role": "user", "content": content})
                elif m["role"] == "user":
                    out.append({"role": "user", "content": m["content"]})
            return out
    """).lstrip()
    got = [(f.line, f.code, f.severity) for f in lint_source(src, "one.py") if f.code == "PC015"]
    assert got == [(10, "PC015", "warning")]


def test_converter_not_returning_its_list_is_not_reported() -> None:
    src = textwrap.dedent("""
        def serialize(role, text):
            out = {"role": role, "content": text, "cache_control": {"type": "ephemeral"}}
            return out


        def show(messages):
            shown = []
            for m in messages:
                if m["role"] == "system":
                    shown.append({"role": "system", "content": m["content"]})
            print(shown)
    """).lstrip()
    assert [f for f in lint_source(src, "one.py") if f.code == "PC015"] == []


def test_enumerated_messages_and_get_reads_are_followed() -> None:
    src = textwrap.dedent("""
        def tool_result(text, cached):
            msg = {"role": "tool", "content": text}
            if cached:
                msg["cache_control"] = {"type": "ephemeral"}
            return msg


        def flatten(history):
            flat = []
            for i, item in enumerate(history):
                kind = item.get("role")
                if kind == "tool":
                    flat.append({"role": "user", "content": f"[{i}] " + item.get("content")})
                else:
                    flat.append(item)
            return flat
    """).lstrip()
    got = [(f.line, f.code, f.severity) for f in lint_source(src, "one.py") if f.code == "PC015"]
    assert got == [(13, "PC015", "warning")]
