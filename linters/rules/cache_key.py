"""Prompt cache keys that change on every request.

PC011: a ``prompt_cache_key`` computed from the request's whole message list (each request
adds a message). PC014: one made from a clock, a random UUID or a random number evaluated
for each request. Either way the provider routes each request away from the machine
holding the previous one's prefix. Facts from :mod:`linters.flow.cache_keys`.
"""

from __future__ import annotations

from linters.flow.cache_keys import volatile_keys
from linters.model import Finding, Rule
from linters.rules.context import RuleContext

RULES = (
    Rule(
        "PC011",
        "cache-key-from-whole-conversation",
        "a `prompt_cache_key` computed from the request's whole message list",
    ),
    Rule(
        "PC014",
        "cache-key-new-every-request",
        "a `prompt_cache_key` made from a clock, UUID or random value on every request",
    ),
)


def check(an: RuleContext) -> list[Finding]:
    """PC011 findings (one per key expression that uses the whole conversation), then
    PC014 findings (one per key expression made from a per-request volatile value)."""
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
    if b"prompt_cache_key" not in an.source:
        return out
    for v in volatile_keys(an.ev):
        if id(v.node) in an.reported:
            continue
        out.append(
            an.finding(
                "PC014",
                v.node,
                f"`prompt_cache_key` is made from {v.why} in `{v.function}()`: a new key on "
                "every request, and OpenAI routes a request by the prompt's first tokens "
                "combined with this key, so no request reaches the machine that cached the "
                "previous one's prefix; use a key that stays the same for the conversation "
                "(a session, user or conversation id)",
            )
        )
    return out
