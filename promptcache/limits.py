"""Provider prompt-cache rules per model family: minimum cacheable length, TTLs, breakpoint
limits -- each row with the page it comes from and the date it was read.

Look a model up with :func:`cache_rules`; unknown models of a known provider get that
provider's conservative default row (flagged ``known=False``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

__all__ = ["CacheRules", "cache_rules", "RULES", "provider_of"]

# Sources (read 2026-11-29 through the search tool's stored copies of the pages).
SRC_OPENAI_GUIDE = "https://developers.openai.com/api/docs/guides/prompt-caching"
SRC_OPENAI_SDK = ("openai-python 3.57.0, openai/types/chat/completion_create_params.py "
                  "(PromptCacheOptions, prompt_cache_retention)")
SRC_AZURE_RETENTION = "https://learn.microsoft.com/azure/foundry/openai/how-to/prompt-caching"
SRC_ANTHROPIC = "https://docs.claude.com/en/docs/build-with-claude/prompt-caching"
SRC_GEMINI = "https://ai.google.dev/gemini-api/docs/caching"
SRC_BEDROCK = "https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html"
READ_ON = "2026-11-29"


@dataclass(frozen=True)
class CacheRules:
    """Prompt-cache rules of one provider's model family.

    Attributes:
        provider: ``"openai"``, ``"anthropic"``, ``"gemini"``, ``"bedrock"`` or ``"local"``.
        family: the model-name prefix the row matches (longest prefix wins).
        min_tokens: minimum cacheable prefix length in tokens (a breakpoint on a shorter
            prefix writes nothing).
        increment: cache hits are counted in steps of this many tokens after the minimum
            (OpenAI: 128), 0 when not documented.
        ttls: supported cache lifetimes, default first (``"5m"``, ``"1h"``, ``"24h"``, ...).
        max_breakpoints: explicit breakpoints one request may carry (0: none accepted).
        lookback_blocks: content blocks checked before each breakpoint for an earlier hit
            (Anthropic: 20), 0 when unlimited or not applicable.
        retention: values of OpenAI's ``prompt_cache_retention`` the model accepts.
        explicit_breakpoints: the model accepts OpenAI ``prompt_cache_breakpoint`` markers.
        source: the page the figures come from; ``read_on``: the date it was read.
        known: False for a provider default applied to an unknown model.
    """

    provider: str
    family: str
    min_tokens: int
    increment: int = 0
    ttls: tuple[str, ...] = ()
    max_breakpoints: int = 0
    lookback_blocks: int = 0
    retention: tuple[str, ...] = ()
    explicit_breakpoints: bool = False
    source: str = ""
    read_on: str = READ_ON
    known: bool = True
    notes: str = field(default="", compare=False)


def _openai(family: str, *, retention: tuple[str, ...] = (), explicit: bool = False,
            notes: str = "") -> CacheRules:
    return CacheRules(
        "openai", family, min_tokens=1024, increment=128,
        ttls=("30m",) if explicit else ("in_memory",) + (("24h",) if retention else ()),
        max_breakpoints=4 if explicit else 0, retention=retention,
        explicit_breakpoints=explicit,
        source=f"{SRC_OPENAI_GUIDE}; {SRC_OPENAI_SDK}; {SRC_AZURE_RETENTION}", notes=notes)


_R24 = ("in_memory", "24h")
_R24_ONLY = ("24h",)

RULES: tuple[CacheRules, ...] = (
    # ---- OpenAI: automatic caching from 1,024 tokens in 128-token steps (gpt-4o and newer).
    # Extended (24h) retention: gpt-4.1, gpt-5, gpt-5-codex, gpt-5.1*, gpt-5.2, gpt-5.3-codex,
    # gpt-5.4 accept in_memory|24h; gpt-5.5 and later accept 24h only. gpt-5.6 and later take
    # explicit prompt_cache_breakpoint markers (up to 4 writes a request) and
    # prompt_cache_options; prompt_cache_retention is deprecated for them.
    _openai("gpt-4o"),
    _openai("gpt-4o-mini"),
    _openai("gpt-4.1", retention=_R24),
    _openai("gpt-4.5"),
    _openai("o1"),
    _openai("o3"),
    _openai("o4"),
    _openai("gpt-5", retention=_R24),
    _openai("gpt-5-codex", retention=_R24),
    _openai("gpt-5.1", retention=_R24),
    _openai("gpt-5.2", retention=_R24),
    _openai("gpt-5.3", retention=_R24),
    _openai("gpt-5.4", retention=_R24),
    _openai("gpt-5.5", retention=_R24_ONLY),
    _openai("gpt-5.6", explicit=True),
    _openai("gpt-5.7", explicit=True),
    _openai("gpt-6", explicit=True),
)

_DEFAULTS: dict[str, CacheRules] = {
    "openai": CacheRules("openai", "", 1024, 128, ("in_memory",), source=SRC_OPENAI_GUIDE,
                         known=False),
    "local": CacheRules("local", "", 0, 16, (), notes="local engine: full 16-token KV blocks",
                        known=False),
}


def provider_of(model: str) -> str:
    """Best guess of the provider from a model name (``"local"`` when nothing matches)."""
    name = model.lower()
    if name.startswith(("claude", "anthropic.")) and not name.startswith("anthropic.claude"):
        return "anthropic"
    if "anthropic.claude" in name or name.startswith(("amazon.", "us.", "eu.", "apac.", "global.")):
        return "bedrock"
    if name.startswith(("gemini", "models/gemini")):
        return "gemini"
    if name.startswith(("gpt-", "o1", "o3", "o4", "chatgpt", "codex")):
        return "openai"
    return "local"


def cache_rules(model: str, provider: Optional[str] = None) -> CacheRules:
    """The :class:`CacheRules` row for ``model`` (longest matching family prefix).

    Args:
        model: the model name as sent to the provider.
        provider: ``"openai"``, ``"anthropic"``, ``"gemini"``, ``"bedrock"`` or ``"local"``;
            guessed from the name when omitted.
    """
    provider = provider or provider_of(model)
    name = model.lower()
    if provider == "bedrock":
        # "us.anthropic.claude-sonnet-4-5-20250929-v1:0" -> "claude-sonnet-4-5-20250929-v1:0"
        name = name.split("anthropic.", 1)[-1] if "anthropic." in name else name.split(".", 1)[-1]
    if name.startswith("models/"):
        name = name[len("models/"):]
    best: Optional[CacheRules] = None
    for row in RULES:
        if row.provider == provider and name.startswith(row.family):
            if best is None or len(row.family) > len(best.family):
                best = row
    if best is not None:
        return best
    default = _DEFAULTS.get(provider)
    if default is None:
        raise ValueError(f"no cache rules for provider {provider!r}")
    return default
