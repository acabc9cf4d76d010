"""``--cache-mode anthropic``: Anthropic's documented cache rules, seen through the official
``anthropic`` client (numbers from https://platform.claude.com/docs/en/build-with-claude/prompt-caching,
2026-11-29: entries written only at breakpoints, minimum 1,024 tokens for models outside the
documented table, 5-minute TTL refreshed on each hit, 1-hour TTL, 20-block lookback,
automatic caching by a top-level cache_control).

Every test uses the same ~1,170-token policy document so the engine's physical prefix
cache makes later requests fast; each test uses its own model name, which gives it its own
emulated cache (entries never cross models). Expected counts are token counts of the
template's text prefixes, tokenized here.
"""

from __future__ import annotations

import uuid

import httpx
import pytest

SYS = "<|im_start|>system\n"


MODE = {"X-Promptcache-Cache-Mode": "anthropic"}


@pytest.fixture(scope="module")
def server(server_factory):
    return server_factory()  # the shared server; each request asks for anthropic rules


@pytest.fixture(scope="module")
def client(server):
    return server.anthropic_client(max_retries=0, timeout=300, default_headers=MODE)


@pytest.fixture(scope="module")
def doc(shared_doc):
    return shared_doc


@pytest.fixture(scope="module")
def doc_tokens(tokenizer, doc):
    """Tokens of the prompt up to the end of the system document (the breakpoint)."""
    n = len(tokenizer.encode(SYS + doc))
    assert n >= 1024 + 64, n  # comfortably above the 1,024-token minimum
    return n


def model_name(tag: str) -> str:
    return f"claude-emulated-{tag}-{uuid.uuid4().hex[:6]}"


def ask(client, model, doc, question, ttl=None, **kw):
    cc = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return client.messages.create(
        model=model,
        max_tokens=1,
        system=[{"type": "text", "text": doc, "cache_control": cc}],
        messages=[{"role": "user", "content": question}],
        **kw,
    )


def total(u) -> int:
    return u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens


def test_write_then_read_then_5_minute_expiry(server, client, doc, doc_tokens, chat_ids):
    m = model_name("ttl")
    r1 = ask(client, m, doc, "Can I return a kettle?")
    u = r1.usage
    prompt_len = len(
        chat_ids(
            [
                {"role": "system", "content": doc},
                {"role": "user", "content": "Can I return a kettle?"},
            ]
        )
    )
    assert total(u) == prompt_len
    assert (u.cache_read_input_tokens, u.cache_creation_input_tokens) == (0, doc_tokens)
    assert u.cache_creation.ephemeral_5m_input_tokens == doc_tokens
    assert u.input_tokens == prompt_len - doc_tokens  # only what follows the breakpoint

    r2 = ask(client, m, doc, "And a toaster bought in store 3?")
    assert (r2.usage.cache_read_input_tokens, r2.usage.cache_creation_input_tokens) == (
        doc_tokens,
        0,
    )

    server.advance_clock(299)  # 4:59 after the last use
    assert ask(client, m, doc, "q3").usage.cache_read_input_tokens == doc_tokens
    server.advance_clock(299)  # the hit above refreshed the TTL: still alive
    assert ask(client, m, doc, "q4").usage.cache_read_input_tokens == doc_tokens
    server.advance_clock(300)  # 5 minutes idle: expired, written again
    r5 = ask(client, m, doc, "q5")
    assert (r5.usage.cache_read_input_tokens, r5.usage.cache_creation_input_tokens) == (
        0,
        doc_tokens,
    )


def test_1h_ttl_outlives_5_minutes(server, client, doc, doc_tokens):
    m = model_name("1h")
    r1 = ask(client, m, doc, "q1", ttl="1h")
    assert r1.usage.cache_creation.ephemeral_1h_input_tokens == doc_tokens
    assert r1.usage.cache_creation.ephemeral_5m_input_tokens == 0
    server.advance_clock(3000)
    assert ask(client, m, doc, "q2", ttl="1h").usage.cache_read_input_tokens == doc_tokens
    server.advance_clock(3600)
    assert ask(client, m, doc, "q3", ttl="1h").usage.cache_read_input_tokens == 0


def test_prefix_under_the_minimum_is_silently_not_cached(client, tokenizer):
    m = model_name("min")
    short = "You are a helpful assistant for a kitchen-appliance shop. " * 10
    assert len(tokenizer.encode(SYS + short)) < 1024
    r1 = ask(client, m, short, "q1")
    r2 = ask(client, m, short, "q1")
    for r in (r1, r2):  # no write, no read: all input billed as input_tokens
        assert r.usage.cache_creation_input_tokens == 0 and r.usage.cache_read_input_tokens == 0
        assert r.usage.input_tokens == total(r.usage)


