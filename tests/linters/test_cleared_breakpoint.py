"""PC009: a breakpoint set and then deleted by a later clean-up loop of the same function.

Each expected (line, code) pair is read off the snippet: lines count from 1 at the first
line of the dedented source.
"""

from __future__ import annotations

import textwrap

from linters.config import LintConfig
from linters.runner import lint_source


def found(src: str) -> list[tuple[int, str]]:
    text = textwrap.dedent(src).lstrip("\n")
    return [(f.line, f.code) for f in lint_source(text, "t.py", LintConfig()) if f.code == "PC009"]


def test_set_then_cleared_in_the_same_list():
    src = """
    def mark(history):
        history[-1]["cache_control"] = {"type": "ephemeral"}
        for block in history:
            block.pop("cache_control", None)
        return history
    """
    assert found(src) == [(2, "PC009")]


def test_block_added_to_the_history_before_the_clean_up():
    # the block list joins self.messages, gets a marker, then the loop over self.messages
    # deletes every marker (the order khoj shipped until 253656b6)
    src = """
    class Agent:
        def __init__(self):
            self.messages = []

        def add(self, results):
            self.messages += [{"role": "user", "content": results}]
            results[-1]["cache_control"] = {"type": "ephemeral"}
            for msg in self.messages:
                for block in msg["content"]:
                    if "cache_control" in block:
                        del block["cache_control"]
    """
    assert found(src) == [(7, "PC009")]


def test_name_taken_from_the_collection():
    src = """
    def mark(history):
        last = history[-1]
        last["content"][-1]["cache_control"] = {"type": "ephemeral"}
        for m in history:
            for b in m["content"]:
                b.pop("cache_control", None)
    """
    assert found(src) == [(3, "PC009")]


def test_appended_block_then_cleared():
    src = """
    def step(messages, text):
        block = {"type": "text", "text": text}
        messages.append({"role": "user", "content": [block]})
        block["cache_control"] = {"type": "ephemeral"}
        for m in messages:
            for b in m["content"]:
                b.pop("cache_control", None)
    """
    assert found(src) == [(4, "PC009")]


def test_clean_up_first_then_set_is_fine():
    src = """
    class Agent:
        def add(self, results):
            for msg in self.messages:
                for block in msg["content"]:
                    if "cache_control" in block:
                        del block["cache_control"]
            results[-1]["cache_control"] = {"type": "ephemeral"}
            self.messages += [{"role": "user", "content": results}]
    """
    assert found(src) == []


def test_set_again_after_the_clean_up_is_fine():
    src = """
    def mark(history):
        history[0]["cache_control"] = {"type": "ephemeral"}
        for block in history:
            block.pop("cache_control", None)
        history[-1]["cache_control"] = {"type": "ephemeral"}
    """
    assert found(src) == []


def test_set_and_clean_up_in_different_branches_are_fine():
    src = """
    def mark(history, cached):
        if cached:
            history[-1]["cache_control"] = {"type": "ephemeral"}
        else:
            for block in history:
                block.pop("cache_control", None)
    """
    assert found(src) == []


def test_block_of_another_list_is_fine():
    # the marker is on the system blocks; the loop clears the conversation's markers
    src = """
    def build(system_blocks, history):
        system_blocks[-1]["cache_control"] = {"type": "ephemeral"}
        for m in history:
            m.pop("cache_control", None)
        return system_blocks, history
    """
    assert found(src) == []


def test_clean_up_that_skips_the_new_block_is_fine():
    src = """
    def mark(history):
        history[-1]["cache_control"] = {"type": "ephemeral"}
        for block in history[:-1]:
            block.pop("cache_control", None)
    """
    assert found(src) == []


def test_clean_up_that_spares_the_new_block_by_a_condition_is_fine():
    src = """
    def mark(history):
        last = history[-1]
        last["cache_control"] = {"type": "ephemeral"}
        for block in history:
            if block is not last:
                block.pop("cache_control", None)
    """
    assert found(src) == []


def test_clean_up_that_spares_the_last_item_is_fine():
    src = """
    def mark(history):
        history[-1]["cache_control"] = {"type": "ephemeral"}
        for block in history:
            if block is not history[-1]:
                block.pop("cache_control", None)
    """
    assert found(src) == []


def test_only_the_base_of_an_added_value_is_not_membership():
    # m.text joined the list, not m: m's marker is not in `parts`
    src = """
    def f(parts, m):
        parts.append(m.text)
        m["cache_control"] = {"type": "ephemeral"}
        for p in parts:
            p.pop("cache_control", None)
    """
    assert found(src) == []


def test_setting_none_is_not_a_breakpoint():
    src = """
    def mark(history):
        history[-1]["cache_control"] = None
        for block in history:
            block.pop("cache_control", None)
    """
    assert found(src) == []


def test_operator_trajectory_shape_before_and_after_the_fix():
    # the shape of khoj's AnthropicOperatorAgent.add_action_results at faecbdb7 (written
    # for this test): results filled per step, appended as an "environment" message, the
    # last result marked, then the "remove previous cache controls" loop
    before = """
    class Message:
        def __init__(self, role, content):
            self.role, self.content = role, content

    class OperatorAgent:
        def __init__(self):
            self.messages = []

        def add_action_results(self, env_steps, action):
            if not action.action_results:
                return
            for idx, step in enumerate(env_steps):
                result = action.action_results[idx]
                result["content"] = step.error or step.output or "[Action completed]"
                if step.error:
                    result["is_error"] = True

            self.messages += [Message(role="environment", content=action.action_results)]

            action.action_results[-1]["cache_control"] = {"type": "ephemeral"}
            for msg in self.messages:
                if msg.role == "environment" and isinstance(msg.content, list):
                    for block in msg.content:
                        if isinstance(block, dict) and "cache_control" in block:
                            del block["cache_control"]
    """
    assert found(before) == [(20, "PC009")]
    # the fix (253656b6) moves the clean-up loop first, then marks, then appends
    lines = textwrap.dedent(before).lstrip("\n").splitlines()
    mark, append = lines[19], lines[17]
    after = "\n".join(lines[:17] + lines[20:] + [mark, append]) + "\n"
    compile(after, "after.py", "exec")  # still valid Python
    assert [(f.line, f.code) for f in lint_source(after, "t.py")] == []
