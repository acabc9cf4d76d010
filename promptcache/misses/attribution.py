"""Miss attribution for recorded traffic: lineages, predecessors and the cause of each
request, as the ledger stores them.

A *lineage* is the sequence of requests one conversation sends: by default the requests
for one model through one wrapped client (``wrap()`` keys them ``"<client id>:<model>"``),
or those under a key the caller gives (``wrap(client, tracker, session=...)``, or per call
through the ``X-Promptcache-Session`` header / LiteLLM metadata). :class:`Attributor` keeps
the latest request of each lineage in memory (its digest chain with the parsed values, so
unchanged segments are not digested again and offsets are exact); when a lineage has no
request in memory (a new process), the predecessor is the ledger's recent request for the
same model with the longest common run of segment digests (:meth:`Attributor.attribute`'s
``fallback``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from promptcache.limits import CacheLimits
from promptcache.misses.cause import Attribution, Observation, attribute
from promptcache.misses.digest_chain import DigestChain, build_chain
from promptcache.providers.usage import Usage

__all__ = ["Attributor", "Attributed", "common_run", "api_of_request"]

#: OpenAI ``prompt_cache_retention`` values carried to the TTL rule.
_RETENTION_KEY = "prompt_cache_retention"


def common_run(a: list[str], b: list[str]) -> int:
    """Length of the common leading run of two digest lists."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def api_of_request(body: Mapping[str, Any], default: str = "chat.completions") -> str:
    """The chain API of a request body told apart by its fields (``messages`` with
    ``system``/``max_tokens`` for Anthropic is ambiguous: pass ``api`` when known)."""
    if "contents" in body:
        return "gemini"
    if "input" in body or "instructions" in body:
        return "responses"
    if "modelId" in body or "toolConfig" in body:
        return "converse"
    if "anthropic_version" in body or isinstance(body.get("system"), list):
        return "messages"
    return default


@dataclass(frozen=True)
class Attributed:
    """The attribution of one request and its chain (to store), and the lineage key."""

    attribution: Attribution
    chain: DigestChain
    lineage: str


class Attributor:
    """Per-process memory of the latest request of each lineage (bounded, LRU).

    Args:
        max_lineages: lineages kept in memory (the oldest is forgotten first; a forgotten
            lineage falls back to the ledger).
    """

    def __init__(self, max_lineages: int = 512) -> None:
        self.max_lineages = max_lineages
        self._last: OrderedDict[str, Observation] = OrderedDict()
        self._lock = threading.Lock()

    def last(self, lineage: str) -> Observation | None:
        """The latest request of ``lineage`` seen by this process, if still in memory."""
        with self._lock:
            obs = self._last.get(lineage)
            if obs is not None:
                self._last.move_to_end(lineage)
            return obs

    def forget(self) -> None:
        """Drop every lineage from memory."""
        with self._lock:
            self._last.clear()

    def attribute(
        self,
        request: Mapping[str, Any],
        api: str,
        usage: Usage,
        ts: float,
        *,
        lineage: str,
        rules: CacheLimits | None = None,
        fallback: Callable[[DigestChain], tuple[Observation, bool] | None] | None = None,
        keep_values: bool = True,
    ) -> Attributed:
        """The cause of one request's cache result.

        Args:
            request: the request body as sent (JSON object).
            api: its chain API (:data:`promptcache.misses.digest_chain.APIS`).
            usage: its normalized usage.
            ts: when it was sent (Unix seconds).
            lineage: its lineage key.
            rules: cache rules to apply (default: from provider, API and model).
            fallback: called with the chain when the lineage has no request in memory;
                returns the predecessor from elsewhere (the ledger) and whether it is of
                the same lineage, or None.
            keep_values: keep the parsed segment values in memory for the next request
                (exact offsets, no re-digesting); False keeps only digests.

        Returns:
            An :class:`Attributed`; this request becomes the lineage's latest.
        """
        prev = self.last(lineage)
        related = True
        chain = build_chain(request, api, previous=prev.chain if prev is not None else None)
        if prev is None and fallback is not None:
            found = fallback(chain)
            if found is not None:
                prev, related = found
        retention = request.get(_RETENTION_KEY)
        obs = Observation(chain, usage, ts, retention if isinstance(retention, str) else None)
        result = attribute(obs, prev, rules=rules, related=related)
        kept = obs
        if not keep_values:
            kept = Observation(
                DigestChain(
                    chain.api, chain.segments, chain.breakpoints, chain.atoms, (), chain.automatic
                ),
                usage,
                ts,
                obs.retention,
            )
        with self._lock:
            self._last[lineage] = kept
            self._last.move_to_end(lineage)
            while len(self._last) > self.max_lineages:
                self._last.popitem(last=False)
        return Attributed(result, chain, lineage)
