"""Engine and model configuration.

:class:`EngineConfig` is what a user sets (model path, device, cache and scheduler limits);
:class:`ModelConfig` is what the loader reads out of the model file (architecture numbers).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from .errors import EngineError
from .spec_decode.config import SpeculativeConfig

#: Values of :attr:`EngineConfig.kv_cache_dtype` (see :mod:`local_engine.kv_cache.quant`).
KV_CACHE_DTYPES = ("auto", "fp8", "int8", "int4", "int2")
WEIGHT_DTYPES = ("float32", "bfloat16", "int8")  # local_engine.models.weights.WEIGHT_DTYPES


@dataclass
class ModelConfig:
    """Architecture of a Llama-family decoder, as read from a GGUF file or ``config.json``.

    Attributes:
        name: display name, e.g. ``"SmolLM2-135M-Instruct"``.
        hidden_size: model width (SmolLM2-135M: 576).
        num_layers: decoder blocks (30).
        num_heads: query heads (9).
        num_kv_heads: key/value heads for grouped-query attention (3).
        head_dim: per-head width (64).
        intermediate_size: SwiGLU hidden width (1536).
        vocab_size: embedding rows (49152).
        rms_norm_eps: RMSNorm epsilon (1e-5).
        rope_theta: rotary base frequency (SmolLM2: 100000).
        max_position_embeddings: trained context length (8192).
        tie_word_embeddings: the LM head reuses the token embedding matrix.
        rope_scaling: HF-style ``rope_scaling`` dict (``{"rope_type": "llama3", ...}``) or None.
    """

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = True
    rope_scaling: dict | None = None

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """KV-cache bytes one token takes over all layers: ``2 * layers * kv_heads * head_dim *
        dtype_bytes`` (2 for K and V)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes


