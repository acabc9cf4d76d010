"""Bedrock Runtime Converse request model and its conversion to turns.

Reference: https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html
and the botocore 1.44 ``bedrock-runtime`` service model (read 2026-12-03). Content blocks
read: ``text``, ``toolUse``, ``toolResult``, ``image``, ``document`` (rendered as
:mod:`.media` says: the local model reads text only), ``cachePoint``; a ``cachePoint`` (in
``system``, ``messages[].content`` or ``toolConfig.tools``) marks the end of the block
before it as a cache breakpoint (``ttl`` ``5m`` | ``1h``). Other blocks (guard content,
video, reasoning) are a 400.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from . import media
from .errors import APIError
from .rendering import Block, Turn, canonical_json


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class InferenceConfig(_Model):
    """``inferenceConfig``."""

    maxTokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=1.0)
    topP: float | None = Field(default=None, ge=0.0, le=1.0)
    stopSequences: list[str] | None = None


class Message(_Model):
    """``{"role": "user" | "assistant", "content": [blocks]}``."""

    role: Literal["user", "assistant"]
    content: list[dict]


class ConverseRequest(_Model):
    """The body of ``POST /model/{modelId}/converse`` (and ``/converse-stream``); the model
    id comes from the path. ``cacheSalt`` is this server's tenant key."""

    messages: list[Message] = Field(min_length=1)
    system: list[dict] | None = None
    inferenceConfig: InferenceConfig | None = None
    toolConfig: dict | None = None
    additionalModelRequestFields: dict | None = None
    cacheSalt: str | None = None
    model: str = ""
    stream: bool = False


def _cache_point(block: dict, where: str) -> tuple[str, str] | None:
    cp = block.get("cachePoint")
    if cp is None:
        return None
    ttl = cp.get("ttl") or "5m"
    if cp.get("type") != "default" or ttl not in ("5m", "1h"):
        raise APIError(
            400,
            f"{where}.cachePoint: expected {{'type': 'default', 'ttl'?: '5m' | '1h'}}",
        )
    return ttl, f"{where}.cachePoint"


def _mark(blocks: list[Block], point: tuple[str, str], where: str) -> None:
    if not blocks:
        raise APIError(400, f"{where}: a cachePoint must follow a content block")
    blocks[-1].cache_control = point


def _block_text(block: dict, where: str) -> str:
    if "text" in block:
        return str(block["text"])
    if "toolUse" in block:
        return canonical_json({"toolUse": block["toolUse"]})
    if "toolResult" in block:
        return canonical_json({"toolResult": block["toolResult"]})
    try:
        if "image" in block:
            return _image_text(block["image"], f"{where}.image")
        if "document" in block:
            return _document_text(block["document"], f"{where}.document")
    except media.MediaError as exc:
        raise APIError(400, str(exc)) from None
    kinds = ", ".join(sorted(block)) or "empty"
    raise APIError(
        400,
        f"{where}: a content block with {kinds} is not supported; this server's model reads "
        "text, toolUse, toolResult, image and document blocks",
    )


def _source(source: Any, where: str) -> tuple[bytes | None, str | None]:
    """``(bytes, None)`` or ``(None, S3 URI)`` of an image/document ``source``."""
    if isinstance(source, dict) and "bytes" in source:
        return media.decode_base64(source["bytes"], f"{where}.bytes"), None
    s3 = source.get("s3Location") if isinstance(source, dict) else None
    if isinstance(s3, dict) and isinstance(s3.get("uri"), str):
        return None, s3["uri"]
    raise media.MediaError(f"{where}: expected bytes or s3Location")


def _image_text(image: Any, where: str) -> str:
    fmt = image.get("format") if isinstance(image, dict) else None
    if fmt not in ("png", "jpeg", "gif", "webp"):
        raise media.MediaError(f"{where}.format: {fmt!r} is not one of png, jpeg, gif, webp")
    data, uri = _source(image.get("source"), f"{where}.source")
    return media.placeholder("image", f"image/{fmt}", data=data, ref=uri)


