"""One API call read from a transcript, before it becomes a ledger record."""

from __future__ import annotations

from dataclasses import dataclass

from promptcache.providers.usage_record import Usage

__all__ = ["TranscriptCall"]


@dataclass
class TranscriptCall:
    """One API call.

    Attributes:
        key: a stable id of the call (the record id is derived from it, so re-importing
            writes nothing twice), e.g. ``claude-code:<message.id>:<requestId>``.
        ts: when the response was logged (Unix seconds).
        model: the model the call used.
        provider: the ledger's provider label (``anthropic``, ``openai``).
        api: the API the agent called (``messages``, ``responses``).
        lineage: the conversation the call belongs to (session, and subagent for Claude
            Code sidechains).
        usage: the normalized usage.
        ttl_1h: the call wrote 1-hour cache entries (Anthropic ``ephemeral_1h_input_tokens``).
        source: ``file:line`` of the line the usage came from.
    """

    key: str
    ts: float
    model: str | None
    provider: str
    api: str
    lineage: str
    usage: Usage
    ttl_1h: bool = False
    source: str = ""
