"""Gemini API routes, under both ``/v1beta`` and ``/v1``: ``models/{model}:generateContent``,
``:streamGenerateContent`` (``?alt=sse``: server-sent events, one ``GenerateContentResponse``
per event), ``:countTokens``, and ``cachedContents`` (create, get, list, patch, delete).

``usageMetadata`` (https://ai.google.dev/api/generate-content#UsageMetadata, read
2026-12-03): ``promptTokenCount`` is the whole prompt, cached part included;
``cachedContentTokenCount`` the cached part (left out when 0, as the API omits zero fields);
``candidatesTokenCount``, ``totalTokenCount``, and per-modality ``promptTokensDetails`` /
``cacheTokensDetails`` / ``candidatesTokensDetails``. Under the Gemini rules a request with
``cachedContent`` reads the whole cached content; one without reads the longest implicit
prefix (:mod:`.emulation_rules`).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from .emulation import CACHE_TIERS_FIELD, CacheRequest, request_mode
from .emulation_rules import gemini_min_tokens
from .errors import APIError, parse_body
from .generation import make_sampling_params, note, request_salt, text_delta
from .pipeline import Endpoint, Generation, run_endpoint
from .protocol_gemini import (
    CachedContentRequest,
    CountTokensRequest,
    GenerateContentRequest,
    PromptFields,
    _lower_types,
    forced_functions,
    json_schema_types,
    model_id,
    to_turns,
)
from .rendering import RenderedPrompt, RenderError, render_chat
from .state import ServerState
from .structured_output import ToolSpec, forced_tool_call, parse_tool_call, structured

router = APIRouter()
VERSIONS = ("v1beta", "v1")
FINISH = {"length": "MAX_TOKENS", "stop": "STOP", "abort": "STOP", None: "STOP"}


def _render(st: ServerState, fields: PromptFields) -> RenderedPrompt:
    tools, system, turns = to_turns(fields)
    try:
        return render_chat(st.tokenizer, tools=tools, system=system, turns=turns)
    except RenderError as exc:
        raise APIError(400, str(exc)) from None


def _merged(req: GenerateContentRequest, cache: Any) -> PromptFields:
    """The prompt: the cached content's fields, then the request's contents."""
    if cache is None:
        return req
    cached = PromptFields.model_validate(cache.fields)
    return PromptFields(
        contents=[*cached.contents, *req.contents],
        systemInstruction=cached.systemInstruction,
        tools=cached.tools,
        toolConfig=cached.toolConfig,
    )


def usage_metadata(prompt: int, cached: int, output: int, tiers: dict | None = None) -> dict:
    """``usageMetadata`` for ``prompt`` tokens (``cached`` of them from a cache) and
    ``output`` candidate tokens."""
    body: dict[str, Any] = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
        "candidatesTokensDetails": [{"modality": "TEXT", "tokenCount": output}],
    }
    if cached:
        body["cachedContentTokenCount"] = cached
        body["cacheTokensDetails"] = [{"modality": "TEXT", "tokenCount": cached}]
    if tiers is not None:
        body[CACHE_TIERS_FIELD] = dict(tiers)
    return body


class GenerateContent(Endpoint):
    """``models/{model}:generateContent`` and ``:streamGenerateContent``."""

    body_model = GenerateContentRequest
    api = "gemini"
    id_prefix = "gen-"

    def attach(self, request: Request, req: GenerateContentRequest) -> None:
        st: ServerState = request.app.state.server
        req.model = model_id(request.path_params["model"])
        req.stream = request.path_params["action"] == "streamGenerateContent"
        req._cache = None
        if req.cachedContent:
            cache = st.cached_contents.get(req.cachedContent)
            if cache.model != req.model:
                raise APIError(
                    400,
                    f"Model {req.model!r} does not match the model of {cache.name} "
                    f"({cache.model!r}).",
                )
            if req.systemInstruction is not None or req.tools or req.toolConfig:
                raise APIError(
                    400,
                    "CachedContent can not be used with GenerateContent request setting "
                    "system_instruction, tools or tool_config. Move them into the cached "
                    "content.",
                )
            req._cache = cache

    def check(self, req: GenerateContentRequest) -> None:
        if not req.contents:
            raise APIError(400, "contents is not specified")

    def render(self, st: ServerState, req: GenerateContentRequest) -> list[RenderedPrompt]:
        return [_render(st, _merged(req, req._cache))]

    def cache_request(
        self, st: ServerState, request: Request, req: GenerateContentRequest, r: RenderedPrompt
    ) -> CacheRequest:
        return CacheRequest(
            model=req.model,
            rendered=r,
            salt=request_salt(request, req.cacheSalt),
            implicit_end=r.num_tokens,
            mode=request_mode(request.headers),
            provider="gemini",
            explicit_cached_tokens=req._cache.tokens if req._cache is not None else None,
        )

    def sampling_params(self, req: GenerateContentRequest) -> Any:
        cfg = req.generationConfig
        forced = forced_functions(_merged(req, req._cache))
        spec = None
        if forced is not None:
            spec = forced_tool_call([ToolSpec(n, p) for n, p in forced], param="toolConfig")
        elif cfg is not None and cfg.responseMimeType == "application/json":
            if cfg.responseJsonSchema is not None:
                spec = structured(
                    json_schema_types(cfg.responseJsonSchema), param="responseJsonSchema"
                )
            elif cfg.responseSchema is not None:
                spec = structured(_lower_types(cfg.responseSchema), param="responseSchema")
            else:
                spec = structured({}, param="responseMimeType")
        elif cfg is not None and (cfg.responseSchema or cfg.responseJsonSchema):
            raise APIError(
                400, "responseSchema needs responseMimeType 'application/json' (generationConfig)"
            )
        return make_sampling_params(
            temperature=cfg.temperature if cfg else None,
            top_p=cfg.topP if cfg else None,
            top_k=cfg.topK if cfg else None,
            seed=cfg.seed if cfg else None,
            max_tokens=cfg.maxOutputTokens if cfg else None,
            stop=cfg.stopSequences if cfg else None,
            n=(cfg.candidateCount or 1) if cfg else 1,
            structured=spec,
        )

    def _parts(self, gen: Generation, o: Any) -> list[dict]:
        if forced_functions(_merged(gen.req, gen.req._cache)) is not None:
            call = parse_tool_call(o.text)
            if call is not None:
                return [{"functionCall": {"name": call[0], "args": call[1]}}]
        return [{"text": o.text}]

    def _usage(self, gen: Generation, outputs: int) -> dict:
        usage = gen.record_usage(outputs)
        return usage_metadata(usage.prompt_tokens, usage.cache_read_tokens, outputs, gen.tiers)

    def response(self, gen: Generation, finals: list[Any]) -> Response:
        final = finals[0]
        candidates = [
            {
                "content": {"role": "model", "parts": self._parts(gen, o)},
                "finishReason": FINISH.get(o.finish_reason, "STOP"),
                "index": o.index,
            }
            for o in final.outputs
        ]
        note(gen.request, finish=",".join(str(o.finish_reason) for o in final.outputs))
        outputs = sum(len(o.token_ids) for o in final.outputs)
        return JSONResponse(
            {
                "candidates": candidates,
                "usageMetadata": self._usage(gen, outputs),
                "modelVersion": gen.req.model,
                "responseId": gen.rid,
            }
        )

    async def events(self, gen: Generation) -> AsyncGenerator[str, None]:
        agen, first = gen.started[0]
        forced = forced_functions(_merged(gen.req, gen.req._cache)) is not None
        base = {"modelVersion": gen.req.model, "responseId": gen.rid}
        sent = ""
        out = first
        while True:
            o = out.outputs[0]
            delta = "" if forced else text_delta(sent, o.text)
            if delta and not out.finished:
                sent += delta
                cand = {"content": {"role": "model", "parts": [{"text": delta}]}, "index": 0}
                yield _sse({"candidates": [cand], **base})
            if out.finished:
                break
            out = await agen.__anext__()
            gen.timing.observe(out)
        gen.finished = True
        o = out.outputs[0]
        parts = self._parts(gen, o) if forced else [{"text": text_delta(sent, o.text)}]
        note(gen.request, finish=str(o.finish_reason))
        cand = {
            "content": {"role": "model", "parts": parts},
            "finishReason": FINISH.get(o.finish_reason, "STOP"),
            "index": 0,
        }
        usage = self._usage(gen, len(o.token_ids))
        yield _sse({"candidates": [cand], "usageMetadata": usage, **base})


def _sse(obj: dict) -> str:
    return "data: " + json.dumps(obj, ensure_ascii=False) + "\r\n\r\n"


GENERATE = GenerateContent()


async def model_action(request: Request, model: str, action: str) -> Response:
    """``models/{model}:{action}`` for generateContent, streamGenerateContent, countTokens."""
    if action in ("generateContent", "streamGenerateContent"):
        return await run_endpoint(GENERATE, request)
    if action == "countTokens":
        return await count_tokens(request, model)
    raise APIError(404, f"Unknown method models/{model}:{action}.")


async def count_tokens(request: Request, model: str) -> Response:
    """``{"totalTokens", "promptTokensDetails"}`` (and ``cachedContentTokenCount`` when the
    counted request uses a cached content)."""
    st: ServerState = request.app.state.server
    req = parse_body(CountTokensRequest, await request.body())
    cached = 0
    if req.generateContentRequest is not None:
        g = req.generateContentRequest
        cache = st.cached_contents.get(g.cachedContent) if g.cachedContent else None
        fields = _merged(g, cache)
        cached = cache.tokens if cache is not None else 0
    else:
        fields = PromptFields(contents=req.contents or [])
    n = _render(st, fields).num_tokens
    body: dict[str, Any] = {
        "totalTokens": n,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": n}],
    }
    if cached:
        body["cachedContentTokenCount"] = cached
    return JSONResponse(body)


def _cache_tokens(st: ServerState, fields: PromptFields) -> int:
    """Tokens of a cached content: its prompt rendered alone, to the end of its last block."""
    r = _render(st, fields)
    return r.block_ends[-1] if r.block_ends else 0


async def create_cache(request: Request) -> Response:
    """``POST cachedContents``: 400 below the model's minimum (Gemini's rule)."""
    st: ServerState = request.app.state.server
    req = parse_body(CachedContentRequest, await request.body())
    if not req.model:
        raise APIError(400, "model is required (models/<name>)")
    model = model_id(req.model)
    fields = PromptFields(
        contents=req.contents,
        systemInstruction=req.systemInstruction,
        tools=req.tools,
        toolConfig=req.toolConfig,
    )
    tokens = _cache_tokens(st, fields)
    minimum = gemini_min_tokens(model)
    if tokens < minimum:
        raise APIError(
            400,
            f"Cached content is too small. total_token_count={tokens}, "
            f"min_total_token_count={minimum}",
        )
    item = st.cached_contents.create(
        model,
        fields.model_dump(exclude_none=True),
        tokens,
        ttl=req.ttl,
        expire_time=req.expireTime,
        display_name=req.displayName,
    )
    return JSONResponse(st.cached_contents.body(item))


def _register() -> None:
    for v in VERSIONS:

        async def action(request: Request, model: str, action: str) -> Response:
            return await model_action(request, model, action)

        router.add_api_route(
            f"/{v}/models/{{model}}:{{action}}", action, methods=["POST"], include_in_schema=False
        )

        async def create(request: Request) -> Response:
            return await create_cache(request)

        async def list_caches(request: Request) -> Response:
            st: ServerState = request.app.state.server
            items = [st.cached_contents.body(i) for i in st.cached_contents.list()]
            return JSONResponse({"cachedContents": items} if items else {})

        async def get_cache(request: Request, cid: str) -> Response:
            st: ServerState = request.app.state.server
            return JSONResponse(st.cached_contents.body(st.cached_contents.get(cid)))

        async def patch_cache(request: Request, cid: str) -> Response:
            st: ServerState = request.app.state.server
            req = parse_body(CachedContentRequest, await request.body())
            if req.contents or req.systemInstruction or req.tools or req.model:
                raise APIError(400, "Only ttl and expireTime of a cached content can be updated.")
            item = st.cached_contents.update(cid, req.ttl, req.expireTime)
            return JSONResponse(st.cached_contents.body(item))

        async def delete_cache(request: Request, cid: str) -> Response:
            st: ServerState = request.app.state.server
            st.cached_contents.delete(cid)
            return JSONResponse({})

        router.add_api_route(f"/{v}/cachedContents", create, methods=["POST"])
        router.add_api_route(f"/{v}/cachedContents", list_caches, methods=["GET"])
        router.add_api_route(f"/{v}/cachedContents/{{cid}}", get_cache, methods=["GET"])
        router.add_api_route(f"/{v}/cachedContents/{{cid}}", patch_cache, methods=["PATCH"])
        router.add_api_route(f"/{v}/cachedContents/{{cid}}", delete_cache, methods=["DELETE"])


_register()
