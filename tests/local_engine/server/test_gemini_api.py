"""The Gemini API through the official ``google-genai`` client (``http_options.base_url``):
generate_content (plain, streamed, ``/v1beta`` and ``/v1``), count_tokens, explicit caches
(create / get / list / update / delete, TTL expiry on the test clock, the minimum size),
implicit caching under Gemini's rules, structured output and function calling mode ANY, and
the SDK's ``to_gemini`` output sent as is.

Expected token counts are worked out here from the model's chat template tokenized as one
text; Gemini's rules (https://ai.google.dev/gemini-api/docs/caching, read 2026-12-03): an
explicit cache below the model's minimum is refused; ``cachedContentTokenCount`` is the
cached content's size; ``promptTokenCount`` includes it. The minimum for gemini-2.5-flash is
the larger of the two current pages' figures, 2,048 (``promptcache.limits``).
"""

from __future__ import annotations

import json
import uuid

import httpx
import jsonschema
import pytest
from google import genai
from google.genai import errors, types

import promptcache
from promptcache.limits import cache_limits

MODEL = "gemini-2.5-flash"
BLOCK = 16


@pytest.fixture(scope="module")
def server(server_factory):
    return server_factory()


def _client(server, version="v1beta", mode=None):
    headers = {"X-Promptcache-Cache-Mode": mode} if mode else None
    return genai.Client(
        api_key="test",
        http_options=types.HttpOptions(
            base_url=server.base_url, api_version=version, headers=headers, timeout=120_000
        ),
    )


@pytest.fixture(scope="module")
def client(server):
    return _client(server)


