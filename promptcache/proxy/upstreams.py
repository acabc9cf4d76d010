"""Where the proxy forwards to, and which base-URL variable points each client at it.

``--upstream anthropic|openai|gemini`` names a provider's public API; anything else must be an
``http(s)://`` URL (a gateway, a self-hosted server, the local engine). A request for
``/v1/messages?beta=true`` goes to ``<upstream base><path>?<query>``: the path and query are
kept byte for byte, the base's own path (if any) is put in front.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["Upstream", "UPSTREAMS", "resolve", "child_env"]


@dataclass(frozen=True)
class Upstream:
    """One upstream.

    Attributes:
        name: ``anthropic``, ``openai``, ``gemini`` or ``url``.
        base_url: ``scheme://host[:port][/path]`` without a trailing slash.
        provider: the ledger's provider label, or None to derive it from the host
            (:func:`promptcache.integrations.clients.provider_for_host`).
        sdk: the client family the recorder parses usage for (``anthropic``, ``openai``,
            ``google``); a URL upstream is parsed by the request's API shape.
    """

    name: str
    base_url: str
    provider: str | None
    sdk: str

    @property
    def host(self) -> str:
        """The upstream's host name (no port)."""
        return urlsplit(self.base_url).hostname or ""

    def url_for(self, raw_path: bytes, query: bytes) -> str:
        """The upstream URL of a request's raw path and query string (kept as sent)."""
        path = raw_path.decode("latin-1")
        url = self.base_url + path
        if query:
            url += "?" + query.decode("latin-1")
        return url


#: The public APIs ``--upstream`` names (hosts as the providers document them; checked
#: 2026-12-03 against each provider's API reference).
UPSTREAMS: dict[str, Upstream] = {
    "anthropic": Upstream("anthropic", "https://api.anthropic.com", "anthropic", "anthropic"),
    "openai": Upstream("openai", "https://api.openai.com", "openai", "openai"),
    "gemini": Upstream("gemini", "https://generativelanguage.googleapis.com", "gemini", "google"),
}


def resolve(spec: str) -> Upstream:
    """The :class:`Upstream` for ``--upstream SPEC``.

    Raises:
        ValueError: ``spec`` is neither a known name nor an ``http(s)://host`` URL (the message
            is one line saying what to pass).
    """
    known = UPSTREAMS.get(spec.strip().lower())
    if known is not None:
        return known
    parts = urlsplit(spec.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"--upstream {spec!r}: use anthropic, openai, gemini or an http(s):// URL "
            "(e.g. http://127.0.0.1:8000)"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"--upstream {spec!r}: a base URL takes no query or fragment")
    base = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
    return Upstream("url", base, None, "openai")


def child_env(upstream: Upstream, proxy_url: str) -> dict[str, str]:
    """The environment variables that point a child process's clients at the proxy.

    ``proxy_url`` is ``http://host:port`` (no trailing slash). Which CLI reads which variable
    (each documented in ``docs/proxy.md`` with its source):

    - ``ANTHROPIC_BASE_URL``: Claude Code and the Anthropic SDKs (they append ``/v1/messages``);
    - ``OPENAI_BASE_URL``: the OpenAI SDKs and the Codex CLI (they append ``/responses`` or
      ``/chat/completions`` to a base that ends in ``/v1``);
    - ``GOOGLE_GEMINI_BASE_URL``: the google-genai SDKs, and through them the Gemini CLI.

    A named upstream sets only its own family's variable (pointing a Claude Code child at an
    OpenAI upstream would fail); a URL upstream (e.g. the local engine, which serves both the
    OpenAI and the Anthropic API) sets all three.
    """
    env = {
        "anthropic": {"ANTHROPIC_BASE_URL": proxy_url},
        "openai": {"OPENAI_BASE_URL": proxy_url + "/v1"},
        "gemini": {"GOOGLE_GEMINI_BASE_URL": proxy_url},
    }
    if upstream.name in env:
        return dict(env[upstream.name])
    out: dict[str, str] = {}
    for part in env.values():
        out.update(part)
    return out
