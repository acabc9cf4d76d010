"""CUDA graphs for decode steps.

A decode step launches a few hundred small kernels (per layer: norms, projections, rotary
embedding with the KV write, paged attention, the MLP); at small batch sizes the CPU cannot launch
them as fast as the GPU runs them. :class:`DecodeGraphRunner` captures the model's forward pass
and the LM head (every row of a decode step samples, so all rows' float32 logits are computed
inside the graph) once per batch size in :data:`DEFAULT_BATCH_SIZES` (up to the engine's ``max_num_seqs``) over
fixed input buffers, and replays the smallest graph that fits each decode step.

Inputs are copied into the fixed buffers before each replay: ``input_ids``, ``positions`` and
``slot_mapping`` ``[B]``, ``block_tables`` ``[B, max_blocks_per_seq]`` (max_model_len's blocks;
the kernels read only each sequence's first ``cdiv(seq_len, block_size)`` entries, so stale
columns are harmless), ``seq_lens`` ``[B]``; ``cu_seqlens_q`` is the constant ``0..B``. Rows past
the real batch are padding: slot -1 (the KV write skips them), context length 1 over block 0
(a real pool block, so the padded attention reads valid memory and its result is dropped).

The attention launch choices depend only on tensor shapes (see
:mod:`local_engine.attention.triton_backend`), which are fixed per graph, so the captured
kernels are the ones an eager step of that shape would run.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Sequence

import torch

from .attention.metadata import AttentionMetadata

logger = logging.getLogger("local_engine")

#: Decode batch sizes captured (those up to ``max_batch``, plus ``max_batch`` itself).
DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256)


def graph_batch_sizes(max_batch: int, sizes: Sequence[int] = DEFAULT_BATCH_SIZES) -> list[int]:
    """The captured sizes for an engine running at most ``max_batch`` sequences per step:
    every size in ``sizes`` below ``max_batch``, then ``max_batch``."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be at least 1, got {max_batch}")
    return [s for s in sorted(set(sizes)) if s < max_batch] + [max_batch]


