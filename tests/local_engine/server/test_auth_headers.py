"""The API key as each provider's client sends it: OpenAI's bearer token, Anthropic's
``x-api-key``, Gemini's ``x-goog-api-key``; Bedrock's SigV4 ``Authorization`` is accepted on
Bedrock paths only (signatures are not checked)."""

from __future__ import annotations

from local_engine.server.app import _auth_failure

KEY = "k-123"
SIGV4 = "AWS4-HMAC-SHA256 Credential=x/20261203/us-east-1/bedrock/aws4_request, Signature=ab"


def test_each_providers_key_header_is_accepted():
    assert _auth_failure("/v1/chat/completions", {"authorization": f"Bearer {KEY}"}, KEY) is None
    assert _auth_failure("/v1/messages", {"x-api-key": KEY}, KEY) is None
    assert _auth_failure("/v1beta/models/m:generateContent", {"x-goog-api-key": KEY}, KEY) is None
    assert _auth_failure("/model/m/converse", {"authorization": SIGV4}, KEY) is None


def test_wrong_or_missing_keys_are_refused():
    assert (
        _auth_failure("/v1/messages", {"x-api-key": "nope"}, KEY) == "Incorrect API key provided."
    )
    assert _auth_failure("/v1/messages", {}, KEY).startswith("Missing API key")
    # a SigV4 header opens only the Bedrock paths
    assert _auth_failure("/v1/chat/completions", {"authorization": SIGV4}, KEY) is not None
