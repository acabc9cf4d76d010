"""HTTP errors in each provider's shape.

OpenAI (https://platform.openai.com/docs/guides/error-codes)::

    {"error": {"message": "...", "type": "invalid_request_error", "param": null, "code": null}}

Anthropic (https://platform.claude.com/docs/en/api/errors)::

    {"type": "error", "error": {"type": "invalid_request_error", "message": "..."}, "request_id": "req_..."}

Paths under ``/v1/messages`` answer in Anthropic's shape, everything else in OpenAI's.
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Mapping
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse

ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    503: "server_error",
}


class APIError(Exception):
    """An error answered with ``status`` and ``message`` in the provider's shape.

    ``param``: the offending request field's path (OpenAI reports it); ``code``: OpenAI's
    machine code (``invalid_api_key``, ``context_length_exceeded`` ...)."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "INVALID_ARGUMENT",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}
#: Bedrock's error types (``x-amzn-ErrorType``), by status
#: (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html#API_runtime_Converse_Errors,
#: read 2026-12-03)
BEDROCK_ERROR_TYPES = {
    400: "ValidationException",
    401: "AccessDeniedException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    413: "ValidationException",
    424: "ModelErrorException",
    429: "ThrottlingException",
    500: "InternalServerException",
    503: "ServiceUnavailableException",
}


def is_gemini_path(path: str) -> bool:
    """Whether ``path`` is a Gemini endpoint (``/v1beta/...``, ``/v1/models/x:method``,
    ``/v1/cachedContents``): its errors take Google's shape."""
    if path.startswith("/v1beta/"):
        return True
    return path.startswith("/v1/cachedContents") or (path.startswith("/v1/models/") and ":" in path)


def is_bedrock_path(path: str) -> bool:
    """Whether ``path`` is a Bedrock Runtime endpoint (``/model/{modelId}/...``)."""
    return path.startswith("/model/")


def is_anthropic_path(path: str) -> bool:
    """Whether ``path`` is an Anthropic endpoint (its errors take Anthropic's shape)."""
    return path.startswith("/v1/messages")


def error_body(
    path: str,
    status: int,
    message: str,
    *,
    param: str | None = None,
    code: str | None = None,
    request_id: str | None = None,
) -> dict:
    """The JSON body of an error for a request to ``path``: Anthropic's, Google's
    (``{"error": {"code", "message", "status"}}``), Bedrock's (``{"message"}``, the type in
    the ``x-amzn-ErrorType`` header: :func:`error_headers`) or OpenAI's."""
    if is_gemini_path(path):
        return {
            "error": {
                "code": status,
                "message": message,
                "status": GEMINI_STATUS.get(status, "UNKNOWN"),
            }
        }
    if is_bedrock_path(path):
        return {"message": message}
    if is_anthropic_path(path):
        body = {
            "type": "error",
            "error": {"type": ANTHROPIC_ERROR_TYPES.get(status, "api_error"), "message": message},
        }
        if request_id:
            body["request_id"] = request_id
        return body
    return {
        "error": {
            "message": message,
            "type": OPENAI_ERROR_TYPES.get(status, "server_error"),
            "param": param,
            "code": code,
        }
    }


def error_headers(path: str, status: int) -> dict[str, str] | None:
    """Bedrock's ``x-amzn-ErrorType`` header (botocore reads the error code from it)."""
    if is_bedrock_path(path):
        return {"x-amzn-ErrorType": BEDROCK_ERROR_TYPES.get(status, "InternalServerException")}
    return None


def error_response(request: Request, exc: APIError) -> JSONResponse:
    """The JSON error response for ``exc`` in the shape of the API that ``request`` called."""
    rid = getattr(request.state, "request_id", None)
    return JSONResponse(
        error_body(
            request.url.path,
            exc.status,
            exc.message,
            param=exc.param,
            code=exc.code,
            request_id=rid,
        ),
        status_code=exc.status,
        headers=error_headers(request.url.path, exc.status),
    )