def test_20_block_lookback(client, doc, tokenizer):
    m = model_name("lookback")
    notes = [{"type": "text", "text": f"Note {k}."} for k in range(1, 26)]

    def with_breakpoint(k):
        blocks = [dict(b) for b in notes]
        blocks[k - 1]["cache_control"] = {"type": "ephemeral"}
        return client.messages.create(
            model=m, max_tokens=1, system=doc, messages=[{"role": "user", "content": blocks}]
        )

    # end of block 3 in tokens: the system turn, then the user turn up to "Note 3."
    head = SYS + doc + "<|im_end|>\n<|im_start|>user\n"
    end3 = (
        len(tokenizer.encode(head + "Note 1."))
        + len(tokenizer.encode("\n\nNote 2."))
        + len(tokenizer.encode("\n\nNote 3."))
    )
    r1 = with_breakpoint(3)
    assert r1.usage.cache_creation_input_tokens == end3
    # breakpoint on block 25: its window is blocks 6..25, block 3 is outside -> miss
    r2 = with_breakpoint(25)
    assert r2.usage.cache_read_input_tokens == 0 and r2.usage.cache_creation_input_tokens > end3
    # breakpoint on block 22: window 3..22 reaches the entry at block 3 -> hit
    r3 = with_breakpoint(22)
    assert r3.usage.cache_read_input_tokens == end3


def test_automatic_caching_moves_the_breakpoint_forward(client, doc, tokenizer):
    m = model_name("auto")
    turn1 = [{"role": "user", "content": "Which items can I return?"}]
    r1 = client.messages.create(
        model=m, max_tokens=1, system=doc, messages=turn1, cache_control={"type": "ephemeral"}
    )
    end1 = len(
        tokenizer.encode(SYS + doc + "<|im_end|>\n<|im_start|>user\nWhich items can I return?")
    )
    assert (r1.usage.cache_read_input_tokens, r1.usage.cache_creation_input_tokens) == (0, end1)
    turn2 = turn1 + [
        {"role": "assistant", "content": "Most of them."},
        {"role": "user", "content": "Even ovens?"},
    ]
    r2 = client.messages.create(
        model=m, max_tokens=1, system=doc, messages=turn2, cache_control={"type": "ephemeral"}
    )
    assert r2.usage.cache_read_input_tokens == end1  # turn 1's entry, found by the lookback
    end2 = total(r2.usage) - r2.usage.input_tokens
    assert r2.usage.cache_creation_input_tokens == end2 - end1 > 0


def test_streaming_reports_the_emulated_usage(server, doc, doc_tokens):
    m = model_name("stream")
    body = {
        "model": m,
        "max_tokens": 2,
        "stream": True,
        "system": [{"type": "text", "text": doc, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "q"}],
    }
    import json

    for expect_read in (0, doc_tokens):
        starts, deltas = [], []
        with httpx.stream(
            "POST", server.base_url + "/v1/messages", json=body, headers=MODE, timeout=300
        ) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    d = json.loads(line[6:])
                    if d["type"] == "message_start":
                        starts.append(d["message"]["usage"])
                    elif d["type"] == "message_delta":
                        deltas.append(d["usage"])
        assert starts[0]["cache_read_input_tokens"] == expect_read
        assert starts[0]["cache_creation_input_tokens"] == doc_tokens - expect_read
        assert deltas[0]["cache_read_input_tokens"] == expect_read


def test_tenants_never_share_entries(server, client, doc, doc_tokens):
    m = model_name("salt")
    ask(client, m, doc, "q")  # the unsalted tenant
    assert ask(client, m, doc, "q").usage.cache_read_input_tokens == doc_tokens
    other = ask(client, m, doc, "q", extra_headers={"X-Cache-Salt": "tenant-b"})
    assert other.usage.cache_read_input_tokens == 0
    assert other.usage.cache_creation_input_tokens == doc_tokens


def test_openai_endpoint_honours_cache_control_in_anthropic_mode(server, doc, doc_tokens):
    oc = server.openai_client(max_retries=0, timeout=300, default_headers=MODE)
    m = model_name("oai")
    msgs = [
        {
            "role": "system",
            "content": [{"type": "text", "text": doc, "cache_control": {"type": "ephemeral"}}],
        },
        {"role": "user", "content": "q"},
    ]
    r1 = oc.chat.completions.create(model=m, messages=msgs, max_tokens=1)
    assert r1.usage.prompt_tokens_details.cached_tokens == 0
    assert r1.usage.prompt_tokens_details.cache_write_tokens == doc_tokens
    r2 = oc.chat.completions.create(model=m, messages=msgs, max_tokens=1)
    assert r2.usage.prompt_tokens_details.cached_tokens == doc_tokens
    assert r2.usage.prompt_tokens_details.cache_write_tokens == 0
