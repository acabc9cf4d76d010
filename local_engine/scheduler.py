"""Continuous-batching scheduler.

Each :meth:`Scheduler.schedule` call picks the work of one step under a token budget
(``max_num_batched_tokens``) and a sequence cap (``max_num_seqs``), like vLLM v1's scheduler:

1. Running sequences first, oldest first: a decode takes one token; a prompt still in (chunked)
   prefill takes as many as the remaining budget allows. When the pool cannot supply a block, the
   newest running sequence is preempted (its blocks freed; it goes back to the front of the
   queue and is recomputed later, hitting the prefix cache for its full blocks) until the
   allocation fits.
2. Then waiting sequences in arrival order (FCFS): each is looked up in the prefix cache, then
   given the budget left (chunked prefill lets a long prompt share steps with decodes). A
   waiting sequence whose next uncached block is being computed right now by another
   sequence's prefill is held back (prefix-aware scheduling) so that it hits that block a step
   later instead of computing it again; the requests behind it are not blocked.
3. With a CPU tier, a waiting sequence whose prefix continues into blocks the device pool
   evicted to the tier gets its blocks at once and a copy back (``tier_restore``); it waits
   (``RESTORING``, keeping its place in the queue) until the runner reports the copy done,
   while the other sequences run, then is admitted like any other with those tokens cached.

Nothing here knows about tensors; the runner turns a :class:`SchedulerOutput` into them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from .kv_cache.manager import KVCacheManager
from .sequence import Sequence, SequenceStatus


@dataclass(slots=True)
class ScheduledSequence:
    """``seq`` computes tokens ``[num_computed, num_computed + num_new_tokens)`` this step;
    it samples when that range ends at ``seq.num_tokens``."""

    seq: Sequence
    num_computed: int
    num_new_tokens: int

    @property
    def samples(self) -> bool:
        return self.num_computed + self.num_new_tokens == self.seq.num_tokens


@dataclass
class SchedulerOutput:
    """One step's plan: the sequences to run with their new-token counts (``scheduled``), block
    copies for copy-on-write, swap copies ``(src, dst)`` block ids, sequences preempted this step,
    and the total new tokens (at most ``max_num_batched_tokens``)."""

    scheduled: list[ScheduledSequence] = field(default_factory=list)
    block_copies: list[tuple[int, int]] = field(default_factory=list)
    swap_out: list[tuple[int, int]] = field(default_factory=list)  # (device block, cpu block)
    swap_in: list[tuple[int, int]] = field(default_factory=list)  # (cpu block, device block)
    preempted: list[Sequence] = field(default_factory=list)
    num_batched_tokens: int = 0
    # CPU tier: (device block, host slot) offloads of evicted blocks, done before anything
    # writes a device block this step; restores begun this step (RestoreJob), issued after swaps
    tier_offload: list[tuple[int, int]] = field(default_factory=list)
    tier_restore: list = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled

    @property
    def has_transfers(self) -> bool:
        """Whether the step moves blocks between tiers (to run even when nothing is scheduled)."""
        return bool(self.tier_offload or self.tier_restore)


class Scheduler:
    """FCFS continuous batching with chunked prefill, prefix-aware holding back and
    preemption by recompute.

    Args:
        kv: the KV-cache manager.
        max_num_seqs: most running sequences.
        max_num_batched_tokens: token budget per step.
        enable_chunked_prefill: split prompts longer than the remaining budget.
    """

    def __init__(
        self,
        kv: KVCacheManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        enable_chunked_prefill: bool = True,
    ):
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.enable_chunked_prefill = enable_chunked_prefill
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self.num_swaps = 0
        self._pending_swap_out: list[tuple[int, int]] = []

    @property
    def max_sequence_tokens(self) -> int:
        """Most tokens (prompt + output) one sequence may ever hold so it can always be
        scheduled, even recomputed after preemption: the whole pool, and with chunked prefill
        off also one step's token budget. The engine refuses prompts past it and ends
        sequences that reach it with ``finish_reason="length"``."""
        limit = self.kv.num_blocks * self.kv.block_size
        if not self.enable_chunked_prefill:
            limit = min(limit, self.max_num_batched_tokens)
        return limit

    # ---- queue management ----------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        """Queue a new sequence at the back of the waiting queue (first come, first served)."""
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    def add_running(self, seq: Sequence) -> None:
        """Join a sample just forked off a computed one (``FORK_PENDING`` until now) to the
        running set."""
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def has_unfinished(self) -> bool:
        """True while any sequence is waiting or running."""
        return bool(self.waiting or self.running)

    def finish(self, seq: Sequence, status: SequenceStatus) -> None:
        """Mark ``seq`` finished with ``status``, take it out of its queue and free its blocks
        at once. A ``FORK_PENDING`` sample is in no queue and holds no blocks."""
        if seq.status == SequenceStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status != SequenceStatus.FORK_PENDING and not seq.is_finished:
            self.waiting.remove(seq)  # WAITING, PREEMPTED, SWAPPED, RESTORING wait in the queue
        if seq.status == SequenceStatus.SWAPPED and self._pending_swap_out:
            # its swap-out copies may not have run yet: its host blocks are given back now and
            # may hold another block (the CPU tier's) before the next step runs them
            mine = set(self.kv.swapped.get(seq.seq_id, ()))
            self._pending_swap_out = [c for c in self._pending_swap_out if c[1] not in mine]
        seq.status = status
        self.kv.free(seq)

    # ---- scheduling ----------------------------------------------------------------------
    def _preempt(self, seq: Sequence) -> None:
        """Take ``seq``'s blocks back: swap them to CPU memory when there is swap space for
        all of them, else drop them (it is recomputed later, hitting the prefix cache for its
        full blocks). It goes to the front of the queue."""
        if self.kv.can_swap_out(seq):
            self._pending_swap_out.extend(self.kv.swap_out(seq))
            seq.status = SequenceStatus.SWAPPED
            self.num_swaps += 1
        else:
            self.kv.free(seq)
            seq.num_computed_tokens = 0
            seq.status = SequenceStatus.PREEMPTED
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def _uncomputed_prompt_hashes(self, seq: Sequence) -> list[bytes]:
        """Hashes of ``seq``'s full prompt blocks that are not computed yet."""
        bs = self.kv.block_size
        hashes = self.kv.update_block_hashes(seq)
        return hashes[seq.num_computed_tokens // bs : seq.num_prompt_tokens // bs]

    def _pending_hashes(self) -> set[bytes]:
        """Hashes of prompt blocks that running prefills will compute but have not yet, and
        of blocks being restored from the CPU tier (and what those sequences compute next)."""
        pending: set[bytes] = set()
        for s in self.running:
            if s.in_prefill:
                pending.update(self._uncomputed_prompt_hashes(s))
        for job in self.kv.restoring.values():
            pending.update(job.hashes)
        for s in self.waiting:
            if s.status == SequenceStatus.RESTORING:
                pending.update(self._uncomputed_prompt_hashes(s))
        return pending

    def _admit(self, idx: int, seq: Sequence, num_new: int, out: SchedulerOutput) -> int:
        """Move ``seq`` (``self.waiting[idx]``, its slots already allocated) to the running set
        and schedule its next ``num_new`` tokens. Returns the ``max_num_seqs`` seats it takes:
        itself plus the samples still to fork off it."""
        del self.waiting[idx]
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)
        out.scheduled.append(ScheduledSequence(seq, seq.num_computed_tokens, num_new))
        return 1 + seq.num_forks

    def schedule(self) -> SchedulerOutput:
        """Plan one step: running sequences first (decodes and prefill chunks, preempting the newest
        when the pool runs out), then waiting ones in arrival order while the token budget,
        ``max_num_seqs`` and free blocks allow, holding back requests whose uncached prefix
        another request is computing this step."""
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens
        self.kv.end_step()
        failed = self.kv.take_failed_restores()
        if failed:
            self._retry_failed_restores(failed)

        budget = self._schedule_running(out, budget)
        # waiting sequences only when this step did not have to preempt (the pool is tight);
        # the per-running-sequence sums there are only worth computing when someone waits
        if not out.preempted and self.waiting:
            budget = self._schedule_waiting(out, budget)
        out.num_batched_tokens = self.max_num_batched_tokens - budget
        out.tier_offload, out.tier_restore = self.kv.take_transfers()
        # swap-outs decided this step (or left from a step that scheduled nothing) run first
        out.swap_out = self._pending_swap_out + out.swap_out
        self._pending_swap_out = [] if (out.scheduled or out.has_transfers) else out.swap_out
        return out

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        """Schedule running sequences oldest first: a decode takes one token, a prefill chunk
        what the budget allows; when the pool cannot supply a block, preempt the newest until
        the allocation fits. Returns the budget left."""
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            num_new = len(seq.all_token_ids) - seq.num_computed_tokens
            if seq.num_lookahead_tokens:  # speculative drafts, as far as the budget allows
                num_new += max(0, min(seq.num_lookahead_tokens, budget - num_new))
            if num_new > budget:
                if not self.enable_chunked_prefill:
                    i += 1
                    continue
                num_new = budget
            while True:
                copies = self.kv.allocate_slots(seq, num_new)
                if copies is not None:
                    break
                victim = self.running.pop()
                self._preempt(victim)
                out.preempted.append(victim)
                if victim is seq:
                    break
            if copies is None:  # seq itself was preempted
                break
            if copies:
                out.block_copies.extend(copies)
            out.scheduled.append(ScheduledSequence(seq, seq.num_computed_tokens, num_new))
            budget -= num_new
            i += 1

        return budget

    def _schedule_waiting(self, out: SchedulerOutput, budget: int) -> int:
        """Admit waiting sequences in arrival order (swapped ones swap back in; new and
        preempted ones look up the prefix cache first) while the budget, ``max_num_seqs`` and
        free blocks allow, holding back one whose next uncached block a running prefill is
        computing. Returns the budget left."""
        num_seqs = len(self.running) + sum(s.num_forks for s in self.running)
        if self.kv.has_restored:
            num_seqs, budget = self._admit_restored(out, num_seqs, budget)
        pending = self._pending_hashes() if self.kv.enable_caching else set()
        idx = 0
        while idx < len(self.waiting) and budget > 0:
            seq = self.waiting[idx]
            if num_seqs + 1 + seq.num_forks > self.max_num_seqs:
                break
            if seq.status == SequenceStatus.SWAPPED:
                num_new = min(seq.num_tokens - seq.num_computed_tokens, budget)
                if (
                    num_new < seq.num_tokens - seq.num_computed_tokens
                    and not self.enable_chunked_prefill
                ):
                    break
                need = max(
                    self.kv.num_swapped_blocks(seq),
                    self.kv.blocks_needed(seq.num_computed_tokens + num_new),
                )
                if need > self.kv.num_free_blocks:
                    break  # FCFS: wait until it fits
                swap_in = self.kv.swap_in(seq)
                if swap_in is None:  # int2: no residual slot free for its open block
                    break
                out.swap_in.extend(swap_in)
                copies = self.kv.allocate_slots(seq, num_new)
                assert copies is not None
                num_seqs += self._admit(idx, seq, num_new, out)
                budget -= num_new
                continue
            if seq.status == SequenceStatus.RESTORING:
                idx += 1  # its copy is still running (or it was admitted above)
                continue
            hits, num_cached = self.kv.get_computed_blocks(seq)
            if pending:
                hashes = self.kv.update_block_hashes(seq)
                nxt = len(hits)
                if nxt < (seq.num_tokens - 1) // self.kv.block_size and hashes[nxt] in pending:
                    idx += 1  # hold back: another prefill is computing this block now
                    continue
            cont = self.kv.find_cpu_hits(seq, hits) if self.kv.lower_tiers_enabled else []
            if cont and pending and any(h in pending for h, _ in cont):
                idx += 1  # another sequence restores (or computes) these blocks right now
                continue
            num_cached += len(cont) * self.kv.block_size
            num_new = seq.num_tokens - seq.num_computed_tokens - num_cached
            if num_new > budget:
                if not self.enable_chunked_prefill:
                    break
                num_new = budget
            if cont:
                job = self.kv.begin_restore(seq, hits, cont, num_new)
                if job is None:
                    break  # FCFS, as below
                if seq.num_cached_tokens < 0:
                    seq.num_cached_tokens = num_cached
                    seq.num_cpu_cached_tokens = len(job.blocks) * self.kv.block_size
                    seq.num_disk_cached_tokens = len(job.disk_blocks) * self.kv.block_size
                    self.kv.record_lookup(
                        seq.num_prompt_tokens,
                        num_cached,
                        seq.num_cpu_cached_tokens,
                        seq.num_disk_cached_tokens,
                    )
                seq.num_computed_tokens += num_cached
                seq.status = SequenceStatus.RESTORING
                pending.update(job.hashes)
                if self.kv.enable_caching:
                    pending.update(self._uncomputed_prompt_hashes(seq))
                idx += 1  # it stays in the queue until its copy is done
                continue
            copies = self.kv.allocate_slots(seq, num_new, hits)
            if copies is None:
                break  # FCFS: nobody overtakes a request that does not fit
            if seq.num_cached_tokens < 0:
                seq.num_cached_tokens = num_cached
                self.kv.record_lookup(seq.num_prompt_tokens, num_cached)
            seq.num_computed_tokens += num_cached
            num_seqs += self._admit(idx, seq, num_new, out)
            budget -= num_new
            if self.kv.enable_caching and seq.in_prefill:
                pending.update(self._uncomputed_prompt_hashes(seq))
        return budget

    def _retry_failed_restores(self, seq_ids: set[str]) -> None:
        """Sequences whose restore failed (a disk block could not be read; their blocks are
        already given back) wait again, uncomputed, in their place: the next lookup finds
        what is still cached and computes the rest. Their lookup is counted again then."""
        for seq in self.waiting:
            if seq.seq_id not in seq_ids:
                continue
            if seq.num_cached_tokens >= 0:
                self.kv.record_lookup(
                    -seq.num_prompt_tokens,
                    -seq.num_cached_tokens,
                    -seq.num_cpu_cached_tokens,
                    -seq.num_disk_cached_tokens,
                )
            seq.num_cached_tokens = -1
            seq.num_cpu_cached_tokens = seq.num_disk_cached_tokens = 0
            seq.num_computed_tokens = 0
            seq.status = SequenceStatus.WAITING

    def _admit_restored(self, out: SchedulerOutput, num_seqs: int, budget: int) -> tuple[int, int]:
        """Admit the waiting sequences whose CPU-tier restore is done, in queue order, before
        the FCFS pass: they already hold the blocks of their first chunk (taken when the
        restore began), so admitting them takes nothing from the sequences ahead of them, and
        a sequence ahead that does not fit cannot hold them (and their blocks) back. Returns
        the seats and budget left."""
        idx = 0
        while idx < len(self.waiting) and budget > 0:
            seq = self.waiting[idx]
            if seq.status != SequenceStatus.RESTORING or not self.kv.restore_done(seq):
                idx += 1
                continue
            if num_seqs + 1 + seq.num_forks > self.max_num_seqs:
                break
            num_new = seq.num_tokens - seq.num_computed_tokens
            if num_new > budget:
                if not self.enable_chunked_prefill:
                    idx += 1
                    continue
                num_new = budget
            copies = self.kv.allocate_slots(seq, num_new)
            if copies is None:  # the blocks it holds were sized for its first chunk
                held = len(self.kv.req_blocks[seq.seq_id]) * self.kv.block_size
                num_new = min(num_new, held - seq.num_computed_tokens)
                copies = self.kv.allocate_slots(seq, num_new)
                assert copies is not None and num_new > 0
            self.kv.admit_restored(seq)
            out.block_copies.extend(copies)
            num_seqs += self._admit(idx, seq, num_new, out)
            budget -= num_new
        return num_seqs, budget

    def check_invariants(self) -> None:
        """Debug check: pool invariants, and every live sequence in exactly one queue."""
        self.kv.check_invariants()
        ids = [s.seq_id for s in self.running] + [s.seq_id for s in self.waiting]
        if len(ids) != len(set(ids)):
            raise AssertionError(f"a sequence is queued twice: {ids}")
        for s in self.waiting:
            if (s.status == SequenceStatus.RESTORING) != bool(self.kv.req_blocks.get(s.seq_id)):
                raise AssertionError(f"waiting sequence {s.seq_id}: holds blocks iff restoring")
            if (s.status == SequenceStatus.RESTORING) != (
                s.seq_id in self.kv.restoring
                or self.kv.restore_done(s)
                or self.kv.restore_failed(s)
            ):
                raise AssertionError(f"sequence {s.seq_id}: restore state and status disagree")
            if (s.status == SequenceStatus.SWAPPED) != (s.seq_id in self.kv.swapped):
                raise AssertionError(f"sequence {s.seq_id}: swap state and status disagree")
