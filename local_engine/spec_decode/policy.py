"""When to speculate, and how many drafts: a step-cost model measured online and a
per-sequence acceptance estimate (the goodput rule of SmartSpec, Liu et al. 2024, "Optimizing
Speculative Decoding for Serving Large Language Models Using Goodput"; vLLM and SGLang ship
variants of "speculate less when little is accepted").

Cost. A decode step of ``B`` sequences takes ``T_d(B)`` seconds; each extra (drafted or padding)
token a verification adds costs ``beta(B)`` seconds more, so a step with ``x`` extra tokens
takes ``T_d(B) + beta(B) * x``. Both are measured from the engine's own steps
(:meth:`StepCostModel.observe`: exponential moving averages per batch-size bucket; steps that
also prefill are not used). While ``T_d`` of a bucket is unknown the decoder runs one plain
decode step to measure it; while ``beta`` is unknown it speculates (to measure it).

Gain. With per-position acceptance probability ``a`` (Leviathan et al. 2023: drafts accepted
i.i.d.), ``k`` drafts emit ``E(a, k) = 1 + a + ... + a**k`` tokens in expectation, one more
than a plain decode for the first ``a``, and the ``j``-th draft adds ``a**j``. A token is
worth ``T_d(B) / B`` seconds of the batch's time, so the ``j``-th draft pays for itself iff
``a**j * T_d / B > beta``: :func:`best_num_drafts` keeps the drafts that do (adaptive K).

Estimate. ``a`` per sequence: accepted drafts over positions tested (accepted ones plus the
first rejected one: the maximum-likelihood estimate under i.i.d. acceptance), both counts decayed
by :data:`DECAY` per verification (recent steps weigh most), with a Beta(1, 1) prior.

Only the choice of *how many* drafts depends on the past; the verification of each draft is
unchanged, so the emitted tokens keep the target's distribution (and greedy tokens are those
without speculation). Timing-based choices vary from run to run, so requests whose samples
must be reproducible (seeded, temperature > 0) do not use them (:meth:`allows_timing`).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Weight of the newest step in the moving averages of step times.
EMA_WEIGHT = 0.2
#: Per verification, older acceptance counts are multiplied by this (memory of ~10 steps).
DECAY = 0.9


def expected_tokens(a: float, k: int) -> float:
    """``E(a, k) = (1 - a**(k+1)) / (1 - a)`` tokens per verification of ``k`` drafts with
    per-position acceptance ``a`` (Leviathan et al. 2023, eq. 1); ``k + 1`` at ``a = 1``."""
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def best_num_drafts(a: float, k_max: int, token_seconds: float, beta: float) -> int:
    """The most drafts (at most ``k_max``) each of which pays for itself: the ``j``-th adds
    ``a**j`` expected tokens worth ``token_seconds`` each and costs ``beta`` seconds, so keep
    ``j`` while ``a**j * token_seconds > beta`` (0 when even the first does not pay)."""
    if k_max <= 0 or a <= 0.0:
        return 0
    if beta <= 0.0 or a >= 1.0:
        return k_max
    ratio = beta / token_seconds
    j, gain = 0, 1.0
    while j < k_max:  # a**j falls with j: stop at the first draft that does not pay
        gain *= a
        if gain <= ratio:
            break
        j += 1
    return j


def bucket(num_seqs: int) -> int:
    """The batch-size bucket step times are kept under: exact up to 8, then the CUDA-graph
    sizes (:data:`local_engine.cuda_graphs.DEFAULT_BATCH_SIZES`), then multiples of 32."""
    if num_seqs <= 8:
        return num_seqs
    for b in (16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256):
        if num_seqs <= b:
            return b
    return -(-num_seqs // 32) * 32


@dataclass
class _Bucket:
    decode_s: float | None = None  # T_d: a step with no extra tokens
    beta_s: float | None = None  # seconds per extra token


class StepCostModel:
    """Online step times per batch-size bucket (see the module docstring)."""

    def __init__(self, ema_weight: float = EMA_WEIGHT):
        self.w = ema_weight
        self._b: dict[int, _Bucket] = {}

    def observe(self, num_seqs: int, extra_tokens: int, seconds: float) -> None:
        """One decode or verification step (no prefill) of ``num_seqs`` sequences that
        computed ``extra_tokens`` drafted or padding tokens beyond one each, in ``seconds``."""
        if num_seqs <= 0 or seconds <= 0:
            return
        b = self._b.setdefault(bucket(num_seqs), _Bucket())
        w = self.w
        if extra_tokens == 0:
            b.decode_s = seconds if b.decode_s is None else (1 - w) * b.decode_s + w * seconds
        elif b.decode_s is not None:
            beta = max(0.0, seconds - b.decode_s) / extra_tokens
            b.beta_s = beta if b.beta_s is None else (1 - w) * b.beta_s + w * beta

    def decode_seconds(self, num_seqs: int) -> float | None:
        """``T_d`` of the bucket, None until a plain decode step of it was seen."""
        b = self._b.get(bucket(num_seqs))
        return None if b is None else b.decode_s

    def beta_seconds(self, num_seqs: int) -> float | None:
        """Seconds per extra token of the bucket, None until measured."""
        b = self._b.get(bucket(num_seqs))
        return None if b is None else b.beta_s


@dataclass
class AcceptanceEstimate:
    """Decayed counts of one sequence's verified drafts (see the module docstring)."""

    accepted: float = 0.0
    tested: float = 0.0

    @property
    def rate(self) -> float:
        """Per-position acceptance probability, Beta(1, 1) prior: 0.5 before any evidence."""
        return (self.accepted + 1.0) / (self.tested + 2.0)

    def update(self, num_drafts: int, num_accepted: int) -> None:
        """After a verification of ``num_drafts`` real drafts of which the first
        ``num_accepted`` were accepted."""
        if num_drafts <= 0:
            return
        self.accepted = DECAY * self.accepted + num_accepted
        self.tested = DECAY * self.tested + num_accepted + (num_accepted < num_drafts)


def allows_timing(params) -> bool:
    """Whether a request's drafts may be chosen from measured step times: greedy requests
    (their tokens do not depend on the drafts) and unseeded sampled ones (no reproducibility
    promised); a seeded sampled request gets the same drafts in every run."""
    return bool(getattr(params, "greedy", False)) or getattr(params, "seed", None) is None


__all__ = [
    "AcceptanceEstimate",
    "StepCostModel",
    "allows_timing",
    "best_num_drafts",
    "bucket",
    "expected_tokens",
]
