"""The local engine's HTTP server: OpenAI- and Anthropic-compatible APIs over the engine.

``create_app(AsyncEngine(engine), ServerConfig(...))`` builds the FastAPI app;
``promptcache serve`` (:mod:`local_engine.server.cli`) runs it under uvicorn. Modules:
``protocol_*`` request models, ``rendering`` prompt + block boundaries, ``emulation``
cache-mode usage, ``diagnostics`` Anthropic cache diagnostics, ``routes_*`` the endpoints,
``pipeline`` the steps every generation route shares, ``openapi`` the OpenAPI document,
``metrics`` Prometheus series, ``errors`` provider-shaped errors.
"""

from .state import ServerConfig

__all__ = ["ServerConfig", "create_app"]


def create_app(engine, config=None, *, enable_docs=True):
    """See :func:`local_engine.server.app.create_app` (imported lazily)."""
    from .app import create_app as _create_app

    return _create_app(engine, config, enable_docs=enable_docs)
