"""Gemini API request models (``generateContent``, ``countTokens``, ``cachedContents``) and
their conversion to turns.

Reference: https://ai.google.dev/api/generate-content and https://ai.google.dev/api/caching
(read 2026-12-03). Field names are the REST API's camelCase (what the official
``google-genai`` client sends); unknown fields (``safetySettings`` ...) are ignored. Parts
read: ``text``, ``functionCall``, ``functionResponse``, ``inlineData`` and ``fileData`` (images
and documents, rendered as :mod:`.media` says: the local model reads text only). Tools: ``functionDeclarations`` with ``parameters``
(Gemini's OpenAPI subset) or ``parametersJsonSchema``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from . import media
from .errors import APIError
from .rendering import Block, Turn, canonical_json


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class Content(_Model):
    """``{"role": "user" | "model", "parts": [...]}``."""

    role: str | None = None
    parts: list[dict] = Field(default_factory=list)


class GenerationConfig(_Model):
    """``generationConfig``: sampling and output format."""

    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    topP: float | None = Field(default=None, gt=0.0, le=1.0)
    topK: int | None = Field(default=None, ge=0)
    maxOutputTokens: int | None = Field(default=None, ge=1)
    stopSequences: list[str] | None = None
    candidateCount: int | None = Field(default=None, ge=1, le=8)
    seed: int | None = None
    responseMimeType: str | None = None
    responseSchema: dict | None = None
    responseJsonSchema: dict | None = None


class PromptFields(_Model):
    """The prompt of a request: what ``countTokens`` counts and a cached content holds."""

    contents: list[Content] = Field(default_factory=list)
    systemInstruction: Content | None = None
    tools: list[dict] | None = None
    toolConfig: dict | None = None


class GenerateContentRequest(PromptFields):
    """The body of ``models/{model}:generateContent`` / ``:streamGenerateContent``, plus
    this server's ``cacheSalt``. ``model`` comes from the path."""

    generationConfig: GenerationConfig | None = None
    cachedContent: str | None = None
    cacheSalt: str | None = None
    model: str = ""
    stream: bool = False
    #: the cached content named by ``cachedContent`` (set by the route)
    _cache: Any = PrivateAttr(default=None)


class CountTokensRequest(_Model):
    """``models/{model}:countTokens``: ``contents``, or a whole ``generateContentRequest``."""

    contents: list[Content] | None = None
    generateContentRequest: GenerateContentRequest | None = None


class CachedContentRequest(PromptFields):
    """``POST cachedContents`` / ``PATCH cachedContents/{id}``: the prompt to cache, its
    ``model`` (``models/...``), and ``ttl`` (``"300s"``) or ``expireTime`` (RFC 3339)."""

    model: str | None = None
    ttl: str | None = None
    expireTime: str | None = None
    displayName: str | None = None


def model_id(name: str) -> str:
    """``models/gemini-2.5-flash`` -> ``gemini-2.5-flash``."""
    return name[len("models/") :] if name.startswith("models/") else name


def function_declarations(tools: list[dict] | None) -> list[dict]:
    """Every ``functionDeclarations`` entry of ``tools`` (camelCase or snake_case), in
    order. Raises :class:`APIError` 400 for a hosted tool (search, code execution)."""
    out = []
    for i, t in enumerate(tools or []):
        decls = t.get("functionDeclarations", t.get("function_declarations"))
        if decls is None:
            kinds = ", ".join(sorted(t)) or "an empty tool"
            raise APIError(
                400,
                f"tools[{i}]: {kinds} is not supported by this server (functionDeclarations is)",
            )
        out.extend(decls)
    return out


#: Gemini's ``Type`` enum (https://ai.google.dev/api/caching#Type, read 2026-12-03), the
#: values @google/genai's ``Type`` sends (``Type.OBJECT === "OBJECT"``)
GEMINI_TYPES = frozenset({"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT", "NULL"})
#: JSON Schema keywords whose values are data, not subschemas (left as sent)
_VALUE_KEYWORDS = frozenset({"enum", "const", "default", "examples", "example"})


def _lower_type(value: Any) -> Any:
    if isinstance(value, str) and value in GEMINI_TYPES:
        return value.lower()
    if isinstance(value, list):
        return [_lower_type(v) for v in value]
    return value


