"""``promptcache simulate --from-ledger``: the ledger's recorded traffic as trace requests.

Since schema version 5 every record whose request body was seen keeps its digest chain
(:mod:`promptcache.misses.digest_chain`: one digest and character length per segment in cache
order, the breakpoints' character offsets and TTLs) beside its token counts. This module
turns each such record into a **segments** trace line -- the JSON Lines format of
``promptcache simulate`` and ``wrap(..., trace=PATH)`` -- which ``simulate`` reads with
:func:`promptcache.simulation.simulate.load_trace` and replays as it does a file: recorded traffic,
no prompt text, no hand-written trace, one simulator.

Mapping (one record -> one request):

- ``ts``, ``model``, ``output_tokens``: the record's;
- segments: the chain's segments, cut again at every breakpoint that ends inside one
  (a marker on an inner content part of a message); ``hash`` is the segment digest
  (``digest@start-end`` for a piece of a cut segment), ``cache`` the breakpoint's TTL,
  ``layer`` the segment kind (tools, system, messages; routing settings such as
  ``tool_choice`` or ``response_format`` have no layer and ``boundary: false``);
- tokens: the ledger keeps a record's prompt tokens (uncached + cache read + cache write),
  not each segment's, so a segment's tokens are estimated in proportion to its characters
  (``round(chars * prompt_tokens / chain_chars)`` at each cut, the estimate miss
  attribution uses) and fixed at the segment's first appearance, so equal digests always
  carry equal token counts;
- OpenAI ``prompt_cache_key``: the digest of the ``$.prompt_cache_key`` segment (equal key
  = equal partition; the segment itself is left out of the prompt: it is routing, not
  tokens); ``retention``: the ``prompt_cache_retention`` stored with the chain.

Known approximations: token counts per segment are estimates (above); a message with
several content parts counts as one content block for Anthropic's 20-block lookback unless
a breakpoint cuts it.
"""

from __future__ import annotations

import json
from typing import Any

from promptcache.ledger.tracker import LedgerError, Record, Tracker, parse_since
from promptcache.misses.digest_chain import DigestChain

__all__ = ["trace_rows_from_ledger"]

_LAYERS = {"tools": "tools", "system": "system", "messages": "messages"}


def _chains(tracker: Tracker, since: float | None) -> dict[str, dict[str, Any]]:
    """``record_id -> chain JSON`` for the records since ``since`` that have one."""
    d = tracker.store.dialect
    sql = "SELECT record_id, chain FROM requests WHERE chain IS NOT NULL"
    params: list[Any] = []
    if since is not None:
        sql += f" AND ts >= {d.param}"
        params.append(since)
    cur = tracker.store.cursor()
    cur.execute(sql, params)
    return {rid: json.loads(text) for rid, text in cur.fetchall()}


def _row(
    data: dict[str, Any], rec: Record, memo: dict[tuple[str, int, int], int]
) -> dict[str, Any]:
    chain = DigestChain.from_json(data)
    # OpenAI's prompt_cache_key picks the cache partition; it is not prompt text
    key_seg = next((s for s in chain.segments if s.path == "$.prompt_cache_key"), None)
    key_chars = key_seg.chars if key_seg is not None else 0
    total_chars = chain.chars - key_chars
    prompt = rec.usage.prompt_tokens

    def tokens_at(chars: int) -> int:
        if key_seg is not None and chars >= key_seg.end:
            chars -= key_chars
        if total_chars <= 0:
            return 0
        return int(round(chars * prompt / total_chars))

    bps: dict[int, str] = {}
    for bp in chain.breakpoints:
        bps.setdefault(bp.end, bp.ttl)
    segs: list[dict[str, Any]] = []
    for s in chain.segments:
        if s is key_seg:
            continue
        cuts = sorted({e for e in bps if s.start < e < s.end} | {s.end})
        start = s.start
        for end in cuts:
            whole = start == s.start and end == s.end
            memo_key = (s.digest, start - s.start, end - s.start)
            if memo_key not in memo:
                memo[memo_key] = max(0, tokens_at(end) - tokens_at(start))
            seg: dict[str, Any] = {
                "tokens": memo[memo_key],
                "hash": s.digest if whole else f"{s.digest}@{start - s.start}-{end - s.start}",
            }
            if end in bps:
                seg["cache"] = bps[end]
            if s.kind == "setting":
                seg["boundary"] = False
            if s.kind in _LAYERS:
                seg["layer"] = _LAYERS[s.kind]
            segs.append(seg)
            start = end
    row: dict[str, Any] = {
        "ts": float(rec.ts),
        "model": rec.model,
        "output_tokens": int(rec.usage.output_tokens),
    }
    if key_seg is not None:
        row["prompt_cache_key"] = key_seg.digest
    if isinstance(data.get("retention"), str):
        row["retention"] = data["retention"]
    row["segments"] = segs
    return row


def trace_rows_from_ledger(tracker: Tracker, since: Any = None) -> tuple[list[dict[str, Any]], int]:
    """The ledger's records since ``since`` (anything :func:`promptcache.ledger.tracker.parse_since`
    accepts) as segments trace lines (dicts, oldest first; ``json.dumps`` each for a JSONL
    trace), and how many records were skipped for having no digest chain (recorded before
    schema v5 or without their request body).

    Raises :class:`~promptcache.ledger.tracker.LedgerError` when nothing is selected, no selected
    record has a digest chain, or a stored chain is unreadable; ``ValueError`` for a bad
    ``since``."""
    lo = parse_since(since)
    records = tracker.records(since=lo)
    if not records:
        where = f" since {since}" if since is not None else ""
        raise LedgerError(f"the ledger {tracker.location} has no requests{where}")
    chains = _chains(tracker, lo)
    memo: dict[tuple[str, int, int], int] = {}
    out: list[dict[str, Any]] = []
    skipped = 0
    for rec in records:
        data = chains.get(rec.record_id)
        if data is None or not data.get("segments"):
            skipped += 1
            continue
        try:
            out.append(_row(data, rec, memo))
        except ValueError as e:
            raise LedgerError(f"record {rec.record_id}: unreadable digest chain: {e}") from None
    if not out:
        raise LedgerError(
            f"none of the {len(records)} selected records in {tracker.location} has a "
            "digest chain (recorded before ledger schema v5, or without the request body); "
            "record with promptcache.wrap(client) on this version, or replay a JSONL trace"
        )
    return out, skipped
