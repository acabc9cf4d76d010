"""A sequence: one sample of one request as the scheduler, KV manager and runner see it.

All tokens (prompt + generated) live in ``all_token_ids``; ``num_computed_tokens`` of them have
K/V in the cache. Each step the scheduler gives a sequence ``num_new_tokens`` of the rest; when
that reaches the end of ``all_token_ids`` the step samples the next token. Prefill, chunked
prefill, decode and recompute after preemption are the same operation (as in vLLM v1).
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

import torch

from .sampling import SamplingParams


class SequenceStatus(enum.Enum):
    """Lifecycle of a sequence: WAITING -> RUNNING -> FINISHED_*; RUNNING -> PREEMPTED (blocks
        given back, recomputed later) or SWAPPED (K/V kept in CPU memory) -> RUNNING; WAITING or
    PREEMPTED -> RESTORING (holding its prefix blocks while the CPU tier copies them back) ->
    RUNNING.

        Samples 1..n-1 of an ``n > 1`` request start FORK_PENDING: in no scheduler queue and
        holding no blocks until sample 0's prompt is computed; then they fork off it (sharing its
        blocks copy-on-write) straight to RUNNING, or are aborted (FINISHED_ABORTED)."""

    WAITING = "waiting"
    FORK_PENDING = "fork_pending"  # a sibling sample not yet forked off sample 0
    RUNNING = "running"
    PREEMPTED = "preempted"  # waiting again after giving its blocks back
    SWAPPED = "swapped"  # waiting with its K/V copied to CPU memory
    RESTORING = "restoring"  # waiting while its cached prefix is copied back from the CPU tier
    FINISHED_STOPPED = "finished_stopped"
    FINISHED_LENGTH = "finished_length"
    FINISHED_ABORTED = "finished_aborted"

    @property
    def finished(self) -> bool:
        return self.value.startswith("finished")


@dataclass(eq=False)
class Sequence:
    """Scheduler-side state of one sample. Compared and hashed by identity (queues remove a
    sequence by ``list.remove``; a field-by-field ``==`` made that cost microseconds per
    element passed over).

    Attributes:
        seq_id: unique id (``request_id`` for sample 0, ``request_id#i`` for sample i).
        request_id, index: the owning request and the sample's index in its ``outputs``.
        prompt_token_ids: the prompt; ``all_token_ids`` = prompt + generated.
        num_computed_tokens: tokens whose K/V are in this sequence's blocks.
        num_cached_tokens: prompt tokens served from the prefix cache when first scheduled
            (whole blocks, either tier); -1 until then.
        num_cpu_cached_tokens: of those, tokens restored from the CPU tier.
        num_disk_cached_tokens: of those, tokens read back from the disk tier.
        cache_salt: per-tenant salt mixed into block hashes (None = shared cache).
        num_forks: for sample 0 of an ``n > 1`` request, how many siblings still to fork off
            when its prompt is done (they share its blocks copy-on-write).
        generator: torch RNG for seeded sampling (None = the engine's generator).
        spec_token_ids: speculative decoding: this step's drafted tokens (after the committed
            ones; never part of ``all_token_ids``), empty when not speculating.
        spec_probs: the draft distribution ``[len(spec_token_ids), vocab]`` they were drawn
            from (None for prompt lookup and greedy requests).
        num_lookahead_tokens: draft slots the scheduler should add to this step's decode.
        num_spec_pad: how many of ``spec_token_ids`` (at the end) are padding: tokens computed
            only so that every sequence of a verification step has K drafts (one CUDA-graph
            shape); their logits rows are never verified and they are never accepted.
    """

    seq_id: str
    request_id: str
    index: int
    prompt_token_ids: list[int]
    params: SamplingParams
    arrival_time: float = field(default_factory=time.monotonic)
    cache_salt: str | None = None
    all_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_cached_tokens: int = -1
    num_cpu_cached_tokens: int = 0
    num_disk_cached_tokens: int = 0
    status: SequenceStatus = SequenceStatus.WAITING
    num_forks: int = 0
    generator: torch.Generator | None = None
    block_hashes: list[bytes] = field(default_factory=list)
    logprobs: list[dict[int, float]] = field(default_factory=list)
    cumulative_logprob: float = 0.0
    num_preemptions: int = 0
    max_total_len: int = 0  # prompt + max output tokens, capped by max_model_len
    spec_token_ids: list[int] = field(default_factory=list)
    spec_probs: torch.Tensor | None = None
    num_lookahead_tokens: int = 0
    num_spec_pad: int = 0

    def __post_init__(self):
        if not self.all_token_ids:
            self.all_token_ids = list(self.prompt_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.all_token_ids[len(self.prompt_token_ids) :]

    @property
    def num_output_tokens(self) -> int:
        return len(self.all_token_ids) - len(self.prompt_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status.finished

    @property
    def in_prefill(self) -> bool:
        """True while the prompt is not fully computed."""
        return self.num_computed_tokens < self.num_prompt_tokens

    def extra_keys(self) -> tuple | None:
        """Extra keys for block hashing (mixed into the first block, hence into all)."""
        return ("salt", self.cache_salt) if self.cache_salt is not None else None
