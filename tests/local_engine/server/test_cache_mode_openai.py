"""``--cache-mode openai``: OpenAI's documented cache rules through the official ``openai``
client (https://developers.openai.com/api/docs/guides/prompt-caching, 2026-11-29): no hit
under 1,024 tokens; hits in 128-token steps (1024, 1152, ...) on models before GPT-5.6;
``prompt_cache_key`` separates caches; in-memory retention expires after 5 idle minutes;
GPT-5.6+: explicit ``prompt_cache_breakpoint`` at exact boundaries and reported
``cache_write_tokens``; breakpoints on an older model are a 400.

All long prompts share one ~1,170-token policy document (fast after the first prefill);
each test uses its own ``prompt_cache_key`` or model name, hence its own emulated cache.
"""

from __future__ import annotations

import uuid

import openai
import pytest

SYS = "<|im_start|>system\n"


MODE = {"X-Promptcache-Cache-Mode": "openai"}


@pytest.fixture(scope="module")
def server(server_factory):
    return server_factory()  # the shared server; each request asks for openai rules


@pytest.fixture(scope="module")
def client(server):
    return server.openai_client(max_retries=0, timeout=300, default_headers=MODE)


@pytest.fixture(scope="module")
def doc(shared_doc):
    return shared_doc


def key() -> str:
    return "k-" + uuid.uuid4().hex[:8]


def msgs(doc, q):
    return [{"role": "system", "content": doc}, {"role": "user", "content": q}]


def cached(r) -> int:
    return r.usage.prompt_tokens_details.cached_tokens


def test_short_prompts_never_hit(client):
    m = [{"role": "user", "content": "Short question about kettles?"}]
    k = key()
    client.chat.completions.create(model="gpt-4o", messages=m, max_tokens=1, prompt_cache_key=k)
    r = client.chat.completions.create(model="gpt-4o", messages=m, max_tokens=1, prompt_cache_key=k)
    assert r.usage.prompt_tokens < 1024 and cached(r) == 0
    assert r.usage.prompt_tokens_details.cache_write_tokens is None  # not reported before GPT-5.6


def test_hits_in_128_token_steps(client, doc, chat_ids, common_prefix):
    k = key()
    a, b = msgs(doc, "Can I return a blender?"), msgs(doc, "What about a steamer from store 2?")
    r1 = client.chat.completions.create(
        model="gpt-4o", messages=a, max_tokens=1, prompt_cache_key=k
    )
    r2 = client.chat.completions.create(
        model="gpt-4o", messages=b, max_tokens=1, prompt_cache_key=k
    )
    shared = common_prefix(chat_ids(a), chat_ids(b))
    assert shared >= 1024
    expected = 1024 + (shared - 1024) // 128 * 128
    assert cached(r1) == 0
    assert cached(r2) == expected
    assert r2.usage.prompt_tokens == len(chat_ids(b))
    # the identical prompt: its own length rounded down the same way
    r3 = client.chat.completions.create(
        model="gpt-4o", messages=b, max_tokens=1, prompt_cache_key=k
    )
    n = r3.usage.prompt_tokens
    assert cached(r3) == 1024 + (n - 1024) // 128 * 128


def test_prompt_cache_key_separates_and_idle_expiry(server, client, doc):
    k1, k2 = key(), key()
    a = msgs(doc, "q")
    client.chat.completions.create(model="gpt-4.1", messages=a, max_tokens=1, prompt_cache_key=k1)
    assert (
        cached(
            client.chat.completions.create(
                model="gpt-4.1", messages=a, max_tokens=1, prompt_cache_key=k2
            )
        )
        == 0
    )
    assert (
        cached(
            client.chat.completions.create(
                model="gpt-4.1", messages=a, max_tokens=1, prompt_cache_key=k1
            )
        )
        > 0
    )
    server.advance_clock(300)  # 5 idle minutes: the in-memory entry is gone
    assert (
        cached(
            client.chat.completions.create(
                model="gpt-4.1", messages=a, max_tokens=1, prompt_cache_key=k1
            )
        )
        == 0
    )


