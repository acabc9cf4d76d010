"""The engine's side of speculative decoding, one step at a time.

Per step (the engine calls these around its scheduler and runner):

1. :meth:`SpeculativeDecoder.plan` (before scheduling): for each running sequence in decode,
   how many tokens to draft (``seq.num_lookahead_tokens``): the request's K, cut so that the
   accepted run plus the bonus token cannot pass ``max_tokens``/``max_model_len``. Prompt
   lookup drafts here already (it needs only the token ids) and asks for exactly as many
   slots as it found tokens; a draft model asks for K. The scheduler then gives the sequence
   ``1 + num_lookahead_tokens`` new tokens when the budget allows (fewer drafts when not).
2. :meth:`SpeculativeDecoder.draft` (after scheduling, the slots allocated): the drafts of
   each scheduled decode (a draft model runs here), in ``seq.spec_token_ids`` with their
   draft distribution in ``seq.spec_probs``; a scheduled sequence given fewer drafts than it
   reserved has its ``num_new_tokens`` lowered to match.
3. The target runs one forward pass over every sequence's new tokens, drafts included,
   writing their K/V through the paged cache, and returns ``k + 1`` logits rows per drafted
   sequence. :meth:`SpeculativeDecoder.verify` accepts or rejects the drafts
   (:class:`~local_engine.spec_decode.rejection_sampler.RejectionSampler`).
4. The engine appends the emitted tokens (stopping at a stop token, stop string or length),
   advances ``num_computed_tokens`` only over the accepted drafts and then caches full blocks,
   so the prefix cache hashes a block only once all its tokens are accepted; then
   :meth:`SpeculativeDecoder.rollback` gives back blocks that held only rejected drafts. A
   rejected draft's K/V left in a kept block sits past ``num_computed_tokens`` and is
   overwritten by the next step before anything reads it.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import EngineError
from ..sequence import Sequence
from .config import SpeculativeConfig
from .ngram import NgramIndex, NgramProposer
from .policy import (
    EXPLORE_EVERY,
    AcceptanceEstimate,
    MatchAcceptance,
    StepCostModel,
    allows_timing,
    best_num_drafts,
    bucket,
    drafts_that_pay,
    expected_tokens,
)
from .rejection_sampler import RejectionSampler, VerifyOutput


@dataclass
class SpecDecodeCounters:
    """Engine-wide totals (Prometheus counters): drafted tokens, accepted drafts, and
    verification steps (sequence-steps that verified at least one draft). Padding
    (``Sequence.num_spec_pad``) is not counted."""

    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_verify_steps: int = 0


#: Most decode steps a sequence waits before drafting again after its drafts were all rejected,
#: or after the cost model judged its drafts not worth their cost (the wait doubles each time:
#: 1, 2, 4, ..., and drops to 0 on any acceptance; the drafts after a wait are a probe that
#: measures the acceptance again). With nothing ever accepted this drafts on about 1 step in
#: 33, so the verification's extra cost (measured 1.9x a decode step for K=4 at batch 64 on
#: the 8B shape, bench/RESULTS.md) is paid on ~3% of steps.
MAX_BACKOFF_STEPS = 32
#: Plain decode steps tried per batch-size bucket to measure its decode time (a step that a
#: new prompt joins measures nothing); after that the bucket speculates without the cost model.
MEASURE_TRIES = 3
#: The acceptance rate a probe is counted at on a padded step (the estimate's Beta(1, 1)
#: prior: no evidence either way).
PRIOR_RATE = AcceptanceEstimate().rate
#: Most decode steps a sequence skips prompt lookup after lookups that found no match (the
#: wait doubles after each failed lookup, 1, 2, 4, 8, and drops to 0 on a match). A skipped
#: step neither indexes the new token nor looks up: the index catches up in bulk at the next
#: lookup. With no match ever this looks up on ~1 step in 8; a copy that starts during a wait
#: is still a match when the wait ends (copies run on), so it loses at most the wait.
MAX_LOOKUP_BACKOFF_STEPS = 8
#: Lookups back off only while a token is worth less than this many seconds of step time
#: (``T_d / B``): a lookup costs ~2-10 us of host time (bench/spec_plan_cpu.py), so below 1 ms
#: a step's lookups may cost a percent of it (the H200's 8B shape at batch 64: 7.3 ms / 64 =
#: 0.11 ms a token, lookups 8 % of the step, bench/RESULTS.md); above it (CPU steps of
#: 50-300 ms, a GPU at batch 1) the drafts a wait could miss are worth more than the lookups.
LOOKUP_BACKOFF_TOKEN_SECONDS = 1e-3


@dataclass
class StepShape:
    """What the cost model needs of a step: its sequences, the drafted and padding tokens it
    computes beyond one per sequence, and whether it is decode-only (no prefill)."""

    num_seqs: int
    extra_tokens: int
    decode_only: bool


@dataclass
class _SeqState:
    """Per-sequence drafting state: the token ids as an int64 array grown in place (prompt
    lookup scans it without converting the list every step), the backoffs (of drafting, and
    of prompt lookup after lookups that failed), the acceptance estimate and prompt lookup's
    index (built at the sequence's first matching lookup)."""

    tokens: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    num_tokens: int = 0
    backoff: int = 0  # the current wait after a fully rejected (or refused) step
    wait: int = 0  # decode steps left before drafting again
    probe: bool = False  # the drafts after this wait are drafted whatever the cost model says
    acceptance: AcceptanceEstimate = field(default_factory=AcceptanceEstimate)
    index: NgramIndex | None = None  # prompt lookup's incremental index (NgramProposer)
    planned: int = 0  # real drafts planned this step (the rest of the lookahead is padding)
    match_len: int = 0  # length of the suffix match this step's lookup drafts continue
    priced: bool = False  # this step's drafts were priced by their match length's acceptance
    lookup_backoff: int = 0  # the current lookup wait after lookups that found nothing
    lookup_wait: int = 0  # decode steps left before looking up again

    def array(self, ids: list[int]) -> np.ndarray:
        n = len(ids)
        if n < self.num_tokens:  # not this sequence's prefix any more (cannot happen; be safe)
            self.num_tokens = 0
        if n > self.tokens.shape[0]:
            grown = np.empty(max(n, 2 * self.tokens.shape[0], 256), dtype=np.int64)
            grown[: self.num_tokens] = self.tokens[: self.num_tokens]
            self.tokens = grown
        if n > self.num_tokens:
            self.tokens[self.num_tokens : n] = ids[self.num_tokens : n]
            self.num_tokens = n
        return self.tokens[:n]

    def lookup(self, ngram, ids: list[int], k: int, lazy: bool = True) -> list[int]:
        """Up to ``k`` prompt-lookup drafts after ``ids`` (this sequence's tokens), with
        ``match_len`` set to the length of the suffix match they continue (0: unknown).

        For an :class:`NgramProposer`: with ``lazy`` (lookups backing off) and until a lookup
        first matches, a scan of the token array (:meth:`NgramProposer.lookup`: 3-9 us for
        1,000 tokens, where indexing them costs ~1 ms, paid for nothing by a sequence that
        never matches); from then on, or from the first lookup without ``lazy`` (a lookup
        every step: the index's ~3 us a step beats a scan's), the incremental
        :class:`NgramIndex` (same drafts). A drafter with only
        ``propose(token_ids, k)`` (as the benchmarks and tests substitute) gets the array."""
        self.match_len = 0
        if type(ngram) is NgramProposer:
            if self.index is None:
                if lazy:
                    drafts, n = ngram.lookup(self.array(ids), k)
                    if not n:
                        return drafts
                self.index = ngram.index()
            self.index.extend(ids)
            self.match_len = self.index.match_length
            return self.index.propose(k)
        return ngram.propose(self.array(ids), k)

    def lookup_failed(self) -> None:
        """Skip prompt lookup for the next 1, 2, 4, ... (:data:`MAX_LOOKUP_BACKOFF_STEPS`)
        decode steps, doubling after each failed lookup."""
        self.lookup_backoff = min(max(1, 2 * self.lookup_backoff), MAX_LOOKUP_BACKOFF_STEPS)
        self.lookup_wait = self.lookup_backoff

    def back_off(self) -> None:
        """Skip drafting for the next ``backoff`` steps, doubling it (1, 2, 4, ... up to
        :data:`MAX_BACKOFF_STEPS`)."""
        self.backoff = min(max(1, 2 * self.backoff), MAX_BACKOFF_STEPS)
        self.wait = self.backoff


class SpeculativeDecoder:
    """Drafting and verification for one engine.

    Args:
        spec: the validated :class:`SpeculativeConfig`.
        engine_config: the engine's config.
        runner: the target's :class:`~local_engine.runner.ModelRunner`.
        tokenizer: the target's tokenizer (a draft model's must match).
        max_model_len: longest context.

    Attributes:
        adaptive: choose each step's drafts with the cost model
            (:mod:`local_engine.spec_decode.policy`); False drafts whenever the drafter has
            drafts and the sequence is not backing off.
        pad: pad every decode of a verification step to K drafts so that the step replays the
            captured verification CUDA graph (None: exactly when the runner has one).
        lookup_backoff: where a token is worth less than
            :data:`LOOKUP_BACKOFF_TOKEN_SECONDS`, skip lookups after lookups that found
            nothing (:data:`MAX_LOOKUP_BACKOFF_STEPS`) and index a sequence only once a lookup
            matched; False looks up every sequence every step, indexing it from its first
            lookup (the behaviour before 2026-12-01 session 3, kept for benchmarks).
        match_model: for prompt lookup, price drafts by the acceptance of their match length
            (:class:`~local_engine.spec_decode.policy.MatchAcceptance`); False uses the
            per-sequence acceptance for them as for a draft model (before 2026-12-01
            session 3, kept for benchmarks).

    Raises:
        EngineError, ModelNotFoundError: from the draft model's loading and checks.
    """

    def __init__(
        self, spec: SpeculativeConfig, engine_config, runner, tokenizer, max_model_len: int
    ):
        self.spec = spec
        self.k = spec.num_speculative_tokens
        self.draft_model = None
        self.ngram = None
        if spec.method == "ngram":
            self.ngram = NgramProposer(spec.prompt_lookup_min, spec.prompt_lookup_max)
        else:
            from .draft import DraftModelProposer

            self.draft_model = DraftModelProposer(
                spec, engine_config, runner, tokenizer, max_model_len
            )
        self.runner = runner
        self.max_model_len = max_model_len
        self.sampler = RejectionSampler(engine_config.seed + 2, device=runner.device)
        self.counters = SpecDecodeCounters()
        self.cost = StepCostModel()
        self.adaptive = True
        self.pad: bool | None = None
        self.lookup_backoff = True
        self.match_model = True
        self.match = MatchAcceptance(spec.prompt_lookup_max)
        self._measure_tries: dict[int, int] = {}
        self._state: weakref.WeakKeyDictionary[Sequence, _SeqState] = weakref.WeakKeyDictionary()

    @property
    def pads(self) -> bool:
        """Whether verification steps are padded to K drafts a sequence (see ``pad``)."""
        if self.pad is not None:
            return self.pad
        return getattr(self.runner, "spec_graphs", None) is not None

    # ---- memory (a draft model's own cache shares the target's block ids) -----------------
    def kv_block_bytes(self) -> int:
        """Extra bytes per KV block a draft model's own cache takes (0 otherwise)."""
        return self.draft_model.kv_block_bytes() if self.draft_model else 0

    def allocate_kv_cache(self, num_blocks: int) -> None:
        if self.draft_model:
            self.draft_model.allocate_kv_cache(num_blocks)

    def copy_blocks(self, copies) -> None:
        if self.draft_model and copies:
            self.draft_model.copy_blocks(copies)

    # ---- per request ---------------------------------------------------------------------
    def request_k(self, params) -> int:
        """K for a request: ``params.num_speculative_tokens`` (0 = off for this request) or
        the engine's K.

        Raises:
            EngineError: a per-request K above the engine's.
        """
        k = getattr(params, "num_speculative_tokens", None)
        if k is None:
            return self.k
        if k > self.k:
            raise EngineError(
                f"num_speculative_tokens={k} exceeds the engine's {self.k}; ask for at most "
                f"{self.k} (0 turns speculation off for the request)"
            )
        return k

    # ---- 1. before scheduling ------------------------------------------------------------
    def plan(self, running: Seq[Sequence], waiting: bool = True) -> None:
        """Set ``num_lookahead_tokens`` (and, for prompt lookup, ``spec_token_ids``) of every
        running sequence: 0 for sequences in prefill or about to sample their first token, for
        sequences backing off (:data:`MAX_BACKOFF_STEPS`) or skipping lookups after failed
        ones (:data:`MAX_LOOKUP_BACKOFF_STEPS`), and for drafts the cost model says cost more
        than they bring (:mod:`~local_engine.spec_decode.policy`; cut to the drafts that pay,
        per sequence, or on a padded step all or none). Prompt-lookup drafts are priced by the
        acceptance of their match length
        (:class:`~local_engine.spec_decode.policy.MatchAcceptance`), a draft model's by the
        sequence's acceptance. On a padded step every decode gets K slots: its real drafts,
        then padding (``num_spec_pad``). ``waiting``: whether requests wait for a slot (a
        token is then worth ``T_d / B``, else the marginal per-sequence step cost:
        :meth:`~local_engine.spec_decode.policy.StepCostModel.token_seconds`)."""
        ngram = self.ngram
        states = self._state
        decodes: list[tuple[Sequence, _SeqState, int]] = []  # (seq, state, room for drafts)
        for seq in running:
            seq.spec_token_ids = []
            seq.spec_probs = None
            seq.num_lookahead_tokens = 0
            seq.num_spec_pad = 0
            n = seq.num_tokens
            if seq.num_computed_tokens != n - 1 or n == seq.num_prompt_tokens:
                continue  # prefill (or the first token): no drafts
            st = states.get(seq)
            if st is None:
                st = states[seq] = _SeqState()
            st.planned = st.match_len = 0
            st.priced = False
            decodes.append((seq, st, min(self.request_k(seq.params), seq.max_total_len - n - 1)))
        if not decodes:
            return
        num_seqs = len(running)
        # padding buys one graph shape, which a step that also prefills cannot have
        pads = self.pads and len(decodes) == num_seqs
        t_d = self.cost.decode_seconds(num_seqs)
        beta = self.cost.beta_seconds(num_seqs)
        timed = self.adaptive and t_d is not None and beta is not None
        value = self.cost.token_seconds(num_seqs, waiting)  # one emitted token, seconds
        if (
            self.adaptive
            and t_d is None
            and len(decodes) == num_seqs  # no prefill running (a new one may still join)
            and self._measure_tries.get(bucket(num_seqs), 0) < MEASURE_TRIES
            # (only when every sequence may follow timings: a seeded one drafts as always)
            and all(allows_timing(s.params) for s, _st, _k in decodes)
        ):
            # one plain decode step measures T_d of this size
            b = bucket(num_seqs)
            self._measure_tries[b] = self._measure_tries.get(b, 0) + 1
            for _seq, st, _k in decodes:
                st.wait = max(0, st.wait - 1)
                st.lookup_wait = max(0, st.lookup_wait - 1)
            return
        # back off failing lookups only where they cost a measurable part of the step
        lazy = (
            self.lookup_backoff
            and t_d is not None
            and t_d < LOOKUP_BACKOFF_TOKEN_SECONDS * num_seqs
        )
        match = self.match if self.match_model else None
        gain = 0.0  # padded step: expected extra tokens of the sequences' drafts
        forced = False  # a sequence that does not follow the cost model drafts
        chosen: list[tuple[Sequence, _SeqState, list[int] | None, int]] = []
        for seq, st, k in decodes:
            if k <= 0:
                continue
            if st.wait:
                st.wait -= 1
                continue
            drafts: list[int] | None = None
            n_real = k
            if ngram is not None:
                if st.lookup_wait:
                    st.lookup_wait -= 1
                    continue
                drafts = st.lookup(ngram, seq.all_token_ids, k, lazy)
                if not drafts:
                    if lazy:
                        st.lookup_failed()
                    continue
                st.lookup_backoff = 0
                n_real = len(drafts)
            if timed and allows_timing(seq.params):
                assert t_d is not None and beta is not None and value is not None
                m = st.match_len if match is not None else 0
                if pads:  # a probe counts at the prior's rate: padded steps cost every decode
                    if st.probe:
                        gain += expected_tokens(PRIOR_RATE, n_real) - 1.0
                    elif m:
                        gain += sum(match.cumulative(m, n_real))  # type: ignore[union-attr]
                    else:
                        gain += expected_tokens(st.acceptance.rate, n_real) - 1.0
                elif m:
                    assert match is not None
                    n_pay = drafts_that_pay(match.cumulative(m, n_real), value, beta)
                    if n_pay:
                        n_real = n_pay
                    elif not match.refuse(m, EXPLORE_EVERY * num_seqs):
                        # (no backoff: the next step's match is longer if the copy goes on)
                        continue
                    st.priced = True
                elif not st.probe and st.acceptance.tested:
                    # (a probe, or a sequence with no evidence yet, drafts all it has: that
                    # costs only its own tokens and measures its acceptance)
                    n_real = best_num_drafts(st.acceptance.rate, n_real, value, beta)
                    if n_real == 0:  # not worth it now: wait, then probe
                        st.back_off()
                        st.probe = True
                        continue
            else:
                forced = True
            chosen.append((seq, st, drafts, n_real))
        if pads and chosen and not forced and timed:
            assert t_d is not None and beta is not None and value is not None
            # a padded verification costs beta * K extra tokens for every decode
            if gain * value <= beta * self.k * len(decodes):
                for _seq, st, _d, _n in chosen:
                    st.back_off()
                    st.probe = True
                return
        if not chosen:
            return
        if pads and ngram is not None:  # the step verifies anyway: every lookup rides along
            have = {id(c[0]) for c in chosen}
            for seq, st, k in decodes:  # (a seeded request's drafts stay as they always are)
                if (
                    k > 0
                    and id(seq) not in have
                    and not st.lookup_wait
                    and allows_timing(seq.params)
                ):
                    d = st.lookup(ngram, seq.all_token_ids, k, lazy)
                    if d:
                        chosen.append((seq, st, d, len(d)))
        for seq, st, drafts, n_real in chosen:
            st.probe = False
            st.planned = n_real
            if drafts is not None:
                seq.spec_token_ids = drafts[:n_real]
            seq.num_lookahead_tokens = n_real
        if pads:
            limit = min(self.max_model_len, self.runner.num_blocks * self.runner.block_size)
            for seq, _st, _k in decodes:
                # positions n-1 .. n-1+K must exist (rotary table, the pool): else no padding
                # (the step then runs eagerly)
                seq.num_lookahead_tokens = max(
                    seq.num_lookahead_tokens, min(self.k, limit - seq.num_tokens)
                )

    # ---- 2. after scheduling -------------------------------------------------------------
    def draft(self, scheduled, block_tables) -> None:
        """Fill ``spec_token_ids`` / ``spec_probs`` of the scheduled sequences with the drafts
        the scheduler made room for (``num_computed + num_new_tokens - num_tokens`` of them:
        the planned real drafts first, padding after) and lower ``num_new_tokens`` where the
        drafter gave fewer.

        Args:
            scheduled: the step's ``ScheduledSequence`` list.
            block_tables: int32 ``[len(scheduled), max_blocks]`` in the same order.
        """
        want, rows, pads = [], [], []
        states = self._state
        for r, s in enumerate(scheduled):
            seq = s.seq
            n_spec = s.num_computed + s.num_new_tokens - seq.num_tokens
            if n_spec <= 0:
                if seq.spec_token_ids:
                    seq.spec_token_ids = []
                seq.num_spec_pad = 0
                continue
            st = states.get(seq)
            real = min(n_spec, st.planned if st is not None else n_spec)
            seq.num_spec_pad = n_spec - real
            if self.ngram is not None or real == 0:
                seq.spec_token_ids = seq.spec_token_ids[:real] + [seq.all_token_ids[-1]] * (
                    n_spec - real
                )
            else:
                want.append(real)
                rows.append(r)
                pads.append(n_spec - real)
        if rows:
            assert self.draft_model is not None
            seqs = [scheduled[r].seq for r in rows]
            drafts, qs = self.draft_model.propose(seqs, want, block_tables[rows])
            for seq, d, q, pad in zip(seqs, drafts, qs, pads):
                seq.spec_token_ids = list(d) + [seq.all_token_ids[-1]] * pad
                seq.spec_probs = q

    # ---- 3. verification -----------------------------------------------------------------
    def verify(self, logits: torch.Tensor, seqs: Seq[Sequence]) -> VerifyOutput:
        """Verify the real drafts of ``seqs`` (each with ``len(spec_token_ids) -
        num_spec_pad + 1`` consecutive logits rows; 0 drafts is plain sampling), count them
        and update each sequence's acceptance estimate and backoff."""
        drafts = [seq.spec_token_ids[: len(seq.spec_token_ids) - seq.num_spec_pad] for seq in seqs]
        out = self.sampler(
            logits,
            drafts,
            [seq.spec_probs for seq in seqs],
            [seq.params for seq in seqs],
            [seq.generator for seq in seqs],
        )
        self.account(seqs, drafts, out.num_accepted)
        return out

    def account(self, seqs: Seq[Sequence], drafts: Seq[list[int]], num_accepted) -> None:
        """Count a verification's outcome and update the acceptance estimates and backoffs:
        ``drafts[i]`` (the real drafts of ``seqs[i]``) of which the first ``num_accepted[i]``
        were accepted (called by :meth:`verify`; replays of recorded outputs call it
        directly)."""
        c = self.counters
        states = self._state
        match = self.match
        for seq, d, a in zip(seqs, drafts, num_accepted):
            if d:
                c.num_draft_tokens += len(d)
                c.num_accepted_tokens += a
                c.num_verify_steps += 1
                st = states.get(seq)
                if st is not None:
                    st.acceptance.update(len(d), a)
                    if st.match_len:
                        match.update(st.match_len, len(d), a)
                    if a:
                        st.backoff = st.wait = 0
                    elif not st.priced:  # all rejected: wait 1, 2, 4, ... steps
                        # (drafts priced by their match length need no wait: the rejection
                        # lowers that length's estimate, and the next match is judged by it)
                        st.back_off()

    # ---- the cost model's measurements ---------------------------------------------------
    @staticmethod
    def step_shape(scheduled) -> StepShape:
        """The shape of a scheduled step (before it runs; ``scheduled`` as :meth:`draft`)."""
        extra = 0
        decode_only = True
        for s in scheduled:
            seq = s.seq
            if s.num_computed != seq.num_tokens - 1 or seq.num_tokens == seq.num_prompt_tokens:
                decode_only = False
                break
            extra += s.num_new_tokens - 1
        return StepShape(len(scheduled), extra, decode_only)

    def observe(self, shape: StepShape, seconds: float) -> None:
        """Feed a finished step's wall time to the cost model (decode-only steps only)."""
        if shape.decode_only:
            self.cost.observe(shape.num_seqs, shape.extra_tokens, seconds)

    # ---- 4. after the step ---------------------------------------------------------------
    @staticmethod
    def rollback(seq: Sequence, kv) -> None:
        """Forget ``seq``'s drafts and give back the blocks past its committed tokens (those
        held only rejected drafts' K/V)."""
        seq.spec_token_ids = []
        seq.spec_probs = None
        seq.num_lookahead_tokens = 0
        seq.num_spec_pad = 0
        if not seq.is_finished:
            kv.trim(seq, seq.num_tokens)


__all__ = ["SpeculativeDecoder", "SpecDecodeCounters", "StepShape"]
