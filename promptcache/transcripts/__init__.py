"""Transcript import: agent CLIs' own session logs into the ledger, one record per API call.

Owns the tolerant JSON Lines reader (:mod:`~.jsonl`: a truncated last line, a line that is not
UTF-8 or not JSON is skipped with one warning each), the Claude Code reader
(:mod:`~.claude_code`, ``~/.claude/projects``), the Codex CLI reader (:mod:`~.codex`,
``~/.codex/sessions``), the causes that can be told without the request
(:mod:`~.causes`: ``ttl_expired`` from the gap, ``prefix_changed`` when the read falls back
to a stable boundary, ``unknown`` otherwise), the writer that makes re-imports idempotent
(:mod:`~.importer`) and ``promptcache import`` (:mod:`~.cli`).

A floor of its own just below ``promptcache.cli`` (beside ``promptcache.proxy``): may import
the ledger, ``promptcache.misses``, ``promptcache.providers`` and the top-level modules; it
needs nothing of the integrations and nothing imports it back.
"""
