"""The one table of provider prompt-cache limits: breakpoint counts, TTLs, minimum cacheable
lengths, hit increments -- each figure with the page it comes from and the date it was read.

Two levels:

- provider-wide figures as named constants (``ANTHROPIC_MAX_BREAKPOINTS``,
  ``ANTHROPIC_TTL_SECONDS``, ``OPENAI_CACHE_INCREMENT``, ...), read by the renderers
  (:mod:`promptcache.providers`), :func:`promptcache.check`, the emulator
  (:mod:`promptcache.simulation.emulation`) and the linter (``linters.rules.cache_control``);
- per-model rows (:class:`CacheLimits`, table :data:`MODEL_LIMITS`): look a model up with
  :func:`cache_limits`; unknown models of a known provider get that provider's
  conservative default row (flagged ``known=False``).

The rule pages ``linters/rule_pages/PC005.md`` and ``PC008.md`` (shown on the docs site as
``docs/rules/``) carry blocks generated from this module (``python -m linters.rule_docs``);
a test fails when they drift.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType

__all__ = [
    "ANTHROPIC_MAX_BREAKPOINTS",
    "ANTHROPIC_TTLS",
    "ANTHROPIC_TTL_SECONDS",
    "ANTHROPIC_LOOKBACK_BLOCKS",
    "ANTHROPIC_DEFAULT_MIN_TOKENS",
    "OPENAI_MIN_CACHED_TOKENS",
    "OPENAI_CACHE_INCREMENT",
    "OPENAI_RETENTIONS",
    "OPENAI_BREAKPOINT_TTLS",
    "OPENAI_MAX_WRITTEN_BREAKPOINTS",
    "OPENAI_MATCH_BREAKPOINTS",
    "OPENAI_TTL_SECONDS",
    "OPENAI_IN_MEMORY_MAX_SECONDS",
    "OPENAI_WRITE_PRICE_MULTIPLIER",
    "BEDROCK_MAX_BREAKPOINTS",
    "BEDROCK_TTLS",
    "GEMINI_DEFAULT_TTL",
    "CacheLimits",
    "cache_limits",
    "MODEL_LIMITS",
    "provider_of",
]

# Sources, read 2026-11-29 (stored copies of the pages, through the project's search tool).
# Where two current pages disagree, the row takes the larger minimum (a breakpoint below the
# real minimum is silently ignored by the provider; an explicit Gemini cache below it fails)
# and says so in ``notes``.
SRC_OPENAI_GUIDE = "https://developers.openai.com/api/docs/guides/prompt-caching"
SRC_OPENAI_SDK = (
    "openai-python 3.57.0, openai/types/chat/completion_create_params.py "
    "(PromptCacheOptions, PromptCacheBreakpoint, prompt_cache_retention)"
)
SRC_AZURE_RETENTION = "https://learn.microsoft.com/azure/foundry/openai/how-to/prompt-caching"
SRC_ANTHROPIC = "https://platform.claude.com/docs/en/build-with-claude/prompt-caching"
SRC_ANTHROPIC_QUOTE = (
    "minimums as quoted from the Anthropic docs in "
    "https://github.com/anthropics/anthropic-sdk-python/issues/1194"
)
SRC_ANTHROPIC_NEWER = (
    "https://docs.litellm.ai/docs/completion/prompt_caching (table for Claude "
    "5 / Opus 4.8); https://clawdemy.org/lessons/building-with-claude/"
    "prompt-caching-and-context-management/cheatsheet/"
)
SRC_ANTHROPIC_SDK = (
    "anthropic-python 2.14.0: anthropic/types/cache_control_ephemeral_param.py "
    "(ttl 5m|1h), message_create_params.py (top-level cache_control, diagnostics)"
)
SRC_GEMINI = "https://ai.google.dev/gemini-api/docs/caching"
SRC_BEDROCK = "https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html"
SRC_BEDROCK_API = (
    "https://docs.aws.amazon.com/bedrock/latest/APIReference/"
    "API_runtime_CachePointBlock.html (ttl 5m|1h); botocore 1.44 service model"
)
SRC_BEDROCK_TABLE = "https://portkey.ai/docs/integrations/llms/bedrock/prompt-caching (AWS table)"
READ_ON = "2026-11-29"

# --------------------------------------------------------------------------------------
# Provider-wide figures (all read 2026-11-29 from the pages named beside them)
# --------------------------------------------------------------------------------------

#: Anthropic: at most 4 ``cache_control`` blocks per request; the API's error text is
#: "A maximum of 4 blocks with cache_control may be provided. Found N." (SRC_ANTHROPIC).
ANTHROPIC_MAX_BREAKPOINTS = 4
#: Anthropic: the ``ttl`` values of ``cache_control``, default first (SRC_ANTHROPIC;
#: SRC_ANTHROPIC_SDK: ``Literal["5m", "1h"]``).
ANTHROPIC_TTLS: tuple[str, ...] = ("5m", "1h")
#: Anthropic: those lifetimes in seconds (SRC_ANTHROPIC).
ANTHROPIC_TTL_SECONDS: Mapping[str, float] = MappingProxyType({"5m": 300.0, "1h": 3600.0})
#: Anthropic: block boundaries checked for a hit per breakpoint, its own block included
#: (SRC_ANTHROPIC: "about 20 blocks before").
ANTHROPIC_LOOKBACK_BLOCKS = 20
#: Anthropic: minimum cacheable length assumed for a model the table does not know (the
#: smallest figure of the current Sonnet rows, SRC_ANTHROPIC).
ANTHROPIC_DEFAULT_MIN_TOKENS = 1024

#: OpenAI: prompts (and cached prefixes) shorter than this never hit (SRC_OPENAI_GUIDE).
OPENAI_MIN_CACHED_TOKENS = 1024
#: OpenAI, models before GPT-5.6: ``cached_tokens`` grows in steps of this many tokens
#: after the minimum (SRC_OPENAI_GUIDE).
OPENAI_CACHE_INCREMENT = 128
#: OpenAI: the values of ``prompt_cache_retention`` (SRC_OPENAI_SDK).
OPENAI_RETENTIONS: tuple[str, ...] = ("in_memory", "24h")
#: OpenAI, GPT-5.6+: the TTLs of ``prompt_cache_breakpoint`` markers, default first
#: (SRC_OPENAI_GUIDE, SRC_OPENAI_SDK).
OPENAI_BREAKPOINT_TTLS: tuple[str, ...] = ("30m", "12h")
#: OpenAI, GPT-5.6+: at most this many breakpoints are written per request (SRC_OPENAI_GUIDE).
OPENAI_MAX_WRITTEN_BREAKPOINTS = 4
#: OpenAI, GPT-5.6+: matching considers this many latest breakpoints (SRC_OPENAI_GUIDE).
OPENAI_MATCH_BREAKPOINTS = 80
#: OpenAI lifetimes in seconds: idle expiry for in-memory retention (lower bound of the
#: documented 5-10 minutes), 24h extended retention, and the GPT-5.6+ breakpoint TTLs
#: (SRC_OPENAI_GUIDE).
OPENAI_TTL_SECONDS: Mapping[str, float] = MappingProxyType(
    {"in_memory": 300.0, "24h": 86400.0, "30m": 1800.0, "12h": 43200.0}
)
#: OpenAI in-memory retention: an entry lives at most one hour after it was written
#: (SRC_OPENAI_GUIDE).
OPENAI_IN_MEMORY_MAX_SECONDS = 3600.0
#: OpenAI GPT-5.6+: cache writes cost this multiple of the uncached input price
#: (SRC_OPENAI_GUIDE).
OPENAI_WRITE_PRICE_MULTIPLIER = 1.25

#: Bedrock Converse: at most 4 ``cachePoint`` blocks per request (SRC_BEDROCK).
BEDROCK_MAX_BREAKPOINTS = 4
#: Bedrock: the ``cachePoint.ttl`` values, default first; 1h only on Claude 4.5 and later
#: (SRC_BEDROCK_API).
BEDROCK_TTLS: tuple[str, ...] = ("5m", "1h")
#: Gemini: the default lifetime of an explicit cached content (SRC_GEMINI).
GEMINI_DEFAULT_TTL = "1h"


@dataclass(frozen=True)
class CacheLimits:
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
        cacheable: request fields that may carry a marker (Bedrock Nova: system, messages).
        min_per_segment: the minimum applies to each checkpoint's own segment, not only to the
            cumulative prefix (Bedrock: "the first checkpoint after 1,024 tokens, the second
            after 2,048").
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
    cacheable: tuple[str, ...] = ("tools", "system", "messages")
    min_per_segment: bool = False


def _openai(
    family: str, *, retention: tuple[str, ...] = (), explicit: bool = False, notes: str = ""
) -> CacheLimits:
    return CacheLimits(
        "openai",
        family,
        min_tokens=OPENAI_MIN_CACHED_TOKENS,
        increment=OPENAI_CACHE_INCREMENT,
        ttls=(
            OPENAI_BREAKPOINT_TTLS[:1]
            if explicit
            else OPENAI_RETENTIONS[:1] + (OPENAI_RETENTIONS[1:] if retention else ())
        ),
        max_breakpoints=OPENAI_MAX_WRITTEN_BREAKPOINTS if explicit else 0,
        retention=retention,
        explicit_breakpoints=explicit,
        source=f"{SRC_OPENAI_GUIDE}; {SRC_OPENAI_SDK}; {SRC_AZURE_RETENTION}",
        notes=notes,
    )


def _anthropic(
    family: str, min_tokens: int, notes: str = "", *, source: str = SRC_ANTHROPIC_QUOTE
) -> CacheLimits:
    return CacheLimits(
        "anthropic",
        family,
        min_tokens,
        ttls=ANTHROPIC_TTLS,
        max_breakpoints=ANTHROPIC_MAX_BREAKPOINTS,
        lookback_blocks=ANTHROPIC_LOOKBACK_BLOCKS,
        source=f"{SRC_ANTHROPIC}; {source}; {SRC_ANTHROPIC_SDK}",
        notes=notes,
    )


def _bedrock(
    family: str,
    min_tokens: int,
    *,
    ttls: tuple[str, ...] = BEDROCK_TTLS[:1],
    cacheable: tuple[str, ...] = ("tools", "system", "messages"),
    notes: str = "",
) -> CacheLimits:
    return CacheLimits(
        "bedrock",
        family,
        min_tokens,
        ttls=ttls,
        max_breakpoints=BEDROCK_MAX_BREAKPOINTS,
        lookback_blocks=ANTHROPIC_LOOKBACK_BLOCKS if family.startswith("claude") else 0,
        source=f"{SRC_BEDROCK}; {SRC_BEDROCK_API}; {SRC_BEDROCK_TABLE}",
        cacheable=cacheable,
        min_per_segment=True,
        notes=notes,
    )


def _gemini(family: str, min_tokens: int, notes: str = "") -> CacheLimits:
    return CacheLimits(
        "gemini",
        family,
        min_tokens,
        ttls=(GEMINI_DEFAULT_TTL,),
        max_breakpoints=0,
        source=SRC_GEMINI,
        notes=notes,
    )


_R24 = OPENAI_RETENTIONS
_R24_ONLY = OPENAI_RETENTIONS[1:]

MODEL_LIMITS: tuple[CacheLimits, ...] = (
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
    # ---- Anthropic: up to 4 cache_control breakpoints, 20-block lookback, TTL 5m | 1h (a 1h
    # breakpoint may not follow a 5m one); cache order tools -> system -> messages.
    _anthropic("claude-opus-5", 512, source=SRC_ANTHROPIC_NEWER),
    _anthropic("claude-fable-5", 512, source=SRC_ANTHROPIC_NEWER),
    _anthropic("claude-mythos-5", 512, source=SRC_ANTHROPIC_NEWER),
    _anthropic("claude-sonnet-5", 1024, source=SRC_ANTHROPIC_NEWER),
    _anthropic("claude-opus-4-8", 1024, source=SRC_ANTHROPIC_NEWER),
    _anthropic(
        "claude-opus-4-7",
        4096,
        "one page says 2,048; the larger figure is used",
        source=SRC_ANTHROPIC_NEWER,
    ),
    _anthropic("claude-mythos-preview", 4096, source=SRC_ANTHROPIC_NEWER),
    _anthropic("claude-opus-4-6", 4096),
    _anthropic("claude-opus-4-5", 4096),
    _anthropic(
        "claude-sonnet-4-6", 1024, "documented 1,024; issue #1194 observed caching only from 2,048"
    ),
    _anthropic("claude-sonnet-4-5", 1024),
    _anthropic("claude-opus-4-1", 1024),
    _anthropic("claude-opus-4", 1024),
    _anthropic("claude-sonnet-4", 1024),
    _anthropic("claude-3-7-sonnet", 1024),
    _anthropic("claude-haiku-4-5", 4096),
    _anthropic("claude-3-5-haiku", 2048),
    _anthropic("claude-3-haiku", 2048),
    # ---- Amazon Bedrock Converse: cachePoint blocks, at most 4 a request, each checkpoint
    # after at least the minimum since the previous one; ttl 5m | 1h (1h on Claude 4.5+).
    _bedrock("claude-opus-4-5", 4096, ttls=BEDROCK_TTLS),
    _bedrock("claude-opus-4-6", 4096, ttls=BEDROCK_TTLS),
    _bedrock("claude-opus-4-7", 4096, ttls=BEDROCK_TTLS),
    _bedrock("claude-haiku-4-5", 4096, ttls=BEDROCK_TTLS),
    _bedrock("claude-sonnet-4-5", 1024, ttls=BEDROCK_TTLS),
    _bedrock("claude-sonnet-4-6", 1024, ttls=BEDROCK_TTLS),
    _bedrock("claude-opus-4-8", 1024, ttls=BEDROCK_TTLS),
    _bedrock("claude-opus-5", 512, ttls=BEDROCK_TTLS),
    _bedrock("claude-sonnet-5", 1024, ttls=BEDROCK_TTLS),
    _bedrock("claude-opus-4", 1024),
    _bedrock("claude-sonnet-4", 1024),
    _bedrock("claude-3-7-sonnet", 1024),
    _bedrock("claude-3-5-haiku", 2048),
    _bedrock(
        "nova-",
        1000,
        cacheable=("system", "messages"),
        notes="Nova: tools not cacheable; at most 32k tokens cached",
    ),
    # ---- Gemini: implicit caching (automatic) and explicit cached contents (default TTL 1h)
    # above the same per-model minimum. The current pages disagree for 2.5 (1,024/4,096 on
    # the English page, 2,048 on a newer localized one); the larger figure is used.
    _gemini("gemini-2.5-flash", 2048, "English page: 1,024; newer page: 2,048"),
    _gemini("gemini-2.5-pro", 4096, "English page: 4,096; newer page: 2,048"),
    _gemini(
        "gemini-3",
        4096,
        "Gemini 3.x Flash and Pro: 4,096 (3 Flash Preview: 1,024 on the English page)",
    ),
)

_DEFAULTS: dict[str, CacheLimits] = {
    "openai": CacheLimits(
        "openai",
        "",
        OPENAI_MIN_CACHED_TOKENS,
        OPENAI_CACHE_INCREMENT,
        OPENAI_RETENTIONS[:1],
        source=SRC_OPENAI_GUIDE,
        known=False,
    ),
    "anthropic": CacheLimits(
        "anthropic",
        "",
        ANTHROPIC_DEFAULT_MIN_TOKENS,
        ttls=ANTHROPIC_TTLS,
        max_breakpoints=ANTHROPIC_MAX_BREAKPOINTS,
        lookback_blocks=ANTHROPIC_LOOKBACK_BLOCKS,
        source=SRC_ANTHROPIC,
        known=False,
    ),
    "bedrock": CacheLimits(
        "bedrock",
        "",
        1024,
        ttls=BEDROCK_TTLS[:1],
        max_breakpoints=BEDROCK_MAX_BREAKPOINTS,
        source=SRC_BEDROCK,
        known=False,
        min_per_segment=True,
    ),
    "gemini": CacheLimits(
        "gemini", "", 4096, ttls=(GEMINI_DEFAULT_TTL,), source=SRC_GEMINI, known=False
    ),
    "local": CacheLimits(
        "local", "", 0, 16, (), notes="local engine: full 16-token KV blocks", known=False
    ),
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


# What may follow a Claude family name in the same model's ids: a snapshot date (also
# Vertex's "@20250929"), "-latest", a Bedrock version ("-v1:0").
_CLAUDE_SNAPSHOT = re.compile(r"^(?:[-@](?:\d{8}|latest))?(?:-v\d+(?::\d+)?)?$")


@lru_cache(maxsize=1024)
def cache_limits(model: str, provider: str | None = None) -> CacheLimits:
    """The :class:`CacheLimits` row for ``model`` (longest matching family prefix).

    Args:
        model: the model name as sent to the provider.
        provider: ``"openai"``, ``"anthropic"``, ``"gemini"``, ``"bedrock"`` or ``"local"``;
            guessed from the name when omitted.

    Raises:
        ValueError: ``provider`` is none of those.
    """
    provider = provider or provider_of(model)
    name = model.lower()
    if provider == "bedrock":
        # "us.anthropic.claude-sonnet-4-5-20250929-v1:0" -> "claude-sonnet-4-5-20250929-v1:0"
        name = name.split("anthropic.", 1)[-1] if "anthropic." in name else name.split(".", 1)[-1]
    if name.startswith("models/"):
        name = name[len("models/") :]
    best: CacheLimits | None = None
    for row in MODEL_LIMITS:
        if row.provider == provider and name.startswith(row.family):
            if row.family.startswith("claude") and not _CLAUDE_SNAPSHOT.match(
                name[len(row.family) :]
            ):
                # claude-sonnet-5-5 is not a snapshot of claude-sonnet-5: its minimum is not
                # documented here, so it gets the provider default (known=False)
                continue
            if best is None or len(row.family) > len(best.family):
                best = row
    if best is not None:
        return best
    default = _DEFAULTS.get(provider)
    if default is None:
        raise ValueError(f"no cache limits for provider {provider!r}")
    return default