def test_24h_retention_survives_an_idle_hour(server, client, doc):
    k = key()
    a = msgs(doc, "q")
    client.chat.completions.create(
        model="gpt-4.1",
        messages=a,
        max_tokens=1,
        prompt_cache_key=k,
        extra_body={"prompt_cache_retention": "24h"},
    )
    server.advance_clock(3600)
    r = client.chat.completions.create(
        model="gpt-4.1",
        messages=a,
        max_tokens=1,
        prompt_cache_key=k,
        extra_body={"prompt_cache_retention": "24h"},
    )
    assert cached(r) >= 1024


def test_gpt_5_6_explicit_breakpoint_exact_boundary_and_writes(client, doc, tokenizer):
    k = key()
    boundary = len(tokenizer.encode(SYS + doc))

    def ask(q):
        return client.chat.completions.create(
            model="gpt-5.6",
            max_tokens=1,
            prompt_cache_key=k,
            messages=[
                {
                    "role": "system",
                    "content": [
                        {
                            "type": "text",
                            "text": doc,
                            "prompt_cache_breakpoint": {"mode": "explicit"},
                        }
                    ],
                },
                {"role": "user", "content": q},
            ],
            extra_body={"prompt_cache_options": {"mode": "explicit"}},
        )

    r1 = ask("First question?")
    assert cached(r1) == 0
    assert r1.usage.prompt_tokens_details.cache_write_tokens == boundary
    r2 = ask("A different second question?")
    assert cached(r2) == boundary  # exact: not rounded to 128
    assert r2.usage.prompt_tokens_details.cache_write_tokens == 0


def test_gpt_5_6_implicit_breakpoint_caches_the_conversation(client, doc, chat_ids):
    k = key()
    turn1 = msgs(doc, "Hello")
    r1 = client.chat.completions.create(
        model="gpt-5.6", messages=turn1, max_tokens=1, prompt_cache_key=k
    )
    # implicit breakpoint at the end of the latest user message: written once, whole prompt so far
    assert r1.usage.prompt_tokens_details.cache_write_tokens > 1024
    turn2 = turn1 + [{"role": "assistant", "content": "Hi"}, {"role": "user", "content": "More?"}]
    r2 = client.chat.completions.create(
        model="gpt-5.6", messages=turn2, max_tokens=1, prompt_cache_key=k
    )
    assert cached(r2) == r1.usage.prompt_tokens_details.cache_write_tokens
    assert r2.usage.prompt_tokens == len(chat_ids(turn2))


def test_breakpoints_on_an_older_model_are_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="gpt-4o",
            max_tokens=1,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "text",
                            "text": "hi",
                            "prompt_cache_breakpoint": {"mode": "explicit"},
                        }
                    ],
                }
            ],
        )
    assert "gpt-5.6" in e.value.body["message"]


def test_explicit_mode_without_breakpoints_caches_nothing(client, doc):
    k = key()
    for _ in range(2):
        r = client.chat.completions.create(
            model="gpt-5.6",
            messages=msgs(doc, "q"),
            max_tokens=1,
            prompt_cache_key=k,
            extra_body={"prompt_cache_options": {"mode": "explicit"}},
        )
        assert cached(r) == 0 and r.usage.prompt_tokens_details.cache_write_tokens == 0


def test_anthropic_endpoint_in_openai_mode(server, doc):
    ac = server.anthropic_client(max_retries=0, timeout=300, default_headers=MODE)
    m = "gpt-4o-" + uuid.uuid4().hex[:6]  # its own emulated cache
    ac.messages.create(
        model=m, max_tokens=1, system=doc, messages=[{"role": "user", "content": "q"}]
    )
    r = ac.messages.create(
        model=m, max_tokens=1, system=doc, messages=[{"role": "user", "content": "q2"}]
    )
    assert r.usage.cache_read_input_tokens >= 1024 and r.usage.cache_read_input_tokens % 128 == 0
    assert r.usage.cache_creation_input_tokens == 0
