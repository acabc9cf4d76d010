"""The OpenAI-compatible API with the official ``openai`` client (sync, async, streaming)
against ``promptcache serve`` (automatic cache mode) on a free loopback port.

Expected cached-token counts are worked out in the test: the shared prefix of the two
prompts' token ids (tokenized here, the plain way) rounded down to whole 16-token blocks.
"""

from __future__ import annotations

import asyncio
import uuid

import httpx
import openai
import pytest

BLOCK = 16


@pytest.fixture(scope="module")
def server(server_factory):
    return server_factory()


@pytest.fixture(scope="module")
def client(server):
    return server.openai_client(max_retries=0, timeout=120)


def system_prompt(tag: str) -> str:
    # a unique tag first, so no earlier request shares even one block with it
    return (
        f"[{tag}] You are the support assistant of Example Ltd. Answer in one short sentence. "
        "Our shop sells kettles, toasters and coffee machines; opening hours are nine to five; "
        "returns are accepted within thirty days with a receipt."
    )


def test_health(server):
    r = httpx.get(server.base_url + "/health")
    assert r.status_code == 200
    assert r.json()["status"] == "ok"


def test_chat_plain_usage_matches_the_tokenized_prompt(client, chat_ids):
    messages = [
        {"role": "system", "content": system_prompt(uuid.uuid4().hex[:8])},
        {"role": "user", "content": "What are your opening hours?"},
    ]
    r = client.chat.completions.create(
        model="local", messages=messages, max_tokens=4, temperature=0
    )
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.model == "local"
    choice = r.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens == len(chat_ids(messages))
    assert r.usage.completion_tokens == (
        4 if choice.finish_reason == "length" else r.usage.completion_tokens
    )
    assert 1 <= r.usage.completion_tokens <= 4
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details.cached_tokens == 0  # unique first block


def test_cached_tokens_after_a_shared_prefix_are_the_shared_length_in_whole_blocks(
    client, chat_ids, common_prefix
):
    sys_msg = {"role": "system", "content": system_prompt(uuid.uuid4().hex[:8])}
    a = [sys_msg, {"role": "user", "content": "Do you sell kettles?"}]
    b = [sys_msg, {"role": "user", "content": "Can I return a toaster without a receipt?"}]
    ra = client.chat.completions.create(model="local", messages=a, max_tokens=1, temperature=0)
    rb = client.chat.completions.create(model="local", messages=b, max_tokens=1, temperature=0)
    shared = common_prefix(chat_ids(a), chat_ids(b))
    assert shared > 2 * BLOCK  # the system prompt is several blocks long
    assert ra.usage.prompt_tokens_details.cached_tokens == 0
    assert rb.usage.prompt_tokens_details.cached_tokens == shared // BLOCK * BLOCK
    # the same request again: every whole block of its prompt is cached
    rb2 = client.chat.completions.create(model="local", messages=b, max_tokens=1, temperature=0)
    assert rb2.usage.prompt_tokens_details.cached_tokens == len(chat_ids(b)) // BLOCK * BLOCK


def test_streaming_with_include_usage(client, chat_ids, common_prefix):
    sys_msg = {"role": "system", "content": system_prompt(uuid.uuid4().hex[:8])}
    first = [sys_msg, {"role": "user", "content": "Hello!"}]
    plain = client.chat.completions.create(
        model="local", messages=first, max_tokens=6, temperature=0
    )
    second = [
        sys_msg,
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "Tell me about coffee machines."},
    ]
    stream = client.chat.completions.create(
        model="local",
        messages=first,
        max_tokens=6,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content  # greedy: same tokens streamed or not
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finishes == [plain.choices[0].finish_reason]
    assert all(c.usage is None for c in chunks[:-1])
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == plain.usage.completion_tokens
    assert last.usage.prompt_tokens == len(chat_ids(first))
    assert last.usage.prompt_tokens_details.cached_tokens == len(chat_ids(first)) // BLOCK * BLOCK

    s2 = client.chat.completions.create(
        model="local",
        messages=second,
        max_tokens=2,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = [c.usage for c in s2 if c.usage][-1]
    shared = common_prefix(chat_ids(first), chat_ids(second))
    assert usage.prompt_tokens_details.cached_tokens == shared // BLOCK * BLOCK


def test_streaming_without_include_usage_sends_no_usage(client):
    stream = client.chat.completions.create(
        model="local", messages=[{"role": "user", "content": "Hi"}], max_tokens=2, stream=True
    )
    chunks = list(stream)
    assert chunks and all(getattr(c, "usage", None) is None for c in chunks)
    assert all(c.choices for c in chunks)


def test_async_client_concurrent_requests(server):
    async def main():
        aclient = server.async_openai_client(max_retries=0, timeout=120)
        tasks = [
            aclient.chat.completions.create(
                model="local",
                max_tokens=3,
                temperature=0,
                messages=[{"role": "user", "content": f"Count to {i}"}],
            )
            for i in range(3)
        ]
        out = await asyncio.gather(*tasks)
        stream = await aclient.chat.completions.create(
            model="local",
            max_tokens=3,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "Count to 1"}],
        )
        chunks = [c async for c in stream]
        await aclient.close()
        return out, chunks

    out, chunks = asyncio.run(main())
    assert [len(r.choices) for r in out] == [1, 1, 1]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == out[1].choices[0].message.content