def _document_text(doc: Any, where: str) -> str:
    if not isinstance(doc, dict):
        raise media.MediaError(f"{where}: expected an object with name and source")
    fmt, name = doc.get("format"), doc.get("name")
    if not isinstance(name, str) or not name:
        raise media.MediaError(f"{where}.name: required")
    if fmt is not None and fmt not in media.BEDROCK_DOCUMENT_FORMATS:
        allowed = ", ".join(media.BEDROCK_DOCUMENT_FORMATS)
        raise media.MediaError(f"{where}.format: {fmt!r} is not one of {allowed}")
    source = doc.get("source")
    mt = media.BEDROCK_TEXT_FORMATS.get(fmt or "") or (
        f"application/{fmt}" if fmt else "application/octet-stream"
    )
    if isinstance(source, dict) and isinstance(source.get("text"), str):
        return media.text_document(source["text"], name=name, media_type=mt)
    if isinstance(source, dict) and isinstance(source.get("content"), list):
        texts = [c.get("text") if isinstance(c, dict) else None for c in source["content"]]
        if not all(isinstance(t, str) for t in texts):
            raise media.MediaError(f"{where}.source.content: expected text blocks")
        return media.text_document("\n".join(map(str, texts)), name=name, media_type=mt)
    data, uri = _source(source, f"{where}.source")
    if data is not None:
        return media.bytes_document(data, mt, name=name)
    return media.placeholder("document", mt, ref=uri, name=name)


def tool_specs(req: ConverseRequest) -> list[dict]:
    """The ``toolSpec`` entries of ``toolConfig.tools``."""
    return [t["toolSpec"] for t in (req.toolConfig or {}).get("tools", []) if "toolSpec" in t]


def to_turns(req: ConverseRequest) -> tuple[list[Block], list[Block], list[Turn]]:
    """(tool blocks, system blocks, turns); ``cachePoint`` blocks become breakpoints on
    the block before them. Raises :class:`APIError` 400 for an unsupported block."""
    tools: list[Block] = []
    for k, t in enumerate((req.toolConfig or {}).get("tools", [])):
        point = _cache_point(t, f"toolConfig.tools.{k}")
        if point is not None:
            _mark(tools, point, f"toolConfig.tools.{k}")
        elif "toolSpec" in t:
            tools.append(Block(canonical_json(t["toolSpec"]), "tools"))
        else:
            raise APIError(400, f"toolConfig.tools.{k}: expected toolSpec or cachePoint")
    system: list[Block] = []
    for k, b in enumerate(req.system or []):
        point = _cache_point(b, f"system.{k}")
        if point is not None:
            _mark(system, point, f"system.{k}")
        else:
            system.append(Block(_block_text(b, f"system.{k}"), "system"))
    turns = []
    for i, m in enumerate(req.messages):
        blocks: list[Block] = []
        for j, b in enumerate(m.content):
            where = f"messages.{i}.content.{j}"
            point = _cache_point(b, where)
            if point is not None:
                _mark(blocks, point, where)
            else:
                blocks.append(Block(_block_text(b, where), "messages", i))
        if not blocks:
            raise APIError(400, f"messages.{i}.content: must hold at least one content block")
        turns.append(Turn(m.role, blocks, i))
    return tools, system, turns


def forced_tools(req: ConverseRequest) -> list[tuple[str, dict]] | None:
    """``(name, input schema)`` of the tools one of which the output must call
    (``toolChoice: {"any": {}}`` or ``{"tool": {"name"}}``), or None. Raises
    :class:`APIError` 400 for a tool name ``tools`` does not declare."""
    choice = (req.toolConfig or {}).get("toolChoice") or {}
    specs = tool_specs(req)
    schema: dict[str, dict] = {
        str(s["name"]): (s.get("inputSchema") or {}).get("json") or {} for s in specs
    }
    if "any" in choice:
        return list(schema.items())
    if "tool" in choice:
        name = (choice["tool"] or {}).get("name")
        if name not in schema:
            raise APIError(
                400,
                f"toolConfig.toolChoice.tool.name: {name!r} is not one of the tools "
                f"({', '.join(map(repr, schema)) or 'none'})",
            )
        return [(name, schema[name])]
    return None


def stop_reason(o: Any, is_call: bool) -> str:
    """Converse ``stopReason`` of a finished sample."""
    if is_call:
        return "tool_use"
    if o.finish_reason == "length":
        return "max_tokens"
    if isinstance(getattr(o, "stop_reason", None), str):
        return "stop_sequence"
    return "end_turn"
