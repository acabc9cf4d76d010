"""PC005 marker checks and PC014: markers the client ignores or the API rejects, and
``prompt_cache_key`` values new on every request.

Each snippet is a shape seen in a real fix (not its code). Expected (line, code, severity)
are read off the snippet: lines count from 1 at the first line of the dedented source.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from linters import lint_paths
from linters.config import LintConfig
from linters.runner import lint_source


def found(src: str, code: str = "PC005") -> list[tuple[int, str, str]]:
    text = textwrap.dedent(src).lstrip("\n")
    return [
        (f.line, f.code, f.severity)
        for f in lint_source(text, "t.py", LintConfig())
        if f.code == code
    ]


# -- misspelt marker keys ----------------------------------------------------------------

CAMEL = """
import litellm

def mark(messages):
    marker = {"cacheControl": {"type": "ephemeral"}}
    for i in range(len(messages) - 2, len(messages)):
        messages[i] = {**messages[i], **marker}
    return messages

def ask(messages):
    messages = mark(messages)
    return litellm.completion(model="anthropic/claude-sonnet-4-5", messages=messages)
"""


def test_camel_case_marker_returned_into_litellm():
    # the key of line 4 reaches litellm.completion (line 11) through mark()'s return
    assert found(CAMEL) == [(4, "PC005", "warning")]


def test_correct_marker_key_is_not_reported():
    assert found(CAMEL.replace("cacheControl", "cache_control")) == []


def test_dashed_marker_in_an_anthropic_system_block():
    src = """
    import anthropic

    client = anthropic.Anthropic()

    def ask(question, guide):
        system = [{"type": "text", "text": guide, "cache-control": {"type": "ephemeral"}}]
        return client.messages.create(
            model="claude-sonnet-4-5", max_tokens=512, system=system,
            messages=[{"role": "user", "content": question}],
        )
    """
    assert found(src) == [(6, "PC005", "warning")]


def test_misspelt_key_that_reaches_no_request_is_not_reported():
    # a UI payload, never sent to a model client
    src = """
    import json

    def render(messages, out):
        for m in messages:
            m["cacheControl"] = "no-store"
        json.dump({"messages": messages}, out)
    """
    assert found(src) == []


# -- raw cachePoint ------------------------------------------------------------------------

CACHE_POINT = """
import litellm

def ask(history, system_text):
    system = {"role": "system", "content": [{"type": "text", "text": system_text}]}
    system["content"][-1].update({"cachePoint": {"type": "default"}})
    return litellm.completion(model="bedrock/anthropic.claude-sonnet-4-5", messages=[system, *history])
"""


def test_cache_point_through_litellm_is_ignored():
    assert found(CACHE_POINT) == [(5, "PC005", "warning")]


def test_cache_point_in_a_boto3_converse_request_is_right():
    src = """
    import boto3

    runtime = boto3.client("bedrock-runtime")

    def ask(system_text, messages):
        system = [{"text": system_text}, {"cachePoint": {"type": "default"}}]
        return runtime.converse(modelId="anthropic.claude-sonnet-4-5", system=system, messages=messages)
    """
    assert found(src) == []


def test_cache_point_sent_with_the_anthropic_sdk_is_rejected():
    src = """
    def ask(client, text, question):
        system = [{"type": "text", "text": text, "cachePoint": {"type": "default"}}]
        return client.messages.create(
            model="claude-sonnet-4-5", max_tokens=256, system=system,
            messages=[{"role": "user", "content": question}],
        )
    """
    assert found(src) == [(2, "PC005", "error")]


# -- marker on a text that can be empty ----------------------------------------------------

EMPTY = """
import litellm

