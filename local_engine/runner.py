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
from dataclasses import dataclass
from typing import List, Optional, Sequence as Seq, Tuple

import numpy as np
import torch

from .attention.metadata import AttentionMetadata
from .config import EngineConfig, ModelConfig
from .models.llama import LlamaForCausalLM
from .sampling import Sampler, SamplerOutput, SamplingParams
from .scheduler import SchedulerOutput

logger = logging.getLogger("local_engine")


@dataclass
class BatchInputs:
    """The flat inputs of one forward step: ``input_ids`` and ``positions`` int64 ``[num_tokens]``,
    the attention metadata (slot mapping, block tables, cu_seqlens_q, seq_lens), and for each
    logits row the index of its sequence in the scheduled list."""
    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    sample_rows: List[int]  # index into scheduled list, for each logits row
    is_decode: bool = False  # [TRITON] every sequence has exactly one new token (CUDA-graph eligible)


def kv_block_bytes(mc: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    """Bytes of one KV block over all layers: ``2 * layers * kv_heads * head_dim * block_size *
    dtype_bytes`` (SmolLM2-135M, fp32, 16 tokens: 737,280)."""
    return mc.kv_bytes_per_token(torch.empty((), dtype=dtype).element_size()) * block_size


def plan_num_blocks(cfg: EngineConfig, mc: ModelConfig, dtype: torch.dtype, max_model_len: int) -> int:
    """Pool size in blocks: ``num_kv_blocks`` when set; else ``kv_cache_memory`` bytes; else on
    CUDA ``gpu_memory_utilization`` of the free device memory (after the weights are loaded),
    on the CPU :attr:`EngineConfig.DEFAULT_CPU_KV_CACHE_MEMORY`. At least enough blocks for
    one ``max_model_len`` sequence plus one is not required: it is reported instead."""
    if cfg.num_kv_blocks is not None:
        return cfg.num_kv_blocks
    per_block = kv_block_bytes(mc, cfg.block_size, dtype)
    if cfg.kv_cache_memory is not None:
        budget = cfg.kv_cache_memory
    elif str(cfg.device).startswith("cuda"):
        free, _total = torch.cuda.mem_get_info(torch.device(cfg.device))
        budget = int(free * cfg.gpu_memory_utilization)
    else:
        budget = EngineConfig.DEFAULT_CPU_KV_CACHE_MEMORY
    return max(1, budget // per_block)


# [TRITON] random weights for LLMEngine.from_config (benchmarks of shapes with no checkpoint)
@torch.no_grad()
def init_random_weights(model: torch.nn.Module, seed: int, std: float = 0.02) -> None:
    """Fill a model's parameters in place as transformers initialises Llama: linear and
    embedding weights ~ N(0, ``std``) (``initializer_range`` 0.02), norm weights 1. Drawn on the
    parameters' own device from a generator seeded with ``seed``."""
    if model.config.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
            p.fill_(1.0)
        else:
            p.normal_(0.0, std, generator=gen)
# [/TRITON]


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
        with torch.device("meta"):  # no random init of weights that are overwritten next
            model = LlamaForCausalLM(mc, max_positions=max(max_model_len, 1))
        # [TRITON] parameters are created on the target device in the target dtype (an 8B model
        # never exists in float32 on the host); weights=None draws random ones (from_config).
        model = model.to(dtype=self.dtype).to_empty(device=self.device)
        if weights is None:
            init_random_weights(model, cfg.seed)
        else:
            model.load_weights(weights)
        self.model = model.eval()
        # [/TRITON]
        self.model.rope.build_tables(self.device)  # float32 tables, whatever the model dtype
        self.num_blocks = 0
        self.kv_cache = None
        self.kv_caches = []
        self.sampler = Sampler(cfg.seed, device=self.device)
        self.max_model_len = max_model_len
        self.graphs = None  # [TRITON] local_engine.cuda_graphs.DecodeGraphRunner on CUDA

    def allocate_kv_cache(self, num_blocks: int) -> None:
        """Allocate the paged cache: one tensor ``[layers, 2, num_blocks, block_size,
        num_kv_heads, head_dim]``; layer i's ``(k_cache, v_cache)`` are views into it."""
        mc = self.model_config
        self.num_blocks = num_blocks
        shape = (mc.num_layers, 2, num_blocks, self.block_size, mc.num_kv_heads, mc.head_dim)
        self.kv_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.kv_caches = [(self.kv_cache[i, 0], self.kv_cache[i, 1]) for i in range(mc.num_layers)]
        # [TRITON] capture decode steps in CUDA graphs (local_engine/cuda_graphs.py)
        if self.device.type == "cuda" and not self.cfg.enforce_eager:
            from .cuda_graphs import DecodeGraphRunner

            self.graphs = DecodeGraphRunner(
                self.model, self.kv_caches, max_batch=self.cfg.max_num_seqs,
                max_blocks_per_seq=-(-self.max_model_len // self.block_size),
                backend=self.backend).capture()
        # [/TRITON]

    # ---- batch construction --------------------------------------------------------------
    def prepare(self, sched: SchedulerOutput, block_tables: Seq[Seq[int]]) -> BatchInputs:
        """Flat batch tensors for the scheduled sequences (``block_tables[i]`` is the i-th
        scheduled sequence's block table)."""
        bs = self.block_size
        ids_parts, pos_parts, slot_parts = [], [], []
        cu = [0]
        seq_lens, sample_rows, logits_idx = [], [], []
        max_blocks = max((len(b) for b in block_tables), default=1) or 1
        bt = np.zeros((len(sched.scheduled), max_blocks), dtype=np.int32)
        for i, (s, table) in enumerate(zip(sched.scheduled, block_tables)):
            start, n = s.num_computed, s.num_new_tokens
            ids_parts.append(s.seq.all_token_ids[start:start + n])
            pos = np.arange(start, start + n, dtype=np.int64)
            tab = np.asarray(table, dtype=np.int64)
            bt[i, :len(table)] = tab
            slot_parts.append(tab[pos // bs] * bs + pos % bs)
            pos_parts.append(pos)
            cu.append(cu[-1] + n)
            seq_lens.append(start + n)
            if s.samples:
                logits_idx.append(cu[-1] - 1)
                sample_rows.append(i)
        dev = self.device
        input_ids = torch.tensor([t for part in ids_parts for t in part], dtype=torch.long)
        positions = torch.from_numpy(np.concatenate(pos_parts))
        meta = AttentionMetadata(
            slot_mapping=torch.from_numpy(np.concatenate(slot_parts)).to(dev),
            block_tables=torch.from_numpy(bt).to(dev),
            cu_seqlens_q=torch.tensor(cu, dtype=torch.int32, device=dev),
            seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=dev),
            logits_indices=torch.tensor(logits_idx, dtype=torch.long, device=dev),
            backend=self.backend,
        )
        is_decode = bool(sched.scheduled) and all(s.num_new_tokens == 1 for s in sched.scheduled)  # [TRITON]
        return BatchInputs(input_ids.to(dev), positions.to(dev), meta, sample_rows, is_decode)

    def allocate_swap_space(self, num_cpu_blocks: int) -> None:
        """CPU memory for swapped-out blocks, shaped like the device cache (pinned on CUDA)."""
        self.cpu_kv_cache = None
        if num_cpu_blocks <= 0:
            return
        shape = (self.kv_cache.shape[0], 2, num_cpu_blocks) + tuple(self.kv_cache.shape[3:])
        self.cpu_kv_cache = torch.zeros(shape, dtype=self.dtype, device="cpu",
                                        pin_memory=self.device.type == "cuda")

    def swap(self, swap_out: Seq[Tuple[int, int]], swap_in: Seq[Tuple[int, int]]) -> None:
        """Copy ``(device, cpu)`` blocks out, then ``(cpu, device)`` blocks in, all layers."""
        if swap_out:
            dev = torch.tensor([a for a, _ in swap_out], dtype=torch.long, device=self.device)
            cpu = torch.tensor([b for _, b in swap_out], dtype=torch.long)
            self.cpu_kv_cache[:, :, cpu] = self.kv_cache[:, :, dev].to("cpu")
        if swap_in:
            cpu = torch.tensor([a for a, _ in swap_in], dtype=torch.long)
            dev = torch.tensor([b for _, b in swap_in], dtype=torch.long, device=self.device)
            self.kv_cache[:, :, dev] = self.cpu_kv_cache[:, :, cpu].to(self.device)

    def copy_blocks(self, copies: Seq[Tuple[int, int]]) -> None:
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
        if (self.graphs is not None and batch.is_decode  # [TRITON] replay a captured decode step
                and self.graphs.can_run(batch.input_ids.shape[0], batch.meta)):
            hidden = self.graphs.run(batch.input_ids, batch.positions, batch.meta)
        else:
            hidden = self.model(batch.input_ids, batch.positions, batch.meta, self.kv_caches)
        if batch.meta.logits_indices.numel() == 0:
            return hidden.new_zeros((0, self.model.config.vocab_size), dtype=torch.float32)
        return self.model.compute_logits(hidden[batch.meta.logits_indices])

    @torch.inference_mode()
    def sample(self, logits: torch.Tensor, params: Seq[SamplingParams],
               generators: Seq[Optional[torch.Generator]]) -> SamplerOutput:
        """One token per logits row (rows may repeat a sequence's logits for ``n > 1``)."""
        return self.sampler(logits, params, generators)
