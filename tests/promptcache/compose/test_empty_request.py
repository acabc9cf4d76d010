"""A Prompt with no history and no dynamic part: building it is fine (its prefix hash and
explain() use the frozen layers alone); rendering it for a provider that needs a message
raises EmptyRequestError, a ValueError naming the provider and what to add.

What each provider rejects (their API references, read 2026-11): Anthropic Messages 400
"messages: at least one message is required"; Bedrock Converse needs a user message to
start the conversation; Gemini generateContent needs ``contents``; OpenAI Chat Completions
and Responses reject an empty ``messages`` / ``input`` array but accept a system-only one.
"""

from __future__ import annotations

import pytest

from promptcache import build
from promptcache.errors import EmptyRequestError, PromptCacheError

POLICY = "word " * 2000  # 2,000 tokens under the word counter: over Claude's 1,024 minimum
CLAUDE = "claude-sonnet-4-5"
BEDROCK_CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"

RENDERERS = [
    ("to_anthropic", CLAUDE, {}, "Anthropic Messages", "at least one message"),
    ("to_bedrock", BEDROCK_CLAUDE, {}, "Bedrock Converse", "at least one message"),
    ("to_gemini", "gemini-2.5-flash", {}, "Gemini generateContent", "content turn"),
    ("to_openai", "gpt-4o", {}, "OpenAI Chat Completions", "messages list"),
    ("to_openai", "gpt-4o", {"api": "responses"}, "OpenAI Responses", "input list"),
    ("to_openai_compatible", "smollm2", {}, "OpenAI-compatible", "messages list"),
]


@pytest.mark.parametrize("method,model,kw,provider,needs", RENDERERS)
def test_nothing_at_all_is_refused_by_every_renderer(method, model, kw, provider, needs):
    p = build(messages=[])  # building is fine
    with pytest.raises(EmptyRequestError) as ei:
        getattr(p, method)(model, **kw)
    msg = str(ei.value)
    assert msg.startswith("nothing to send: ") and provider in msg and needs in msg
    assert "messages=" in msg and "dynamic=" in msg  # says what to add
    assert isinstance(ei.value, ValueError) and isinstance(ei.value, PromptCacheError)


@pytest.mark.parametrize(
    "method,model",
    [("to_anthropic", CLAUDE), ("to_bedrock", BEDROCK_CLAUDE), ("to_gemini", "gemini-2.5-flash")],
)
def test_system_only_is_refused_where_a_message_is_required(method, model):
    p = build(system="You are terse.", session="User: Ada", messages=[])
    with pytest.raises(EmptyRequestError, match="at least one"):
        getattr(p, method)(model)


def test_openai_sends_a_system_only_request():
    p = build(system="You are terse.", messages=[])
    assert p.to_openai("gpt-4o")["messages"] == [{"role": "system", "content": "You are terse."}]
    assert p.to_openai("gpt-4o", api="responses")["input"] == [
        {"content": [{"text": "You are terse.", "type": "input_text"}], "role": "system"}
    ]
    assert p.to_openai_compatible("smollm2")["messages"] == [
        {"role": "system", "content": "You are terse."}
    ]


def test_a_prefix_only_prompt_has_the_prefix_hash_of_the_full_request():
    prefix = build(system="S", tools=[{"name": "t", "input_schema": {"type": "object"}}])
    full = build(
        system="S",
        tools=[{"name": "t", "input_schema": {"type": "object"}}],
        messages=[{"role": "user", "content": "hi"}],
        dynamic="q",
    )
    assert prefix.prefix_hash == full.prefix_hash


@pytest.mark.parametrize("model", [CLAUDE, BEDROCK_CLAUDE])
def test_explain_plans_a_prefix_only_prompt(word_tokens, model):
    exp = build(system=POLICY).explain(model, quiet=True)
    # one system block of 2,000 words: the frozen breakpoint closes it, at 2,000 tokens
    assert [(b.kind, b.prefix_tokens) for b in exp.breakpoints] == [("frozen", 2000)]
    # and the same prefix, once a question is added, is sent with that breakpoint
    kw = build(system=POLICY, dynamic="q").to_anthropic(CLAUDE)
    assert kw["system"][-1]["cache_control"] == {"type": "ephemeral"}
