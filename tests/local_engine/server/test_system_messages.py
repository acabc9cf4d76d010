"""Anthropic mid-conversation system messages (``{"role": "system"}`` in ``messages``)
through the official ``anthropic`` client, under Anthropic's cache rules.

Rules from https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages
and https://docs.aws.amazon.com/bedrock/latest/userguide/claude-messages-mid-conversation-system.html
(both read 2026-12-03): Claude Opus 4.8; not first; right after a user message (or an
assistant message ending in a server tool use); last or followed by an assistant turn; never
next to another system message; text only; each violation a 400 invalid_request_error.
Expected token counts are the template's text prefixes tokenized here (the model's chat
template renders a ``system`` turn wherever it stands).
"""

from __future__ import annotations

import random

import anthropic
import httpx
import pytest

from local_engine.server.system_messages import supports_system_messages

MODE = {"X-Promptcache-Cache-Mode": "anthropic"}
CC = {"type": "ephemeral"}
RULE = "From now on, answer in French and name the store number in every answer."


@pytest.fixture(scope="module")
def client(server_factory):
    return server_factory().anthropic_client(max_retries=0, timeout=300, default_headers=MODE)


def opus_4_8() -> str:
    """A dated Opus 4.8 snapshot name: its own emulated cache (entries never cross models)."""
    return f"claude-opus-4-8-{random.randrange(10**7, 10**8)}"


def prefix_tokens(tokenizer, messages: list[dict], upto: str) -> int:
    """Tokens of the template's text up to the end of the last occurrence of ``upto``."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=False)
    return len(tokenizer.encode(text[: text.rindex(upto) + len(upto)]))


def total(u) -> int:
    return u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens


def test_model_names():
    assert supports_system_messages("claude-opus-4-8")
    assert supports_system_messages("claude-opus-4-8-20260528")
    assert supports_system_messages("us.anthropic.claude-opus-4-8-v1:0")
    assert not supports_system_messages("claude-opus-4-7")
    assert not supports_system_messages("claude-sonnet-4-5-20250929")
    assert not supports_system_messages("claude-opus-4-80")


def test_system_message_keeps_the_prefix_cached(client, shared_doc, tokenizer, chat_ids):
    m = opus_4_8()
    system = [{"type": "text", "text": shared_doc, "cache_control": CC}]
    u1 = {"role": "user", "content": "Can I return a kettle?"}
    a1 = {"role": "assistant", "content": "Yes, within 10 days."}
    u2 = {"role": "user", "content": "And a toaster bought in store 3?"}
    rule = {"role": "system", "content": RULE, "cache_control": CC}
    plain = [{"role": "system", "content": shared_doc}]  # the template's view
    doc_end = prefix_tokens(tokenizer, [*plain, u1], shared_doc)

    r1 = client.messages.create(model=m, max_tokens=1, system=system, messages=[u1])
    assert (r1.usage.cache_read_input_tokens, r1.usage.cache_creation_input_tokens) == (
        0,
        doc_end,
    )

    convo = [u1, a1, u2, rule]
    r2 = client.messages.create(model=m, max_tokens=1, system=system, messages=convo)
    as_template = [*plain, u1, a1, u2, {"role": "system", "content": RULE}]
    rule_end = prefix_tokens(tokenizer, as_template, RULE)
    assert total(r2.usage) == len(chat_ids(as_template))  # rendered at its position
    # the earlier prefix is read; the system message's own breakpoint writes the rest
    assert (r2.usage.cache_read_input_tokens, r2.usage.cache_creation_input_tokens) == (
        doc_end,
        rule_end - doc_end,
    )
    counted = client.messages.count_tokens(model=m, system=system, messages=convo)
    assert counted.input_tokens == total(r2.usage)

    a2 = {"role": "assistant", "content": "Oui, dans les 13 jours (magasin 3)."}
    u3 = {"role": "user", "content": [{"type": "text", "text": "Et un mixeur ?"}]}
    r3 = client.messages.create(model=m, max_tokens=1, system=system, messages=[*convo, a2, u3])
    # the next request reads everything up to the system message from the cache
    assert r3.usage.cache_read_input_tokens == rule_end
    assert r3.usage.cache_creation_input_tokens == 0


def test_block_cache_control_and_count(client, shared_doc, tokenizer):
    """``content`` as text blocks, the breakpoint on the block: the same write."""
    m = opus_4_8()
    u1 = {"role": "user", "content": "Can I return a kettle?"}
    rule = {"role": "system", "content": [{"type": "text", "text": RULE, "cache_control": CC}]}
    r = client.messages.create(model=m, max_tokens=1, system=shared_doc, messages=[u1, rule])
    as_template = [
        {"role": "system", "content": shared_doc},
        u1,
        {"role": "system", "content": RULE},
    ]
    assert r.usage.cache_creation_input_tokens == prefix_tokens(tokenizer, as_template, RULE)


U = {"role": "user", "content": "Hello"}
A = {"role": "assistant", "content": "Hi"}
S = {"role": "system", "content": RULE}


@pytest.mark.parametrize(
    ("messages", "model", "fragment"),
    [
        ([U, S], "claude-sonnet-4-5", "'system' is not supported on model"),
        ([U, S], "claude-opus-4-7", "'system' is not supported on model"),
        ([S, U], None, "cannot be the first entry"),
        ([U, A, S], None, "must immediately follow a user message"),
        ([U, S, U], None, "followed by an assistant turn"),
        ([U, S, S], None, "consecutive system messages"),
        ([U, S, A, U, S, S, A], None, "consecutive system messages"),
        (
            [U, {"role": "system", "content": [{"type": "image", "source": {}}]}],
            None,
            "text blocks only",
        ),
    ],
)
def test_placement_and_model_violations(client, messages, model, fragment):
    for call in (client.messages.create, client.messages.count_tokens):
        kw = {"max_tokens": 1} if call == client.messages.create else {}
        with pytest.raises(anthropic.BadRequestError) as e:
            call(model=model or opus_4_8(), messages=messages, **kw)
        assert e.value.status_code == 400
        body = e.value.body
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert fragment in body["error"]["message"]


def test_after_a_server_tool_use_placement_is_accepted(client):
    """An assistant message ending in a server tool use may precede a system message: the
    placement passes (this server then refuses the server tool block it cannot render)."""
    srv = {
        "role": "assistant",
        "content": [
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
        ],
    }
    with pytest.raises(anthropic.BadRequestError) as e:
        client.messages.create(model=opus_4_8(), max_tokens=1, messages=[U, srv, S])
    assert "server_tool_use" in e.value.body["error"]["message"]
    assert "must immediately follow" not in e.value.body["error"]["message"]


def test_bedrock_invoke_takes_the_same_rules(server_factory):
    """``/model/{modelId}/invoke`` (an Anthropic body on Bedrock; the AWS page above is
    Bedrock's user guide): a Bedrock Opus 4.8 id is served, another model's is a 400."""
    base = server_factory().base_url
    body = {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 1, "messages": [U, S]}
    ok = httpx.post(
        f"{base}/model/us.anthropic.claude-opus-4-8-v1:0/invoke", json=body, timeout=120
    )
    assert ok.status_code == 200, ok.text
    bad = httpx.post(
        f"{base}/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/invoke", json=body, timeout=120
    )
    assert bad.status_code == 400 and "'system' is not supported on model" in bad.text
