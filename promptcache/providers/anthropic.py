"""Provider module: anthropic — renders requests for its official client and parses its usage.

Two sections, owned by different parts of the SDK: request rendering (used by
`promptcache.build`) and usage parsing (used by `promptcache.usage`).
"""

from __future__ import annotations

# --- request rendering ---------------------------------------------------------------


# --- usage parsing -------------------------------------------------------------------
