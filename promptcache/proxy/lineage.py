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
3. else a new lineage. A request that shares only the head with a known lineage is another
   conversation with the same head; the ledger compares it with its most similar recent
   request as such (``related=False`` in :func:`promptcache.misses.cause.attribute`).
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from promptcache.misses.attribution import api_of_request, common_run
from promptcache.misses.digest_chain import APIS, DigestChain, build_chain

__all__ = ["LineageIndex", "SIMILAR"]

#: Share of a head segment's blocks that must be equal for an edited head to continue a
#: lineage.
SIMILAR = 0.5


@dataclass(frozen=True)
class _Last:
    model: str | None
    digests: list[str]
    kinds: list[str]
    head_blocks: list[frozenset[str]]  # per head segment (the leading non-message ones)


def _head_blocks(chain: DigestChain) -> list[frozenset[str]]:
    out = []
    for seg in chain.segments:
        if seg.kind == "messages":
            break
        blocks: set[str] = set()
        for atom in chain.atoms.get(seg.digest, ()):
            blocks.update(atom.blocks or (atom.digest,))
        out.append(frozenset(blocks))
    return out


def _similarity(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / max(len(a), len(b))


class LineageIndex:
    """The latest digest list of each content-found lineage (bounded, least recently used
    forgotten first).

    Args:
        max_lineages: lineages remembered.
        prefix: the lineage keys' prefix (``proxy:<n>``).
    """

    def __init__(self, max_lineages: int = 256, prefix: str = "proxy") -> None:
        self.max_lineages = max_lineages
        self.prefix = prefix
        self._last: OrderedDict[str, _Last] = OrderedDict()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def assign(self, request: Mapping[str, Any], api: str, model: str | None) -> str:
        """The lineage key of ``request`` (its chain API ``api``, ``model``); it becomes the
        lineage's latest request. Raises nothing for a JSON object body."""
        chain_api = api if api in APIS else api_of_request(request)
        chain = build_chain(request, chain_api)
        last = _Last(
            model, chain.digests(), [s.kind for s in chain.segments], _head_blocks(chain)
        )
        with self._lock:
            key = self._continued(last) or self._edited(last) or f"{self.prefix}:{next(self._ids)}"
            self._last[key] = last
            self._last.move_to_end(key)
            while len(self._last) > self.max_lineages:
                self._last.popitem(last=False)
        return key

    def _continued(self, cur: _Last) -> str | None:
        best_key, best_run = None, 0
        for key, prev in self._last.items():
            if prev.model != cur.model:
                continue
            run = common_run(prev.digests, cur.digests)
            continues = run == len(prev.digests) or (
                run > 0 and any(k == "messages" for k in prev.kinds[:run])
            )
            if continues and run >= best_run:  # ties: the most recent lineage
                best_key, best_run = key, run
        return best_key

    def _edited(self, cur: _Last) -> str | None:
        best_key, best = None, SIMILAR
        for key, prev in self._last.items():
            if prev.model != cur.model:
                continue
            run = common_run(prev.digests, cur.digests)
            if run >= len(prev.head_blocks) or run >= len(cur.head_blocks):
                continue  # the difference is not in the head
            sim = _similarity(prev.head_blocks[run], cur.head_blocks[run])
            if sim >= best:
                best_key, best = key, sim
        return best_key
