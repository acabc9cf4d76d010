"""Image and document blocks on every API (``local_engine/server/media.py``): accepted in each
provider's shape through its official client; what the text-only model reads is the
document's text, or for an image / binary document a line with its media type and the
SHA-256 of its bytes (worked out here with ``hashlib``) or the URL it names; the same image
repeats as the same prefix (cached), another one does not; a malformed block is one 400 in
the provider's error shape naming the field."""

from __future__ import annotations

import base64
import hashlib
import uuid

import anthropic
import boto3
import botocore.config
import botocore.exceptions
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from local_engine.server.protocol_anthropic import (
    MessagesRequest,
    invalidating_settings,
    messages_to_turns,
)
from local_engine.server.protocol_bedrock import ConverseRequest
from local_engine.server.protocol_bedrock import to_turns as bedrock_turns
from local_engine.server.protocol_gemini import PromptFields
from local_engine.server.protocol_gemini import to_turns as gemini_turns
from local_engine.server.protocol_openai import ChatCompletionRequest, chat_to_turns

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))  # bytes only: nothing decodes the pixels
PNG_B64 = base64.b64encode(PNG).decode()
OTHER = b"\x89PNG\r\n\x1a\n" + bytes(range(64, 128))
PDF = b"%PDF-1.4\n1 0 obj\n<<>>\nendobj\n%%EOF\n"
NOTE = "The locker code is 4417 and the door opens inward."


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def texts(blocks) -> str:
    return "\n".join(b.text for b in blocks)


@pytest.fixture(scope="module")
def server(server_factory):
    return server_factory()


# ---------------------------------------------------------------------------- what the model reads


def test_anthropic_blocks_as_the_model_reads_them():
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {
            "type": "document",
            "title": "Notes",
            "source": {"type": "text", "media_type": "text/plain", "data": NOTE},
        },
        {
            "type": "document",
            "source": {
                "type": "base64",
                "media_type": "application/pdf",
                "data": base64.b64encode(PDF).decode(),
            },
        },
        {"type": "text", "text": "What do they say?"},
    ]
    req = MessagesRequest.model_validate(
        {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": content}]}
    )
    _, _, turns, _ = messages_to_turns(req)
    read = texts(turns[0].blocks)
    assert f"image/png, {len(PNG)} bytes, sha256 {sha(PNG)}" in read
    assert "https://example.com/a.png" in read
    assert NOTE in read and "'Notes'" in read
    assert f"application/pdf, {len(PDF)} bytes, sha256 {sha(PDF)}" in read
    # Anthropic: images anywhere invalidate the message blocks (promptcache.limits)
    assert invalidating_settings(req) == {"images": True}


def test_openai_parts_as_the_model_reads_them():
    note_url = "data:text/plain;base64," + base64.b64encode(NOTE.encode()).decode()
    content = [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/b.jpg", "detail": "low"}},
        {"type": "file", "file": {"file_data": note_url, "filename": "notes.txt"}},
        {"type": "file", "file": {"file_id": "file-abc123"}},
        {"type": "text", "text": "Summarise."},
    ]
    req = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": content}]}
    )
    _, _, turns = chat_to_turns(req)
    read = texts(turns[0].blocks)
    assert f"sha256 {sha(PNG)}" in read and "https://example.com/b.jpg" in read
    assert NOTE in read and "file-abc123" in read


def test_gemini_and_bedrock_parts_as_the_model_reads_them():
    fields = PromptFields.model_validate(
        {
            "contents": [
                {
                    "role": "user",
                    "parts": [
                        {"inlineData": {"mimeType": "image/png", "data": PNG_B64}},
                        {
                            "inlineData": {
                                "mimeType": "text/plain",
                                "data": base64.b64encode(NOTE.encode()).decode(),
                            }
                        },
                        {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/doc.pdf"}},
                    ],
                }
            ]
        }
    )
    read = texts(gemini_turns(fields)[2][0].blocks)
    assert f"sha256 {sha(PNG)}" in read and NOTE in read and "gs://b/doc.pdf" in read
    req = ConverseRequest.model_validate(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"image": {"format": "png", "source": {"bytes": PNG_B64}}},
                        {
                            "document": {
                                "format": "txt",
                                "name": "notes",
                                "source": {"bytes": base64.b64encode(NOTE.encode()).decode()},
                            }
                        },
                        {
                            "document": {
                                "format": "pdf",
                                "name": "spec",
                                "source": {"s3Location": {"uri": "s3://b/spec.pdf"}},
                            }
                        },
                        {"text": "Summarise."},
                    ],
                }
            ]
        }
    )
    read = texts(bedrock_turns(req)[2][0].blocks)
    assert f"image/png, {len(PNG)} bytes, sha256 {sha(PNG)}" in read
    assert NOTE in read and "s3://b/spec.pdf" in read and "'spec'" in read


