"""PC013: rolling breakpoints put only on user-role messages while the project's agent turns
are ``"role": "tool"`` messages (SWE-agent 3f35533a's kind).

Each expected (file, line, code, severity) is read off the snippet: lines count from 1 at
the first line of the dedented source.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from linters import lint_paths
from linters.config import LintConfig
from linters.runner import lint_source


def findings(src: str) -> list:
    text = textwrap.dedent(src).lstrip("\n")
    return [f for f in lint_source(text, "t.py", LintConfig()) if f.code == "PC013"]


def found(src: str) -> list[tuple[int, str, str]]:
    return [(f.line, f.code, f.severity) for f in findings(src)]


# The parent of SWE-agent 3f35533a, rewritten small: a history processor tags the newest
# N user messages through a helper; the agent turns observations into tool messages.
HISTORY_PROCESSOR = """
class CacheTagger:
    def __init__(self, last_n):
        self.last_n = last_n

    def _clear(self, entry):
        if isinstance(entry["content"], list):
            entry["content"][0].pop("cache_control", None)

    def _set(self, entry):
        if not isinstance(entry["content"], list):
            entry["content"] = [
                {"type": "text", "text": entry["content"], "cache_control": {"type": "ephemeral"}}
            ]
        else:
            entry["content"][0]["cache_control"] = {"type": "ephemeral"}

    def __call__(self, history):
        out = []
        n_tagged = 0
        for entry in reversed(history):
            self._clear(entry)
            if n_tagged < self.last_n and entry["role"] == "user":
                self._set(entry)
                n_tagged += 1
            out.append(entry)
        return list(reversed(out))
"""

OBSERVATION = """

def add_observation(history, text, tool_call_ids):
    item = {"role": "user", "content": text}
    if tool_call_ids:
        item["role"] = "tool"
        item["tool_call_ids"] = tool_call_ids
    history.append(item)
