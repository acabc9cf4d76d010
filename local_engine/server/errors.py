"""HTTP errors in each provider's shape.

OpenAI (https://platform.openai.com/docs/guides/error-codes)::

    {"error": {"message": "...", "type": "invalid_request_error", "param": null, "code": null}}

Anthropic (https://platform.claude.com/docs/en/api/errors)::

    {"type": "error", "error": {"type": "invalid_request_error", "message": "..."}, "request_id": "req_..."}

Paths under ``/v1/messages`` answer in Anthropic's shape, everything else in OpenAI's.
"""

from __future__ import annotations

import json
from typing import Optional

from pydantic import ValidationError
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

    def __init__(self, status: int, message: str, *, param: Optional[str] = None,
                 code: Optional[str] = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


def is_anthropic_path(path: str) -> bool:
    return path.startswith("/v1/messages")


def error_body(path: str, status: int, message: str, *, param: Optional[str] = None,
               code: Optional[str] = None, request_id: Optional[str] = None) -> dict:
    """The JSON body of an error for a request to ``path``."""
    if is_anthropic_path(path):
        body = {"type": "error",
                "error": {"type": ANTHROPIC_ERROR_TYPES.get(status, "api_error"), "message": message}}
        if request_id:
            body["request_id"] = request_id
        return body
    return {"error": {"message": message, "type": OPENAI_ERROR_TYPES.get(status, "server_error"),
                      "param": param, "code": code}}


def error_response(request: Request, exc: APIError) -> JSONResponse:
    rid = getattr(request.state, "request_id", None)
    return JSONResponse(error_body(request.url.path, exc.status, exc.message, param=exc.param,
                                   code=exc.code, request_id=rid), status_code=exc.status)


def validation_message(exc: ValidationError) -> tuple[str, Optional[str]]:
    """A one-line message for a pydantic error, e.g. ``"messages.0.role: Input should be
    'user' or 'assistant'"``, and the first error's field path."""
    parts = []
    first_param = None
    for err in exc.errors(include_url=False)[:3]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if not str(x).startswith(("function-", "list[", "str", "union")))
        if first_param is None and loc:
            first_param = loc
        msg = err.get("msg", "invalid value")
        parts.append(f"{loc}: {msg}" if loc else msg)
    more = len(exc.errors()) - 3
    if more > 0:
        parts.append(f"({more} more)")
    return "; ".join(parts), first_param


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
        message, param = validation_message(exc)
        raise APIError(400, message, param=param) from None
