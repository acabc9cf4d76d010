"""Model runner: owns the model, the KV-cache tensors and the sampler; turns a
:class:`~local_engine.scheduler.SchedulerOutput` into batch tensors, runs the forward pass and
samples.

Per step it builds, for the flat packed batch of all scheduled tokens:
``input_ids`` / ``positions`` int64 ``[num_tokens]``, ``slot_mapping`` int64 ``[num_tokens]``,
``block_tables`` int32 ``[num_seqs, max_blocks]``, ``cu_seqlens_q`` int32 ``[num_seqs + 1]``,
``seq_lens`` int32 ``[num_seqs]`` and ``logits_indices`` int64 (the last row of each sequence
that samples). They are plain tensors in :class:`~local_engine.attention.metadata.
AttentionMetadata` so that a CUDA-graph runner can copy them into fixed-size buffers.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from .attention.metadata import AttentionMetadata
from .config import EngineConfig, ModelConfig
from .host_layout import HostLayout
from .kv_cache.int2 import Layout, residual_slots, set_residual_ids
from .kv_cache.quant import KVCacheFormat, allocate_kv_cache, kv_cache_format
from .kv_cache.residual import ResidualSlots
from .models.llama import LlamaForCausalLM
from .sampling import Sampler, SamplerOutput, SamplingParams
from .scheduler import SchedulerOutput

if TYPE_CHECKING:
    from .cuda_graphs import DecodeGraphRunner, PrefillGraphRunner
    from .kv_cache.transfer import KVTransfer

logger = logging.getLogger("local_engine")


@dataclass
class BatchInputs:
    """The flat inputs of one forward step: ``input_ids`` and ``positions`` int64 ``[num_tokens]``,
    the attention metadata (slot mapping, block tables, cu_seqlens_q, seq_lens), and for each
    logits row the index of its sequence in the scheduled list."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    sample_rows: list[int]  # index into scheduled list, for each logits row
    is_decode: bool = False  # every sequence has exactly one new token (CUDA-graph eligible)
    # speculative decoding: logits rows of each sampling sequence (1 + its drafts), or None
    # when every sampling sequence has one row
    logits_rows: list[int] | None = None
    # the (tokens, sequences) bucket of the prefill CUDA graph whose input buffer holds this
    # step's inputs (padded; these tensors are views of it), or None
    graph_shape: tuple[int, int] | None = None


def kv_block_bytes(mc: ModelConfig, block_size: int, dtype: torch.dtype | KVCacheFormat) -> int:
    """Bytes of one KV block over all layers: ``2 * layers * kv_heads * head_dim * block_size *
    dtype_bytes`` (SmolLM2-135M, fp32, 16 tokens: 737,280); for a quantized
    :class:`~local_engine.kv_cache.quant.KVCacheFormat` the per-token-head scales are added
    (int8: 2 x 30 x 3 x (64 + 4) x 16 = 195,840)."""
    if isinstance(dtype, KVCacheFormat):
        return dtype.block_bytes(mc, block_size)
    return mc.kv_bytes_per_token(torch.empty((), dtype=dtype).element_size()) * block_size


