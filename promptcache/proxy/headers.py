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


def request_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The ASGI request headers ``raw`` (lower-case names) to send upstream."""
    items = list(raw)
    drop = HOP_BY_HOP | _REQUEST_RESET | _connection_named(items)
    return [(k, v) for k, v in items if k.lower() not in drop]


def response_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The upstream's response headers to send to the client (names lower-cased, as ASGI
    asks; HTTP field names are case-insensitive)."""
    items = [(k.lower(), v) for k, v in raw]
    drop = HOP_BY_HOP | _connection_named(items)
    return [(k, v) for k, v in items if k not in drop]


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
