"""Which headers cross the proxy, and which words never reach a log.

Hop-by-hop headers (RFC 9110 section 7.6.1: ``Connection`` and the fields it names,
``Proxy-Connection``, ``Keep-Alive``, ``TE``, ``Transfer-Encoding``, ``Upgrade``; plus
``Proxy-Authenticate``/``Proxy-Authorization``, RFC 9110 section 11.7) describe one connection
and are dropped in both directions; ``Host`` and ``Content-Length`` of a request are set again
by the HTTP client for the upstream connection (the body is passed unchanged, so the length is
the same). Everything else passes as sent, in order, duplicates kept.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

__all__ = [
    "HOP_BY_HOP",
    "request_headers",
    "response_headers",
    "redact_query",
    "install_log_redaction",
]

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"proxy-connection",
        b"keep-alive",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
        b"proxy-authenticate",
        b"proxy-authorization",
    }
)
_REQUEST_RESET = frozenset({b"host", b"content-length"})


def _connection_named(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    named: set[bytes] = set()
    for k, v in headers:
        if k.lower() == b"connection":
            named.update(t.strip().lower() for t in v.split(b",") if t.strip())
    return named


#: The request header naming a call's lineage (``promptcache.integrations.clients.SESSION_HEADER``
#: lower-cased, as ASGI gives names).
SESSION = b"x-promptcache-session"


def request_headers(raw: Iterable[tuple[bytes, bytes]]) -> tuple[list[tuple[str, str]], str | None]:
    """The ASGI request headers ``raw`` (lower-case names) to send upstream, as ``(name, value)``
    strings (latin-1, byte for byte), in order, duplicates kept; and the value of the
    ``X-Promptcache-Session`` header (None when absent), which is passed on too."""
    out: list[tuple[str, str]] = []
    session = None
    named: set[bytes] | None = None
    for k, v in raw:
        if k in HOP_BY_HOP or k in _REQUEST_RESET:
            if k == b"connection":
                named = _connection_named([(k, v)]) | (named or set())
            continue
        if k == SESSION:
            session = v.decode("latin-1")
        out.append((k.decode("latin-1"), v.decode("latin-1")))
    if named:  # rare: drop the fields the client's Connection header names
        out = [(k, v) for k, v in out if k.encode("latin-1") not in named]
    return out, session


def response_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers to send to the client (names lower-cased, as ASGI
    asks; HTTP field names are case-insensitive), in order, duplicates kept."""
    out: list[tuple[bytes, bytes]] = []
    named: set[bytes] | None = None
    for k, v in raw:
        k = k.lower()
        if k in HOP_BY_HOP:
            if k == b"connection":
                named = _connection_named([(k, v)]) | (named or set())
            continue
        out.append((k, v))
    if named:
        out = [(k, v) for k, v in out if k not in named]
    return out


_SECRET_PARAM = re.compile(r"(?i)([?&](?:key|api[-_]?key|access_token|token)=)[^&#]*")


def redact_query(url: str) -> str:
    """``url`` with the values of credential-looking query parameters (Gemini's ``key=``)
    replaced by ``***``, for anything that is logged."""
    return _SECRET_PARAM.sub(r"\1***", url)


class _RedactQuery(logging.Filter):
    """Rewrites the URL arguments of httpx's ``HTTP Request: METHOD URL ...`` log lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(redact_query(str(a)) if "?" in str(a) else a for a in record.args)
        elif isinstance(record.msg, str) and "?" in record.msg:
            record.msg = redact_query(record.msg)
        return True


_FILTER = _RedactQuery()


def install_log_redaction() -> None:
    """Redact credential query parameters in httpx's request log (INFO on the ``httpx``
    logger names every URL, and Gemini clients may send ``?key=``). Idempotent."""
    logger = logging.getLogger("httpx")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
