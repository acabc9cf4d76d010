"""The rules, one module per family, and the registry of every code.

Each family module exposes ``RULES`` (its :class:`~linters.model.Rule` entries) and
``check(analysis) -> list[Finding]``. Families run in the order below; a later family skips
syntax nodes an earlier one already reported (PC001 wins over PC004, PC004 over PC007).
"""

from __future__ import annotations

from types import ModuleType

from linters.model import Rule
from linters.rules import (
    cache_control,
    cache_key,
    cleared_breakpoint,
    conversion,
    layout,
    ordering,
    rolling_breakpoint_roles,
    serialization,
    shared_history_breakpoint,
    text_setter,
    volatile,
)

FAMILIES = (
    volatile,
    serialization,
    ordering,
    layout,
    cache_control,
    cleared_breakpoint,
    shared_history_breakpoint,
    rolling_breakpoint_roles,
    cache_key,
    text_setter,
    conversion,
)

PARSE_ERROR = Rule(
    "PC900",
    "parse-error",
    "the file could not be parsed (Python syntax error, or a payload that is not JSON)",
)
PAYLOAD_UNCHECKED = Rule(
    "PC901",
    "payload-not-checked",
    "a request payload could not be checked (promptcache.check is missing or refused it)",
)

RULES: dict[str, Rule] = {r.code: r for fam in FAMILIES for r in fam.RULES}
RULES[PARSE_ERROR.code] = PARSE_ERROR
RULES[PAYLOAD_UNCHECKED.code] = PAYLOAD_UNCHECKED
RULES = dict(sorted(RULES.items()))


def family_codes(family: ModuleType) -> frozenset[str]:
    """The codes a family module reports."""
    return frozenset(r.code for r in family.RULES)
