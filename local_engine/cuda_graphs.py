"""CUDA graphs for decode steps, and for prefill and mixed steps of few tokens.

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

:class:`PrefillGraphRunner` does the same for steps that are not pure decode: a prefill chunk
over a cached prefix (a prefix-cache hit), or prefill chunks mixed with decodes. Such a step run
eagerly is bound by the host (issue 13; measured on the 8B shape, 100 new tokens over a
4,000-token prefix: ~360 launches, more host time than the 7.4 ms of GPU work, 18 ms to the
first token; ``bench/RESULTS.md``, "## hitpath"). The whole forward pass is captured, attention
included (no piecewise graphs as in vLLM v1): the Triton paged-attention kernel reads each
sequence's query range and context length from device tensors and sizes its grid from shapes
alone (``num_tokens // BLOCK_Q + num_seqs`` q-blocks), so one graph serves any mix of query
lengths and cached prefixes of its shape. A graph is captured per *(tokens, sequences)* bucket
(:func:`prefill_graph_shapes`); a step of ``t`` tokens in ``n`` sequences replays the smallest
bucket ``(T, S)`` with ``T >= t`` and ``S >= n`` (:func:`choose_prefill_shape`).

Its inputs reach the graph's buffer in the one host-to-device copy that every step makes
anyway: the runner lays the step out in the bucket's padded sizes
(:class:`local_engine.host_layout.HostLayout`), so a replay launches nothing but the graph.
Padding: tokens ``t..T`` belong to no sequence (slot -1, so nothing is written; id and
position 0; their rows are dropped); sequences ``n..S`` have no query tokens (their
``cu_seqlens_q`` entries repeat ``t``), so the attention programs of the padding exit at once;
logits rows past the real ones gather row 0. Only the sampling rows' logits are computed
(``hidden[logits_indices]``), into one float32 buffer shared by all the buckets.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Sequence

import torch

from .attention.metadata import AttentionMetadata
from .host_layout import HostLayout

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


#: Token counts captured for prefill and mixed steps (those up to the engine's limit).
DEFAULT_PREFILL_TOKENS = (16, 32, 64, 128, 256, 512)
#: Sequence counts captured for prefill and mixed steps (those up to ``max_num_seqs``).
DEFAULT_PREFILL_SEQS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def prefill_graph_shapes(
    max_tokens: int,
    max_seqs: int,
    token_sizes: Sequence[int] = DEFAULT_PREFILL_TOKENS,
    seq_sizes: Sequence[int] = DEFAULT_PREFILL_SEQS,
) -> list[tuple[int, int]]:
    """The ``(tokens, sequences)`` buckets captured for prefill and mixed steps, sorted.

    Token buckets: every size in ``token_sizes`` below ``max_tokens``, then ``max_tokens``;
    sequence buckets likewise up to ``max_seqs`` (:func:`graph_batch_sizes`). A pair is kept
    when it has fewer sequences than tokens (a step of as many tokens as sequences is a decode
    step: :class:`DecodeGraphRunner`'s). ``max_tokens < 1`` gives no buckets (prefill graphs
    off). Example: ``prefill_graph_shapes(32, 4)`` is ``[(16, 1), (16, 2), (16, 4), (32, 1),
    (32, 2), (32, 4)]``.

    Raises:
        ValueError: ``max_seqs < 1``.
    """
    if max_tokens < 1:
        return []
    tokens = graph_batch_sizes(max_tokens, token_sizes)
    seqs = graph_batch_sizes(max_seqs, seq_sizes)
    return [(t, s) for t in tokens for s in seqs if s < t]


def choose_prefill_shape(
    shapes: Sequence[tuple[int, int]], num_tokens: int, num_seqs: int
) -> tuple[int, int] | None:
    """The bucket a step of ``num_tokens`` tokens in ``num_seqs`` sequences replays: the one
    with the fewest tokens (then the fewest sequences) that holds both, or None when none does.
    ``shapes`` sorted as :func:`prefill_graph_shapes` returns them. Example: over
    ``prefill_graph_shapes(32, 4)``, 20 tokens in 3 sequences replay ``(32, 4)``; 16 tokens in
    4 sequences ``(16, 4)``; 33 tokens, or 5 sequences, nothing."""
    for t, s in shapes:  # sorted by tokens, then sequences: the first fit is the smallest
        if t >= num_tokens and s >= num_seqs:
            return t, s
    return None


class PrefillGraphRunner:
    """Captured forward passes (and LM head of the sampling rows) of prefill and mixed steps.

    Args:
        model: the :class:`~local_engine.models.llama.LlamaForCausalLM` (on CUDA).
        kv_caches: per layer ``(k_cache, v_cache[, k_scale, v_scale])``.
        max_tokens: largest token bucket (the engine's ``prefill_graph_max_tokens``, at most
            ``max_num_batched_tokens``); below 1 nothing is captured.
        max_seqs: most sequences in a step (``max_num_seqs``).
        max_blocks_per_seq: block-table width (``cdiv(max_model_len, block_size)``).
        backend: attention backend name passed through the metadata (None = by device).
        shapes: buckets to capture (default :func:`prefill_graph_shapes`).
        require_cuda: False lets CPU tests drive the buffers (with a stand-in for capture).

    Inputs: one int64 device buffer, ``inputs``. Bucket ``(T, S)`` reads its step from the
    front of it, laid out as :class:`~local_engine.host_layout.HostLayout` ``.plan(T, S,
    max_blocks_per_seq, S)`` (``layouts[(T, S)]``): :meth:`ModelRunner.prepare
    <local_engine.runner.ModelRunner.prepare>` writes a step in that layout, padded, into its
    host buffer and copies it here in one copy; :meth:`replay` then only launches the graph.
    Output: ``logits`` float32 ``[S_max, vocab]``, shared by the buckets.
    """

    def __init__(
        self,
        model,
        kv_caches: list[tuple[torch.Tensor, ...]],
        *,
        max_tokens: int,
        max_seqs: int,
        max_blocks_per_seq: int,
        backend: str | None = None,
        shapes: Sequence[tuple[int, int]] | None = None,
        require_cuda: bool = True,
    ):
        device = kv_caches[0][0].device
        if require_cuda and device.type != "cuda":
            raise ValueError("CUDA graphs need the model and KV cache on a CUDA device")
        self.device = device
        self.model = model
        self.kv_caches = kv_caches
        self.backend = backend
        self.shapes = (
            sorted(shapes) if shapes is not None else prefill_graph_shapes(max_tokens, max_seqs)
        )
        self.max_blocks_per_seq = max_blocks_per_seq
        self.max_tokens = max((t for t, _ in self.shapes), default=0)
        self.max_seqs = max((s for _, s in self.shapes), default=0)
        self.layouts = {
            (t, s): HostLayout.plan(t, s, max_blocks_per_seq, s) for t, s in self.shapes
        }
        total = max((lay.total for lay in self.layouts.values()), default=1)
        self.inputs = torch.zeros(total, dtype=torch.long, device=device)
        vocab = model.config.vocab_size if model is not None else 0
        self.logits = torch.zeros((self.max_seqs, vocab), dtype=torch.float32, device=device)
        self.graphs: dict[tuple[int, int], Callable[[], None]] = {}
        self.capture_seconds = 0.0
        self.capture_bytes = 0  # device memory the capture reserved (graph pool, warm-ups)

    def _forward(self, t: int, s: int) -> None:
        """Bucket ``(t, s)``'s step over the input buffer: float32 logits of its ``s``
        gathered rows into ``logits[:s]``."""
        ids, pos, slots, lidx, tables, cu, lens = self.layouts[(t, s)].tensors(self.inputs)
        meta = AttentionMetadata(slots, tables, cu, lens, lidx, backend=self.backend)
        hidden = self.model(ids, pos, meta, self.kv_caches)
        self.logits[:s].copy_(self.model.compute_logits(hidden[lidx]))

    def _empty_step(self, shape: tuple[int, int]) -> None:
        """Fill the input buffer with bucket ``shape``'s padding of an empty step (no sequence
        has tokens, every slot -1): what capture runs on, writing no KV."""
        self.inputs.zero_()
        lay = self.layouts[shape]
        self.inputs[lay.slot_mapping : lay.slot_mapping + lay.num_tokens].fill_(-1)

    @torch.inference_mode()
    def capture(self) -> PrefillGraphRunner:
        """Capture one graph per bucket, largest first, all in one memory pool, each over the
        padding of an empty step (so the KV cache is not written)."""
        t0 = time.monotonic()
        cuda = self.device.type == "cuda"
        reserved = torch.cuda.memory_reserved(self.device) if cuda else 0
        pool = torch.cuda.graph_pool_handle() if cuda else None
        for shape in reversed(self.shapes):
            self._empty_step(shape)
            self.graphs[shape] = self._capture_one(shape, pool)
        if cuda:
            torch.cuda.synchronize()
            self.capture_bytes = torch.cuda.memory_reserved(self.device) - reserved
        self.capture_seconds = time.monotonic() - t0
        if self.shapes:
            logger.info(
                "captured %d prefill/mixed-step CUDA graphs (up to %d tokens in %d sequences) "
                "in %.1fs, %.0f MiB",
                len(self.shapes),
                self.max_tokens,
                self.max_seqs,
                self.capture_seconds,
                self.capture_bytes / 2**20,
            )
        return self

    def _capture_one(self, shape: tuple[int, int], pool) -> Callable[[], None]:
        """The replay function of bucket ``shape``."""
        self._forward(*shape)  # eager warm-up: compiles the Triton kernels, picks the GEMMs
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            self._forward(*shape)
        return graph.replay

    def shape_for(self, num_tokens: int, num_seqs: int, max_blocks: int) -> tuple[int, int] | None:
        """The bucket that replays a step of ``num_tokens`` tokens in ``num_seqs`` sequences
        (one logits row at most each) with block tables ``max_blocks`` wide, or None (run it
        eagerly)."""
        if not self.graphs or max_blocks > self.max_blocks_per_seq:
            return None
        return choose_prefill_shape(self.shapes, num_tokens, num_seqs)

    @torch.inference_mode()
    def replay(self, shape: tuple[int, int], num_logits: int) -> torch.Tensor:
        """Replay bucket ``shape`` over the step already in :attr:`inputs` (its layout,
        padded); float32 logits ``[num_logits, vocab_size]`` of the step's sampling rows (a
        view of the shared buffer, valid until the next replay)."""
        self.graphs[shape]()
        return self.logits[:num_logits]


__all__ = [
    "DecodeGraphRunner",
    "PrefillGraphRunner",
    "DEFAULT_BATCH_SIZES",
    "DEFAULT_PREFILL_SEQS",
    "DEFAULT_PREFILL_TOKENS",
    "choose_prefill_shape",
    "graph_batch_sizes",
    "prefill_graph_shapes",
]
