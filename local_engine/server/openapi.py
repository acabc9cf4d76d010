"""The OpenAPI document (``/openapi.json``, browsed at ``/docs``) with the request models.

The generation routes read their bodies themselves (:func:`~.errors.parse_body`: errors in
the provider's shape, strict JSON types), so FastAPI cannot infer their request schemas from
the signature. Each route declares its pydantic model with :func:`request_body`; the
document lists the models under ``components/schemas`` (generated together by pydantic, so
two models of the same name in the OpenAI and Anthropic protocols get distinct names).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

#: the request models that routes declared with :func:`request_body`, in declaration order
REQUEST_MODELS: list[type[BaseModel]] = []

_REF_TEMPLATE = "#/components/schemas/{model}"


def _key(model: type[BaseModel]) -> str:
    return f"{model.__module__}.{model.__qualname__}"


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` for a route whose JSON body is ``model``: a required
    ``application/json`` request body whose schema is filled in by :func:`install`."""
    if model not in REQUEST_MODELS:
        REQUEST_MODELS.append(model)
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"x-model": _key(model)}}},
        }
    }


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` (cached after the first call) add the declared request models
    to the generated document and point each route's request body at its model."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        refs, top = models_json_schema(
            [(m, "validation") for m in REQUEST_MODELS], ref_template=_REF_TEMPLATE
        )
        by_key = {_key(m): refs[(m, "validation")] for m in REQUEST_MODELS}
        doc.setdefault("components", {}).setdefault("schemas", {}).update(top.get("$defs", {}))
        for item in doc.get("paths", {}).values():
            for op in item.values():
                content = op.get("requestBody", {}).get("content", {}).get("application/json")
                if content and "x-model" in content.get("schema", {}):
                    content["schema"] = by_key[content["schema"]["x-model"]]
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
