"""``Prompt.explain()``: what a prompt will look like to the provider's cache -- the layers with
their token counts, where the breakpoints went and why, how much will be cached, and every
warning."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from promptcache.limits import CacheLimits, cache_limits, provider_of
from promptcache.prompt.breakpoints import (
    PlacedBreakpoint,
    block_tokens,
    frozen_text_tokens,
    plan,
    session_text_tokens,
    tool_tokens,
)
from promptcache.prompt.tokens import count_tokens
from promptcache.providers.anthropic import layout as anthropic_layout
from promptcache.providers.anthropic import plan_for
from promptcache.providers.bedrock import layout
from promptcache.providers.openai import render

__all__ = ["Explanation", "LayerInfo", "explain"]


@dataclass(frozen=True)
class LayerInfo:
    """One layer: ``name``, number of ``items`` (texts, tools, messages, blocks), its
    ``tokens`` and the cumulative prefix tokens up to its end (``cumulative``)."""

    name: str
    items: int
    tokens: int
    cumulative: int


@dataclass
class Explanation:
    """The result of :func:`explain`; ``str()`` (and ``repr()``) is the report text, so
    ``print(prompt.explain(model))`` shows it once.

    Attributes:
        provider, model: what the prompt was explained for.
        rules: the :class:`promptcache.limits.CacheLimits` row applied.
        prefix_hash: the prompt's prefix hash.
        layers: :class:`LayerInfo` per non-empty layer, in prompt order.
        breakpoints: the breakpoints placed (explicit-marker providers).
        skipped: why candidate breakpoints were not placed.
        cacheable_tokens: tokens a following request with the same prefix can read from the
            cache (up to the last breakpoint; for automatic caches, the stable prefix rounded
            down to the provider's granularity).
        total_tokens: the whole prompt.
        approximate: whether the counts are estimates (no exact tokenizer for the model).
        notes: how the provider caches; warnings: volatile values and other problems.
    """

    provider: str
    model: str
    rules: CacheLimits
    prefix_hash: str
    layers: list[LayerInfo]
    breakpoints: list[PlacedBreakpoint]
    skipped: list[str]
    cacheable_tokens: int
    total_tokens: int
    approximate: bool
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    block_numbers: dict[int, int] = field(default_factory=dict)

    def __repr__(self) -> str:
        return str(self)

    def __str__(self) -> str:
        approx = "~" if self.approximate else ""
        lines = [
            f"prompt {self.prefix_hash[:16]} for {self.provider} {self.model} "
            f"(minimum cacheable prefix {self.rules.min_tokens} tokens"
            f"{'' if self.rules.known else ', provider default'})"
        ]
        lines.append(f"  {'layer':<10} {'items':>5} {'tokens':>9} {'cumulative':>11}")
        for layer in self.layers:
            lines.append(
                f"  {layer.name:<10} {layer.items:>5} {approx}{layer.tokens:>8} "
                f"{approx}{layer.cumulative:>10}"
            )
        if self.breakpoints:
            lines.append("breakpoints:")
            for bp in self.breakpoints:
                number = self.block_numbers.get(bp.index, bp.index + 1)
                lines.append(
                    f"  {bp.kind:<8} on {bp.layer} block {number} (ttl {bp.ttl}, prefix "
                    f"{approx}{bp.prefix_tokens} tokens): {bp.reason}"
                )
        for s in self.skipped:
            lines.append(f"  skipped {s}")
        lines.append(
            f"cached for the next request: {approx}{self.cacheable_tokens} of "
            f"{approx}{self.total_tokens} tokens"
        )
        for n in self.notes:
            lines.append(f"note: {n}")
        for w in self.warnings:
            lines.append(f"warning: {w}")
        return "\n".join(lines)


def _layers(prompt: Any, model: str) -> list[LayerInfo]:
    n_sys = len(prompt.system)
    frozen = frozen_text_tokens(prompt, model)
    sizes = [
        ("tools", len(prompt.tools), sum(tool_tokens(prompt, model))),
        ("system", n_sys, sum(frozen[:n_sys])),
        ("documents", len(prompt.documents), sum(frozen[n_sys:])),
        ("session", len(prompt.session), sum(session_text_tokens(prompt, model))),
        (
            "messages",
            len(prompt.messages),
            sum(block_tokens(b, model) for m in prompt.messages for b in m["content"]),
        ),
        ("dynamic", len(prompt.dynamic), sum(block_tokens(b, model) for b in prompt.dynamic)),
    ]
    out, cum = [], 0
    for name, items, tokens in sizes:
        cum += tokens
        if items:
            out.append(LayerInfo(name, items, tokens, cum))
    return out


def _explicit_markers(
    prompt: Any, model: str, provider: str, rules: Any, ttl: str, history_ttl: str
) -> tuple[list[PlacedBreakpoint], list[str], dict[int, int], int, list[str]]:
    """Anthropic and Bedrock: the breakpoint plan, the skipped candidates, each block's
    number within its layer, the cacheable tokens (up to the last breakpoint) and a note."""
    if provider == "anthropic":
        _, p = plan_for(prompt, model, ttl=ttl, history_ttl=history_ttl)
        _, blocks = anthropic_layout(prompt, model)
    else:
        _, blocks = layout(prompt, model)
        p = plan(
            blocks,
            min_tokens=rules.min_tokens,
            max_breakpoints=rules.max_breakpoints,
            lookback=rules.lookback_blocks,
            ttl=ttl,
            history_ttl=history_ttl,
            min_per_segment=rules.min_per_segment,
        )
    seen: dict[str, int] = {}
    numbers: dict[int, int] = {}
    for i, b in enumerate(blocks):
        seen[b.layer] = seen.get(b.layer, 0) + 1
        numbers[i] = seen[b.layer]
    cacheable = p.breakpoints[-1].prefix_tokens if p.breakpoints else 0
    note = (
        f"{provider} caches only up to explicit breakpoints (at most "
        f"{rules.max_breakpoints}; lookback {rules.lookback_blocks} blocks); "
        f"source: {rules.source.split(';')[0]} (read {rules.read_on})"
    )
    return p.breakpoints, p.skipped, numbers, cacheable, [note]


def _openai(prompt: Any, model: str, rules: Any, stable: int) -> tuple[int, list[str]]:
    """OpenAI: the cacheable tokens (the minimum, then whole increments) and notes."""
    cacheable = (
        0
        if stable < rules.min_tokens
        else rules.min_tokens + (stable - rules.min_tokens) // rules.increment * rules.increment
    )
    notes = [
        f"OpenAI caches the longest previously seen prefix automatically, from "
        f"{rules.min_tokens} tokens in steps of {rules.increment}; requests are "
        f"routed by prompt_cache_key pc-{prompt.prefix_hash[:32]}"
    ]
    if rules.explicit_breakpoints:
        kw = render(prompt, model)
        marked = sum(
            1
            for m in kw["messages"]
            if isinstance(m.get("content"), list)
            and any("prompt_cache_breakpoint" in part for part in m["content"])
        )
        notes.append(
            f"{model} takes explicit prompt_cache_breakpoint markers: {marked} "
            "placed (end of frozen layers, session, newest history turn)"
        )
    return cacheable, notes


def explain(
    prompt: Any,
    model: str,
    *,
    provider: str | None = None,
    file: Any = None,
    quiet: bool = False,
    ttl: str = "5m",
    history_ttl: str = "5m",
) -> Explanation:
    """Explain ``prompt`` for ``model`` (provider guessed from the name unless given) and
    return the :class:`Explanation` (its ``str()`` is the report). Nothing is printed
    unless ``file`` is given (then the report is written there; ``quiet`` is kept for
    callers of the old printing behaviour and suppresses that too).

    Raises:
        ValueError: an unknown provider; a rendering error of the provider's renderer.
    """
    provider = provider or provider_of(model)
    if provider not in ("anthropic", "bedrock", "openai", "gemini", "local", "openai_compatible"):
        raise ValueError(f"unknown provider {provider!r}")
    rules = cache_limits(model, "local" if provider == "openai_compatible" else provider)
    layers = _layers(prompt, model)
    total = layers[-1].cumulative if layers else 0
    stable = total - next((layer.tokens for layer in layers if layer.name == "dynamic"), 0)
    approximate = count_tokens("", model).approximate
    breakpoints: list[PlacedBreakpoint] = []
    skipped: list[str] = []
    numbers: dict[int, int] = {}
    if provider in ("anthropic", "bedrock"):
        breakpoints, skipped, numbers, cacheable, notes = _explicit_markers(
            prompt, model, provider, rules, ttl, history_ttl
        )
    elif provider == "openai":
        cacheable, notes = _openai(prompt, model, rules, stable)
    elif provider == "gemini":
        cacheable = stable if stable >= rules.min_tokens else 0
        notes = [
            f"Gemini caches implicitly from {rules.min_tokens} tokens; an explicit cache "
            "of the frozen prefix: promptcache.providers.gemini.create_cached_content"
        ]
    else:
        block = rules.increment or 16
        cacheable = stable // block * block
        notes = [f"automatic prefix caching in whole {block}-token KV blocks"]
    warnings = list(prompt.warnings)
    if approximate:
        warnings.append(
            f"token counts are estimates (no offline tokenizer for {model}); "
            "register an exact counter with promptcache.prompt.tokens.register_counter"
        )
    exp = Explanation(
        provider,
        model,
        rules,
        prompt.prefix_hash,
        layers,
        breakpoints,
        skipped,
        cacheable,
        total,
        approximate,
        notes,
        warnings,
        numbers,
    )
    if file is not None and not quiet:
        print(str(exp), file=file)
    return exp
