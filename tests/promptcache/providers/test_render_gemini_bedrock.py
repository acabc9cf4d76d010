"""Gemini through the real google-genai client (httpx mock transport) and Bedrock Converse
through boto3 with botocore's Stubber, which validates the parameters against the service
model of the installed botocore."""

import base64
import json

import pytest

from promptcache import build

TOOL = {
    "name": "weather",
    "description": "Weather.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
HIST = [
    {"role": "user", "content": "Hi"},
    {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "5C"},
]


def W(n):
    return " ".join(["w"] * n)


# ---- Gemini ---------------------------------------------------------------------------------


def fold(value):
    """Keys in lowerCamelCase (proto3 JSON accepts either spelling)."""
    if isinstance(value, dict):
        return {
            "".join(w if i == 0 else w.capitalize() for i, w in enumerate(k.split("_"))): fold(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [fold(v) for v in value]
    return value


def gemini_client(sent):
    import httpx
    from google import genai

    def handler(request):
        sent.append((str(request.url), json.loads(request.content)))
        if "cachedContents" in str(request.url):
            return httpx.Response(
                200, json={"name": "cachedContents/abc123", "model": "models/gemini-2.5-pro"}
            )
        return httpx.Response(
            200,
            json={
                "candidates": [
                    {
                        "content": {"role": "model", "parts": [{"text": "ok"}]},
                        "finishReason": "STOP",
                    }
                ],
                "usageMetadata": {
                    "promptTokenCount": 5,
                    "candidatesTokenCount": 1,
                    "totalTokenCount": 6,
                },
            },
        )

    return genai.Client(
        api_key="x",
        http_options={"httpx_client": httpx.Client(transport=httpx.MockTransport(handler))},
    )


def test_gemini_request_sent_by_the_official_client():
    sent = []
    p = build(
        system="You are terse.", tools=[TOOL], session="User: Ann", messages=HIST, dynamic="Thanks?"
    )
    r = gemini_client(sent).models.generate_content(**p.to_gemini("gemini-2.5-flash"))
    assert r.text == "ok"
    url, body = sent[-1]
    assert url.endswith("/models/gemini-2.5-flash:generateContent")
    assert body["systemInstruction"]["parts"] == [{"text": "You are terse."}, {"text": "User: Ann"}]
    # google-genai 3.6 sends this one field in its proto name (proto3 JSON accepts both the
    # proto name and the lowerCamelCase name): compare with snake/camel case folded
    assert fold(body["tools"]) == [
        {
            "functionDeclarations": [
                {
                    "description": "Weather.",
                    "name": "weather",
                    "parametersJsonSchema": {
                        "properties": {"city": {"type": "string"}},
                        "type": "object",
                    },
                }
            ]
        }
    ]
    assert body["contents"] == [
        {"parts": [{"text": "Hi"}], "role": "user"},
        {
            "parts": [
                {"text": "Checking."},
                {"functionCall": {"args": {"city": "Oslo"}, "id": "c1", "name": "weather"}},
            ],
            "role": "model",
        },
        {
            "parts": [
                {"functionResponse": {"id": "c1", "name": "weather", "response": {"output": "5C"}}}
            ],
            "role": "user",
        },
        {"parts": [{"text": "Thanks?"}], "role": "user"},
    ]


def test_gemini_explicit_cache_of_the_frozen_prefix(word_tokens):
    sent = []
    client = gemini_client(sent)
    from promptcache.providers.gemini import create_cached_content

    p = build(system=W(5000), tools=[TOOL], session="User: Ann", dynamic="q")
    cache = create_cached_content(client, p, "gemini-2.5-pro", ttl="600s")
    url, body = sent[-1]
    assert url.endswith("/cachedContents") and cache.name == "cachedContents/abc123"
    assert body["ttl"] == "600s" and body["displayName"] == f"pc-{p.prefix_hash[:16]}"
    assert body["systemInstruction"]["parts"] == [{"text": W(5000)}]  # frozen only
    client.models.generate_content(**p.to_gemini("gemini-2.5-pro", cached_content=cache.name))
    body = sent[-1][1]
    assert body["cachedContent"] == "cachedContents/abc123"
    assert "systemInstruction" not in body and "tools" not in body
    assert body["contents"][0] == {"parts": [{"text": "User: Ann"}], "role": "user"}


def test_gemini_cache_refused_under_the_minimum(word_tokens):
    from promptcache.providers.gemini import cached_content_config

    with pytest.raises(ValueError, match="under Gemini's minimum of 4096"):
        cached_content_config(build(system=W(3000)), "gemini-2.5-pro")


def test_gemini_tool_result_needs_its_call():
    orphan = [{"role": "tool", "tool_call_id": "zz", "content": "x"}]
    with pytest.raises(ValueError, match="no earlier tool call"):
        build(messages=orphan).to_gemini("gemini-2.5-flash")


# ---- Bedrock --------------------------------------------------------------------------------


def converse(kw):
    import boto3
    from botocore.stub import Stubber

    client = boto3.client(
        "bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stub = Stubber(client)
    stub.add_response(
        "converse",
        {
            "output": {"message": {"role": "assistant", "content": [{"text": "ok"}]}},
            "stopReason": "end_turn",
            "usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2},
            "metrics": {"latencyMs": 1},
        },
        kw,
    )
    with stub:
        return client.converse(**kw)  # raises ParamValidationError on a malformed request


BEDROCK_CLAUDE = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"


def test_bedrock_request_validated_by_botocore(word_tokens):
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
    hist = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
            ],
        },
        *HIST[1:],
    ]
    # tool 1 + system 1100 = 1101 -> checkpoint after system; session 10 is under 1,024 since
    # it (skipped); the history -- "see" 1 + an image (flat estimate 1,600) + "Checking." 1 +
    # toolUse (name 1 + args 1) + toolResult (1 + 1) -- ends at 2,717, 1,616 after the first
    # checkpoint -> a second cachePoint after the tool result, before the dynamic text.
    p = build(system=W(1100), tools=[TOOL], session=W(10), messages=hist, dynamic="Thanks?")
    kw = p.to_bedrock(BEDROCK_CLAUDE, ttl="1h")
    assert converse(kw)["stopReason"] == "end_turn"
    assert kw["system"] == [
        {"text": W(1100)},
        {"cachePoint": {"ttl": "1h", "type": "default"}},
        {"text": W(10)},
    ]
    assert kw["toolConfig"] == {
        "tools": [
            {
                "toolSpec": {
                    "description": "Weather.",
                    "inputSchema": {
                        "json": {"properties": {"city": {"type": "string"}}, "type": "object"}
                    },
                    "name": "weather",
                }
            }
        ]
    }
    assert kw["messages"] == [
        {
            "content": [
                {"text": "see"},
                {"image": {"format": "png", "source": {"bytes": b"\x89PNG\r\n\x1a\n"}}},
            ],
            "role": "user",
        },
        {
            "content": [
                {"text": "Checking."},
                {"toolUse": {"input": {"city": "Oslo"}, "name": "weather", "toolUseId": "c1"}},
            ],
            "role": "assistant",
        },
        # the tool result and the dynamic text merge into one user turn
        {
            "content": [
                {"toolResult": {"content": [{"text": "5C"}], "toolUseId": "c1"}},
                {"cachePoint": {"type": "default"}},
                {"text": "Thanks?"},
            ],
            "role": "user",
        },
    ]


def test_bedrock_checkpoints_need_the_minimum_each(word_tokens):
    # system 1100 | session 1100 (2200 cum, 1100 since) | history 1100 (3300, 1100 since)
    p = build(
        system=W(1100),
        session=W(1100),
        messages=[{"role": "user", "content": W(1100)}],
        dynamic="q",
    )
    kw = p.to_bedrock(BEDROCK_CLAUDE)
    converse(kw)
    assert [list(b) for b in kw["system"]] == [["text"], ["cachePoint"], ["text"], ["cachePoint"]]
    assert kw["messages"][0]["content"][1] == {"cachePoint": {"type": "default"}}


def test_bedrock_nova_never_marks_tools(word_tokens):
    tools = [{**TOOL, "description": W(1100)}]
    p = build(tools=tools, dynamic="q")
    kw = p.to_bedrock("amazon.nova-pro-v1:0")
    converse(kw)
    assert all("cachePoint" not in t for t in kw["toolConfig"]["tools"])
    with pytest.raises(ValueError, match="not available"):
        p.to_bedrock("amazon.nova-pro-v1:0", ttl="1h")


def test_bedrock_rejects_image_urls():
    hist = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}],
        }
    ]
    with pytest.raises(ValueError, match="not URLs"):
        build(messages=hist).to_bedrock(BEDROCK_CLAUDE)
