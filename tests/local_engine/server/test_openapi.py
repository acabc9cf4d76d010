"""The OpenAPI document: ``/openapi.json`` lists the generation routes with their request
schemas (required fields as the providers document them), ``/docs`` serves Swagger UI, both
without an API key, and ``promptcache serve --disable-docs`` (or ``create_app(...,
enable_docs=False)``) turns them off with the API's own 404.

Required fields, from the providers' API references (2026-12-01):
Chat Completions ``model``, ``messages``; legacy Completions ``model``, ``prompt``
(https://platform.openai.com/docs/api-reference); Messages ``model``, ``messages``,
``max_tokens``; count_tokens ``model``, ``messages`` (https://docs.claude.com/en/api/messages).
"""

from __future__ import annotations

import httpx
import pytest

ROUTES = {
    "/v1/chat/completions": ("ChatCompletionRequest", {"model", "messages"}),
    "/v1/completions": ("CompletionRequest", {"model", "prompt"}),
    "/v1/messages": ("MessagesRequest", {"model", "messages", "max_tokens"}),
    "/v1/messages/count_tokens": ("CountTokensRequest", {"model", "messages"}),
}


def check_document(doc: dict) -> None:
    schemas = doc["components"]["schemas"]
    for path, (name, required) in ROUTES.items():
        op = doc["paths"][path]["post"]
        body = op["requestBody"]
        assert body["required"] is True
        ref = body["content"]["application/json"]["schema"]["$ref"]
        assert ref == f"#/components/schemas/{name}"
        schema = schemas[name]
        assert set(schema["required"]) == required, path
        assert required <= set(schema["properties"])
    # nested models resolve: every $ref in the document names a listed schema
    refs: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc)
    assert refs and all(r.removeprefix("#/components/schemas/") in schemas for r in refs)
    # a message's role is one of the documented roles (the nested model is really there);
    # "system": mid-conversation system messages (Claude Opus 4.8,
    # https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages,
    # read 2026-12-03)
    msg = schemas["MessagesRequest"]["properties"]["messages"]["items"]["$ref"].rsplit("/", 1)[1]
    assert set(schemas[msg]["properties"]["role"]["enum"]) == {"user", "assistant", "system"}


def test_openapi_document_lists_the_routes_with_their_request_schemas(server_factory):
    server = server_factory()
    r = httpx.get(server.base_url + "/openapi.json", timeout=30)
    assert r.status_code == 200
    check_document(r.json())
    docs = httpx.get(server.base_url + "/docs", timeout=30)
    assert docs.status_code == 200 and "swagger-ui" in docs.text
    assert "/openapi.json" in docs.text


def test_disable_docs_flag_turns_the_document_off(server_factory):
    server = server_factory(extra_args=["--disable-docs"])
    for path in ("/openapi.json", "/docs", "/redoc"):
        r = httpx.get(server.base_url + path, timeout=30)
        assert r.status_code == 404, path
        assert r.json()["error"]["message"] == f"Unknown path {path!r}."
    assert httpx.get(server.base_url + "/health", timeout=30).status_code == 200


@pytest.mark.parametrize("enable_docs", [True, False])
def test_app_factory_argument_and_the_api_key(enable_docs):
    from starlette.testclient import TestClient

    from local_engine.server import ServerConfig, create_app

    # the document needs no engine: the app is not started (no lifespan), nothing is generated
    app = create_app(object(), ServerConfig(api_key="k-123"), enable_docs=enable_docs)
    client = TestClient(app)
    r = client.get("/openapi.json")
    if enable_docs:
        assert r.status_code == 200  # public, like /health: the schema holds no secret
        check_document(r.json())
    else:
        assert r.status_code == 401  # an unknown path behind the key, as before
        authed = client.get("/openapi.json", headers={"authorization": "Bearer k-123"})
        assert authed.status_code == 404
    # the generation routes still need the key
    assert client.post("/v1/chat/completions", json={}).status_code == 401
