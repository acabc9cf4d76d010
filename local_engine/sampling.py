"""Sampling parameters and the sampler (logits -> next tokens).

The sampler works on the whole step's logits at once: temperature, top-k and top-p are applied
as tensors; random choice uses the exponential-race form of sampling (``argmax(p / E)`` with
``E ~ Exp(1)``, equivalent to drawing from ``p``) so that a seeded request draws its noise from
its own generator and gets the same tokens alone or in a batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .errors import EngineError

#: Temperatures below this are greedy (argmax).
GREEDY_EPS = 1e-5
MAX_LOGPROBS = 20


@dataclass
class SamplingParams:
    """How to pick tokens and when to stop.

    Attributes:
        temperature: softmax temperature; 0 = greedy.
        top_p: nucleus sampling mass in (0, 1].
        top_k: keep the k most likely tokens; -1 (or 0) = all.
        seed: per-request RNG seed; equal seeds give equal samples, alone or batched.
        max_tokens: most new tokens (None = up to ``max_model_len``).
        stop: string(s) that end generation; the stop string is not part of the text.
        stop_token_ids: extra token ids that end generation (the model's EOS ids always do
            unless ``ignore_eos``).
        n: samples per prompt (they share the prompt's KV blocks copy-on-write).
        logprobs: return this many top log-probabilities per generated token (plus the
            sampled one); None = none.
        ignore_eos: keep going past EOS.
        structured: the output must match this grammar
            (:class:`~local_engine.structured.StructuredOutput`; None = free text): a token
            mask is applied to every sampled row (:func:`apply_token_bitmask`).
        skip_special_tokens: drop control tokens from the text.
        num_speculative_tokens: with speculative decoding on, draft at most this many tokens
            per step for this request (0 = no speculation for it; None = the engine's K).
            Speculation never changes what is sampled, only how fast.

    Raises:
        EngineError: a value out of range (the message names it).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    max_tokens: int | None = 16
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    n: int = 1
    logprobs: int | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    num_speculative_tokens: int | None = None
    structured: Any = None

    def __post_init__(self):
        if self.temperature is None:
            self.temperature = 1.0
        if not isinstance(self.temperature, (int, float)) or self.temperature < 0:
            raise EngineError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0.0 < float(self.top_p) <= 1.0:
            raise EngineError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            raise EngineError(f"top_k must be -1 (off) or a positive integer, got {self.top_k!r}")
        if self.top_k == 0:
            self.top_k = -1
        if self.max_tokens is not None and (
            not isinstance(self.max_tokens, int) or self.max_tokens < 1
        ):
            raise EngineError(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if not isinstance(self.n, int) or self.n < 1:
            raise EngineError(f"n must be a positive integer, got {self.n!r}")
        if self.logprobs is not None and not (0 <= self.logprobs <= MAX_LOGPROBS):
            raise EngineError(f"logprobs must be in 0..{MAX_LOGPROBS}, got {self.logprobs!r}")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = [s for s in (self.stop or []) if s]
        if any(not isinstance(s, str) for s in self.stop):
            raise EngineError("stop must be a string or a list of strings")
        self.stop_token_ids = list(self.stop_token_ids or [])
        if self.num_speculative_tokens is not None and (
            not isinstance(self.num_speculative_tokens, int) or self.num_speculative_tokens < 0
        ):
            raise EngineError(
                "num_speculative_tokens must be a non-negative integer or None, got "
                f"{self.num_speculative_tokens!r}"
            )
        if self.seed is not None and not isinstance(self.seed, int):
            raise EngineError(f"seed must be an integer, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_EPS


def make_generator(seed: int | None, index: int, device="cpu") -> torch.Generator | None:
    """The RNG of sample ``index`` of a seeded request (None when unseeded). Sample 0 uses
    ``seed`` itself; sample i uses ``seed`` mixed with i so the samples differ."""
    if seed is None:
        return None
    g = torch.Generator(device=device)
    g.manual_seed((seed * 1_000_003 + index) % (2**63) if index else seed % (2**63))
    return g


@dataclass
class SamplerOutput:
    """``token_ids[i]`` for row i; ``logprobs[i]`` a ``{token_id: logprob}`` dict (sampled token
    plus the top ones) when asked, else None; ``sampled_logprob[i]`` the sampled token's."""

    token_ids: list[int]
    logprobs: list[dict[int, float] | None]
    sampled_logprob: list[float]


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """Set the logits of disallowed tokens to -inf, in place, and return ``logits``.

    ``logits``: float ``[rows, vocab]`` on any device; ``bitmask``: int32 ``[rows,
    ceil(vocab / 32)]`` on the CPU (bit ``t % 32`` of word ``t // 32`` set = token ``t``
    allowed; a row of all ones changes nothing). The bits are unpacked on the logits' device
    (one copy of ``rows * vocab / 8`` bytes), so the mask costs a few element-wise ops there."""
    rows, vocab = logits.shape
    words = bitmask.to(logits.device, non_blocking=True)
    shifts = torch.arange(32, device=logits.device, dtype=torch.int32)
    allowed = ((words.unsqueeze(-1) >> shifts) & 1).view(rows, -1)[:, :vocab].bool()
    return logits.masked_fill_(~allowed, float("-inf"))


class Sampler:
    """Turns float32 logits ``[rows, vocab]`` into one token per row."""

    def __init__(self, seed: int = 0, device="cpu"):
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    def __call__(
        self,
        logits: torch.Tensor,
        params: Sequence[SamplingParams],
        generators: Sequence[torch.Generator | None],
        bitmask: torch.Tensor | None = None,
    ) -> SamplerOutput:
        """One token per row of float logits ``[rows, vocab]``; ``bitmask`` (int32 ``[rows,
        ceil(vocab / 32)]``, see :func:`apply_token_bitmask`) restricts each row's tokens
        (constrained decoding)."""
        rows = logits.shape[0]
        logits = logits.float()
        if bitmask is not None:
            apply_token_bitmask(logits, bitmask)
        greedy = [p.greedy for p in params]
        want_lp = any(p.logprobs is not None for p in params)
        if all(greedy):
            if logits.device.type == "cpu" and not want_lp:
                # NumPy's vectorised argmax is ~10x torch's on the CPU (first maximum on ties
                # and NaN as the maximum, as torch); the ids come back as Python ints directly
                token_ids = logits.numpy().argmax(axis=1).tolist()
                return SamplerOutput(
                    token_ids=token_ids, logprobs=[None] * rows, sampled_logprob=[0.0] * rows
                )
            out = logits.argmax(dim=-1)
        else:
            temps = torch.tensor(
                [1.0 if g else p.temperature for g, p in zip(greedy, params)],
                dtype=torch.float32,
                device=logits.device,
            )
            scaled = logits / temps[:, None]
            scaled = self._top_k_top_p(scaled, params)
            probs = torch.softmax(scaled, dim=-1)
            noise = torch.empty_like(probs)
            shared = [i for i, g in enumerate(generators) if g is None and not greedy[i]]
            if shared:
                noise[shared] = torch.empty(
                    len(shared), probs.shape[1], device=probs.device
                ).exponential_(generator=self.generator)
            for i, g in enumerate(generators):
                if g is not None and not greedy[i]:
                    noise[i].exponential_(generator=g)
            sampled = (probs / noise).argmax(dim=-1)
            argmax = logits.argmax(dim=-1)
            gmask = torch.tensor(greedy, device=logits.device)
            out = torch.where(gmask, argmax, sampled)
        token_ids = out.tolist()
        lps: list[dict[int, float] | None] = [None] * rows
        sampled_lp = [0.0] * rows
        if want_lp:
            logp = torch.log_softmax(logits, dim=-1)
            chosen = logp.gather(1, out[:, None]).squeeze(1).tolist()
            k = max(p.logprobs or 0 for p in params)
            top_v, top_i = logp.topk(k, dim=-1) if k > 0 else (None, None)
            for i, p in enumerate(params):
                sampled_lp[i] = chosen[i]
                if p.logprobs is None:
                    continue
                d = {token_ids[i]: chosen[i]}
                if p.logprobs and top_v is not None and top_i is not None:
                    for v, t in zip(
                        top_v[i, : p.logprobs].tolist(), top_i[i, : p.logprobs].tolist()
                    ):
                        d.setdefault(t, v)
                lps[i] = d
        return SamplerOutput(token_ids=token_ids, logprobs=lps, sampled_logprob=sampled_lp)

    @staticmethod
    def _top_k_top_p(logits: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
        vocab = logits.shape[1]
        ks = [p.top_k if 0 < p.top_k < vocab else vocab for p in params]
        ps = [float(p.top_p) for p in params]
        if all(k == vocab for k in ks) and all(p >= 1.0 for p in ps):
            return logits
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        ranks = torch.arange(vocab, device=logits.device)[None, :]
        k_t = torch.tensor(ks, device=logits.device)[:, None]
        remove = ranks >= k_t
        probs = torch.softmax(sorted_logits.masked_fill(remove, float("-inf")), dim=-1)
        # mass strictly before each token; keep tokens while that mass is below top_p
        before = probs.cumsum(dim=-1) - probs
        p_t = torch.tensor(ps, device=logits.device)[:, None]
        remove |= before >= p_t
        remove[:, 0] = False  # always keep the most likely token
        sorted_logits = sorted_logits.masked_fill(remove, float("-inf"))
        return torch.full_like(logits, float("-inf")).scatter(1, order, sorted_logits)


__all__ = [
    "SamplingParams",
    "Sampler",
    "SamplerOutput",
    "apply_token_bitmask",
    "make_generator",
    "GREEDY_EPS",
]