def json_schema_types(node: Any) -> Any:
    """A ``responseJsonSchema`` (JSON Schema) with Gemini's upper-case ``type`` names
    (``"OBJECT"``, ``["STRING", "NULL"]``) lowered to JSON Schema's, in every subschema;
    everything else is kept as sent. Gemini CLI 0.61.0 sends such schemas (its routing
    classifier builds them with @google/genai's ``Type`` enum and passes them as
    ``generationConfig.responseJsonSchema``: ``BaseLlmClient.generateJson`` in its bundle),
    and the hosted API serves that CLI, so the names are accepted there."""
    if isinstance(node, list):
        return [json_schema_types(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k == "type":
            out[k] = _lower_type(v)
        elif k in _VALUE_KEYWORDS:
            out[k] = v
        elif k in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"):
            out[k] = (
                {name: json_schema_types(s) for name, s in v.items()} if isinstance(v, dict) else v
            )
        else:
            out[k] = json_schema_types(v)
    return out


def declaration_schema(decl: dict) -> dict:
    """The JSON schema of a function's arguments (``parametersJsonSchema``, else
    ``parameters``; Gemini's upper-case type names lowered in both)."""
    schema = decl.get("parametersJsonSchema", decl.get("parameters_json_schema"))
    if schema is not None:
        schema = json_schema_types(schema)
    else:
        schema = _lower_types(decl.get("parameters") or {"type": "object"})
    return schema


def _lower_types(node: Any) -> Any:
    """Gemini ``Schema`` (``"type": "OBJECT"``, ``nullable``) as JSON Schema; objects get
    ``additionalProperties: false`` (the ``Schema`` type has no such field: the hosted API
    returns the declared properties only, https://ai.google.dev/api/caching#Schema, read
    2026-12-03)."""
    if isinstance(node, list):
        return [_lower_types(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for k, v in node.items():
        if k == "type" and isinstance(v, str):
            out[k] = v.lower()
        elif k in ("properties",) and isinstance(v, dict):
            out[k] = {name: _lower_types(s) for name, s in v.items()}
        elif k in ("items", "anyOf"):
            out[k] = _lower_types(v)
        elif k in ("propertyOrdering", "nullable"):
            continue
        else:
            out[k] = v
    if node.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if out.get("type") == "object":
        # Gemini's Schema has no additionalProperties: only declared properties come back
        out.setdefault("additionalProperties", False)
    return out


def _part_text(part: dict, where: str) -> str:
    if "text" in part:
        return str(part["text"])
    call = part.get("functionCall", part.get("function_call"))
    if call is not None:
        return canonical_json({"functionCall": call})
    resp = part.get("functionResponse", part.get("function_response"))
    if resp is not None:
        return canonical_json({"functionResponse": resp})
    blob = part.get("inlineData", part.get("inline_data"))
    if blob is not None:
        return _inline_data_text(blob, f"{where}.inlineData")
    ref = part.get("fileData", part.get("file_data"))
    if ref is not None:
        mt = ref.get("mimeType", ref.get("mime_type")) if isinstance(ref, dict) else None
        uri = ref.get("fileUri", ref.get("file_uri")) if isinstance(ref, dict) else None
        if not isinstance(uri, str) or not uri:
            raise APIError(400, f"{where}.fileData.fileUri: required")
        kind = "image" if str(mt or "").startswith("image/") else "document"
        return media.placeholder(kind, mt, ref=uri)
    kinds = ", ".join(sorted(part)) or "empty"
    raise APIError(
        400,
        f"{where}: a part with {kinds} is not supported; this server's model reads text, "
        "inlineData, fileData, functionCall and functionResponse parts",
    )


def _inline_data_text(blob: Any, where: str) -> str:
    """An ``inlineData`` blob (``mimeType``, base64 ``data``) as text (:mod:`.media`):
    ``text/*`` as its text, other types as a placeholder."""
    if not isinstance(blob, dict):
        raise APIError(400, f"{where}: expected an object with mimeType and data")
    mt = blob.get("mimeType", blob.get("mime_type"))
    if not isinstance(mt, str) or "/" not in mt:
        raise APIError(400, f"{where}.mimeType: required (a media type such as image/png)")
    try:
        data = media.decode_base64(blob.get("data"), f"{where}.data", proto3=True)
    except media.MediaError as exc:
        raise APIError(400, str(exc)) from None
    if mt.startswith("image/"):
        return media.placeholder("image", mt, data=data)
    return media.bytes_document(data, mt)


def to_turns(
    fields: PromptFields, *, where: str = "contents", tools_where: str = "tools"
) -> tuple[list[Block], list[Block], list[Turn]]:
    """(tool blocks, system blocks, turns) of a Gemini prompt: one block per function
    declaration and per part. Raises :class:`APIError` 400 for an unsupported part, role or
    tool."""
    tools = [
        Block(canonical_json({"functionDeclaration": d}), "tools")
        for d in function_declarations(fields.tools)
    ]
    system = []
    if fields.systemInstruction is not None:
        system = [
            Block(_part_text(p, f"systemInstruction.parts[{j}]"), "system")
            for j, p in enumerate(fields.systemInstruction.parts)
        ]
    turns = []
    for i, c in enumerate(fields.contents):
        role = {"user": "user", "model": "assistant", "function": "user", None: "user"}.get(c.role)
        if role is None:
            raise APIError(400, f"{where}[{i}].role: must be 'user' or 'model', got {c.role!r}")
        if not c.parts:
            raise APIError(400, f"{where}[{i}].parts: must not be empty")
        blocks = [
            Block(_part_text(p, f"{where}[{i}].parts[{j}]"), "messages", i)
            for j, p in enumerate(c.parts)
        ]
        turns.append(Turn(role, blocks, i))
    return tools, system, turns


def forced_functions(req: PromptFields) -> list[tuple[str, dict]] | None:
    """``(name, schema)`` of the functions one of which the output must call
    (``functionCallingConfig.mode: "ANY"``, restricted to ``allowedFunctionNames``), or
    None. Raises :class:`APIError` 400 for a name no declaration has."""
    cfg = (req.toolConfig or {}).get("functionCallingConfig") or {}
    if str(cfg.get("mode", "")).upper() != "ANY":
        return None
    decls = function_declarations(req.tools)
    names = cfg.get("allowedFunctionNames")
    by_name = {d.get("name"): d for d in decls}
    if names:
        missing = [n for n in names if n not in by_name]
        if missing:
            raise APIError(
                400,
                f"toolConfig.functionCallingConfig.allowedFunctionNames: {missing[0]!r} is not "
                f"a declared function (declared: {', '.join(map(repr, by_name)) or 'none'})",
            )
        decls = [by_name[n] for n in names]
    if not decls:
        raise APIError(
            400,
            "toolConfig.functionCallingConfig.mode ANY needs at least one function declaration",
        )
    return [(d["name"], declaration_schema(d)) for d in decls]