def test_n_and_seed_are_reproducible(client):
    kw = dict(
        model="local",
        messages=[{"role": "user", "content": "Name a fruit."}],
        max_tokens=5,
        temperature=1.0,
        n=2,
        seed=1234,
    )
    r1 = client.chat.completions.create(**kw)
    r2 = client.chat.completions.create(**kw)
    assert [c.index for c in r1.choices] == [0, 1]
    assert [c.message.content for c in r1.choices] == [c.message.content for c in r2.choices]
    assert 2 <= r1.usage.completion_tokens <= 10  # both samples counted


def test_stop_sequence_truncates_and_reports_stop(client):
    msgs = [
        {"role": "user", "content": "Write the numbers one to ten in words, separated by commas."}
    ]
    full = client.chat.completions.create(
        model="local", messages=msgs, max_tokens=12, temperature=0
    )
    text = full.choices[0].message.content
    words = [w for w in text.split() if len(w) >= 3]
    assert words, f"the model wrote nothing usable to stop on: {text!r}"
    stop = words[min(1, len(words) - 1)]
    cut = client.chat.completions.create(
        model="local", messages=msgs, max_tokens=12, temperature=0, stop=[stop]
    )
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].message.content == text[: text.index(stop)]


def test_logprob_bytes_rebuild_the_content(client):
    """Each logprobs entry's ``bytes`` are the token's raw bytes, so joined they are the content's
    UTF-8 even where a token holds part of an emoji (its ``token`` text alone is U+FFFD).
    Before, every such entry carried U+FFFD's bytes (ef bf bd) instead."""
    r = client.chat.completions.create(
        model="local",
        temperature=0,
        max_tokens=8,
        logprobs=True,
        top_logprobs=2,
        messages=[{"role": "user", "content": "Say something with emoji 🎉 and 日本語"}],
    )
    content = r.choices[0].message.content
    entries = r.choices[0].logprobs.content
    joined = bytes(b for e in entries for b in e.bytes)
    # the content stops at the last whole character (max_tokens may cut an emoji: its first
    # bytes are in the last tokens but not in the text), so the bytes extend it by < 4 bytes
    assert joined.startswith(content.encode("utf-8"))
    tail = joined[len(content.encode("utf-8")) :]
    assert len(tail) < 4 and (not tail or tail.decode("utf-8", errors="replace") == "\ufffd")
    assert not content.isascii(), content  # greedy SmolLM2 answers with emoji here
    assert any("\ufffd" in e.token for e in entries)


def test_logprobs_and_max_completion_tokens(client):
    r = client.chat.completions.create(
        model="local",
        messages=[{"role": "user", "content": "Say yes."}],
        max_completion_tokens=3,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
    )
    assert r.usage.completion_tokens <= 3
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0.0
        assert len(entry.top_logprobs) == 3
        lps = [t.logprob for t in entry.top_logprobs]
        assert lps == sorted(lps, reverse=True)
        # greedy: the chosen token is the most likely one (ties within 1e-6 tolerated)
        assert entry.logprob >= lps[0] - 1e-6
    assert "".join(e.token for e in content) == r.choices[0].message.content


def test_completions_with_token_prompts_cached_blocks(client, server):
    # token ids chosen directly: the shared prefix is exactly 70 tokens -> 64 cached (4 blocks)
    base = [1000 + (7 * i) % 3000 for i in range(70)]
    a = base + [11, 12, 13, 14, 15]
    b = base + [21, 22, 23]
    ra = client.completions.create(model="local", prompt=a, max_tokens=2, temperature=0)
    rb = client.completions.create(model="local", prompt=b, max_tokens=2, temperature=0)
    assert ra.object == "text_completion"
    assert ra.usage.prompt_tokens == 75 and ra.usage.prompt_tokens_details.cached_tokens == 0
    assert rb.usage.prompt_tokens == 73 and rb.usage.prompt_tokens_details.cached_tokens == 64
    # streaming, a list of two prompts with n=1: choices indexed per prompt
    stream = client.completions.create(
        model="local",
        prompt=[a, b],
        max_tokens=2,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    texts = {0: "", 1: ""}
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] += ch.text
    assert texts[0] == ra.choices[0].text and texts[1] == rb.choices[0].text
    usage = chunks[-1].usage
    assert usage.prompt_tokens == 148
    assert usage.prompt_tokens_details.cached_tokens == 64 + 64  # both prompts' whole blocks now


