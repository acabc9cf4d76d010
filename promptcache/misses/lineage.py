"""Which earlier request a request continues: predecessors found by shared prefix.

One client (or one process) usually serves many conversations at once: a web app's users,
an agent's parallel tool calls, its sub-agents. "The previous call of this client and model"
is then, most of the time, another conversation's call. :class:`RecentRequests` instead
keeps the recent requests of each (provider, model) and picks, for a new request, the one it
most plausibly continues:

1. one of the same conversation (*related*, below) over any other;
2. then the one whose digest chain shares the longest common run of leading segments with
   it (:func:`promptcache.misses.attribution.common_run`);
3. among equal runs, one that the new request *contains* whole (a conversation's previous
   turn is a prefix of its next turn; a sibling branch of a parallel call is not);
4. then the one whose segments after the first difference reappear in the new request
   (an edit inside a conversation -- a changed tool description, a timestamp in the system
   prompt -- keeps the rest of that conversation: its later segments are still there);
5. then the most recent.

When no candidate is related so, an *edited head* is looked for: among the
:data:`RECENT_EDIT` most recent candidates, the one whose first difference lies in a head
segment (tools, system prompt) that shares at least :data:`SIMILAR` of its 128-character
blocks with the new request's (the same prompt with a timestamp inserted at its top, a tool
added), and whose messages all reappear in the new request. That request continues the candidate's conversation with its prefix changed, and
the ledger says where (the proxy's lineage index uses the same rule and helpers).

Only requests within ``window_s`` seconds (the longest TTL the provider offers: nothing
older can still be cached) are candidates. A candidate is *related* (the same conversation)
when the new request contains it whole, or when every segment it has after the first
difference reappears in the new request (at least two segments, or one when the new
request is longer); otherwise it is only the most similar recent
request (another conversation sharing a head), and :func:`promptcache.misses.cause.attribute`
is told so (``related=False``). A request sharing nothing with any candidate has no
predecessor.

Pure bookkeeping over digest chains; thread-safe; bounded (``max_requests`` per process,
the oldest forgotten first).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from promptcache.limits import OPENAI_IN_MEMORY_MAX_SECONDS, CacheLimits
from promptcache.misses.cause import Observation, ttl_seconds
from promptcache.misses.digest_chain import DigestChain

__all__ = [
    "SIMILAR",
    "RECENT_EDIT",
    "head_blocks",
    "similarity",
    "edited_head",
    "Match",
    "RecentRequests",
    "match",
    "best_match",
    "new_conversation_id",
    "window_for",
    "NO_TTL_WINDOW_S",
]

#: How far back candidates are looked for when the provider documents no TTL (Gemini's
#: implicit cache, self-hosted servers: LRU eviction): one day.
NO_TTL_WINDOW_S = 86400.0


def window_for(rules: CacheLimits) -> float:
    """Seconds back a predecessor may lie: the longest TTL ``rules`` offer, at least the
    hour an OpenAI in-memory entry may live (:data:`~promptcache.limits.OPENAI_IN_MEMORY_MAX_SECONDS`;
    a request after a pause past a 5-minute TTL must still find its predecessor to be told
    ``ttl_expired``); :data:`NO_TTL_WINDOW_S` when none is documented."""
    secs = [t for t in (ttl_seconds(x) for x in rules.ttls) if t is not None]
    if not secs:
        return NO_TTL_WINDOW_S
    return max(max(secs), OPENAI_IN_MEMORY_MAX_SECONDS)


#: Share of a head segment's 128-character blocks that must be equal for an edited head to
#: continue a conversation.
SIMILAR = 0.5

#: An edited head is looked for among this many most recent candidates.
RECENT_EDIT = 16


def head_blocks(chain: DigestChain) -> list[frozenset[str]]:
    """The block digests of each head segment of ``chain`` (the leading segments before the
    first ``messages`` one; an atom without blocks counts as one block, its digest)."""
    out = []
    for seg in chain.segments:
        if seg.kind == "messages":
            break
        blocks: set[str] = set()
        for atom in chain.atoms.get(seg.digest, ()):
            blocks.update(atom.blocks or (atom.digest,))
        out.append(frozenset(blocks))
    return out


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Shared blocks over the larger segment's blocks, in [0, 1] (0 when either is empty)."""
    if not a or not b:
        return 0.0
    return len(a & b) / max(len(a), len(b))