def plan_num_blocks(
    cfg: EngineConfig, mc: ModelConfig, dtype: torch.dtype | KVCacheFormat, max_model_len: int
) -> int:
    """Pool size in blocks: ``num_kv_blocks`` when set; else ``kv_cache_memory`` bytes; else on
    CUDA ``gpu_memory_utilization`` of the free device memory (after the weights are loaded),
    on the CPU :attr:`EngineConfig.DEFAULT_CPU_KV_CACHE_MEMORY`. At least enough blocks for
    one ``max_model_len`` sequence plus one is not required: it is reported instead. int2's
    residual slots come out of the same bytes (:meth:`KVCacheFormat.residual_blocks
    <local_engine.kv_cache.quant.KVCacheFormat.residual_blocks>` blocks)."""
    if cfg.num_kv_blocks is not None:
        return cfg.num_kv_blocks
    per_block = kv_block_bytes(mc, cfg.block_size, dtype)
    residual = 0
    if isinstance(dtype, KVCacheFormat):
        residual = dtype.residual_blocks(mc, cfg.block_size, cfg.max_num_seqs)
    if cfg.kv_cache_memory is not None:
        budget = cfg.kv_cache_memory
    elif str(cfg.device).startswith("cuda"):
        free, _total = torch.cuda.mem_get_info(torch.device(cfg.device))
        budget = int(free * cfg.gpu_memory_utilization)
    else:
        budget = EngineConfig.DEFAULT_CPU_KV_CACHE_MEMORY
    return max(1, budget // per_block - residual)


@torch.no_grad()
def init_random_weights(model: LlamaForCausalLM, seed: int, std: float = 0.02) -> None:
    """Fill a model's parameters in place as transformers initialises Llama: linear and
    embedding weights ~ N(0, ``std``) (``initializer_range`` 0.02), norm weights 1. Drawn on the
    parameters' own device from a generator seeded with ``seed``. Used by
    :meth:`LLMEngine.from_config` (benchmarks of shapes with no checkpoint)."""
    if model.config.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
            p.fill_(1.0)
        else:
            p.normal_(0.0, std, generator=gen)


def _as_block_table(block_tables, n: int) -> np.ndarray:
    """int32 ``[n, max_blocks]`` (``max_blocks`` at least 1) from an array of that shape or
    from ``n`` lists of block ids (padded with 0)."""
    if isinstance(block_tables, np.ndarray):
        if block_tables.ndim != 2 or block_tables.shape[0] != n:
            raise ValueError(
                f"block_tables has shape {block_tables.shape}; expected ({n}, max_blocks)"
            )
        if block_tables.shape[1] == 0:
            return np.zeros((n, 1), dtype=np.int32)
        return block_tables.astype(np.int32, copy=False)
    tables = list(block_tables)
    if len(tables) != n:
        raise ValueError(f"{len(tables)} block tables for {n} scheduled sequences")
    max_blocks = max((len(t) for t in tables), default=1) or 1
    bt = np.zeros((n, max_blocks), dtype=np.int32)
    for i, t in enumerate(tables):
        bt[i, : len(t)] = t
    return bt


class ModelRunner:
    """Args: cfg (engine config), mc (model config), weights (HF-named float32 tensors),
    max_model_len (rotary table length). Call :meth:`allocate_kv_cache` before running."""

    def __init__(self, cfg: EngineConfig, mc: ModelConfig, weights, max_model_len: int):
        self.cfg = cfg
        self.model_config = mc
        self.device = torch.device(cfg.device)
        self.dtype = cfg.torch_dtype()
        self.block_size = cfg.block_size
        self.backend = cfg.attention_backend
        self.kv_format = kv_cache_format(cfg.kv_cache_dtype, self.dtype, cfg.device, self.backend)
        # the model's modules allocate uninitialised parameters (no random init); on the CPU
        # they are built in place (meta + to_empty would import sympy: 0.6 s of start-up)
        with torch.device("cpu" if self.device.type == "cpu" else "meta"):
            model = LlamaForCausalLM(mc, max_positions=max(max_model_len, 1))
        # parameters are created on the target device in the target dtype (an 8B model never
        # exists in float32 on the host); weights=None draws random ones (from_config).
        model = model.to(dtype=self.dtype).to_empty(device=self.device)
        if weights is None:
            init_random_weights(model, cfg.seed)
        else:
            model.load_weights(weights, cfg.cpu_weight_dtype())
        self.model = model.eval()
        self.model.rope.build_tables(self.device)  # float32 tables, whatever the model dtype
        self.num_blocks = 0
        self.kv_cache = torch.empty(0, dtype=self.dtype)  # [layers, 2, ...] once allocated
        self.kv_caches: list[tuple[torch.Tensor, ...]] = []  # (k, v[, k_scale, v_scale])
        self.residual: ResidualSlots | None = None  # int2's residual slots (residual_slots)
        self.cpu_kv_cache: torch.Tensor | None = None  # swap space + CPU tier, when any
        self.kv_transfer: KVTransfer | None = None  # copies to and from it
        self.sampler = Sampler(cfg.seed, device=self.device)
        self.max_model_len = max_model_len
        self.graphs: DecodeGraphRunner | None = None  # on CUDA unless enforce_eager
        # the same for verification steps of K + 1 tokens a sequence (speculative decoding)
        self.spec_graphs: DecodeGraphRunner | None = None
        # prefill and mixed steps of few tokens (a prefix-cache hit's chunk, chunks + decodes)
        self.prefill_graphs: PrefillGraphRunner | None = None
        # CUDA: the pinned int64 host buffer of prepare(), its NumPy view, its copy's event
        self._pinned: torch.Tensor | None = None
        self._pinned_np: np.ndarray | None = None
        self._copy_done: torch.cuda.Event | None = None

    def allocate_kv_cache(self, num_blocks: int) -> None:
        """Allocate the paged cache: one tensor ``[layers, 2, num_blocks, ...]`` in the format
        of ``kv_cache_dtype`` (:func:`local_engine.kv_cache.quant.allocate_kv_cache`); layer i's
        ``(k_cache, v_cache[, k_scale, v_scale])`` are views into it."""
        self.num_blocks = num_blocks
        slots = residual_slots(self.cfg.max_num_seqs) if self.kv_format.name == "int2" else 0
        self.kv_cache, self.kv_caches = allocate_kv_cache(
            self.model_config, num_blocks, self.block_size, self.kv_format, self.device, slots
        )
        # capture decode steps in CUDA graphs (local_engine/cuda_graphs.py)
        if self.device.type == "cuda" and not self.cfg.enforce_eager:
            from .cuda_graphs import DecodeGraphRunner

            self.graphs = DecodeGraphRunner(
                self.model,
                self.kv_caches,
                max_batch=self.cfg.max_num_seqs,
                max_blocks_per_seq=-(-self.max_model_len // self.block_size),
                backend=self.backend,
            ).capture()
            spec = self.cfg.speculative
            if spec is not None:  # speculative verification steps: K + 1 tokens per sequence
                self.spec_graphs = DecodeGraphRunner(
                    self.model,
                    self.kv_caches,
                    max_batch=self.cfg.max_num_seqs,
                    max_blocks_per_seq=-(-self.max_model_len // self.block_size),
                    backend=self.backend,
                    query_len=spec.num_speculative_tokens + 1,
                ).capture()
            max_tokens = min(self.cfg.prefill_graph_max_tokens, self.cfg.max_num_batched_tokens)
            if max_tokens > 0:
                from .cuda_graphs import PrefillGraphRunner

                self.prefill_graphs = PrefillGraphRunner(
                    self.model,
                    self.kv_caches,
                    max_tokens=max_tokens,
                    max_seqs=self.cfg.max_num_seqs,
                    max_blocks_per_seq=-(-self.max_model_len // self.block_size),
                    backend=self.backend,
                ).capture()

    # ---- batch construction --------------------------------------------------------------
    def prepare(self, sched: SchedulerOutput, block_tables) -> BatchInputs:
        """Flat batch tensors for the scheduled sequences.

        Args:
            sched: the step's plan.
            block_tables: the scheduled sequences' block tables, in ``sched.scheduled`` order:
                an int32 array ``[num_seqs, max_blocks]`` padded with 0
                (:meth:`KVCacheManager.block_table_array`), or one list of block ids each.

        All integer inputs are written into one host buffer (laid out as :class:`HostLayout`
        says) and reach the device in one copy (from pinned memory on CUDA); the tensors of
        :class:`BatchInputs` are views into it. A prefill or mixed step that a prefill CUDA
        graph holds (:meth:`PrefillGraphRunner.shape_for
        <local_engine.cuda_graphs.PrefillGraphRunner.shape_for>`) is laid out in the padded
        sizes of that graph's bucket and copied into the graph's input buffer
        (``graph_shape`` set; :meth:`forward_logits` then only replays).
        Per sequence there is one pass of Python attribute reads; positions, slots and the
        rest are NumPy arithmetic over the whole batch.
        """
        self.write_residual_ids()
        scheduled = sched.scheduled
        n = len(scheduled)
        bs = self.block_size
        starts = [s.num_computed for s in scheduled]
        news = [s.num_new_tokens for s in scheduled]
        is_decode = n > 0 and news.count(1) == n  # CUDA-graph eligible
        if is_decode:
            token_ids = [s.seq.all_token_ids[p] for s, p in zip(scheduled, starts)]
            ends = [p + 1 for p in starts]
        else:
            ends = [p + k for p, k in zip(starts, news)]
            # a speculating sequence's drafted tokens follow its committed ones
            token_ids = [
                t
                for s, p, e in zip(scheduled, starts, ends)
                for t in (
                    s.seq.all_token_ids[p:e]
                    if not s.seq.spec_token_ids
                    else (s.seq.all_token_ids + s.seq.spec_token_ids)[p:e]
                )
            ]
        sample_rows = [
            i for i, (s, e) in enumerate(zip(scheduled, ends)) if e >= len(s.seq.all_token_ids)
        ]
        logits_rows = None
        if not is_decode and any(s.seq.spec_token_ids for s in scheduled):
            logits_rows = [ends[i] - len(scheduled[i].seq.all_token_ids) + 1 for i in sample_rows]
        num_tokens = len(token_ids)
        bt = _as_block_table(block_tables, n)
        max_blocks = bt.shape[1]

        n_lp = len(sample_rows) if logits_rows is None else sum(logits_rows)
        # a prefill or mixed step that a prefill CUDA graph replays is laid out in the padded
        # sizes of the graph's bucket and copied straight into the graph's input buffer
        pg = self.prefill_graphs
        shape = None
        if pg is not None and not is_decode and logits_rows is None:
            shape = pg.shape_for(num_tokens, n, max_blocks)
        if shape is None:
            lay = HostLayout.plan(num_tokens, n, max_blocks, n_lp)
        else:
            assert pg is not None
            lay = pg.layouts[shape]
        host = self._host_buffer(lay.total)
        o_ids, o_pos, o_slot, o_lp = (
            lay.input_ids,
            lay.positions,
            lay.slot_mapping,
            lay.logits_indices,
        )
        o_bt, o_cu, o_sl = lay.block_tables, lay.cu_seqlens_q, lay.seq_lens
        h32 = host[lay.int32 : lay.int32 + lay.int32_len].view(np.int32)

        ends_np = np.array(ends, dtype=np.int64)
        host[o_ids : o_ids + num_tokens] = token_ids
        if is_decode:
            pos = host[o_pos : o_pos + n]
            pos[:] = starts
            rows = np.arange(n)
            cu = np.arange(n + 1, dtype=np.int64)
        else:
            news_np = np.array(news, dtype=np.int64)
            cu = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(news_np, out=cu[1:])
            rows = np.repeat(np.arange(n), news_np)
            pos = host[o_pos : o_pos + num_tokens]
            # position of flat token t of sequence r: start_r + (t - cu_r)
            np.subtract(
                np.arange(num_tokens, dtype=np.int64),
                np.repeat(cu[:-1] - np.array(starts, dtype=np.int64), news_np),
                out=pos,
            )
        slots = host[o_slot : o_slot + num_tokens]
        np.multiply(bt[rows, pos // bs].astype(np.int64), bs, out=slots)
        slots += pos % bs
        if logits_rows is not None:  # the last 1 + drafts rows of each sampling sequence
            last = cu[1:][sample_rows]
            counts = np.array(logits_rows, dtype=np.int64)
            host[o_lp : o_lp + n_lp] = np.repeat(last - counts, counts) + (
                np.arange(n_lp) - np.repeat(np.cumsum(counts) - counts, counts)
            )
        elif n_lp:
            host[o_lp : o_lp + n_lp] = cu[1:][sample_rows] - 1
        if shape is None:
            h32[o_bt : o_bt + n * max_blocks] = bt.reshape(-1)
        else:  # the graph's [S, max_blocks_per_seq] table: rows and columns past ours are 0
            table = h32[o_bt : o_bt + lay.num_seqs * lay.max_blocks].reshape(-1, lay.max_blocks)
            table[:n, :max_blocks] = bt
            table[:n, max_blocks:] = 0
            table[n:] = 0
        h32[o_cu : o_cu + n + 1] = cu
        h32[o_sl : o_sl + n] = ends_np
        if shape is not None:  # padding (see local_engine/cuda_graphs.py, PrefillGraphRunner)
            big_t, big_s = shape
            host[o_ids + num_tokens : o_ids + big_t] = 0
            host[o_pos + num_tokens : o_pos + big_t] = 0
            host[o_slot + num_tokens : o_slot + big_t] = -1  # tokens of no sequence: no write
            host[o_lp + n_lp : o_lp + big_s] = 0  # logits rows past ours gather row 0
            h32[o_cu + n + 1 : o_cu + big_s + 1] = num_tokens  # sequences of no tokens
            h32[o_sl + n : o_sl + big_s] = 0

        dest = pg.inputs if pg is not None and shape is not None else None
        dev = self._to_device(host, lay.total, dest)
        ids_d, pos_d, slot_d, lp_d, bt_d, cu_d, sl_d = lay.tensors(dev, num_tokens, n, n_lp)
        meta = AttentionMetadata(
            slot_mapping=slot_d,
            block_tables=bt_d,
            cu_seqlens_q=cu_d,
            seq_lens=sl_d,
            logits_indices=lp_d,
            backend=self.backend,
        )
        return BatchInputs(ids_d, pos_d, meta, sample_rows, is_decode, logits_rows, shape)

    def _host_buffer(self, size: int) -> np.ndarray:
        """An int64 host array of at least ``size`` entries to build one step's inputs in. On
        the CPU a new one each step (the batch tensors are views of it and may outlive the
        step); on CUDA a persistent pinned one, reused once its last copy to the device is done."""
        if self.device.type != "cuda":
            return np.empty(max(size, 1), dtype=np.int64)
        if self._pinned is None or self._pinned_np is None or self._pinned.shape[0] < size:
            cap = 1 << max(12, (size - 1).bit_length())
            self._pinned = torch.empty(cap, dtype=torch.int64, pin_memory=True)
            self._pinned_np = self._pinned.numpy()
            self._copy_done = None
        elif self._copy_done is not None:
            self._copy_done.synchronize()  # the previous step's copy still reads the buffer
        return self._pinned_np

    def _to_device(
        self, host: np.ndarray, size: int, dest: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The first ``size`` entries of the host buffer as an int64 tensor on the device (one
        non-blocking copy on CUDA; the buffer itself on the CPU), or copied into ``dest`` (a
        CUDA graph's input buffer) when given."""
        if self.device.type != "cuda":
            if dest is None:
                return torch.from_numpy(host)
            dest[:size].copy_(torch.from_numpy(host[:size]))
            return dest
        assert self._pinned is not None  # _host_buffer made it
        dev = (
            torch.empty(max(size, 1), dtype=torch.int64, device=self.device)
            if dest is None
            else dest
        )
        dev[:size].copy_(self._pinned[:size], non_blocking=True)
        if self._copy_done is None:
            self._copy_done = torch.cuda.Event()
        self._copy_done.record()
        return dev

    def allocate_swap_space(self, num_cpu_blocks: int) -> None:
        """Host KV blocks for swap space and the CPU tier of the prefix cache together,
        ``[num_cpu_blocks, layers, 2, *block]`` (pinned on CUDA), and the copy engine that
        moves blocks to and from them (:mod:`local_engine.kv_cache.transfer`)."""
        from .kv_cache.transfer import KVTransfer, allocate_host_cache

        self.cpu_kv_cache = None
        self.kv_transfer = None
        if num_cpu_blocks <= 0:
            return
        self.cpu_kv_cache = allocate_host_cache(self.kv_cache, num_cpu_blocks)
        self.kv_transfer = KVTransfer(self.kv_cache, self.cpu_kv_cache)

    def swap(self, swap_out: Seq[tuple[int, int]], swap_in: Seq[tuple[int, int]]) -> None:
        """Copy ``(device, cpu)`` blocks out, then ``(cpu, device)`` blocks in, all layers."""
        cpu_cache = self.cpu_kv_cache
        if not (swap_out or swap_in):
            return
        assert cpu_cache is not None, "swap without swap space"
        if swap_out:
            dev = torch.tensor([a for a, _ in swap_out], dtype=torch.long, device=self.device)
            cpu = torch.tensor([b for _, b in swap_out], dtype=torch.long)
            cpu_cache[cpu] = self.kv_cache[:, :, dev].movedim(2, 0).to("cpu")
        if swap_in:
            cpu = torch.tensor([a for a, _ in swap_in], dtype=torch.long)
            dev = torch.tensor([b for _, b in swap_in], dtype=torch.long, device=self.device)
            self.kv_cache[:, :, dev] = cpu_cache[cpu].movedim(0, 2).to(self.device)

    def residual_slots(self) -> ResidualSlots | None:
        """The books of int2's residual slots for this pool (None for other formats):
        ``max_num_seqs + 4`` slots from pseudo-block ``num_blocks`` on. The cache manager
        hands them out; :meth:`prepare` writes the slot ids it handed out into the pool."""
        if self.kv_format.name != "int2":
            return None
        if self.residual is None:
            mc = self.model_config
            lay = Layout(self.block_size, mc.num_kv_heads, mc.head_dim)
            per = lay.blocks_per_slot(torch.empty((), dtype=self.dtype).element_size())
            slots = residual_slots(self.cfg.max_num_seqs)
            self.residual = ResidualSlots(slots, self.num_blocks, per)
        return self.residual

    def write_residual_ids(self) -> None:
        """Write int2's ``(block, residual slot)`` assignments made since the last call into
        the pool (called by :meth:`prepare`: after the step's swaps and block copies, which
        would otherwise overwrite a block's slot id with its source's)."""
        writes = self.residual.take_writes() if self.residual is not None else []
        if writes:
            set_residual_ids(self.kv_cache, [b for b, _ in writes], [r for _, r in writes])

    def copy_blocks(self, copies: Seq[tuple[int, int]]) -> None:
        """Copy whole KV blocks ``src -> dst`` in every layer (copy-on-write)."""
        if not copies:
            return
        src = torch.tensor([c[0] for c in copies], dtype=torch.long, device=self.device)
        dst = torch.tensor([c[1] for c in copies], dtype=torch.long, device=self.device)
        self.kv_cache[:, :, dst] = self.kv_cache[:, :, src]

    # ---- execution -----------------------------------------------------------------------
    @torch.inference_mode()
    def forward_logits(self, batch: BatchInputs) -> torch.Tensor:
        """Run the model; float32 logits ``[len(batch.sample_rows), vocab]``."""
        if (
            self.graphs is not None
            and batch.is_decode  # replay a captured decode step
            and self.graphs.can_run(batch.input_ids.shape[0], batch.meta)
        ):
            logits = self.graphs.run(batch.input_ids, batch.positions, batch.meta)  # every row's
            if len(batch.sample_rows) == logits.shape[0]:
                return logits
            return logits[batch.meta.logits_indices]
        sg = self.spec_graphs
        if (  # a verification step where every sequence verifies K drafts (all rows sample)
            sg is not None
            and batch.logits_rows is not None
            and batch.input_ids.shape[0] == sg.q * batch.meta.num_seqs
            and batch.meta.logits_indices.shape[0] == batch.input_ids.shape[0]
            and sg.can_run(batch.meta.num_seqs, batch.meta)
        ):
            return sg.run(batch.input_ids, batch.positions, batch.meta)
        pg = self.prefill_graphs
        if pg is not None and batch.graph_shape is not None:  # laid out in a graph's buffer
            return pg.replay(batch.graph_shape, batch.meta.logits_indices.shape[0])
        hidden = self.model(batch.input_ids, batch.positions, batch.meta, self.kv_caches)
        if batch.meta.logits_indices.numel() == 0:
            return hidden.new_zeros((0, self.model.config.vocab_size), dtype=torch.float32)
        return self.model.compute_logits(hidden[batch.meta.logits_indices])

    @torch.inference_mode()
    def sample(
        self,
        logits: torch.Tensor,
        params: Seq[SamplingParams],
        generators: Seq[torch.Generator | None],
        bitmask: torch.Tensor | None = None,
    ) -> SamplerOutput:
        """One token per logits row (rows may repeat a sequence's logits for ``n > 1``);
        ``bitmask``: the constrained rows' allowed tokens (see ``Sampler.__call__``)."""
        return self.sampler(logits, params, generators, bitmask)