# ---------------------------------------------------------------------------- official clients


def test_openai_chat_image_repeats_as_a_cached_prefix_and_another_does_not(server):
    oai = server.openai_client(max_retries=0, timeout=120)
    system = f"[{uuid.uuid4().hex}] You describe pictures for a catalogue. " * 8

    def ask(image: bytes):
        url = "data:image/png;base64," + base64.b64encode(image).decode()
        content = [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": "Describe the product in the picture for the catalogue page."},
        ]
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": content}]
        return oai.chat.completions.create(model="gpt-5.4", max_tokens=1, messages=msgs).usage

    first, same, other = ask(PNG), ask(PNG), ask(OTHER)
    assert same.prompt_tokens == first.prompt_tokens
    cached_same = same.prompt_tokens_details.cached_tokens
    cached_other = other.prompt_tokens_details.cached_tokens
    # the whole prompt but its last partial block is reused; another image misses from it on
    assert cached_same >= first.prompt_tokens - 16
    assert 0 < cached_other < cached_same


def test_responses_input_image_and_input_file(server):
    oai = server.openai_client(max_retries=0, timeout=120)
    note = "data:text/plain;base64," + base64.b64encode(NOTE.encode()).decode()
    r = oai.responses.create(
        model="gpt-5.4",
        max_output_tokens=2,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG_B64}"},
                    {"type": "input_file", "file_data": note, "filename": "notes.txt"},
                    {"type": "input_text", "text": "What is the code?"},
                ],
            }
        ],
    )
    assert r.status in ("completed", "incomplete") and r.usage.input_tokens > 0


def test_anthropic_image_and_document_and_a_bad_media_type(server):
    claude = server.anthropic_client(max_retries=0, timeout=120)
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": NOTE}},
        {"type": "text", "text": "What is the code?"},
    ]
    r = claude.messages.create(
        model="claude-sonnet-4-5", max_tokens=2, messages=[{"role": "user", "content": content}]
    )
    assert r.usage.input_tokens > 0
    content[0] = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/bmp", "data": PNG_B64},
    }
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(
            model="claude-sonnet-4-5", max_tokens=2, messages=[{"role": "user", "content": content}]
        )
    err = e.value.body["error"]
    assert err["type"] == "invalid_request_error"
    assert err["message"].startswith("messages.0.content.0.image.source.base64.media_type: ")


def test_gemini_inline_image_and_a_part_without_mime_type(server):
    g = genai.Client(
        api_key="test", http_options=types.HttpOptions(base_url=server.base_url, timeout=120_000)
    )
    parts = [types.Part.from_bytes(data=PNG, mime_type="image/png"), types.Part(text="What is it?")]
    r = g.models.generate_content(
        model="gemini-2.5-flash",
        contents=[types.Content(role="user", parts=parts)],
        config=types.GenerateContentConfig(max_output_tokens=2),
    )
    assert r.usage_metadata.prompt_token_count > 0
    with pytest.raises(genai_errors.ClientError) as e:
        g.models.generate_content(
            model="gemini-2.5-flash",
            contents=[{"role": "user", "parts": [{"inline_data": {"data": PNG}}]}],
            config=types.GenerateContentConfig(max_output_tokens=2),
        )
    assert e.value.code == 400 and "mimeType" in e.value.message


def test_bedrock_image_and_document_and_a_bad_format(server):
    br = boto3.client(
        "bedrock-runtime",
        endpoint_url=server.base_url,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=botocore.config.Config(retries={"max_attempts": 0}, read_timeout=120),
    )
    content = [
        {"image": {"format": "png", "source": {"bytes": PNG}}},
        {"document": {"format": "txt", "name": "notes", "source": {"bytes": NOTE.encode()}}},
        {"text": "What is the code?"},
    ]
    model = "anthropic.claude-sonnet-4-5-20250929-v1:0"
    r = br.converse(
        modelId=model,
        messages=[{"role": "user", "content": content}],
        inferenceConfig={"maxTokens": 2},
    )
    assert r["usage"]["inputTokens"] > 0
    content[0] = {"image": {"format": "bmp", "source": {"bytes": PNG}}}
    with pytest.raises(botocore.exceptions.ClientError) as e:
        br.converse(modelId=model, messages=[{"role": "user", "content": content}])
    assert e.value.response["Error"]["Code"] == "ValidationException"
    assert "messages.0.content.0.image.format" in e.value.response["Error"]["Message"]


def test_openai_bad_image_is_a_400_naming_the_field(server):
    oai = server.openai_client(max_retries=0, timeout=120)
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(
            model="gpt-5.4", max_tokens=1, messages=[{"role": "user", "content": [part]}]
        )
    assert e.value.body["param"] == "messages.0.content.0.image_url.url"
    assert "invalid base64" in e.value.body["message"]
