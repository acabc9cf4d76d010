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
from .ngram import NgramProposer
from .rejection_sampler import RejectionSampler, VerifyOutput


@dataclass
class SpecDecodeCounters:
    """Engine-wide totals (Prometheus counters): drafted tokens, accepted drafts, and
    verification steps (sequence-steps that verified at least one draft)."""

    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_verify_steps: int = 0


#: Most decode steps a sequence waits before drafting again after its drafts were all rejected
#: (the wait doubles on each such step: 1, 2, 4, ..., and drops to 0 on any acceptance). With
#: nothing ever accepted this drafts on about 1 step in 17, so the verification's extra cost
#: (measured 1.9x a decode step for K=4 at batch 64 on the 8B shape, bench/RESULTS.md) is paid
#: on ~6% of steps.
MAX_BACKOFF_STEPS = 16


@dataclass
class _SeqState:
    """Per-sequence drafting state: the token ids as an int64 array grown in place (prompt
    lookup reads it without converting the list every step) and the backoff."""

    tokens: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    num_tokens: int = 0
    backoff: int = 0  # the current wait after a fully rejected step
    wait: int = 0  # decode steps left before drafting again

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


class SpeculativeDecoder:
    """Drafting and verification for one engine.

    Args:
        spec: the validated :class:`SpeculativeConfig`.
        engine_config: the engine's config.
        runner: the target's :class:`~local_engine.runner.ModelRunner`.
        tokenizer: the target's tokenizer (a draft model's must match).
        max_model_len: longest context.

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
        self.sampler = RejectionSampler(engine_config.seed + 2, device=runner.device)
        self.counters = SpecDecodeCounters()
        self._state: weakref.WeakKeyDictionary[Sequence, _SeqState] = weakref.WeakKeyDictionary()

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
    def plan(self, running: Seq[Sequence]) -> None:
        """Set ``num_lookahead_tokens`` (and, for prompt lookup, ``spec_token_ids``) of every
        running sequence; 0 for sequences in prefill or about to sample their first token, and
        for sequences backing off after fully rejected drafts (:data:`MAX_BACKOFF_STEPS`)."""
        ngram = self.ngram
        states = self._state
        for seq in running:
            seq.spec_token_ids = []
            seq.spec_probs = None
            seq.num_lookahead_tokens = 0
            n = seq.num_tokens
            if seq.num_computed_tokens != n - 1 or n == seq.num_prompt_tokens:
                continue  # prefill (or the first token): no drafts
            k = min(self.request_k(seq.params), seq.max_total_len - n - 1)
            if k <= 0:
                continue
            st = states.get(seq)
            if st is None:
                st = states[seq] = _SeqState()
            if st.wait:
                st.wait -= 1
                continue
            if ngram is not None:
                drafts = ngram.propose(st.array(seq.all_token_ids), k)
                seq.spec_token_ids = drafts
                seq.num_lookahead_tokens = len(drafts)
            else:
                seq.num_lookahead_tokens = k

    # ---- 2. after scheduling -------------------------------------------------------------
    def draft(self, scheduled, block_tables) -> None:
        """Fill ``spec_token_ids`` / ``spec_probs`` of the scheduled sequences with the drafts
        the scheduler made room for (``num_computed + num_new_tokens - num_tokens`` of them)
        and lower ``num_new_tokens`` where the drafter gave fewer.

        Args:
            scheduled: the step's ``ScheduledSequence`` list.
            block_tables: int32 ``[len(scheduled), max_blocks]`` in the same order.
        """
        want, rows = [], []
        for r, s in enumerate(scheduled):
            seq = s.seq
            n_spec = s.num_computed + s.num_new_tokens - seq.num_tokens
            if n_spec <= 0:
                if seq.spec_token_ids:
                    seq.spec_token_ids = []
                continue
            if self.ngram is not None:
                seq.spec_token_ids = seq.spec_token_ids[:n_spec]
            else:
                want.append(n_spec)
                rows.append(r)
        if rows:
            assert self.draft_model is not None
            seqs = [scheduled[r].seq for r in rows]
            drafts, qs = self.draft_model.propose(seqs, want, block_tables[rows])
            for seq, d, q in zip(seqs, drafts, qs):
                seq.spec_token_ids = d
                seq.spec_probs = q

    # ---- 3. verification -----------------------------------------------------------------
    def verify(self, logits: torch.Tensor, seqs: Seq[Sequence]) -> VerifyOutput:
        """Verify the drafts of ``seqs`` (each with ``len(seq.spec_token_ids) + 1`` consecutive
        logits rows; 0 drafts is plain sampling) and count them."""
        drafts = [seq.spec_token_ids for seq in seqs]
        out = self.sampler(
            logits,
            drafts,
            [seq.spec_probs for seq in seqs],
            [seq.params for seq in seqs],
            [seq.generator for seq in seqs],
        )
        c = self.counters
        states = self._state
        for seq, d, a in zip(seqs, drafts, out.num_accepted):
            if d:
                c.num_draft_tokens += len(d)
                c.num_accepted_tokens += a
                c.num_verify_steps += 1
                st = states.get(seq)
                if st is not None:
                    if a:
                        st.backoff = 0
                    else:  # all rejected: wait 1, 2, 4, ... steps before drafting again
                        st.backoff = min(max(1, 2 * st.backoff), MAX_BACKOFF_STEPS)
                        st.wait = st.backoff
        return out

    # ---- 4. after the step ---------------------------------------------------------------
    @staticmethod
    def rollback(seq: Sequence, kv) -> None:
        """Forget ``seq``'s drafts and give back the blocks past its committed tokens (those
        held only rejected drafts' K/V)."""
        seq.spec_token_ids = []
        seq.spec_probs = None
        seq.num_lookahead_tokens = 0
        if not seq.is_finished:
            kv.trim(seq, seq.num_tokens)


__all__ = ["SpeculativeDecoder", "SpecDecodeCounters"]
