"""PC010: a breakpoint written in place into the caller's message dicts at a moving position.

Each expected (line, code) pair is read off the snippet: lines count from 1 at the first
line of the dedented source.
"""

from __future__ import annotations

import textwrap

from linters.config import LintConfig
from linters.runner import lint_source


def found(src: str) -> list[tuple[int, str]]:
    text = textwrap.dedent(src).lstrip("\n")
    return [(f.line, f.code) for f in lint_source(text, "t.py", LintConfig()) if f.code == "PC010"]


def test_extend_then_mark_last_message():
    src = """
    def build(history, question):
        messages = []
        messages.extend(history)
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        messages.append({"role": "user", "content": question})
        return messages
    """
    assert found(src) == [(4, "PC010")]


def test_list_copy_and_helper_marking_the_message():
    # the marker is set by a helper that gets the message: reported where the moving item
    # is taken (line 7), its mark at line 2
    src = """
    def mark(message):
        message["content"][-1]["cache_control"] = {"type": "ephemeral"}


    def build(history):
        messages = list(history)
        mark(messages[len(messages) - 2])
        return messages
    """
    assert found(src) == [(7, "PC010")]


def test_message_text_replaced_by_marked_blocks():
    # ``m["content"] = [{..., "cache_control": ...}]`` rewrites the caller's dict too;
    # reported where the moving item is taken (line 3), as for a helper
    src = """
    def build(history):
        messages = history[:]
        last = messages[-1]
        last["content"] = [{"type": "text", "text": last["content"], "cache_control": {"type": "ephemeral"}}]
        return messages
    """
    assert found(src) == [(3, "PC010")]


def test_deep_copy_before_marking_is_fine():
    src = """
    import copy

    def build(history):
        messages = []
        messages.extend(history)
        last = copy.deepcopy(messages[-1])
        last["content"][-1]["cache_control"] = {"type": "ephemeral"}
        messages[-1] = last
        return messages
    """
    assert found(src) == []


def test_old_markers_cleared_is_fine():
    src = """
    def build(history):
        messages = list(history)
        for m in messages:
            for b in m["content"]:
                b.pop("cache_control", None)
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        return messages
    """
    assert found(src) == []


def test_fresh_messages_are_fine():
    # new dicts built from the history: the caller's dicts are not touched
    src = """
    def build(history):
        messages = [{"role": m["role"], "content": list(m["content"])} for m in history]
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        return messages
    """
    assert found(src) == []


def test_fixed_position_is_fine():
    # the first message gets the marker every turn: one marker, it does not move
    src = """
    def build(history):
        messages = list(history)
        messages[0]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        return messages
    """
    assert found(src) == []


def test_block_list_of_the_system_prompt_is_fine():
    # a copy of the system blocks with the last text block marked: a block, not a message
    # of a growing history (letta's _add_cache_control_to_system_message has this shape)
    src = """
    def cache_system(system_content):
        cached = system_content.copy()
        for i in range(len(cached) - 1, -1, -1):
            if cached[i].get("type") == "text":
                cached[i]["cache_control"] = {"type": "ephemeral"}
                break
        return cached
    """
    assert found(src) == []


def test_history_prefix_shape_before_and_after_the_fix():
    # the shape of PraisonAI's LLM._build_messages / _mark_history_prefix /
    # _mark_message_cache_control at 0b05a566 (written for this test)
    before = """
    class LLM:
        @staticmethod
        def _mark_message_cache_control(message):
            content = message.get("content")
            if isinstance(content, str):
                message["content"] = [
                    {"type": "text", "text": content, "cache_control": {"type": "ephemeral"}}
                ]
                return True
            if isinstance(content, list):
                for block in reversed(content):
                    if isinstance(block, dict) and block.get("type") == "text":
                        if "cache_control" not in block:
                            block["cache_control"] = {"type": "ephemeral"}
                        return True
            return False

        def _mark_history_prefix(self, messages, history_start, preserve_recent=2):
            if len(messages) - history_start <= preserve_recent:
                return
            boundary_index = len(messages) - preserve_recent - 1
            self._mark_message_cache_control(messages[boundary_index])

        def _build_messages(self, prompt, system_prompt=None, chat_history=None):
            messages = []
            if system_prompt:
                messages.append({"role": "system", "content": system_prompt})
            if chat_history:
                history_start = len(messages)
                messages.extend(chat_history)
                self._mark_history_prefix(messages, history_start)
            messages.append({"role": "user", "content": prompt})
            return messages
    """
    assert found(before) == [(22, "PC010")]
    # fe92c9ad: the boundary message is deep-copied, marked, and put back
    after = textwrap.dedent(before).replace(
        "        self._mark_message_cache_control(messages[boundary_index])\n",
        "        boundary = copy.deepcopy(messages[boundary_index])\n"
        "        if self._mark_message_cache_control(boundary):\n"
        "            messages[boundary_index] = boundary\n",
    )
    assert "copy.deepcopy" in after
    after = "import copy\n" + after.lstrip("\n")
    compile(after, "after.py", "exec")
    assert [(f.line, f.code) for f in lint_source(after, "t.py")] == []