def test_completions_text_prompt_and_echo(client, tokenizer):
    prompt = "The capital of France is"
    r = client.completions.create(
        model="local", prompt=prompt, max_tokens=3, temperature=0, echo=True
    )
    assert r.choices[0].text.startswith(prompt)
    assert r.usage.prompt_tokens == len(tokenizer.encode(prompt))


def test_completions_logprobs(client):
    r = client.completions.create(
        model="local",
        prompt="One, two, three,",
        max_tokens=3,
        temperature=0,
        logprobs=2,
        user="someone",
    )
    lp = r.choices[0].logprobs
    assert (
        len(lp.tokens)
        == len(lp.token_logprobs)
        == len(lp.top_logprobs)
        == r.usage.completion_tokens
    )
    assert "".join(lp.tokens) == r.choices[0].text
    for chosen, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert chosen <= 0.0 and len(top) <= 2
        assert chosen >= max(top.values()) - 1e-6  # greedy picks the most likely token
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)


def test_models_endpoint(client):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert ids == ["SmolLM2-135M-Instruct"]


def test_unknown_fields_are_ignored(server):
    r = httpx.post(
        server.openai_base_url + "/chat/completions",
        json={
            "model": "local",
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 1,
            "frequency_penalty": 0.5,
            "some_future_field": {"x": 1},
        },
    )
    assert r.status_code == 200, r.text


# ---------------------------------------------------------------------------- bad input


def test_missing_field_is_400_in_openai_shape(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="local", messages=[])
    body = e.value.body
    assert e.value.status_code == 400
    assert body["type"] == "invalid_request_error" and "messages" in body["message"]


def test_wrong_types_are_400(server):
    url = server.openai_base_url + "/chat/completions"
    cases = [
        {"model": "local", "messages": [{"role": "user", "content": "Hi"}], "temperature": "hot"},
        {"model": "local", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": "5"},
        {"model": "local", "messages": [{"role": "wizard", "content": "Hi"}]},
        {"model": "local", "messages": "Hi"},
        {"model": "local", "messages": [{"role": "user", "content": "Hi"}], "temperature": 3},
        {"model": "local", "messages": [{"role": "user", "content": "Hi"}], "n": 0},
    ]
    for body in cases:
        r = httpx.post(url, json=body)
        assert r.status_code == 400, (body, r.text)
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error" and err["message"], r.text
        assert err["param"] is not None


def test_malformed_json_and_non_object_body(server):
    url = server.openai_base_url + "/chat/completions"
    r = httpx.post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = httpx.post(url, json=[1, 2])
    assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]


def test_audio_content_and_a_bad_image_are_clear_400s(client):
    # images are read as media.py says (tests/local_engine/server/test_media_content.py);
    # audio is not, and an image of a type OpenAI does not take is refused naming the field
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    bmp = {"type": "image_url", "image_url": {"url": "data:image/bmp;base64,AAAA"}}
    for part, words in ((audio, "input_audio"), (bmp, "image/bmp")):
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(
                model="local", max_tokens=1, messages=[{"role": "user", "content": [part]}]
            )
        assert words in e.value.body["message"]


def test_prompt_longer_than_the_context_names_both_lengths(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="local", prompt=[100] * 9000, max_tokens=1)
    msg = e.value.body["message"]
    assert "9000" in msg and "8192" in msg
    assert e.value.body["code"] == "context_length_exceeded"


def test_unknown_path_is_404_in_openai_shape(server):
    r = httpx.get(server.base_url + "/v1/nothing-here")
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.get(server.base_url + "/v1/chat/completions")
    assert r.status_code == 405 and "not allowed" in r.json()["error"]["message"]


def test_unknown_cache_mode_header_is_400(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="local",
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=1,
            extra_headers={"X-Promptcache-Cache-Mode": "sometimes"},
        )
    assert "X-Promptcache-Cache-Mode" in e.value.body["message"]


def test_server_still_serves_after_bad_requests(client):
    r = client.chat.completions.create(
        model="local", messages=[{"role": "user", "content": "Hi"}], max_tokens=1
    )
    assert r.usage.completion_tokens == 1


def test_prompt_plus_max_tokens_over_the_context_is_400(client):
    # 8,000 prompt tokens + 500 requested = 8,500 > the model's 8,192 (SmolLM2's context).
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="local", prompt=[100] * 8000, max_tokens=500)
    msg = e.value.body["message"]
    assert "8192" in msg and "8500" in msg and "8000" in msg and "500" in msg
    assert e.value.body["param"] == "max_tokens"
    assert e.value.body["code"] == "context_length_exceeded"