class DecodeGraphRunner:
    """Captured decode forward passes of one model over one KV cache.

    Args:
        model: the :class:`~local_engine.models.llama.LlamaForCausalLM` (on CUDA).
        kv_caches: per layer ``(k_cache, v_cache)``, each ``[num_blocks, block_size,
            num_kv_heads, head_dim]``.
        max_batch: most sequences in a decode step (the engine's ``max_num_seqs``).
        max_blocks_per_seq: block-table width (``cdiv(max_model_len, block_size)``).
        backend: attention backend name passed through the metadata (None = by device).
        batch_sizes: sizes to capture (default :func:`graph_batch_sizes`).
        query_len: new tokens per sequence (1 = decode; ``K + 1`` = a speculative verification
            step where every sequence verifies ``K`` drafts: all ``B * query_len`` rows'
            logits are computed, and padding sequences get a ``query_len``-token context in
            block 0).
    """

    def __init__(
        self,
        model,
        kv_caches: list[tuple[torch.Tensor, ...]],  # (k, v) or (k, v, k_scale, v_scale)
        *,
        max_batch: int,
        max_blocks_per_seq: int,
        backend: str | None = None,
        batch_sizes: Sequence[int] | None = None,
        require_cuda: bool = True,
        query_len: int = 1,
    ):
        device = kv_caches[0][0].device
        if require_cuda and device.type != "cuda":
            raise ValueError("CUDA graphs need the model and KV cache on a CUDA device")
        self.device = device
        self.model = model
        self.kv_caches = kv_caches
        self.backend = backend
        self.sizes = sorted(batch_sizes) if batch_sizes else graph_batch_sizes(max_batch)
        self.max_batch = self.sizes[-1]
        self.max_blocks_per_seq = max_blocks_per_seq
        b = self.max_batch
        self.q = q = query_len
        self.input_ids = torch.zeros(b * q, dtype=torch.long, device=device)
        self.positions = torch.zeros(b * q, dtype=torch.long, device=device)
        self.slot_mapping = torch.full((b * q,), -1, dtype=torch.long, device=device)
        self.block_tables = torch.zeros((b, max_blocks_per_seq), dtype=torch.int32, device=device)
        self.cu_seqlens_q = torch.arange(b + 1, dtype=torch.int32, device=device) * q
        self.seq_lens = torch.full((b,), q, dtype=torch.int32, device=device)
        self._empty = torch.zeros(0, dtype=torch.long, device=device)
        self.graphs: dict[int, tuple[Callable[[], None], torch.Tensor]] = {}
        self.capture_seconds = 0.0

    def _meta(self, b: int) -> AttentionMetadata:
        return AttentionMetadata(
            slot_mapping=self.slot_mapping[: b * self.q],
            block_tables=self.block_tables[:b],
            cu_seqlens_q=self.cu_seqlens_q[: b + 1],
            seq_lens=self.seq_lens[:b],
            logits_indices=self._empty,
            backend=self.backend,
        )

    def _forward(self, b: int) -> torch.Tensor:
        """float32 logits ``[b, vocab]`` of a decode step over the fixed buffers."""
        n = b * self.q
        hidden = self.model(self.input_ids[:n], self.positions[:n], self._meta(b), self.kv_caches)
        return self.model.compute_logits(hidden)

    @torch.inference_mode()
    def capture(self) -> DecodeGraphRunner:
        """Capture one graph per batch size (largest first, all in one memory pool). The
        buffers hold padding (slot -1) while capturing, so the KV cache is not written."""
        t0 = time.monotonic()
        pool = torch.cuda.graph_pool_handle() if self.device.type == "cuda" else None
        self.slot_mapping.fill_(-1)
        self.seq_lens.fill_(self.q)
        self.block_tables.zero_()
        for b in reversed(self.sizes):
            self.graphs[b] = self._capture_one(b, pool)
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.capture_seconds = time.monotonic() - t0
        logger.info(
            "captured %d decode CUDA graphs (%d token(s) per sequence, batch %s) in %.1fs",
            len(self.sizes),
            self.q,
            ",".join(map(str, self.sizes)),
            self.capture_seconds,
        )
        return self

    def _capture_one(self, b: int, pool) -> tuple[Callable[[], None], torch.Tensor]:
        """(replay function, output buffer) for batch size ``b``."""
        self._forward(b)  # eager warm-up: compiles the Triton kernels for this shape
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            out = self._forward(b)
        return graph.replay, out

    def can_run(self, num_seqs: int, meta: AttentionMetadata) -> bool:
        """Whether a decode step of ``num_seqs`` sequences (one new token each) fits a graph."""
        return (
            0 < num_seqs <= self.max_batch
            and bool(self.graphs)
            and meta.block_tables.shape[1] <= self.max_blocks_per_seq
        )

    @torch.inference_mode()
    def run(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        """Replay the smallest graph that holds this decode step.

        Args:
            input_ids, positions: int64 ``[n * query_len]`` (``query_len`` new tokens per
                sequence).
            meta: the step's metadata (``n`` sequences; ``cu_seqlens_q`` must be
                ``0, query_len, 2 * query_len, ...``).

        Returns:
            float32 logits ``[n * query_len, vocab_size]``, one row per token (a view of the
            graph's output buffer, valid until the next replay).
        """
        q = self.q
        t = input_ids.shape[0]
        n = t // q
        b = self.sizes[bisect.bisect_left(self.sizes, n)]
        w = meta.block_tables.shape[1]
        self.input_ids[:t].copy_(input_ids, non_blocking=True)
        self.positions[:t].copy_(positions, non_blocking=True)
        self.slot_mapping[:t].copy_(meta.slot_mapping, non_blocking=True)
        self.block_tables[:n, :w].copy_(meta.block_tables, non_blocking=True)
        self.seq_lens[:n].copy_(meta.seq_lens, non_blocking=True)
        if b > n:  # padding rows: no KV write, a query_len-token context in block 0
            self.slot_mapping[t : b * q].fill_(-1)
            self.seq_lens[n:b].fill_(q)
            self.block_tables[n:b, 0].zero_()
        replay, out = self.graphs[b]
        replay()
        return out[:t]


__all__ = ["DecodeGraphRunner", "DEFAULT_BATCH_SIZES", "graph_batch_sizes"]
