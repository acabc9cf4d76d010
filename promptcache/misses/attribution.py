"""Miss attribution for recorded traffic: lineages, predecessors and the cause of each
request, as the ledger stores them.

A request's predecessor -- the earlier request whose cache it could have read -- is found two
ways:

- **by key**, when the caller names the conversation: ``wrap(client, tracker, session=...)``,
  per call the ``X-Promptcache-Session`` header or LiteLLM metadata. The latest request of
  that key is the predecessor (:class:`Attributor` keeps it in memory, bounded LRU).
- **by shared prefix** otherwise (:mod:`promptcache.misses.lineage`): among the recent
  requests of the same provider and model within the longest TTL -- across every
  conversation of the process -- the one whose digest chain shares the longest prefix with
  it (then: one it contains whole, one whose tail it kept, the most recent). Interleaved
  conversations on one client, parallel tool calls and sub-agents get the causes they would
  get alone. The lineage stored is a conversation key (``"conv:<hex>"``) carried from a
  related predecessor, or new.

When the process has no candidate (a new process), the predecessor is the ledger's recent
request for the same model with the longest common run of segment digests
(:meth:`Attributor.attribute`'s ``fallback``). A call whose usage is unknown
(:data:`~promptcache.providers.usage_record.USAGE_UNKNOWN`) gets no cause and is no
candidate. A serving engine's note on why it did not cache (the local engine's
``X-Promptcache-Cache-Note``) turns an unexplained zero read into ``no_breakpoint`` with that
note (:func:`apply_engine_note`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from promptcache.limits import CacheLimits
from promptcache.misses.cause import Attribution, Observation, attribute, rules_for
from promptcache.misses.digest_chain import DigestChain, build_chain
from promptcache.misses.lineage import RecentRequests, new_conversation_id, window_for
from promptcache.providers.usage import Usage
from promptcache.providers.usage_record import USAGE_UNKNOWN

__all__ = ["Attributor", "Attributed", "common_run", "api_of_request", "apply_engine_note"]

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


def apply_engine_note(
    result: Attribution, chain: DigestChain, usage: Usage, note: str | None
) -> Attribution:
    """``result``, or ``no_breakpoint`` with the engine's ``note`` as its detail when the
    serving engine said why it cached nothing (the local engine's ``X-Promptcache-Cache-Note``:
    its cache mode follows rules under which this request cannot be cached), the request
    read nothing and carries no cache marker. Causes the caller can act on otherwise
    (``prefix_changed``, ``ttl_expired``, ``below_minimum``) are kept."""
    if not note or usage.cache_read_tokens or chain.breakpoints:
        return result
    if result.cause not in ("cold", "partial", "provider_unknown", "breakpoint_moved"):
        return result
    return Attribution(
        "no_breakpoint",
        matched_prefix_tokens=result.matched_prefix_tokens,
        detail=f"the serving engine cached nothing: {note}",
    )


class Attributor:
    """Per-process memory of recent requests for predecessor lookup (bounded).

    Args:
        max_lineages: named lineages (session keys) kept in memory (the oldest is
            forgotten first; a forgotten lineage falls back to the ledger).
        max_requests: recent requests kept for lookup by shared prefix
            (:class:`~promptcache.misses.lineage.RecentRequests`).
    """

    def __init__(self, max_lineages: int = 512, max_requests: int = 1024) -> None:
        self.max_lineages = max_lineages
        self._last: OrderedDict[str, Observation] = OrderedDict()
        self._lock = threading.Lock()
        self.recent = RecentRequests(max_requests)

    def last(self, lineage: str) -> Observation | None:
        """The latest request of the named ``lineage`` seen by this process, if in memory."""
        with self._lock:
            obs = self._last.get(lineage)
            if obs is not None:
                self._last.move_to_end(lineage)
            return obs

    def forget(self) -> None:
        """Drop every lineage and recent request from memory."""
        with self._lock:
            self._last.clear()
        self.recent.clear()

    def attribute(
        self,
        request: Mapping[str, Any],
        api: str,
        usage: Usage,
        ts: float,
        *,
        lineage: str | None = None,
        rules: CacheLimits | None = None,
        fallback: Callable[[DigestChain], tuple[Observation, bool] | None] | None = None,
        keep_values: bool = True,
        note: str | None = None,
    ) -> Attributed:
        """The cause of one request's cache result.

        Args:
            request: the request body as sent (JSON object).
            api: its chain API (:data:`promptcache.misses.digest_chain.APIS`).
            usage: its normalized usage (``provider`` and ``model`` set: they scope the
                lookup by shared prefix).
            ts: when it was sent (Unix seconds).
            lineage: a named lineage (session key), or None to find the predecessor by
                shared prefix (module docstring).
            rules: cache rules to apply (default: from provider, API and model).
            fallback: called with the chain when memory holds no predecessor; returns the
                predecessor from elsewhere (the ledger) and whether it is of the same
                lineage, or None.
            keep_values: keep the parsed segment values in memory for the next request
                (exact offsets, no re-digesting); False keeps only digests.
            note: the serving engine's note on why it cached nothing
                (:func:`apply_engine_note`), or None.

        Returns:
            An :class:`Attributed` whose ``lineage`` is the named lineage or the
            conversation key found; this request becomes a candidate for later ones
            (unless its usage is unknown).
        """
        prev: Observation | None
        if lineage is not None:
            prev = self.last(lineage)
            chain = build_chain(request, api, previous=prev.chain if prev is not None else None)
            related, key = True, lineage
        else:
            eff = rules or rules_for(usage.provider, api, usage.model)
            chain = build_chain(request, api)
            found = self.recent.find(chain, usage.provider, usage.model, ts, window_for(eff))
            prev, related, key = None, False, ""
            if found is not None:
                prev, how, conversation = found
                related = how.related
                key = conversation if related else ""
        if prev is None and fallback is not None:
            back = fallback(chain)
            if back is not None:
                prev, related = back
        key = key or new_conversation_id()
        if USAGE_UNKNOWN in usage.flags:
            unknown = Attribution(None, detail="the response carried no usage")
            return Attributed(unknown, chain, key)
        retention = request.get(_RETENTION_KEY)
        obs = Observation(chain, usage, ts, retention if isinstance(retention, str) else None)
        result = apply_engine_note(
            attribute(obs, prev, rules=rules, related=related), chain, usage, note
        )
        kept = obs if keep_values else _digests_only(obs)
        if lineage is not None:
            with self._lock:
                self._last[lineage] = kept
                self._last.move_to_end(lineage)
                while len(self._last) > self.max_lineages:
                    self._last.popitem(last=False)
        self.recent.add(kept, usage.provider, usage.model, key)
        return Attributed(result, chain, key)


def _digests_only(obs: Observation) -> Observation:
    c = obs.chain
    chain = DigestChain(c.api, c.segments, c.breakpoints, c.atoms, (), c.automatic)
    return Observation(chain, obs.usage, obs.ts, obs.retention)
