"""``promptcache proxy``: a local reverse proxy that records any client's traffic in the ledger.

Owns the upstream table (:mod:`~.upstreams`: ``anthropic``, ``openai``, ``gemini`` or a URL, and
the base-URL variables each agent CLI reads), the hop-by-hop header rules (:mod:`~.headers`), the
ASGI app that passes requests and responses through byte for byte and streams SSE chunk by chunk
(:mod:`~.app`), the glue that feeds each exchange to the same recorder ``promptcache.wrap()`` uses
and writes the ledger off the request path (:mod:`~.recording`, lineages by session header or by
the longest common digest run in :mod:`~.lineage`), the uvicorn runner and ``proxy -- CMD``
wrapping (:mod:`~.server`) and the ``promptcache proxy`` command (:mod:`~.cli`).

A floor of its own just below ``promptcache.cli``: may import ``promptcache.integrations`` (the
recorder), ``promptcache.reports`` (the live view it serves at ``/_promptcache``), the ledger and
everything below; nothing in the SDK imports it back. Its HTTP stack (httpx, uvicorn, starlette)
is the ``[proxy]`` extra, imported only when the proxy runs.
"""
