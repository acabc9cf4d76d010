"""PC011: a ``prompt_cache_key`` computed from the request's whole message list.

Each expected (line, code) pair is read off the snippet: lines count from 1 at the first
line of the dedented source.
"""

from __future__ import annotations

import textwrap

from linters.config import LintConfig
from linters.runner import lint_source


def found(src: str) -> list[tuple[int, str]]:
    text = textwrap.dedent(src).lstrip("\n")
    return [(f.line, f.code) for f in lint_source(text, "t.py", LintConfig()) if f.code == "PC011"]


def test_hash_of_the_messages_in_the_create_call():
    src = """
    import hashlib, json

    def ask(client, messages):
        return client.chat.completions.create(
            model="gpt-5",
            messages=messages,
            prompt_cache_key=hashlib.sha256(json.dumps(messages).encode()).hexdigest(),
        )
    """
    assert found(src) == [(7, "PC011")]


def test_helper_of_the_module_hashing_the_list_behind_the_input_items():
    # the rewritten shape of nanobot's Codex provider before 2d17a095: the body's input is
    # converted from `messages`, and the key hashes all of `messages`
    src = """
    import hashlib
    import json

    def _prompt_cache_key(messages):
        raw = json.dumps(messages, sort_keys=True)
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    def _convert(messages):
        return messages[0]["content"], [m for m in messages[1:]]

    class Provider:
        async def chat(self, messages, tools=None):
            system, input_items = _convert(messages)
            body = {
                "instructions": system,
                "input": input_items,
                "prompt_cache_key": _prompt_cache_key(messages),
            }
            return await self._post(body)
    """
    assert found(src) == [(17, "PC011")]


def test_the_first_messages_only_is_not_reported():
    # the fix: the key hashes the system prompt and the first user message
    src = """
    import hashlib, json

    def _prompt_cache_key(messages):
        return hashlib.sha256(json.dumps(messages).encode()).hexdigest()

    def chat(client, messages):
        return client.responses.create(
            model="gpt-5", input=messages, prompt_cache_key=_prompt_cache_key(messages[:2])
        )
    """
    assert found(src) == []


def test_a_helper_that_keeps_only_the_head_is_not_reported():
    src = """
    import hashlib

    def head_key(messages):
        return hashlib.sha256(messages[0]["content"].encode()).hexdigest()

    def chat(client, messages):
        return client.responses.create(model="gpt-5", input=messages, prompt_cache_key=head_key(messages))
    """
    assert found(src) == []


def test_session_or_user_keys_are_not_reported():
    src = """
    def chat(client, messages, session_id, user):
        client.responses.create(model="gpt-5", input=messages, prompt_cache_key=session_id)
        client.chat.completions.create(model="gpt-5", messages=messages, prompt_cache_key=f"u-{user.id}")
    """
    assert found(src) == []


def test_an_imported_helper_is_not_guessed():
    # what `make_key` does with the list is not in this module: not reported
    src = """
    from app.keys import make_key

    def chat(client, messages):
        return client.responses.create(model="gpt-5", input=messages, prompt_cache_key=make_key(messages))
    """
    assert found(src) == []


def test_the_message_count_in_the_key_is_reported():
    # len(messages) grows by one every turn: a new key each request
    src = """
    def chat(client, messages, user):
        key = f"{user}-{len(messages)}"
        return client.chat.completions.create(model="gpt-5", messages=messages, prompt_cache_key=key)
    """
    assert found(src) == [(3, "PC011")]
