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

Prompt lookup knows more than ``a``: the length ``n`` of the suffix n-gram its draft continues.
Longer matches are accepted far more often (the real SmolLM2's greedy outputs on the
rewrite, quote and chat workloads of bench/spec_decode_cpu.py, every decode position,
2026-12-01: the first draft token was accepted after a 1-token match 21 % of the time, 2:
41 %, 3: 63 %, 4: 77 %, 5: 89 %, 6 or more: 89-96 %; bench/spec_decode_replay.py,
bench/RESULTS.md), and a per-sequence ``a`` mixes them: a sequence that has been
copying long runs drafts after every 2-token coincidence, and one that paraphrased a while
refuses the long match that re-enters the document. :class:`MatchAcceptance` keeps the
acceptance per match length (engine-wide, decayed): once the ``j``-th draft is accepted the
match is ``n + j`` tokens long, so the first ``j`` drafts are all accepted with probability
``q(n) * q(n+1) * ... * q(n+j-1)`` (:meth:`MatchAcceptance.cumulative`), and the ``j``-th pays
iff that times ``T_d / B`` exceeds ``beta`` (:func:`drafts_that_pay`).

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
#: Per test of a match length, its older counts are multiplied by this (memory of ~50 tests:
#: the counts are engine-wide, fed by every sequence).
MATCH_DECAY = 0.98
#: A match length whose drafts the cost model refused this many times since they were last
#: verified gets its next drafts verified anyway (exploration: else a length whose estimate
#: fell below the cost would never be measured again).
EXPLORE_EVERY = 16


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
    if k_max <= 0 or a <= 0.0 or token_seconds <= 0.0:
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


def drafts_that_pay(cumulative: list[float], token_seconds: float, beta: float) -> int:
    """The most drafts each of which pays for itself: the ``j``-th (1-based) is emitted with
    probability ``cumulative[j-1]`` (non-increasing in ``j``), worth ``token_seconds``, and
    costs ``beta`` seconds; keep ``j`` while ``cumulative[j-1] * token_seconds > beta``."""
    j = 0
    for p in cumulative:
        if p * token_seconds <= beta:
            break
        j += 1
    return j


class MatchAcceptance:
    """Per-position acceptance of prompt-lookup drafts by the length of the suffix match
    they continue (see the module docstring): for each length ``m`` in ``1..max_len`` (longer
    ones count as ``max_len``) the decayed counts of draft tokens tested right after an
    ``m``-token match and of those accepted, with a Beta(1, 1) prior.

    Args:
        max_len: the longest match length told apart (``prompt_lookup_max``), >= 1.
        decay: per test, the length's older counts are multiplied by this.
    """

    def __init__(self, max_len: int, decay: float = MATCH_DECAY):
        if max_len < 1:
            raise ValueError("max_len must be >= 1")
        self.max_len = max_len
        self.decay = decay
        self.accepted = [0.0] * (max_len + 1)  # index 0 unused
        self.tested = [0.0] * (max_len + 1)
        self.refused = [0] * (max_len + 1)  # refusals since the length was last verified

    def rate(self, match_len: int) -> float:
        """P(the next draft token is accepted | an ``match_len``-token match), 0.5 with no
        evidence."""
        m = min(match_len, self.max_len)
        return (self.accepted[m] + 1.0) / (self.tested[m] + 2.0)

    def cumulative(self, match_len: int, k: int) -> list[float]:
        """``[P(first j drafts all accepted) for j in 1..k]`` after a ``match_len``-token match:
        the ``j``-th draft follows a match of ``match_len + j - 1`` tokens."""
        out, p = [], 1.0
        for j in range(k):
            p *= self.rate(match_len + j)
            out.append(p)
        return out

    def update(self, match_len: int, num_drafts: int, num_accepted: int) -> None:
        """After a verification of ``num_drafts`` drafts from an ``match_len``-token match,
        of which the first ``num_accepted`` were accepted: drafts ``1..num_accepted`` were
        tested and accepted (after matches of ``match_len .. match_len + num_accepted - 1``),
        the next one (if any) tested and rejected."""
        if num_drafts <= 0 or match_len <= 0:
            return
        d = self.decay
        for j in range(min(num_drafts, num_accepted + 1)):
            m = min(match_len + j, self.max_len)
            self.accepted[m] = d * self.accepted[m] + (j < num_accepted)
            self.tested[m] = d * self.tested[m] + 1.0
            self.refused[m] = 0

    def refuse(self, match_len: int, every: int = EXPLORE_EVERY) -> bool:
        """Count a refusal of drafts after a ``match_len``-token match; True when the length
        is due for exploration (``every`` refusals since it was last verified, by default
        :data:`EXPLORE_EVERY`): then draft anyway. The decoder passes ``EXPLORE_EVERY`` times
        the batch size, so a length is explored about once per 16 steps at any batch (at
        batch 8, 16 refusals came every 2 steps: 13 of quote's 48 steps were explorations,
        bench/RESULTS.md "## spec-decode", session 3b)."""
        m = min(match_len, self.max_len)
        self.refused[m] += 1
        if self.refused[m] >= every:
            self.refused[m] = 0
            return True
        return False


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

    def token_seconds(self, num_seqs: int, waiting: bool = True) -> float | None:
        """What one more emitted token of one of ``num_seqs`` decoding sequences is worth, in
        seconds of step time; None while ``T_d`` of the bucket is unknown.

        With requests waiting (or unknown), ``T_d / B``: a sequence that finishes early hands
        its slot to a waiting request (throughput). With none waiting, finishing early only
        takes the sequence's rows out of the later steps: the marginal per-sequence cost of a
        decode step, the slope ``(T_d(B) - T_d(b)) / (B - b)`` to the smallest bucket ``b``
        measured (at most ``T_d / B``; ``T_d / B`` while no smaller one is).
        On this 1-thread CPU at batch 8 that is ~5 against ~8 ms (bench/RESULTS.md
        "## spec-decode", session 3b), so drafts there must be surer to pay. A batch of one
        is always worth ``T_d``."""
        t_d = self.decode_seconds(num_seqs)
        if t_d is None:
            return None
        share = t_d / num_seqs
        if waiting or num_seqs <= 1:
            return share
        top = bucket(num_seqs)
        for b in sorted(b for b in self._b if b < top):  # the widest span: least noise
            small = self._b[b].decode_s
            if small is not None:
                return max(0.0, min(share, (t_d - small) / (num_seqs - b)))
        return share

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
    "MatchAcceptance",
    "drafts_that_pay",
    "StepCostModel",
    "allows_timing",
    "best_num_drafts",
    "bucket",
    "expected_tokens",
]
