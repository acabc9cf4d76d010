"""Lineages of proxied traffic: which earlier request a request continues.

A client that sends ``X-Promptcache-Session: KEY`` names its lineage (``session:KEY``). Without
it, many conversations share one proxy (an agent's main loop, its subagents, title and
summary calls), so the lineage is found by content, among the latest request of each known
lineage for the same model:

1. *continues*: the lineage whose digest chain shares the longest common leading run of
   segment digests with this request's chain, provided the run reaches into the messages
   (the conversation itself) or covers the whole earlier request (pure growth);
2. *edited head*: else, the lineage whose first differing segment is a head segment (tools,
   system prompt) that shares at least :data:`SIMILAR` of its 128-character blocks with this
   request's (the same prompt with a timestamp inserted, a tool added): the request is that
   conversation with its prefix changed, and the ledger says where;
3. *edited message*: else, among the most recent lineages of the model, one that shares
   the whole head and whose messages after the first difference reappear in this longer
   request (all but its last, see :meth:`LineageIndex._edited_message`): an earlier message
   was edited and the rest of the conversation kept -- Claude Code puts CLAUDE.md in the
   first user message, so a CLAUDE.md edited mid-session changes ``$.messages[0]``;
4. else a new lineage. A request that shares only the head with a known lineage is another
   conversation with the same head; the ledger compares it with its most similar recent
   request as such (``related=False`` in :func:`promptcache.misses.cause.attribute`).

New keys are ``proxy:<run>:<n>``, ``<run>`` random per index (per proxy process), so that two
proxies, or one after another, writing to one ledger never give two conversations one key.
A new proxy knows the lineages already in its ledger (:meth:`LineageIndex.seed`, from the
latest record of each): an agent CLI run once per turn (``claude -p --continue`` under a new
``promptcache proxy -- ...`` each time) continues its lineage across the runs.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from promptcache.misses.attribution import api_of_request
from promptcache.misses.digest_chain import APIS, DigestChain, build_chain
from promptcache.misses.lineage import RECENT_EDIT, SIMILAR, edited_head, head_blocks

__all__ = ["LineageIndex", "SIMILAR"]  # SIMILAR: from promptcache.misses.lineage


@dataclass(frozen=True)
class _Last:
    model: str | None
    digests: list[str]
    kinds: list[str]
    head_blocks: list[frozenset[str]]  # per head segment (the leading non-message ones)
    prefixes: list[int]  # prefixes[k - 1]: a hash of digests[:k]

    @classmethod
    def of(cls, model: str | None, chain: DigestChain, digests: list[str]) -> _Last:
        """What the index keeps of ``chain`` (its ``digests``, already computed)."""
        return cls(
            model,
            digests,
            [s.kind for s in chain.segments],
            head_blocks(chain),
            _prefix_hashes(digests),
        )


def _common_run(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _prefix_hashes(digests: list[str]) -> list[int]:
    out, h = [], 0
    for d in digests:
        h = hash((h, d))
        out.append(h)
    return out


class LineageIndex:
    """The latest digest list of each content-found lineage (bounded, least recently used
    forgotten first), indexed by the hashes of its digest prefixes so that finding the
    longest continued lineage costs one dictionary look-up per segment of the request.

    Args:
        max_lineages: lineages remembered.
        prefix: the lineage keys' prefix (``<prefix>:<n>``); default ``proxy:<run>``,
            ``<run>`` 8 random hex digits.
    """

    def __init__(self, max_lineages: int = 256, prefix: str | None = None) -> None:
        self.max_lineages = max_lineages
        self.prefix = prefix if prefix is not None else f"proxy:{os.urandom(4).hex()}"
        self._last: OrderedDict[str, _Last] = OrderedDict()
        # (model, hash of a digest prefix) -> lineages whose latest request starts with it
        # (insertion order: most recent last); _full: ... whose latest request is exactly it
        self._by_prefix: dict[tuple[str | None, int], dict[str, None]] = {}
        self._full: dict[tuple[str | None, int], dict[str, None]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        # the latest chain per model: unchanged segments of the next request reuse its
        # digests (build_chain's ``previous``) instead of being serialized again
        self._recent: dict[str | None, DigestChain] = {}

    def assign(self, request: Mapping[str, Any], api: str, model: str | None) -> str:
        """The lineage key of ``request`` (its chain API ``api``, ``model``); it becomes the
        lineage's latest request. Raises nothing for a JSON object body."""
        return self.assign_nearest(request, api, model)[0]

    def assign_nearest(
        self, request: Mapping[str, Any], api: str, model: str | None
    ) -> tuple[str, str | None]:
        """``(lineage key, nearest)``: the key as :meth:`assign` gives it, and -- when that is
        a new lineage -- the known lineage whose latest request shares the longest leading
        run of segments with this one (another conversation with the same head), else None.
        The ledger compares a new lineage's first request with ``nearest``'s latest, in
        memory, instead of searching its recent records."""
        chain_api = api if api in APIS else api_of_request(request)
        hint = self._recent.get(model)
        chain = build_chain(
            request,
            chain_api,
            previous=hint if hint is not None and hint.api == chain_api else None,
        )
        self._recent[model] = chain
        if len(self._recent) > 64:
            self._recent.pop(next(iter(self._recent)))
        cur = _Last.of(model, chain, chain.digests())
        with self._lock:
            nearest = None
            key = self._continued(cur) or self._edited(cur) or self._edited_message(cur)
            if key is None:
                key, nearest = f"{self.prefix}:{next(self._ids)}", self._nearest(cur)
            self._forget(key)
            self._remember(key, cur)
            while len(self._last) > self.max_lineages:
                self._forget(next(iter(self._last)))
        return key, nearest

    def seed(self, key: str, model: str | None, chain: DigestChain) -> bool:
        """Know lineage ``key`` (from the ledger) with ``chain`` (its latest request's stored
        chain, atoms included) as its latest request, as the most recent lineage, unless the
        index knows ``key`` already. Seed oldest first, before any :meth:`assign`; beyond
        ``max_lineages`` the least recent is forgotten. Returns whether it was added."""
        digests = chain.digests()
        if not digests:
            return False
        last = _Last.of(model, chain, digests)
        with self._lock:
            if key in self._last:
                return False
            self._remember(key, last)
            while len(self._last) > self.max_lineages:
                self._forget(next(iter(self._last)))
        return True

    def _nearest(self, cur: _Last) -> str | None:
        for h in reversed(cur.prefixes):
            shared = self._by_prefix.get((cur.model, h))
            if shared:
                return next(reversed(shared))
        return None

    def _remember(self, key: str, last: _Last) -> None:
        self._last[key] = last
        for h in last.prefixes:
            self._by_prefix.setdefault((last.model, h), {})[key] = None
        if last.prefixes:
            self._full.setdefault((last.model, last.prefixes[-1]), {})[key] = None

    def _forget(self, key: str) -> None:
        last = self._last.pop(key, None)
        if last is None:
            return
        for index, hashes in ((self._by_prefix, last.prefixes), (self._full, last.prefixes[-1:])):
            for h in hashes:
                bucket = index.get((last.model, h))
                if bucket is not None:
                    bucket.pop(key, None)
                    if not bucket:
                        del index[(last.model, h)]

    def _continued(self, cur: _Last) -> str | None:
        """The most recent lineage with the longest shared run that reaches into the
        messages, or whose latest request is a prefix of this one."""
        first_message = next((i for i, k in enumerate(cur.kinds) if k == "messages"), None)
        for k in range(len(cur.prefixes), 0, -1):
            h = (cur.model, cur.prefixes[k - 1])
            if first_message is not None and k > first_message:
                shared = self._by_prefix.get(h)
                if shared:
                    return next(reversed(shared))
            full = self._full.get(h)
            if full:
                return next(reversed(full))
        return None

    def _recent_of(self, model: str | None) -> Iterator[tuple[str, _Last]]:
        """``(key, latest request)`` of the :data:`RECENT_EDIT` most recent lineages of
        ``model``, most recent first (the candidates an edited request may continue)."""
        seen = 0
        for key in reversed(self._last):
            prev = self._last[key]
            if prev.model != model:
                continue
            seen += 1
            if seen > RECENT_EDIT:
                return
            yield key, prev

    def _edited_message(self, cur: _Last) -> str | None:
        """Among the most recent lineages of the model, the one (longest shared run first,
        then most recent) that this request continues with an earlier message edited: the
        whole head is shared, this request is longer, and every segment of the lineage's
        latest request between the first difference and its last segment -- at least one --
        reappears after the difference. (Its last segment may not: Claude Code moves its
        ``cache_control`` breakpoint to the newest message each turn, so the previous turn's
        last message comes back without it.)"""
        heads = cur.kinds.index("messages") if "messages" in cur.kinds else len(cur.kinds)
        later = {d: i for i, d in enumerate(cur.digests)}
        best_key, best_run = None, -1
        for key, prev in self._recent_of(cur.model):
            run = _common_run(cur.digests, prev.digests)
            middle = prev.digests[run + 1 : -1]
            if (
                run < heads
                or run >= len(prev.digests)
                or len(cur.digests) <= len(prev.digests)
                or prev.kinds[run] != "messages"
                or not middle
                or any(later.get(d, -1) <= run for d in middle)
            ):
                continue
            if run > best_run:
                best_key, best_run = key, run
        return best_key

    def _edited(self, cur: _Last) -> str | None:
        """Among the most recent lineages of the model, the one whose first difference is
        a head segment at least :data:`SIMILAR` alike."""
        best_key, best = None, SIMILAR
        for key, prev in self._recent_of(cur.model):
            sim = edited_head(cur.digests, cur.head_blocks, prev.digests, prev.head_blocks)
            if sim > best or (sim == best and best_key is None):
                best_key, best = key, sim
        return best_key
