"""Speculative decoding settings (``EngineConfig.speculative``) and their validation.

Two drafters (vLLM v1's ``speculative_config`` names):

- ``{"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": a,
  "prompt_lookup_max": b}``: prompt lookup (Saxena 2023): the longest suffix of the sequence, of
  ``a..b`` tokens, that occurred earlier is matched and the K tokens that followed it are proposed.
- ``{"method": "draft", "model": PATH, "num_speculative_tokens": K}``: a smaller model sharing the
  target's tokenizer, or ``{"method": "draft", "layers": n, ...}``: the target's own first ``n``
  decoder layers with its final norm and LM head (self-speculation, as LayerSkip, Elhoushi et al.
  2024).

Every bad value raises one :class:`~local_engine.errors.EngineError` whose message names the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..errors import EngineError

#: Largest K accepted: the verification pass scores K + 1 positions per sequence; past ~16 the
#: acceptance of a run of K falls as alpha**K (alpha < 1) while the pass grows linearly.
MAX_SPECULATIVE_TOKENS = 32
METHODS = ("ngram", "draft")
#: Prompt-lookup defaults. The minimum is 1: one-token matches
#: (",", " the") are accepted only ~21 % of the time, but the cost model prices drafts by their
#: match length (policy.MatchAcceptance) and verifies them only where they pay; measured on the
#: real SmolLM2, CPU, 2026-12-01 (bench/RESULTS.md "## spec-decode", session 3b): quote batch 1
#: 1.46-1.56x against 1.38-1.49x with a minimum of 2, chat 0.97-1.00x at batch 1 and 0.98x at
#: batch 8. The maximum, 5, is vLLM's: it sets both bounds to 5 when neither is given
#: (vllm/config/speculative.py ``__post_init__``, 2025, marked "arbitrarily chosen" there).
DEFAULT_PROMPT_LOOKUP_MIN = 1
DEFAULT_PROMPT_LOOKUP_MAX = 5


@dataclass(frozen=True)
class SpeculativeConfig:
    """Validated speculative-decoding settings.

    Attributes:
        method: ``"ngram"`` or ``"draft"``.
        num_speculative_tokens: K, tokens drafted per step (1..:data:`MAX_SPECULATIVE_TOKENS`).
            A request may ask for fewer (``SamplingParams.num_speculative_tokens``).
        prompt_lookup_min, prompt_lookup_max: n-gram lengths matched (ngram only), 1 <= min <= max.
        model: draft checkpoint path (draft only; exclusive with ``layers``).
        layers: number of the target's leading decoder layers that form the draft (draft only).
    """

    method: str
    num_speculative_tokens: int
    prompt_lookup_min: int = DEFAULT_PROMPT_LOOKUP_MIN
    prompt_lookup_max: int = DEFAULT_PROMPT_LOOKUP_MAX
    model: str | None = None
    layers: int | None = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise EngineError(f"speculative method must be 'ngram' or 'draft', got {self.method!r}")
        k = self.num_speculative_tokens
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
            raise EngineError(
                f"num_speculative_tokens must be an integer in 1..{MAX_SPECULATIVE_TOKENS}, "
                f"got {k!r} (use speculative=None to turn speculation off)"
            )
        if self.method == "ngram":
            if self.model is not None or self.layers is not None:
                raise EngineError(
                    "speculative method 'ngram' takes no 'model' or 'layers'; "
                    "use method 'draft' for a draft model"
                )
            lo, hi = self.prompt_lookup_min, self.prompt_lookup_max
            for name, v in (("prompt_lookup_min", lo), ("prompt_lookup_max", hi)):
                if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                    raise EngineError(f"{name} must be a positive integer, got {v!r}")
            if lo > hi:
                raise EngineError(
                    f"prompt_lookup_min ({lo}) must not exceed prompt_lookup_max ({hi})"
                )
        else:
            if (self.model is None) == (self.layers is None):
                raise EngineError(
                    "speculative method 'draft' needs exactly one of 'model' (a draft checkpoint "
                    "sharing the target's tokenizer) or 'layers' (the target's first n layers)"
                )
            if self.layers is not None and (
                not isinstance(self.layers, int) or isinstance(self.layers, bool) or self.layers < 1
            ):
                raise EngineError(f"draft 'layers' must be a positive integer, got {self.layers!r}")

    @classmethod
    def from_value(cls, value: Any) -> SpeculativeConfig | None:
        """``None`` (off), a :class:`SpeculativeConfig`, or a dict of its fields.

        Raises:
            EngineError: not one of those, an unknown or missing key, or a value out of range.
        """
        if value is None or isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise EngineError(
                "speculative must be None or a dict such as "
                '{"method": "ngram", "num_speculative_tokens": 4}, '
                f"got {type(value).__name__}"
            )
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise EngineError(
                f"unknown speculative option(s) {unknown}; expected some of {sorted(names)}"
            )
        for key in ("method", "num_speculative_tokens"):
            if key not in value:
                raise EngineError(f"speculative config lacks {key!r}")
        return cls(**value)

    def check_engine(self, max_num_batched_tokens: int, num_layers: int | None = None) -> None:
        """Checks against the engine: one step must hold a decode's K + 1 tokens, and a
        ``layers`` draft must be shallower than the target.

        Raises:
            EngineError: naming the setting to change.
        """
        k = self.num_speculative_tokens
        if k + 1 > max_num_batched_tokens:
            raise EngineError(
                f"num_speculative_tokens={k} needs {k + 1} tokens per decode step but "
                f"max_num_batched_tokens is {max_num_batched_tokens}; lower K or raise the budget"
            )
        if self.layers is not None and num_layers is not None and self.layers >= num_layers:
            raise EngineError(
                f"draft 'layers' ({self.layers}) must be fewer than the target's {num_layers} "
                "decoder layers"
            )


def parse_cli(spec: str | None, num_speculative_tokens: int | None) -> SpeculativeConfig | None:
    """``promptcache serve --speculative ngram|draft:PATH|layers:N --num-speculative-tokens K``.

    Raises:
        EngineError: an unknown method, or K without a method.
    """
    if spec is None or spec == "off":
        if num_speculative_tokens is not None:
            raise EngineError("--num-speculative-tokens needs --speculative ngram|draft:PATH")
        return None
    k = 4 if num_speculative_tokens is None else num_speculative_tokens
    if spec == "ngram":
        return SpeculativeConfig("ngram", k)
    if spec.startswith("draft:") and len(spec) > len("draft:"):
        return SpeculativeConfig("draft", k, model=spec[len("draft:") :])
    if spec.startswith("layers:"):
        try:
            n = int(spec[len("layers:") :])
        except ValueError:
            n = None
        if n is not None:
            return SpeculativeConfig("draft", k, layers=n)
    raise EngineError(
        f"--speculative must be 'ngram', 'draft:PATH' or 'layers:N' (the target's first N "
        f"layers as the draft), got {spec!r}"
    )


__all__ = ["SpeculativeConfig", "MAX_SPECULATIVE_TOKENS", "parse_cli"]