"""


def test_swe_agent_shape_user_only_tags_with_tool_observations():
    # the role test is on line 22 of the processor; the helper's first mark is line 11
    got = findings(HISTORY_PROCESSOR + OBSERVATION)
    assert [(f.line, f.code, f.severity) for f in got] == [(22, "PC013", "warning")]
    msg = got[0].message
    # the tool message is built on line 32: the processor's 26 lines, 2 blank, its 4th line
    assert "(line 32)" in msg and "`_set()`" in msg and "line 11" in msg
    assert "walking `history` newest first" in msg
    assert "tag tool-role messages too" in msg


def test_the_fix_tags_tool_messages_too():
    fixed = HISTORY_PROCESSOR.replace(
        'entry["role"] == "user"', 'entry["role"] in ("user", "tool")'
    )
    assert found(fixed + OBSERVATION) == []


def test_a_filter_from_a_setting_is_not_resolved_and_not_reported():
    # the fix's own shape: the roles come from a configurable attribute
    fixed = HISTORY_PROCESSOR.replace('entry["role"] == "user"', 'entry["role"] in self.roles')
    assert found(fixed + OBSERVATION) == []


def test_no_tool_role_messages_in_the_project():
    # observations stay user messages: the user-only filter tags every agent step
    user_only = OBSERVATION.replace('item["role"] = "tool"', 'item["name"] = "tool"')
    assert found(HISTORY_PROCESSOR + user_only) == []


def test_anthropic_tool_results_are_user_messages():
    # Anthropic's own format: a tool result is a user message with a tool_result block, so
    # the user-only filter does tag each step, even where the project also has an OpenAI path
    src = HISTORY_PROCESSOR + OBSERVATION.replace(
        'item = {"role": "user", "content": text}',
        'item = {"role": "user", "content": [{"type": "tool_result", "content": text}]}',
    )
    assert found(src) == []


def test_breakpoints_on_every_role_are_not_reported():
    src = """
    def tag(history):
        for msg in history[-3:]:
            msg["cache_control"] = {"type": "ephemeral"}


    def observe(history, out, call_id):
        history.append({"role": "tool", "content": out, "tool_call_id": call_id})
    """
    assert found(src) == []


def test_continue_form_with_dict_call_and_get():
    # `if ... != "user": continue` skips the other roles (line 4); the mark is line 6
    src = """
    def tag_recent(messages, budget=2):
        for m in messages[::-1]:
            role = m.get("role")
            if role != "user" or budget == 0:
                continue
            m["content"][-1]["cache_control"] = {"type": "ephemeral"}
            budget -= 1


    def tool_message(call_id, text):
        return dict(role="tool", tool_call_id=call_id, content=text)
    """
    assert found(src) == [(4, "PC013", "warning")]


def test_index_loop_and_role_constants():
    # roles named by module constants; a `range(len(...) - 1, -1, -1)` loop; role test line 8
    src = """
    USER = "user"
    TOOL = "tool"
    CACHED_ROLES = (USER,)


    def mark(messages):
        for i in range(len(messages) - 1, -1, -1):
            if messages[i]["role"] in CACHED_ROLES:
                messages[i]["cache_control"] = {"type": "ephemeral"}
                break


    def result(call_id, text):
        return {"role": TOOL, "tool_call_id": call_id, "content": text}
    """
    assert found(src) == [(8, "PC013", "warning")]


def test_oldest_first_loop_is_not_rolling():
    # marks the first user message (a fixed task prompt): not a rolling breakpoint
    src = """
    def mark_task(messages):
        for m in messages:
            if m["role"] == "user":
                m["cache_control"] = {"type": "ephemeral"}
                break


    def result(call_id, text):
        return {"role": "tool", "tool_call_id": call_id, "content": text}
    """
    assert found(src) == []


def test_other_roles_marked_in_another_branch():
    src = """
    def tag(history):
        for m in reversed(history):
            if m["role"] == "user":
                m["cache_control"] = {"type": "ephemeral"}
            else:
                m["content"][0]["cache_control"] = {"type": "ephemeral"}


    def result(call_id, text):
        return {"role": "tool", "tool_call_id": call_id, "content": text}
    """
    assert found(src) == []


def test_assistant_turns_tagged_too_move_forward():
    src = """
    def tag(history):
        for m in reversed(history):
            if m["role"] in ("user", "assistant"):
                m["cache_control"] = {"type": "ephemeral"}


    def result(call_id, text):
        return {"role": "tool", "tool_call_id": call_id, "content": text}
    """
    assert found(src) == []


def test_tool_role_built_in_another_module(tmp_path: Path):
    # the tool role is an imported constant, the message built in another module
    pkg = tmp_path / "agent"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "roles.py").write_text('TOOL_ROLE = "tool"\n')
    (pkg / "steps.py").write_text(
        textwrap.dedent(
            """
            from agent.roles import TOOL_ROLE


            def observation(call_id, output):
                return {"role": TOOL_ROLE, "tool_call_id": call_id, "content": output}
            """
        ).lstrip()
    )
    (pkg / "cache.py").write_text(
        textwrap.dedent(
            """
            def tag_last_user_turns(history, n=2):
                seen = 0
                for msg in reversed(history):
                    if msg["role"] == "user" and seen < n:
                        msg["cache_control"] = {"type": "ephemeral"}
                        seen += 1
            """
        ).lstrip()
    )
    report = lint_paths([tmp_path], LintConfig(root=tmp_path))
    got = [(Path(f.path).name, f.line, f.code, f.severity) for f in report.findings]
    assert got == [("cache.py", 4, "PC013", "warning")]
    assert "(agent/steps.py:5)" in report.findings[0].message


def test_filtered_list_of_user_messages():
    # the filter is in the comprehension (line 2); the loop takes the last two of them
    src = """
    def tag(messages):
        user_turns = [m for m in messages if m["role"] == "user"]
        for m in user_turns[-2:]:
            m["content"][-1]["cache_control"] = {"type": "ephemeral"}


    def result(call_id, text):
        return {"role": "tool", "tool_call_id": call_id, "content": text}
    """
    assert found(src) == [(2, "PC013", "warning")]


def test_filtered_indices_walrus_and_cast():
    # indices of user messages (line 5), newest first; `cast` and `:=` on the way to the mark
    src = """
    from typing import Any, cast


    def tag(messages):
        idx = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        for i in reversed(idx[-3:]):
            if isinstance(content := messages[i]["content"], list):
                cast(dict[str, Any], content[-1])["cache_control"] = {"type": "ephemeral"}


    def result(call_id, text):
        return {"role": "tool", "tool_call_id": call_id, "content": text}
    """
    assert found(src) == [(5, "PC013", "warning")]


def test_filtered_list_oldest_first_is_not_rolling():
    src = """
    def tag(messages):
        for m in [m for m in messages if m["role"] == "user"][:1]:
            m["cache_control"] = {"type": "ephemeral"}


    def result(call_id, text):
        return {"role": "tool", "tool_call_id": call_id, "content": text}
    """
    assert found(src) == []


def test_anthropic_computer_use_shape_is_not_reported():
    # Anthropic's own loop (user turns carry tool_result blocks): user-only is right there
    src = """
    def inject_prompt_caching(messages):
        remaining = 3
        for message in reversed(messages):
            if message["role"] == "user" and isinstance(content := message["content"], list):
                if remaining:
                    remaining -= 1
                    content[-1]["cache_control"] = {"type": "ephemeral"}
                else:
                    content[-1].pop("cache_control", None)
                    break


    def tool_result(tool_use_id, text):
        return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use_id, "content": text}]}
    """
    assert found(src) == []
