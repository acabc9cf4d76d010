"""A function annotated to return a number (``-> int``) passes no iteration order to its
caller's text: the repository's own token counter (a longest-prefix match over a dict
filled at run time) was reported as ordering the tools layer. A function returning the
joined keys of the same dict still is. A small project written for this test."""

from __future__ import annotations

import textwrap
from pathlib import Path

from linters import lint_paths
from linters.config import LintConfig

POLICY = "Refunds within 30 days. " * 300

FILES = {
    "counters.py": """
        from typing import NamedTuple

        _registry: dict = {}


        def register(prefix: str, fn) -> None:
            _registry[prefix] = fn


        class Count(NamedTuple):
            tokens: int
            source: str


        def find(model: str):
            best = None
            for prefix, fn in _registry.items():
                if model.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
                    best = (prefix, fn)
            return best


        def count_full(text: str, model: str) -> Count:
            found = find(model)
            if found is not None:
                prefix, fn = found
                return Count(fn(text), f"counter:{prefix}")
            return Count(len(text) // 4, "bytes/4")


        def count(text: str, model: str) -> int:
            return count_full(text, model).tokens


        def names() -> str:
            return ", ".join(_registry)
    """,
    "agent.py": f"""
        import anthropic

        from counters import count, names

        POLICY = {POLICY!r}


        def ask(question: str, which: str):
            if which == "count":
                head = f"Budget: {{count(question, 'claude-x')}} tokens."
            else:
                head = f"Counters: {{names()}}."
            return anthropic.Anthropic().messages.create(
                model="claude-sonnet-4-6",
                max_tokens=100,
                system=head + "\\n\\n" + POLICY,
                messages=[{{"role": "user", "content": question}}],
            )
    """,
}


def test_an_int_result_carries_no_order_a_joined_listing_does(tmp_path: Path) -> None:
    for rel, text in FILES.items():
        (tmp_path / rel).write_text(textwrap.dedent(text).lstrip())
    found = lint_paths([tmp_path], LintConfig(root=tmp_path)).findings
    messages = [f.message for f in found if f.severity in ("warning", "error")]
    assert any("names()" in m and "_registry" in m for m in messages), messages
    assert not any("count()" in m for m in messages), messages
