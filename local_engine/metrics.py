"""Engine metrics: counters and latency observations, read as a snapshot object that the server
publishes at ``/metrics``."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

#: Latency observations kept (most recent first out); older ones are dropped.
MAX_OBSERVATIONS = 10_000


@dataclass(frozen=True)
class EngineMetrics:
    """A point-in-time snapshot.

    Attributes:
        prefix_cache_queries: prompt tokens looked up in the prefix cache (cumulative).
        prefix_cache_hits: of those, tokens served from cached blocks (cumulative).
        prefix_cache_hit_rate: hits / queries (0 when no query yet).
        kv_usage: fraction of KV blocks held by live sequences, 0..1.
        kv_usage_percent: the same in percent.
        num_blocks, num_free_blocks: pool size and blocks free or evictable.
        kv_cache_dtype: the KV storage format (``"fp8"``, ``"int8"`` or the model dtype's name
            such as ``"bfloat16"`` for ``kv_cache_dtype="auto"``); block_size: tokens per block.
        num_running, num_waiting: sequences in each queue.
        num_preemptions: sequences preempted so far (recomputed or swapped).
        num_swaps: of those, preemptions that swapped the blocks to CPU memory.
        num_evictions: cached blocks evicted so far.
        prompt_tokens, generation_tokens: tokens computed for prompts / sampled (cumulative).
        requests_finished: finished requests (cumulative).
        ttft_seconds: recent time-to-first-token observations, seconds.
        tpot_seconds: recent time-per-output-token observations (per finished request with
            two or more tokens: (finish - first token) / (tokens - 1)), seconds.
        spec_num_draft_tokens, spec_num_accepted_tokens, spec_num_verify_steps: speculative
            decoding totals (drafted tokens, accepted drafts, sequence-steps that verified a
            draft); all 0 with speculation off.
        prefix_cache_hits_cpu: of ``prefix_cache_hits`` (both tiers), tokens copied back from
            the CPU tier (cumulative); ``prefix_cache_hits_gpu`` is the rest.
        gpu_cache_blocks_resident, cpu_cache_blocks_resident: blocks holding cached content
            (a chain hash) in the device pool / the CPU tier now.
        cpu_cache_num_blocks: host blocks of the tier's own share (0 = tier off; it may also
            use swap space swap does not hold); num_swap_blocks: swap's floor.
        cpu_cache_evictions: tier blocks dropped for room (for the tier or for swap);
            cpu_cache_offers_refused: evicted device blocks the tier could not take.
        kv_bytes_gpu_to_cpu, kv_bytes_cpu_to_gpu: CPU-tier copies, bytes (cumulative);
        kv_transfer_seconds_gpu_to_cpu, kv_transfer_seconds_cpu_to_gpu: their copy time
            (CUDA event time on the copy stream; wall time on the CPU).
        prefix_cache_hits_disk: of ``prefix_cache_hits``, tokens read back from the disk
            tier (cumulative).
        disk_cache_blocks_resident: block files of this engine's model and KV format known
            to it; disk_cache_bytes / disk_cache_size: bytes of block files in the folder (all
            models) and the cap; disk_cache_evictions: files deleted for the cap;
            disk_cache_bad_files: corrupt, truncated or foreign files skipped (recomputed);
            disk_cache_writes_dropped: evicted blocks not written (the writer was behind).
        kv_bytes_to_disk, kv_bytes_from_disk: disk-tier bytes written / read back
            (cumulative); kv_disk_read_seconds: the reader threads' time (read, check, copy).
    """

    prefix_cache_queries: int
    prefix_cache_hits: int
    kv_usage: float
    num_blocks: int
    num_free_blocks: int
    num_running: int
    num_waiting: int
    num_preemptions: int
    num_evictions: int
    prompt_tokens: int
    generation_tokens: int
    requests_finished: int
    num_swaps: int = 0
    kv_cache_dtype: str = ""
    block_size: int = 0
    ttft_seconds: list[float] = field(default_factory=list)
    tpot_seconds: list[float] = field(default_factory=list)
    spec_num_draft_tokens: int = 0
    spec_num_accepted_tokens: int = 0
    spec_num_verify_steps: int = 0
    prefix_cache_hits_cpu: int = 0
    gpu_cache_blocks_resident: int = 0
    cpu_cache_blocks_resident: int = 0
    cpu_cache_num_blocks: int = 0
    num_swap_blocks: int = 0
    cpu_cache_evictions: int = 0
    cpu_cache_offers_refused: int = 0
    kv_bytes_gpu_to_cpu: int = 0
    kv_bytes_cpu_to_gpu: int = 0
    kv_transfer_seconds_gpu_to_cpu: float = 0.0
    kv_transfer_seconds_cpu_to_gpu: float = 0.0
    prefix_cache_hits_disk: int = 0
    disk_cache_blocks_resident: int = 0
    disk_cache_bytes: int = 0
    disk_cache_size: int = 0
    disk_cache_evictions: int = 0
    disk_cache_bad_files: int = 0
    disk_cache_writes_dropped: int = 0
    kv_bytes_to_disk: int = 0
    kv_bytes_from_disk: int = 0
    kv_disk_read_seconds: float = 0.0

    @property
    def prefix_cache_hits_gpu(self) -> int:
        """Hits served from the device pool (tokens, cumulative)."""
        return self.prefix_cache_hits - self.prefix_cache_hits_cpu - self.prefix_cache_hits_disk

    @property
    def spec_acceptance_rate(self) -> float:
        """Accepted / drafted tokens (0 when nothing was drafted)."""
        return (
            self.spec_num_accepted_tokens / self.spec_num_draft_tokens
            if self.spec_num_draft_tokens
            else 0.0
        )

    @property
    def prefix_cache_hit_rate(self) -> float:
        return (
            self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0
        )

    @property
    def kv_usage_percent(self) -> float:
        return 100.0 * self.kv_usage

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["prefix_cache_hit_rate"] = self.prefix_cache_hit_rate
        d["kv_usage_percent"] = self.kv_usage_percent
        d["spec_acceptance_rate"] = self.spec_acceptance_rate
        d["prefix_cache_hits_gpu"] = self.prefix_cache_hits_gpu
        return d


class MetricsRecorder:
    """Mutable counters the engine updates; :meth:`snapshot` freezes them."""

    def __init__(self):
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.requests_finished = 0
        self.ttft: deque[float] = deque(maxlen=MAX_OBSERVATIONS)
        self.tpot: deque[float] = deque(maxlen=MAX_OBSERVATIONS)