def _prefix_ids(tokenizer, messages, upto: str) -> int:
    """Tokens of the templated conversation up to the end of its last occurrence of ``upto``."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return len(tokenizer.encode(text[: text.rindex(upto) + len(upto)]))


def test_generate_plain_and_count_tokens(client, chat_ids):
    system = f"[{uuid.uuid4().hex[:8]}] You are terse."
    config = types.GenerateContentConfig(
        system_instruction=system, max_output_tokens=4, temperature=0
    )
    r = client.models.generate_content(model=MODEL, contents="Hello there", config=config)
    n = len(
        chat_ids(
            [{"role": "system", "content": system}, {"role": "user", "content": "Hello there"}]
        )
    )
    u = r.usage_metadata
    assert u.prompt_token_count == n and not u.cached_content_token_count
    assert 1 <= u.candidates_token_count <= 4
    assert u.total_token_count == n + u.candidates_token_count
    assert r.candidates[0].finish_reason in (types.FinishReason.STOP, types.FinishReason.MAX_TOKENS)
    assert isinstance(r.text, str)
    counted = client.models.count_tokens(model=MODEL, contents="Hello there")
    assert counted.total_tokens == len(chat_ids([{"role": "user", "content": "Hello there"}]))


def test_v1_and_streaming(server, chat_ids):
    c = _client(server, "v1")
    config = types.GenerateContentConfig(max_output_tokens=6, temperature=0)
    whole = c.models.generate_content(model=MODEL, contents="Count to three.", config=config)
    chunks = list(
        c.models.generate_content_stream(model=MODEL, contents="Count to three.", config=config)
    )
    assert "".join(ch.text or "" for ch in chunks) == whole.text
    last = chunks[-1].usage_metadata
    assert last.prompt_token_count == len(
        chat_ids([{"role": "user", "content": "Count to three."}])
    )
    assert last.candidates_token_count == whole.usage_metadata.candidates_token_count


def test_implicit_caching_follows_the_minimum_and_reads_the_prefix(server, policy, tokenizer):
    c = _client(server, mode="gemini")
    doc = policy(uuid.uuid4().hex[:8], n=110)
    config = types.GenerateContentConfig(system_instruction=doc, max_output_tokens=1)
    first = c.models.generate_content(model=MODEL, contents="Summarise.", config=config)
    again = c.models.generate_content(model=MODEL, contents="Summarise.", config=config)
    msgs = [{"role": "system", "content": doc}, {"role": "user", "content": "Summarise."}]
    minimum = cache_limits(MODEL, "gemini").min_tokens
    assert first.usage_metadata.prompt_token_count > minimum
    assert not first.usage_metadata.cached_content_token_count
    assert again.usage_metadata.cached_content_token_count == _prefix_ids(
        tokenizer, msgs, "Summarise."
    )
    # a short prompt never reads an implicit cache (below the minimum)
    short = types.GenerateContentConfig(system_instruction="Be brief.", max_output_tokens=1)
    c.models.generate_content(model=MODEL, contents="Hi", config=short)
    r = c.models.generate_content(model=MODEL, contents="Hi", config=short)
    assert not r.usage_metadata.cached_content_token_count


def test_explicit_cache_lifecycle_and_usage(server, policy, tokenizer, chat_ids):
    c = _client(server)  # explicit caches are read in every cache mode
    doc = policy(uuid.uuid4().hex[:8], n=110)
    system = "You answer questions about the policy."
    cache = c.caches.create(
        model=MODEL,
        config=types.CreateCachedContentConfig(
            system_instruction=system,
            contents=[types.Content(role="user", parts=[types.Part(text=doc)])],
            ttl="300s",
            display_name="policy",
        ),
    )
    expected = _prefix_ids(
        tokenizer, [{"role": "system", "content": system}, {"role": "user", "content": doc}], doc
    )
    assert cache.name.startswith("cachedContents/") and cache.model == f"models/{MODEL}"
    assert cache.usage_metadata.total_token_count == expected
    r = c.models.generate_content(
        model=MODEL,
        contents="How long for kettles?",
        config=types.GenerateContentConfig(cached_content=cache.name, max_output_tokens=2),
    )
    full = [
        {"role": "system", "content": system},
        {"role": "user", "content": doc},
        {"role": "user", "content": "How long for kettles?"},
    ]
    assert r.usage_metadata.prompt_token_count == len(chat_ids(full))
    assert r.usage_metadata.cached_content_token_count == expected
    assert cache.name in [x.name for x in c.caches.list()]
    assert c.caches.get(name=cache.name).display_name == "policy"
    c.caches.update(name=cache.name, config=types.UpdateCachedContentConfig(ttl="600s"))
    server.advance_clock(400)  # past the first TTL, within the updated one
    assert c.caches.get(name=cache.name).name == cache.name
    server.advance_clock(201)
    with pytest.raises(errors.ClientError) as e:
        c.caches.get(name=cache.name)
    assert e.value.code == 404


def test_explicit_cache_delete_and_conflicting_fields(server, policy):
    c = _client(server)
    cache = c.caches.create(
        model=MODEL,
        config=types.CreateCachedContentConfig(
            contents=[types.Content(role="user", parts=[types.Part(text=policy("d", n=110))])]
        ),
    )
    with pytest.raises(errors.ClientError) as e:
        c.models.generate_content(
            model=MODEL,
            contents="x",
            config=types.GenerateContentConfig(cached_content=cache.name, system_instruction="no"),
        )
    assert e.value.code == 400 and e.value.status == "INVALID_ARGUMENT"
    c.caches.delete(name=cache.name)
    with pytest.raises(errors.ClientError) as e:
        c.caches.get(name=cache.name)
    assert e.value.code == 404


def test_explicit_cache_below_the_minimum_is_400(client):
    with pytest.raises(errors.ClientError) as e:
        client.caches.create(
            model=MODEL,
            config=types.CreateCachedContentConfig(
                contents=[types.Content(role="user", parts=[types.Part(text="too short")])]
            ),
        )
    minimum = cache_limits(MODEL, "gemini").min_tokens
    assert e.value.code == 400 and f"min_total_token_count={minimum}" in e.value.message


SCHEMA = {
    "type": "object",
    "properties": {"colour": {"enum": ["red", "green"]}, "count": {"type": "integer"}},
    "required": ["colour", "count"],
}


def test_response_json_schema_and_response_schema(client):
    r = client.models.generate_content(
        model=MODEL,
        contents="Pick a colour.",
        config=types.GenerateContentConfig(
            response_mime_type="application/json", response_json_schema=SCHEMA, max_output_tokens=30
        ),
    )
    jsonschema.validate(json.loads(r.text), SCHEMA)
    r = client.models.generate_content(
        model=MODEL,
        contents="Name a few fruits.",
        config=types.GenerateContentConfig(
            response_mime_type="application/json",
            response_schema={"type": "ARRAY", "items": {"type": "STRING"}, "maxItems": 3},
            max_output_tokens=30,
        ),
    )
    value = json.loads(r.text)
    assert isinstance(value, list) and all(isinstance(x, str) for x in value)


def test_function_calling_mode_any(client):
    weather = types.FunctionDeclaration(
        name="get_weather",
        parameters_json_schema={
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}},
            "required": ["city"],
            "additionalProperties": False,
        },
    )
    time_fn = types.FunctionDeclaration(
        name="get_time", parameters_json_schema={"type": "object", "properties": {}}
    )
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[weather, time_fn])],
        tool_config=types.ToolConfig(
            function_calling_config=types.FunctionCallingConfig(
                mode="ANY", allowed_function_names=["get_weather"]
            )
        ),
        max_output_tokens=30,
    )
    r = client.models.generate_content(model=MODEL, contents="Weather in Paris?", config=config)
    call = r.candidates[0].content.parts[0].function_call
    assert call.name == "get_weather" and isinstance(call.args["city"], str)
    bad = config.model_copy(
        update={
            "tool_config": types.ToolConfig(
                function_calling_config=types.FunctionCallingConfig(
                    mode="ANY", allowed_function_names=["nope"]
                )
            )
        }
    )
    with pytest.raises(errors.ClientError) as e:
        client.models.generate_content(model=MODEL, contents="x", config=bad)
    assert e.value.code == 400 and "nope" in e.value.message


def test_unsupported_schema_keyword_is_400_in_google_shape(client):
    with pytest.raises(errors.ClientError) as e:
        client.models.generate_content(
            model=MODEL,
            contents="x",
            config=types.GenerateContentConfig(
                response_mime_type="application/json",
                response_json_schema={"type": "object", "not": {"required": ["a"]}},
            ),
        )
    assert e.value.code == 400 and e.value.status == "INVALID_ARGUMENT" and "not" in e.value.message


def test_sdk_renderer_output_is_sent_as_is(client):
    prompt = promptcache.build(
        system=f"[{uuid.uuid4().hex[:8]}] You are terse.",
        messages=[{"role": "user", "content": "hi"}],
        dynamic="What time is it?",
    )
    kw = prompt.to_gemini(MODEL)
    kw["config"] = {**kw.get("config", {}), "max_output_tokens": 3}
    r = client.models.generate_content(**kw)
    assert r.usage_metadata.prompt_token_count > 0 and r.candidates


#: Gemini CLI 0.61.0's routing classifier schema, as its bundle builds it
#: (/tmp/clis/node_modules/@google/gemini-cli/bundle, ``RESPONSE_SCHEMA2`` with
#: ``FLASH_MODEL2 = "flash"``, ``PRO_MODEL2 = "pro"``; ``Type.OBJECT === "OBJECT"``) and
#: sends as ``generationConfig.responseJsonSchema`` (``BaseLlmClient.generateJson``)
CLI_ROUTER_SCHEMA = {
    "type": "OBJECT",
    "properties": {
        "reasoning": {"type": "STRING", "description": "A brief explanation for the model choice."},
        "model_choice": {"type": "STRING", "enum": ["flash", "pro"]},
    },
    "required": ["reasoning", "model_choice"],
}
#: the same schema in JSON Schema's lower-case type names, written out by hand
CLI_ROUTER_JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string"},
        "model_choice": {"type": "string", "enum": ["flash", "pro"]},
    },
    "required": ["reasoning", "model_choice"],
}


def test_upper_case_types_in_response_json_schema_as_gemini_cli_sends(server):
    """The CLI's raw ``generateContent`` body (camelCase, as @google/genai sends it)."""
    body = {
        "contents": [{"role": "user", "parts": [{"text": "Rename a variable in one file."}]}],
        "systemInstruction": {"role": "user", "parts": [{"text": "Pick flash or pro."}]},
        "generationConfig": {
            "responseJsonSchema": CLI_ROUTER_SCHEMA,
            "responseMimeType": "application/json",
            "maxOutputTokens": 200,
            "temperature": 0,
        },
    }
    r = httpx.post(
        f"{server.base_url}/v1beta/models/gemini-2.5-flash-lite:generateContent",
        json=body,
        headers={"x-goog-api-key": "test"},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    cand = r.json()["candidates"][0]
    assert cand["finishReason"] == "STOP"
    jsonschema.validate(json.loads(cand["content"]["parts"][0]["text"]), CLI_ROUTER_JSON_SCHEMA)


def test_upper_case_types_nested_through_the_client(client):
    """Upper-case names inside ``items``, ``anyOf`` and a type list, through google-genai."""
    schema = {
        "type": "OBJECT",
        "properties": {
            "ids": {"type": "ARRAY", "items": {"type": "INTEGER"}, "maxItems": 2},
            "note": {"anyOf": [{"type": "STRING", "maxLength": 8}, {"type": "NULL"}]},
            "ok": {"type": ["BOOLEAN", "NULL"]},
        },
        "required": ["ids", "note", "ok"],
        "additionalProperties": False,
    }
    lower = {
        "type": "object",
        "properties": {
            "ids": {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
            "note": {"anyOf": [{"type": "string", "maxLength": 8}, {"type": "null"}]},
            "ok": {"type": ["boolean", "null"]},
        },
        "required": ["ids", "note", "ok"],
        "additionalProperties": False,
    }
    r = client.models.generate_content(
        model=MODEL,
        contents="Give two ids.",
        config=types.GenerateContentConfig(
            response_mime_type="application/json",
            response_json_schema=schema,
            max_output_tokens=60,
        ),
    )
    jsonschema.validate(json.loads(r.text), lower)
