"""Write transcript calls to the ledger, once each however often they are imported.

Each call's ``record_id`` is derived from its stable key (the SHA-256 of
``TranscriptCall.key``, first 32 hex digits), and the ledger ignores an id it already has, so
re-importing a folder (or a transcript that grew since) writes only the new calls. Causes
come from :func:`~promptcache.transcripts.causes.assign_causes`; each record stores its
lineage and cause with an empty digest chain (the transcript has no request to digest).
Calls are written in transactions of :data:`BATCH`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from promptcache.ledger.tracker import Tracker
from promptcache.misses.attribution import Attributed
from promptcache.misses.digest_chain import DigestChain
from promptcache.transcripts.calls import TranscriptCall
from promptcache.transcripts.causes import assign_causes

__all__ = ["ImportResult", "import_calls", "record_id", "BATCH"]

#: Calls per ledger transaction.
BATCH = 2000


@dataclass(frozen=True)
class ImportResult:
    """What an import did: ``calls`` read (after de-duplication), ``new`` records written
    (the rest were in the ledger already), ``duplicates`` lines of a call seen twice
    (another file with the same call, e.g. a resumed session)."""

    calls: int
    new: int
    duplicates: int


def record_id(call: TranscriptCall) -> str:
    """The ledger record id of ``call`` (stable across imports)."""
    return hashlib.sha256(call.key.encode("utf-8")).hexdigest()[:32]


def import_calls(tracker: Tracker, calls: Iterable[TranscriptCall], source: str) -> ImportResult:
    """Write ``calls`` to ``tracker`` (``source``: ``claude-code`` or ``codex``, kept in each
    record's metadata as ``import``). Raises :class:`~promptcache.ledger.LedgerError` when
    the ledger cannot be written."""
    unique: dict[str, TranscriptCall] = {}
    duplicates = 0
    for c in calls:
        if c.key in unique:
            duplicates += 1
        else:
            unique[c.key] = c
    causes = assign_causes(unique.values())
    before = tracker.count()
    batch: list[tuple] = []
    for c in sorted(unique.values(), key=lambda c: c.ts):
        attributed = Attributed(causes[c.key], DigestChain(c.api, ()), c.lineage)
        fields = dict(
            model=c.model,
            provider=c.provider,
            api=c.api,
            ts=c.ts,
            record_id=record_id(c),
            metadata={"import": source},
            attributed=attributed,
        )
        batch.append((c.usage, fields))
        if len(batch) >= BATCH:
            tracker.record_many(batch)
            batch = []
    if batch:
        tracker.record_many(batch)
    return ImportResult(len(unique), tracker.count() - before, duplicates)
