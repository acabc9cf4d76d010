"""Lineages of proxied traffic: which earlier request a request continues.

A client that sends ``X-Promptcache-Session: KEY`` names its lineage (``session:KEY``). Without
it, many conversations share one proxy (an agent's main loop, its subagents, title and
summary calls), so the lineage is found by content: among the latest request of each known
lineage for the same model, the one whose digest chain shares the longest common leading run
of segment digests with this request's chain -- provided the shared run reaches into the
messages (the conversation itself) or covers the whole earlier request (pure growth). A
request that shares only the head (system prompt, tools) with every known lineage starts a
new one; the ledger then compares it with its most similar recent request as another
conversation with the same head (``related=False`` in :func:`promptcache.misses.cause.attribute`).
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from promptcache.misses.attribution import api_of_request, common_run
from promptcache.misses.digest_chain import APIS, build_chain

__all__ = ["LineageIndex"]


class LineageIndex:
    """The latest digest list of each content-found lineage (bounded, least recently used
    forgotten first).

    Args:
        max_lineages: lineages remembered.
        prefix: the lineage keys' prefix (``proxy:<n>``).
    """

    def __init__(self, max_lineages: int = 1024, prefix: str = "proxy") -> None:
        self.max_lineages = max_lineages
        self.prefix = prefix
        self._last: OrderedDict[str, tuple[str | None, list[str], list[str]]] = OrderedDict()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def assign(self, request: Mapping[str, Any], api: str, model: str | None) -> str:
        """The lineage key of ``request`` (its chain API ``api``, ``model``); it becomes the
        lineage's latest request. Raises nothing for a JSON object body."""
        chain_api = api if api in APIS else api_of_request(request)
        chain = build_chain(request, chain_api)
        digests = chain.digests()
        kinds = [s.kind for s in chain.segments]
        with self._lock:
            best_key, best_run = None, 0
            for key, (m, prev, prev_kinds) in self._last.items():
                if m != model:
                    continue
                run = common_run(prev, digests)
                continues = run == len(prev) or (
                    run > 0 and any(k == "messages" for k in prev_kinds[:run])
                )
                if continues and run > best_run:
                    best_key, best_run = key, run
            key = best_key or f"{self.prefix}:{next(self._ids)}"
            self._last[key] = (model, digests, kinds)
            self._last.move_to_end(key)
            while len(self._last) > self.max_lineages:
                self._last.popitem(last=False)
        return key