def _walk(tp: Any, loc: tuple) -> list | None:
    """The structural part of ``loc`` under the type ``tp``: field names, list indexes and
    dict keys, without the union-member tags pydantic inserts (``'str'``,
    ``'list[ContentPart]'``, ``'function-after[...]'`` ...). None when ``loc`` does not
    fit ``tp``."""
    if not loc:
        return []
    origin = get_origin(tp)
    if origin is Annotated:
        return _walk(get_args(tp)[0], loc)
    if origin is Union or origin is types.UnionType:
        members = [a for a in get_args(tp) if a is not type(None)]
        if len(members) == 1:  # Optional[X]: no tag
            return _walk(members[0], loc)
        for member in members:  # loc[0] is the member's tag; the rest fits that member
            rest = _walk(member, loc[1:])
            if rest is not None:
                return rest
        return None
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        name = loc[0]
        field = tp.model_fields.get(name) if isinstance(name, str) else None
        if field is None:
            field = next((f for f in tp.model_fields.values() if f.alias == name), None)
        if field is None:
            return None
        rest = _walk(field.annotation, loc[1:])
        return None if rest is None else [name, *rest]
    if origin in (list, tuple, set, frozenset):
        if not isinstance(loc[0], int):
            return None
        args = get_args(tp)
        rest = _walk(args[0] if args else Any, loc[1:])
        return None if rest is None else [loc[0], *rest]
    if origin is dict or tp is dict:
        args = get_args(tp)
        rest = _walk(args[1] if len(args) == 2 else Any, loc[1:])
        return None if rest is None else [loc[0], *rest]
    return None  # a scalar, Literal or Any: nothing below it


_TAG = re.compile(r"^(str|int|float|bool|bytes|none|any)$|[\[\]-]|^[A-Z]")


def field_path(model: type | None, loc: tuple) -> str:
    """A pydantic error location as the request field path, e.g. ``('messages', 0,
    'content', 'list[ContentPart]', 0, 'type')`` -> ``"messages.0.content.0.type"``.

    The location is walked against ``model``'s field types, so a field whose name looks like
    a type tag (``stream``, ``stream_options``) is kept; without a model, or when the
    location does not fit, parts that look like tags are dropped."""
    kept = _walk(model, tuple(loc)) if model is not None else None
    if kept is None:
        kept = [x for x in loc if isinstance(x, int) or not _TAG.search(str(x))]
    return ".".join(str(x) for x in kept)


def _input_note(err: Mapping[str, Any]) -> str:
    """`` (got "yes")`` for a scalar input (arrays and objects are not repeated back)."""
    if err.get("type") == "missing" or "input" not in err or isinstance(err["input"], (dict, list)):
        return ""
    text = json.dumps(err["input"], ensure_ascii=False, default=str)
    return f" (got {text if len(text) <= 40 else text[:37] + '...'})"


def validation_message(exc: ValidationError, model: type | None = None) -> tuple[str, str | None]:
    """A one-line message for a pydantic error and the offending field's path.

    E.g. ``stream: Input should be a valid boolean (got "yes")`` and ``"stream"``. Each
    location is mapped to the request's field path (see :func:`field_path`); the path
    (``param``) is the most specific one: when a union member fails deeper (``messages.0.
    content.0.type`` under ``messages.0.content``), that deeper path. Errors at the same
    path are joined with "or"; at most three paths are listed."""
    by_path: dict[str, list[str]] = {}
    notes: dict[str, str] = {}
    for err in exc.errors(include_url=False):
        path = field_path(model, tuple(err.get("loc", ())))
        msg = err.get("msg", "invalid value")
        if err.get("type") == "value_error" and "error" in (err.get("ctx") or {}):
            msg = str(err["ctx"]["error"])  # our validators' own words, without "Value error, "
        msgs = by_path.setdefault(path, [])
        notes.setdefault(path, _input_note(err))
        if msg not in msgs:
            msgs.append(msg)
    paths = list(by_path)
    first = paths[0] if paths else ""
    deeper = [p for p in paths if first and p.startswith(first + ".")]
    if deeper:
        first = max(deeper, key=lambda p: p.count("."))
        paths.remove(first)
        paths.insert(0, first)
    parts = [(f"{p}: " if p else "") + " or ".join(by_path[p]) + notes[p] for p in paths[:3]]
    if len(paths) > 3:
        parts.append(f"({len(paths) - 3} more)")
    return "; ".join(parts), (first or None)


def parse_body(model, raw: bytes):
    """Validate a raw JSON body against a pydantic model; raise :class:`APIError` 400 with
    the field path on malformed JSON, a non-object body, or a wrong type/value."""
    try:
        data = json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise APIError(400, f"The request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise APIError(400, "The request body must be a JSON object.")
    try:
        # strict JSON validation: "5" is not an integer, as in the hosted APIs
        return model.model_validate_json(raw, strict=True)
    except ValidationError as exc:
        message, param = validation_message(exc, model)
        raise APIError(400, message, param=param) from None