def edited_head(
    mine: Sequence[str],
    heads: list[frozenset[str]],
    theirs: Sequence[str],
    their_heads: list[frozenset[str]],
) -> float:
    """How alike the first differing segment of two requests is (:func:`similarity`) when
    it is a head segment of both; 0.0 otherwise."""
    run = _common_run(mine, theirs)
    if run >= len(heads) or run >= len(their_heads):
        return 0.0
    return similarity(heads[run], their_heads[run])


def _common_run(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class Match:
    """How a candidate predecessor relates to a new request (digest lists compared).

    Attributes:
        run: leading segments shared.
        contained: the candidate is a prefix of the new request (all of it is shared).
        tail: segments of the candidate after the first difference that reappear in the
            new request after it (counted only when its last segment does; else 0).
        tail_total: segments the candidate has after the first difference.
        longer: the new request has more segments than the candidate.
        edited_head: the first difference is a head segment at least :data:`SIMILAR`
            alike (the same conversation, its prefix edited).
    """

    run: int
    contained: bool
    tail: int
    tail_total: int
    longer: bool = False
    edited_head: bool = False

    @property
    def related(self) -> bool:
        """The same conversation: contained whole, or its whole tail kept after an edit --
        a tail of at least two segments, or of one when the new request also extends past
        it. (A one-segment tail alone, such as a first user message "hi" after a system
        prompt, is what any new conversation may share.)"""
        if self.contained or self.edited_head:
            return True
        if self.tail_total == 0 or self.tail != self.tail_total:
            return False
        return self.tail_total >= 2 or self.longer

    @property
    def useful(self) -> bool:
        """Worth comparing with at all: a shared leading run, or a related candidate."""
        return self.run > 0 or self.related

    def key(self) -> tuple[int, int, int, int]:
        """Sort key, larger is better (ties: the caller prefers the most recent)."""
        return (int(self.related), self.run, int(self.contained), self.tail)


def match(
    mine: Sequence[str], theirs: Sequence[str], last: Mapping[str, int] | None = None
) -> Match:
    """Compare a new request's segment digests ``mine`` with a candidate's ``theirs``
    (``last``: each digest of ``mine`` to its last index, when already computed)."""
    run = _common_run(mine, theirs)
    if run == len(theirs):
        return Match(run, True, 0, 0)
    if last is None:
        last = {d: i for i, d in enumerate(mine)}
    n_after = len(theirs) - run - 1
    if n_after == 0 or last.get(theirs[-1], -1) < run:
        # its last segment is gone: not the same conversation (the tail is not counted)
        return Match(run, False, 0, n_after, len(mine) > len(theirs))
    kept = sum(1 for d in theirs[run + 1 :] if last.get(d, -1) >= run)
    return Match(run, False, kept, n_after, len(mine) > len(theirs))


def best_match(
    mine: Sequence[str], candidates: Iterable[tuple[Sequence[str], float]]
) -> tuple[int, Match] | None:
    """Index and :class:`Match` of the best of ``candidates`` (``(digests, ts)`` pairs) for
    a request with digests ``mine`` (rules in the module docstring), or None when none is
    :attr:`Match.useful`."""
    last = {d: i for i, d in enumerate(mine)}
    best: tuple[tuple[int, int, int, int, float], int, Match] | None = None
    for i, (digests, ts) in enumerate(candidates):
        m = match(mine, digests, last)
        if not m.useful:
            continue
        key = (*m.key(), ts)
        if best is None or key > best[0]:
            best = (key, i, m)
    return None if best is None else (best[1], best[2])


def new_conversation_id() -> str:
    """A fresh conversation key (``"conv:"`` and 12 hex digits)."""
    return "conv:" + os.urandom(6).hex()


@dataclass
class _Entry:
    obs: Observation
    digests: list[str]
    conversation: str
    heads: list[frozenset[str]]


class RecentRequests:
    """The recent requests of one process, by (provider, model), for predecessor lookup.

    Args:
        max_requests: requests kept in all (the oldest is forgotten first).
        keep_values: requests whose parsed values stay in memory (the newest; older ones
            keep only digests and atoms: offsets stay exact to the atom, excerpts need
            values on both sides).
    """

    def __init__(self, max_requests: int = 1024, keep_values: int = 128) -> None:
        self.max_requests = max_requests
        self.keep_values = keep_values
        self._entries: OrderedDict[int, tuple[tuple[str, str], _Entry]] = OrderedDict()
        self._groups: dict[tuple[str, str], dict[int, _Entry]] = {}
        self._next = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every request."""
        with self._lock:
            self._entries.clear()
            self._groups.clear()

    def find(
        self,
        chain: DigestChain,
        provider: str | None,
        model: str | None,
        ts: float,
        window_s: float,
    ) -> tuple[Observation, Match, str] | None:
        """The predecessor of a request with ``chain`` sent at ``ts`` among the kept
        requests of the same provider and model no older than ``window_s`` seconds: its
        observation, how it matched and its conversation key; None when there is none."""
        group = (provider or "", model or "")
        with self._lock:
            pool = [
                e for e in self._groups.get(group, {}).values() if ts - window_s <= e.obs.ts <= ts
            ]
        mine = chain.digests()
        found = best_match(mine, ((e.digests, e.obs.ts) for e in pool))
        if found is None or not found[1].related:
            edited = _edited(mine, head_blocks(chain), pool)
            if edited is not None:
                found = edited
        if found is None:
            return None
        entry = pool[found[0]]
        return entry.obs, found[1], entry.conversation

    def add(
        self, obs: Observation, provider: str | None, model: str | None, conversation: str
    ) -> None:
        """Keep ``obs`` (of ``conversation``) as a candidate for later requests."""
        group = (provider or "", model or "")
        entry = _Entry(obs, obs.chain.digests(), conversation, head_blocks(obs.chain))
        with self._lock:
            self._entries[self._next] = (group, entry)
            self._groups.setdefault(group, {})[self._next] = entry
            self._next += 1
            while len(self._entries) > self.max_requests:
                key, (g, _) = self._entries.popitem(last=False)
                members = self._groups[g]
                del members[key]
                if not members:
                    del self._groups[g]
            # the entry that just left the newest ``keep_values``: digests only
            old_key = self._next - 1 - self.keep_values
            if old_key in self._entries:
                old = self._entries[old_key][1]
                if old.obs.chain.values:
                    old.obs = _without_values(old.obs)


def _edited(
    mine: list[str], heads: list[frozenset[str]], pool: list[_Entry]
) -> tuple[int, Match] | None:
    """Index and :class:`Match` (``edited_head``) of the most alike of the
    :data:`RECENT_EDIT` most recent entries of ``pool`` whose first difference from the new
    request is a head segment at least :data:`SIMILAR` alike and whose messages all reappear
    in it (the same conversation; another one that only shares a similar head stays
    another); None when there is none."""
    best: tuple[float, float, int] | None = None
    recent = sorted(range(len(pool)), key=lambda i: pool[i].obs.ts)[-RECENT_EDIT:]
    have = set(mine)
    for i in recent:
        theirs = pool[i].digests[len(pool[i].heads) :]
        if not theirs or not have.issuperset(theirs):
            continue  # its conversation (the messages after the head) is not in this request
        sim = edited_head(mine, heads, pool[i].digests, pool[i].heads)
        if sim >= SIMILAR and (best is None or (sim, pool[i].obs.ts) > best[:2]):
            best = (sim, pool[i].obs.ts, i)
    if best is None:
        return None
    theirs = pool[best[2]].digests
    run = _common_run(mine, theirs)
    n_after = len(theirs) - run - 1
    return best[2], Match(run, False, 0, n_after, len(mine) > len(theirs), edited_head=True)


def _without_values(obs: Observation) -> Observation:
    c = obs.chain
    chain = DigestChain(c.api, c.segments, c.breakpoints, c.atoms, (), c.automatic)
    return Observation(chain, obs.usage, obs.ts, obs.retention)
