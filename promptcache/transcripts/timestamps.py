"""ISO 8601 timestamps of transcripts as Unix seconds."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

__all__ = ["parse_ts"]


def parse_ts(value: Any) -> float | None:
    """Unix seconds of an ISO 8601 text (``2025-10-29T07:35:14.293Z``; no zone: UTC), or
    None when ``value`` is not one."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()