def mark_last_reply(messages):
    target = None
    for msg in reversed(messages):
        if msg.get("role") != "user":
            target = msg
            break
    if target is None:
        return
    text = target.get("content")
    if isinstance(text, str):
        target["content"] = [
            {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
        ]

def ask(messages):
    mark_last_reply(messages)
    return litellm.completion(model="anthropic/claude-sonnet-4-5", messages=messages)
"""


def test_marker_on_a_reply_whose_content_can_be_empty():
    # an assistant turn with only tool calls has content "": the API rejects the marker
    assert found(EMPTY) == [(14, "PC005", "error")]
    (f,) = [
        f for f in lint_source(textwrap.dedent(EMPTY).lstrip("\n"), "t.py") if f.code == "PC005"
    ]
    assert "line 12" in f.message  # the test that lets "" through is named


def test_non_empty_test_around_the_marker():
    assert (
        found(EMPTY.replace("if isinstance(text, str):", "if isinstance(text, str) and text:"))
        == []
    )


def test_early_return_on_empty_text():
    guarded = EMPTY.replace(
        "    if isinstance(text, str):",
        "    if not text:\n        return\n    if isinstance(text, str):",
    )
    assert found(guarded) == []


def test_literal_text_cannot_be_empty():
    src = """
    import litellm

    GUIDE = "You review pull requests. " * 200

    def ask(messages):
        system = {"role": "system", "content": [
            {"type": "text", "text": GUIDE, "cache_control": {"type": "ephemeral"}}
        ]}
        return litellm.completion(model="anthropic/claude-sonnet-4-5", messages=[system, *messages])
    """
    assert found(src) == []


def test_get_default_empty_string_is_a_path_to_empty_text():
    src = """
    import litellm

    def ask(messages):
        last = messages[-1]
        text = last.get("content", "")
        last["content"] = [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]
        return litellm.completion(model="anthropic/claude-sonnet-4-5", messages=messages)
    """
    assert found(src) == [(6, "PC005", "error")]


def test_text_of_messages_selected_as_system_is_not_reported():
    src = """
    import litellm

    def ask(messages):
        firsts = [i for i, m in enumerate(messages) if m.get("role") == "system"]
        for i in firsts[:1]:
            text = messages[i].get("content", "")
            messages[i] = {**messages[i], "content": [
                {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}
            ]}
        return litellm.completion(model="anthropic/claude-sonnet-4-5", messages=messages)
    """
    assert found(src) == []


# -- marker on a block that can be a thinking block -----------------------------------------

SERIALIZER = """
def to_anthropic(turns):
    out = []
    for turn in turns:
        blocks = []
        if turn.signature:
            blocks.append({"type": "thinking", "thinking": turn.reasoning, "signature": turn.signature})
        blocks.append({"type": "text", "text": turn.text})
        out.append({"role": turn.role, "content": blocks})
    return out
"""

CALLER = """
from pkg.serialize import to_anthropic


def mark(messages):
    content = messages[-1].get("content")
    if isinstance(content, list) and content:
        content[0]["cache_control"] = {"type": "ephemeral"}


def ask(client, turns):
    messages = to_anthropic(turns)
    mark(messages)
    return client.messages.create(model="claude-sonnet-4-5", max_tokens=1024, messages=messages)
"""


def _project(tmp_path: Path, serializer: str, caller: str) -> list[tuple[str, int, str, str]]:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "serialize.py").write_text(textwrap.dedent(serializer).lstrip("\n"))
    (pkg / "caller.py").write_text(textwrap.dedent(caller).lstrip("\n"))
    findings = lint_paths([tmp_path], LintConfig(root=tmp_path)).findings
    return [(Path(f.path).name, f.line, f.code, f.severity) for f in findings if f.code == "PC005"]


def test_first_block_of_messages_made_with_thinking_blocks(tmp_path):
    assert _project(tmp_path, SERIALIZER, CALLER) == [("caller.py", 7, "PC005", "error")]


def test_type_test_before_the_marker(tmp_path):
    caller = CALLER.replace(
        "    if isinstance(content, list) and content:",
        '    if isinstance(content, list) and content and content[0].get("type") == "text":',
    )
    assert _project(tmp_path, SERIALIZER, caller) == []


def test_messages_made_without_thinking_blocks(tmp_path):
    serializer = SERIALIZER.replace('"type": "thinking"', '"type": "text"')
    assert _project(tmp_path, serializer, CALLER) == []


def test_last_block_is_never_the_leading_thinking_block(tmp_path):
    assert _project(tmp_path, SERIALIZER, CALLER.replace("content[0]", "content[-1]")) == []


# -- PC014: a prompt_cache_key new on every request ----------------------------------------


def test_uuid_key_in_a_responses_request():
    src = """
    import uuid

    def ask(client, system, question):
        return client.responses.create(
            model="gpt-5", instructions=system, input=question,
            prompt_cache_key=str(uuid.uuid4()),
        )
    """
    assert found(src, "PC014") == [(6, "PC014", "warning")]


def test_uuid_key_in_a_posted_body_through_a_local():
    src = """
    import uuid

    def call(http, url, system, items):
        key = uuid.uuid4().hex
        body = {"model": "gpt-5", "instructions": system, "input": items}
        body["prompt_cache_key"] = key
        return http.post(url, json=body)
    """
    assert found(src, "PC014") == [(6, "PC014", "warning")]


def test_clock_key_in_a_chat_request():
    src = """
    import time

    def ask(client, messages):
        return client.chat.completions.create(
            model="gpt-5", messages=messages, prompt_cache_key=f"run-{time.time()}"
        )
    """
    assert found(src, "PC014") == [(5, "PC014", "warning")]


def test_key_made_once_per_session_is_not_reported():
    src = """
    import uuid

    class Chat:
        def __init__(self, client):
            self.client = client
            self.session = str(uuid.uuid4())

        def ask(self, system, question):
            return self.client.responses.create(
                model="gpt-5", instructions=system, input=question, prompt_cache_key=self.session
            )
    """
    assert found(src, "PC014") == []


def test_daily_key_is_not_per_request():
    src = """
    import datetime

    def ask(client, messages):
        return client.chat.completions.create(
            model="gpt-5", messages=messages, prompt_cache_key=str(datetime.date.today())
        )
    """
    assert found(src, "PC014") == []


def test_key_in_a_dict_that_is_not_a_request():
    src = """
    import uuid

    def trace(messages):
        return {"prompt_cache_key": str(uuid.uuid4()), "messages": len(messages)}
    """
    assert found(src, "PC014") == []


def test_misspelt_key_in_a_body_given_as_keyword_arguments():
    # the body dict is the request's keywords (`**body`): the call is the request
    src = """
    def ask(client, history, guide):
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 256,
            "system": [{"type": "text", "text": guide, "CacheControl": {"type": "ephemeral"}}],
            "messages": history,
        }
        return client.messages.create(**body)
    """
    assert found(src) == [(5, "PC005", "warning")]


def test_marker_state_kept_on_self_and_sent_from_another_method():
    src = """
    import litellm

    class Agent:
        def __init__(self):
            self.messages = []

        def remember(self, text):
            self.messages.append({"role": "user", "content": [
                {"type": "text", "text": text, "cache-control": {"type": "ephemeral"}}
            ]})

        def step(self):
            return litellm.completion(model="anthropic/claude-sonnet-4-5", messages=self.messages)
    """
    assert found(src) == [(9, "PC005", "warning")]


def test_http_cache_control_header_in_the_request_keywords_is_not_a_marker():
    src = """
    import litellm

    def ask(messages):
        kwargs = {
            "model": "anthropic/claude-sonnet-4-5",
            "messages": messages,
            "extra_headers": {"Cache-Control": "no-store"},
        }
        return litellm.completion(**kwargs)
    """
    assert found(src) == []


def test_http_header_dict_passed_on_by_name_is_not_a_marker():
    src = """
    import litellm

    def ask(messages):
        headers = {"Cache-Control": "no-store"}
        kwargs = {"model": "anthropic/claude-sonnet-4-5", "messages": messages, "extra_headers": headers}
        return litellm.completion(**kwargs)
    """
    assert found(src) == []