@dataclass
class EngineConfig:
    """Everything a user can set on the engine (``LLM(**config)``, ``LLMEngine.from_model``).

    Attributes:
        model: None for the embedded SmolLM2-135M-Instruct GGUF, a ``.gguf`` path, or a folder
            holding a GGUF file or a Hugging Face model (``config.json`` + ``*.safetensors``).
        device: ``"cpu"`` or ``"cuda"`` (``"cuda:N"`` accepted).
        dtype: ``"float32"``/``"bfloat16"``/``"float16"`` or a ``torch.dtype``; default float32 on
            the CPU, bfloat16 on CUDA. Used for weights, activations and (with
            ``kv_cache_dtype="auto"``) the KV cache.
        kv_cache_dtype: how the KV cache stores K and V: ``"auto"`` (the model dtype),
            ``"fp8"`` (E4M3), ``"int8"`` or ``"int4"`` (two values per byte), all with a
            float32 scale per token and KV head computed as each token is written (no
            calibration): about half (int4: about a quarter plus scales) the bytes of bf16,
            so that many more blocks (and cached prefixes) in the same memory; or ``"int2"``
            (KIVI-style 2-bit: keys per channel per block, values per token, each sequence's
            open block in the model dtype; about a fifth of bf16's bytes at head_dim 128 plus
            ``max_num_seqs + 4`` open blocks; block_size >= 16, no speculative decoding). See
            :mod:`local_engine.kv_cache.quant`, :mod:`local_engine.kv_cache.int2` and
            docs/DESIGN.md.
        block_size: tokens per KV-cache block (16).
        num_kv_blocks: fixed pool size in blocks; overrides the memory-based sizing.
        kv_cache_memory: KV pool size in bytes (CPU default: 512 MiB).
        gpu_memory_utilization: fraction of the free CUDA memory (after loading the weights)
            given to the KV pool when neither of the two above is set.
        max_model_len: longest context (prompt + output) in tokens; default the model's trained
            length.
        max_num_seqs: most sequences running in one step.
        max_num_batched_tokens: token budget per step (prefill chunks + decodes).
        enable_prefix_caching: reuse full cached blocks across requests.
        enable_chunked_prefill: split long prompts across steps to fit the token budget.
        attention_backend: ``"torch"``, ``"triton"`` or None (by device).
        seed: seed of the engine's default random generator (requests without ``seed``).
        debug_checks: check the block pool's invariants after every step (slow).
        swap_space: bytes of CPU memory for swapping preempted requests' KV (0 = recompute).
        cpu_cache_memory: bytes of CPU memory for the prefix cache's CPU tier (0 = off): cached
            blocks the device pool evicts are copied there (LRU) instead of dropped, and copied
            back when a prompt's prefix continues into them (counted as cached). Pinned on
            CUDA. Shares one host allocator with ``swap_space`` (swap keeps its bytes as a
            reserved floor; the tier may use what swap does not hold). Needs
            ``enable_prefix_caching``. See docs/DESIGN.md, "CPU tier".
        disk_cache_dir: folder of the prefix cache's disk tier (None = off): cached blocks the
            CPU tier evicts (the device pool, without a CPU tier) are written there, one
            checksummed file per block keyed by its chain hash and a fingerprint of the model
            and KV format, and read back when a prompt's prefix continues into them (counted
            as ``num_disk_cached_tokens``). Survives restarts; several engines may share the
            folder. Needs ``enable_prefix_caching``. See docs/DESIGN.md, "Disk tier".
        disk_cache_size: most bytes of block files kept in ``disk_cache_dir`` (all models'
            files together); the least recently used files are deleted past it. Default 10 GiB.
        enforce_eager: on CUDA, run every step eagerly instead of replaying the CUDA graphs
            captured for decode steps of batch sizes 1..``max_num_seqs`` and for small prefill
            and mixed steps (see :mod:`local_engine.cuda_graphs`).
        prefill_graph_max_tokens: on CUDA, steps that are not pure decode (a prefill chunk
            over a cached prefix, prefill chunks mixed with decodes) of at most this many
            tokens (and ``max_num_batched_tokens``) replay CUDA graphs captured per (tokens,
            sequences) bucket (:class:`~local_engine.cuda_graphs.PrefillGraphRunner`); 0 = run
            them eagerly. Off with ``enforce_eager``. Default 512: on the Llama-3-8B shape
            (H200, bench/RESULTS.md "## hitpath") a 100-token chunk over a 4,000-token cached
            prefix reaches its first token in 8.3 ms instead of 14.7-19.3 ms; past ~300
            tokens a padded graph and the eager step cost about the same.
        num_threads: torch intra-op CPU threads for this process on the CPU (None = auto: one
            per core minus the cores other processes keep busy, by the 1-minute load average;
            see :func:`local_engine.engine.cpu_threads`). The choice is logged at start-up.
        weight_dtype: storage of the linear layers' weights on the CPU: ``"float32"``,
            ``"bfloat16"`` or ``"int8"`` (per-channel int8 on fbgemm, a quarter of float32's
            bytes per decoded token; see :mod:`local_engine.models.linear`). None = the
            activation dtype (``dtype``). Activations, norms and the KV cache stay in ``dtype``.
            On CUDA only None is accepted.
        weight_cache: keep the prepared weights (dequantized, fused, transposed or quantized)
            under the user cache directory, keyed by the model file's hash, so the next start
            skips that work (:mod:`local_engine.loader.weight_cache`; CPU only).
        speculative: speculative decoding: None (off), or a dict / :class:`~local_engine.
            spec_decode.config.SpeculativeConfig` such as ``{"method": "ngram",
            "num_speculative_tokens": 4}`` (see :mod:`local_engine.spec_decode.config`);
            a dict is validated and replaced by the dataclass.
    """

    model: str | None = None
    device: str = "cpu"
    dtype: Any = None
    kv_cache_dtype: str = "auto"
    block_size: int = 16
    num_kv_blocks: int | None = None
    kv_cache_memory: int | None = None
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    attention_backend: str | None = None
    seed: int = 0
    debug_checks: bool = False
    swap_space: int = 0
    cpu_cache_memory: int = 0
    disk_cache_dir: str | None = None
    disk_cache_size: int = 10 * 2**30
    enforce_eager: bool = False  # on CUDA: no decode CUDA graphs (local_engine/cuda_graphs.py)
    prefill_graph_max_tokens: int = 512
    num_threads: int | None = None
    weight_dtype: str | None = None
    weight_cache: bool = True
    speculative: Any = None

    DEFAULT_CPU_KV_CACHE_MEMORY = 512 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.block_size <= 0 or self.block_size & (self.block_size - 1):
            raise EngineError(f"block_size must be a positive power of two, got {self.block_size}")
        if self.max_num_seqs <= 0:
            raise EngineError(f"max_num_seqs must be positive, got {self.max_num_seqs}")
        if self.max_num_batched_tokens <= 0:
            raise EngineError(
                f"max_num_batched_tokens must be positive, got {self.max_num_batched_tokens}"
            )
        if self.num_kv_blocks is not None and self.num_kv_blocks <= 0:
            raise EngineError(f"num_kv_blocks must be positive, got {self.num_kv_blocks}")
        if self.kv_cache_memory is not None and self.kv_cache_memory <= 0:
            raise EngineError(f"kv_cache_memory must be positive bytes, got {self.kv_cache_memory}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise EngineError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.max_model_len is not None and self.max_model_len <= 0:
            raise EngineError(f"max_model_len must be positive, got {self.max_model_len}")
        if not (self.device == "cpu" or str(self.device).startswith("cuda")):
            raise EngineError(f"device must be 'cpu' or 'cuda[:N]', got {self.device!r}")
        if self.prefill_graph_max_tokens < 0:
            raise EngineError(
                f"prefill_graph_max_tokens must be >= 0 (0 = off), got {self.prefill_graph_max_tokens}"
            )
        if self.num_threads is not None and self.num_threads < 1:
            raise EngineError(f"num_threads must be at least 1, got {self.num_threads}")
        if self.weight_dtype is not None:
            if self.weight_dtype not in WEIGHT_DTYPES:
                raise EngineError(
                    f"weight_dtype must be one of {', '.join(WEIGHT_DTYPES)}, got {self.weight_dtype!r}"
                )
            if self.device != "cpu":
                raise EngineError(
                    f"weight_dtype={self.weight_dtype!r} is CPU-only; on {self.device} the weights "
                    "use dtype"
                )
        if self.swap_space < 0:
            raise EngineError(f"swap_space must be >= 0 bytes, got {self.swap_space}")
        if not isinstance(self.cpu_cache_memory, int) or self.cpu_cache_memory < 0:
            raise EngineError(
                f"cpu_cache_memory must be a whole number of bytes >= 0 (0 = off), got "
                f"{self.cpu_cache_memory!r}"
            )
        if self.cpu_cache_memory and not self.enable_prefix_caching:
            raise EngineError(
                "cpu_cache_memory is the prefix cache's CPU tier; it needs "
                "enable_prefix_caching=True"
            )
        if self.disk_cache_dir is not None:
            self.disk_cache_dir = str(self.disk_cache_dir)
            if not self.enable_prefix_caching:
                raise EngineError(
                    "disk_cache_dir is the prefix cache's disk tier; it needs "
                    "enable_prefix_caching=True"
                )
        if (
            isinstance(self.disk_cache_size, bool)
            or not isinstance(self.disk_cache_size, int)
            or self.disk_cache_size <= 0
        ):
            raise EngineError(
                f"disk_cache_size must be a whole number of bytes > 0, got {self.disk_cache_size!r}"
            )
        if str(self.kv_cache_dtype).lower() not in KV_CACHE_DTYPES:
            raise EngineError(
                f"unknown kv_cache_dtype {self.kv_cache_dtype!r}; supported: "
                f"{', '.join(KV_CACHE_DTYPES)}"
            )
        self.kv_cache_dtype = str(self.kv_cache_dtype).lower()
        if self.attention_backend not in (None, "torch", "triton"):
            raise EngineError(
                f"attention_backend must be 'torch', 'triton' or None, got {self.attention_backend!r}"
            )
        self.speculative = SpeculativeConfig.from_value(self.speculative)
        if self.speculative is not None:
            self.speculative.check_engine(self.max_num_batched_tokens)
            if self.kv_cache_dtype == "int2":
                raise EngineError(
                    "kv_cache_dtype 'int2' cannot run speculative decoding: a block's keys are "
                    "re-quantized per channel when its last slot is written, and rejected "
                    "drafts would leave such a block open again (local_engine.kv_cache.int2); "
                    "use int4 or int8 with speculative decoding"
                )
        if self.kv_cache_dtype == "int2" and self.block_size < 16:
            raise EngineError(
                f"kv_cache_dtype 'int2' needs block_size >= 16 (a block is its keys' "
                f"quantization group); got {self.block_size}"
            )

    def torch_dtype(self):
        """The ``torch.dtype`` for weights, activations and the KV cache."""
        import torch

        if self.dtype is None:
            return torch.float32 if self.device == "cpu" else torch.bfloat16
        if isinstance(self.dtype, torch.dtype):
            return self.dtype
        names = {
            "float32": torch.float32,
            "fp32": torch.float32,
            "bfloat16": torch.bfloat16,
            "bf16": torch.bfloat16,
            "float16": torch.float16,
            "fp16": torch.float16,
            "half": torch.float16,
        }
        try:
            return names[str(self.dtype).replace("torch.", "")]
        except KeyError:
            raise EngineError(
                f"unknown dtype {self.dtype!r}; expected one of {sorted(names)}"
            ) from None

    def cpu_weight_dtype(self) -> str | None:
        """The weight storage the CPU model is prepared in (``"float32"``, ``"bfloat16"``,
        ``"int8"``), or None for the dense ``[out, in]`` layout in ``dtype`` (CUDA, and
        float16 on the CPU without an explicit ``weight_dtype``)."""
        if self.device != "cpu":
            return None
        if self.weight_dtype is not None:
            return self.weight_dtype
        import torch

        # float16 on the CPU keeps the dense [out, in] layout (None)
        return {torch.float32: "float32", torch.bfloat16: "bfloat16"}.get(self.torch_dtype())

    def replace(self, **changes) -> EngineConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def field_names(cls) -> set:
        return {f.name for f in dataclasses.fields(cls)}


__all__ = ["EngineConfig", "ModelConfig", "KV_CACHE_DTYPES"]
