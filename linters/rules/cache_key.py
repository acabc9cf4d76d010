"""PC011: a ``prompt_cache_key`` computed from the request's whole message list.

The key changes on every request (each one adds a message), so the provider routes each
request away from the machine holding the previous one's prefix. Facts from
:mod:`linters.flow.cache_keys`.
"""

from __future__ import annotations

from linters.model import Finding, Rule
from linters.rules.context import RuleContext

RULES = (
    Rule(
        "PC011",
        "cache-key-from-whole-conversation",
        "a `prompt_cache_key` computed from the request's whole message list",
    ),
)


def check(an: RuleContext) -> list[Finding]:
    """PC011 findings: one per key expression that uses the whole conversation."""
    out = []
    for k in an.facts.conversation_keys:
        if id(k.node) in an.reported:
            continue
        out.append(
            an.finding(
                "PC011",
                k.node,
                f"`prompt_cache_key` is computed from the whole `{k.name}` (the request's "
                f"`{k.field}` list or what it is made from) in `{k.function}()`: it changes on every request, so each "
                "request is routed away from the cache of the one before; derive the key from "
                "what stays the same (the system prompt, a session or user id)",
            )
        )
    return out
