"""Read a JSON Lines file that may be damaged: one object per line, bad lines skipped.

A line is skipped -- with one ``warnings`` entry naming the file, the line number and why --
when its bytes are not UTF-8, it is not JSON (a truncated last line, a half-written line), or
it is JSON but not an object. Memory is one line at a time (the file is read in binary and
split on ``\\n``; ``\\r\\n`` is accepted).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["read_jsonl", "Skipped"]


@dataclass
class Skipped:
    """The lines a reader skipped: ``warnings`` holds one line of text per skipped line."""

    warnings: list[str] = field(default_factory=list)

    def add(self, path: Path, lineno: int, why: str) -> None:
        """Note one skipped line."""
        self.warnings.append(f"{path}:{lineno}: skipped ({why})")


def read_jsonl(path: Path, skipped: Skipped) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each good line of ``path`` (1-based numbers); bad
    lines go to ``skipped``. Raises ``OSError`` when the file cannot be opened."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.rstrip(b"\r\n")
            if not line.strip():
                continue
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                skipped.add(path, lineno, f"not UTF-8 at byte {e.start}")
                continue
            try:
                obj = json.loads(text)
            except ValueError as e:
                truncated = not raw.endswith(b"\n")
                skipped.add(path, lineno, "truncated last line" if truncated else f"not JSON: {e}")
                continue
            if not isinstance(obj, dict):
                skipped.add(path, lineno, f"a JSON {type(obj).__name__}, not an object")
                continue
            yield lineno, obj
