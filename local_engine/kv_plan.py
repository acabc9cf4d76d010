"""``promptcache kv-plan``: KV-cache capacity planning.

For a model (a built-in preset, a ``.gguf`` file, or a Hugging Face ``config.json`` / folder), a
context length and a batch size it prints:

- KV bytes per token = 2 (K and V) x layers x KV heads x (head_dim x bytes per element +
  scale bytes), the scale a float32 per token and KV head for fp8/int8/int4 (0 otherwise; int4
  packs two values a byte); int2 (KIVI-style, ``local_engine.kv_cache.int2``) is a block's
  bytes / block size: layers x KV heads x (head_dim / 2 + 4 + 4 x head_dim / block size), the
  2-bit keys and values, a float16 scale and minimum per token (values) and per channel and
  block (keys); plus its residual slots, one open block per running sequence (``max_num_seqs
  + 4`` slots) in the model dtype (``--weight-dtype``), taken from the same memory;
- KV bytes per request (context rounded up to whole blocks) and for the batch;
- weight bytes (parameters x weight bytes; for a GGUF file, its tensors' stored size);
- with ``--memory``: the memory left after the weights, the KV blocks it holds, and how many
  requests of that context fit at once (whole blocks each);
- with ``--cpu-cache-memory``: the KV blocks the prefix cache's CPU tier holds
  (``cpu_cache_memory // block bytes``, as ``EngineConfig.cpu_cache_memory`` allocates) and how
  many cached prefixes of that context it keeps beside the device's.

Preset numbers come from each model's ``config.json`` on the Hugging Face hub (pages read
2025-01; the repository is named per preset). Parameter counts are computed from those numbers
(embeddings + per-layer attention, MLP and norms), e.g. Llama 3 8B -> 8,030,261,248.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from .config import ModelConfig

#: Bytes per element of each KV-cache / weight dtype.
DTYPE_BYTES = {
    "fp32": 4,
    "float32": 4,
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "int8": 1,
}
#: KV dtypes the engine stores quantized, with one float32 scale per (token, KV head) per K
#: and V (``local_engine.kv_cache.quant.SCALE_BYTES``): the plan counts those bytes too, so it
#: agrees with the pool ``EngineConfig(kv_cache_dtype=...)`` allocates.
KV_SCALE_BYTES = {"fp8": 4, "fp8_e4m3": 4, "int8": 4, "int4": 4}
#: Packed KV dtypes (several values per byte): bits per value (``kv_cache.quant``'s INT4 packs
#: two values a byte, plus the same float32 scale per token and KV head).
KV_PACKED_BITS = {"int4": 4}
#: int2 (``local_engine.kv_cache.int2``): bytes per token and KV head beyond the codes'
#: ``head_dim / 2`` (V's float16 scale and minimum), the smallest block (a block is its keys'
#: group: ``int2.MIN_BLOCK``) and the residual slots beyond one per running sequence
#: (``int2.CHUNK_SLOTS``).
KV_INT2_EXTRA_BYTES = 4
KV_INT2_MIN_BLOCK = 16
KV_INT2_CHUNK_SLOTS = 4
#: Every KV dtype kv-plan knows: the element dtypes and the packed ones.
KV_DTYPES = sorted([*DTYPE_BYTES, *KV_PACKED_BITS, "int2"])


def _preset(name, source, L, H, heads, kv, hd, inter, vocab, tied, ctx):
    return (
        name,
        source,
        ModelConfig(
            name=name,
            hidden_size=H,
            num_layers=L,
            num_heads=heads,
            num_kv_heads=kv,
            head_dim=hd,
            intermediate_size=inter,
            vocab_size=vocab,
            tie_word_embeddings=tied,
            max_position_embeddings=ctx,
        ),
    )


_PRESET_LIST = [
    _preset(
        "llama-3-8b",
        "huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json",
        32,
        4096,
        32,
        8,
        128,
        14336,
        128256,
        False,
        8192,
    ),
    _preset(
        "llama-3-70b",
        "huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json",
        80,
        8192,
        64,
        8,
        128,
        28672,
        128256,
        False,
        8192,
    ),
    # Llama 3.1: the Llama 3 shapes with a 128k window (rope_scaling "llama3" in the same files)
    _preset(
        "llama-3.1-8b",
        "huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json",
        32,
        4096,
        32,
        8,
        128,
        14336,
        128256,
        False,
        131072,
    ),
    _preset(
        "llama-3.1-70b",
        "huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json",
        80,
        8192,
        64,
        8,
        128,
        28672,
        128256,
        False,
        131072,
    ),
    _preset(
        "qwen2.5-7b",
        "huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/main/config.json",
        28,
        3584,
        28,
        4,
        128,
        18944,
        152064,
        False,
        32768,
    ),
    _preset(
        "qwen2.5-72b",
        "huggingface.co/Qwen/Qwen2.5-72B-Instruct/blob/main/config.json",
        80,
        8192,
        64,
        8,
        128,
        29568,
        152064,
        False,
        32768,
    ),
    _preset(
        "mistral-7b",
        "huggingface.co/mistralai/Mistral-7B-Instruct-v0.3/blob/main/config.json",
        32,
        4096,
        32,
        8,
        128,
        14336,
        32768,
        False,
        32768,
    ),
    _preset(
        "smollm2-135m",
        "huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct/blob/main/config.json",
        30,
        576,
        9,
        3,
        64,
        1536,
        49152,
        True,
        8192,
    ),
    _preset(
        "smollm2-1.7b",
        "huggingface.co/HuggingFaceTB/SmolLM2-1.7B-Instruct/blob/main/config.json",
        24,
        2048,
        32,
        32,
        64,
        8192,
        49152,
        True,
        8192,
    ),
]
PRESETS = {name: (cfg, source) for name, source, cfg in _PRESET_LIST}
_ALIASES = {
    "llama3-8b": "llama-3-8b",
    "llama3.1-8b": "llama-3.1-8b",
    "llama3-70b": "llama-3-70b",
    "llama3.1-70b": "llama-3.1-70b",
    "qwen-7b": "qwen2.5-7b",
    "qwen2-7b": "qwen2.5-7b",
    "qwen-72b": "qwen2.5-72b",
    "mistral": "mistral-7b",
    "smollm2": "smollm2-135m",
    "smollm2-135m-instruct": "smollm2-135m",
}


class PlanError(ValueError):
    """Bad input to the planner (unknown model, bad size string); the message says what to fix."""


def parse_bytes(text: str) -> int:
    """``"80GiB"`` -> 85899345920: the one size parser of the CLI (``kv-plan --memory``,
    ``serve --cpu-cache-memory``). Accepts B, KB/MB/GB/TB and K/M/G/T (powers of 1000, as
    pydantic's ``ByteSize`` reads them), KiB/MiB/GiB/TiB (powers of 1024) and plain integers
    (bytes), case-insensitive, with or without a space.

    Raises:
        PlanError: not a size.
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B|[KMGT]|B)?\s*", str(text), flags=re.I)
    if not m:
        raise PlanError(
            f"cannot read {text!r} as a size; write bytes or a number with a unit, e.g. 4GiB, "
            "80GiB, 24GB or 1073741824"
        )
    value, unit = float(m.group(1)), (m.group(2) or "B").upper()
    powers = {
        "B": 1,
        "KB": 10**3,
        "MB": 10**6,
        "GB": 10**9,
        "TB": 10**12,
        "KIB": 2**10,
        "MIB": 2**20,
        "GIB": 2**30,
        "TIB": 2**40,
    }
    return int(value * powers[unit if unit in powers else unit + "B"])


def parse_tokens(text: str) -> int:
    """``"128k"`` -> 131072: a token count, plain (``4096``) or with ``k`` (x 1,024) or
    ``M`` (x 1,048,576), as context windows are quoted (a "128k" window is 131,072 tokens,
    e.g. Llama 3.1's ``max_position_embeddings``).

    Raises:
        PlanError: not a token count.
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmM]?)\s*", str(text))
    if not m:
        raise PlanError(f"cannot read {text!r} as a token count; write e.g. 4096, 32k or 128k")
    scale = {"": 1, "k": 2**10, "m": 2**20}[m.group(2).lower()]
    value = float(m.group(1)) * scale
    if value != int(value):
        raise PlanError(f"{text!r} is not a whole number of tokens")
    return int(value)


#: Memory kept free by default for activations, the CUDA context and allocator
#: fragmentation: 10%, as vLLM's default ``gpu_memory_utilization=0.9``
#: (https://docs.vllm.ai/en/latest/configuration/engine_args.html).
DEFAULT_HEADROOM = 0.10


def count_parameters(cfg: ModelConfig) -> int:
    """Parameters of a Llama-family decoder without biases: embeddings (twice when untied),
    per layer q/k/v/o projections, gate/up/down MLP and two norms, plus the final norm."""
    H, hd = cfg.hidden_size, cfg.head_dim
    attn = H * cfg.num_heads * hd * 2 + H * cfg.num_kv_heads * hd * 2
    mlp = 3 * H * cfg.intermediate_size
    per_layer = attn + mlp + 2 * H
    embed = cfg.vocab_size * H * (1 if cfg.tie_word_embeddings else 2)
    return embed + cfg.num_layers * per_layer + H


@dataclass
class KVPlan:
    """The numbers ``kv-plan`` prints (bytes unless stated)."""

    model: str
    source: str
    context: int
    batch: int
    block_size: int
    kv_dtype: str
    kv_bytes_per_token: int
    kv_scale_bytes_per_token: int
    blocks_per_request: int
    kv_bytes_per_request: int
    kv_bytes_batch: int
    parameters: int | None
    weight_bytes: int
    memory: int | None = None
    memory_after_weights: int | None = None
    kv_blocks: int | None = None
    max_requests: int | None = None
    batch_fits: bool | None = None
    cpu_cache_memory: int | None = None
    cpu_tier_blocks: int | None = None
    cpu_tier_prefixes: int | None = None
    residual_blocks: int = 0  # int2: blocks its residual slots take from --memory


def plan(
    cfg: ModelConfig,
    *,
    context: int,
    batch: int = 1,
    kv_dtype: str = "bf16",
    block_size: int = 16,
    memory: int | None = None,
    weight_bytes: int | None = None,
    weight_dtype: str = "bf16",
    source: str = "",
    cpu_cache_memory: int | None = None,
    max_num_seqs: int = 64,
) -> KVPlan:
    """Compute a :class:`KVPlan`.

    Args:
        cfg: the architecture.
        context: tokens per request (prompt + output); rounded up to whole blocks.
        batch: concurrent requests.
        kv_dtype: key of :data:`DTYPE_BYTES`.
        block_size: tokens per KV block.
        memory: device memory in bytes (None: skip the fit part).
        weight_bytes: stored weight size; default parameters x ``weight_dtype`` bytes.
        cpu_cache_memory: host bytes for the prefix cache's CPU tier (None: skip that part);
            whole blocks of the device's block size, as the engine sizes the tier (swap space
            is separate and, while idle, lent to the tier on top of this).
        max_num_seqs: running sequences (``EngineConfig.max_num_seqs``): int2's residual
            slots, ``max_num_seqs + 4`` open blocks of ``weight_dtype`` K and V.

    Raises:
        PlanError: a non-positive size, a negative CPU-tier size or unknown dtype.
    """
    if context <= 0 or batch <= 0 or block_size <= 0:
        raise PlanError("--context, --batch and --block-size must be positive integers")
    if cpu_cache_memory is not None and cpu_cache_memory < 0:
        raise PlanError("--cpu-cache-memory must be >= 0 bytes (0 = no CPU tier)")
    if kv_dtype not in KV_DTYPES:
        raise PlanError(f"unknown dtype {kv_dtype!r}; use one of {', '.join(KV_DTYPES)}")
    if weight_dtype not in DTYPE_BYTES:
        raise PlanError(
            f"unknown dtype {weight_dtype!r}; use one of {', '.join(sorted(DTYPE_BYTES))}"
        )
    scale_per_token = 2 * cfg.num_layers * cfg.num_kv_heads * KV_SCALE_BYTES.get(kv_dtype, 0)
    residual_blocks = 0
    if kv_dtype == "int2":
        if block_size < KV_INT2_MIN_BLOCK:
            raise PlanError(f"--kv-dtype int2 needs --block-size >= {KV_INT2_MIN_BLOCK}")
        L, H, d = cfg.num_layers, cfg.num_kv_heads, cfg.head_dim
        layer_block = block_size * H * (d // 2 + KV_INT2_EXTRA_BYTES) + 4 * H * d
        per_token = L * layer_block // block_size
        scale_per_token = per_token - L * H * d // 2
        slot = 2 * block_size * H * d * DTYPE_BYTES[weight_dtype]  # K and V of one open block
        residual_blocks = (max_num_seqs + KV_INT2_CHUNK_SLOTS) * -(-slot // layer_block)
    elif kv_dtype in KV_PACKED_BITS:  # head_dim * bits / 8 bytes per token-head
        values = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * KV_PACKED_BITS[kv_dtype]
        per_token = values // 8 + scale_per_token
    else:
        per_token = cfg.kv_bytes_per_token(DTYPE_BYTES[kv_dtype]) + scale_per_token
    blocks = math.ceil(context / block_size)
    per_request = blocks * block_size * per_token
    params = count_parameters(cfg)
    if weight_bytes is None:
        weight_bytes = params * DTYPE_BYTES[weight_dtype]
    p = KVPlan(
        model=cfg.name,
        source=source,
        context=context,
        batch=batch,
        block_size=block_size,
        kv_dtype=kv_dtype,
        kv_bytes_per_token=per_token,
        kv_scale_bytes_per_token=scale_per_token,
        blocks_per_request=blocks,
        kv_bytes_per_request=per_request,
        kv_bytes_batch=per_request * batch,
        parameters=params,
        weight_bytes=weight_bytes,
        residual_blocks=residual_blocks,
    )
    if memory is not None:
        left = memory - weight_bytes
        p.memory = memory
        p.memory_after_weights = left
        p.kv_blocks = max(0, left // (block_size * per_token) - residual_blocks)
        p.max_requests = p.kv_blocks // blocks
        p.batch_fits = p.max_requests >= batch
    if cpu_cache_memory is not None:
        p.cpu_cache_memory = cpu_cache_memory
        p.cpu_tier_blocks = cpu_cache_memory // (block_size * per_token)
        p.cpu_tier_prefixes = p.cpu_tier_blocks // blocks
    return p


def resolve_model(model: str):
    """``(ModelConfig, source, stored weight bytes or None)`` for a preset name, a ``.gguf``
    file, a ``config.json`` or a folder holding one.

    Raises:
        PlanError: nothing matches (the message lists the presets).
    """
    key = model.strip().lower()
    key = _ALIASES.get(key, key)
    if key in PRESETS:
        cfg, source = PRESETS[key]
        return cfg, source, None
    path = Path(model).expanduser()
    if path.is_dir():
        if (path / "config.json").is_file():
            path = path / "config.json"
        else:
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) != 1:
                raise PlanError(f"{model}: folder has no config.json and {len(ggufs)} .gguf files")
            path = ggufs[0]
    if path.is_file() and path.suffix == ".gguf":
        import gguf

        from .loader.gguf_loader import read_gguf_config

        try:
            reader = gguf.GGUFReader(str(path))
            stored = sum(int(t.n_bytes) for t in reader.tensors)
            return read_gguf_config(reader, path), str(path), stored
        except (ValueError, KeyError, OSError) as exc:
            raise PlanError(f"{path}: not a readable GGUF model file ({exc})") from None
    if path.is_file() and path.name.endswith(".json"):
        from .loader.hf_loader import read_hf_config

        tmp = path.parent
        if path.name != "config.json":
            raise PlanError(f"{model}: expected a file named config.json")
        try:
            cfg = read_hf_config(tmp)
        except (ValueError, KeyError, TypeError, OSError) as exc:
            raise PlanError(f"{path}: not a usable Hugging Face config ({exc})") from None
        return cfg, str(path), None
    names = ", ".join(sorted(PRESETS))
    if path.suffix in (".gguf", ".json") or "/" in model:
        raise PlanError(
            f"{model}: no such file (give a preset ({names}), a .gguf file or a config.json)"
        )
    raise PlanError(
        f"unknown model {model!r}: give a preset ({names}), a .gguf file or a config.json"
    )


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{sign}{n / size:,.2f} {unit} ({sign}{n:,} B)"
    return f"{sign}{n:,} B"


def format_plan(p: KVPlan, *, total_memory: int | None = None, headroom: float = 0.0) -> str:
    """The plan as the aligned text table ``promptcache kv-plan`` prints (bytes with binary
    units). ``total_memory``/``headroom``: the device memory given and the share of it kept
    free (``p.memory`` is what is left for weights and KV after that headroom)."""
    rows = [
        ("model", f"{p.model}" + (f"  [{p.source}]" if p.source else "")),
        ("parameters", f"{p.parameters:,}" if p.parameters else "-"),
        ("weights", _fmt_bytes(p.weight_bytes)),
        ("KV dtype / block size", f"{p.kv_dtype} / {p.block_size} tokens"),
        (
            "KV per token",
            _fmt_bytes(p.kv_bytes_per_token)
            + (
                f" incl. {p.kv_scale_bytes_per_token:,} B of scales"
                if p.kv_scale_bytes_per_token
                else ""
            ),
        ),
        (
            f"KV per request ({p.context:,} tokens = {p.blocks_per_request:,} blocks)",
            _fmt_bytes(p.kv_bytes_per_request),
        ),
        (
            f"KV for the batch ({p.batch} request{'' if p.batch == 1 else 's'})",
            _fmt_bytes(p.kv_bytes_batch),
        ),
    ]
    if p.memory is not None:
        total = p.memory if total_memory is None else total_memory
        rows.append(("memory", _fmt_bytes(total)))
        if total_memory is not None:
            rows.append(
                (
                    "headroom",
                    f"{_fmt_bytes(total - p.memory)} ({headroom:.0%}) kept free for "
                    "activations, the CUDA context and fragmentation (vLLM's default "
                    "gpu_memory_utilization=0.9; --headroom to change)",
                )
            )
        left = p.memory_after_weights
        rows += [
            (
                "left after weights",
                _fmt_bytes(left)
                if left is not None and left >= 0
                else f"none: the weights alone ({_fmt_bytes(p.weight_bytes)}) do not fit in "
                f"{_fmt_bytes(p.memory)}",
            ),
            ("KV blocks that fit", f"{p.kv_blocks:,}"),
            *(
                [
                    (
                        "int2 residual slots",
                        f"{p.residual_blocks:,} blocks' bytes (open blocks in the model dtype)",
                    )
                ]
                if p.residual_blocks
                else []
            ),
            (f"requests of {p.context:,} tokens that fit", f"{p.max_requests:,}"),
            (f"batch of {p.batch} fits", "yes" if p.batch_fits else "NO"),
        ]
    if p.cpu_cache_memory is not None:
        rows += [
            ("CPU tier (host memory)", _fmt_bytes(p.cpu_cache_memory)),
            ("CPU tier KV blocks", f"{p.cpu_tier_blocks:,}"),
            (
                f"cached prefixes of {p.context:,} tokens in the CPU tier",
                f"{p.cpu_tier_prefixes:,}"
                + (
                    f" (device: {p.max_requests:,}; together {p.max_requests + p.cpu_tier_prefixes:,})"
                    if p.max_requests is not None and p.cpu_tier_prefixes is not None
                    else ""
                ),
            ),
        ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``promptcache kv-plan``."""
    parser.add_argument(
        "--model",
        required=True,
        help=f"preset ({', '.join(sorted(PRESETS))}), a .gguf file, or a config.json/folder",
    )
    parser.add_argument(
        "--context",
        required=True,
        help="tokens per request (prompt + output): 4096, 32k, 128k (k = 1,024 tokens), 1M",
    )
    parser.add_argument("--batch", type=int, default=1, help="concurrent requests (default 1)")
    parser.add_argument(
        "--kv-dtype",
        default="bf16",
        type=str.lower,
        choices=KV_DTYPES,
        metavar="DTYPE",
        help=f"KV cache dtype, one of {', '.join(KV_DTYPES)}: fp8 / int8 / int4 are quantized, "
        "with a float32 scale per token and KV head (int4: two values a byte); int2 is "
        "KIVI-style 2-bit (3/4 head_dim + 4 bytes a token and KV head at block 16, plus "
        "--max-num-seqs + 4 open blocks in --weight-dtype); as `promptcache serve "
        "--kv-cache-dtype` stores them (default bf16)",
    )
    parser.add_argument(
        "--weight-dtype",
        default="bf16",
        help="weight dtype for presets and config.json (default bf16; a .gguf uses its stored size)",
    )
    parser.add_argument(
        "--memory",
        default=None,
        help="device memory: 80GiB, 24GB, 141GB or bytes (enables the fit part)",
    )
    parser.add_argument(
        "--cpu-cache-memory",
        default=None,
        metavar="SIZE",
        help="host memory for the prefix cache's CPU tier, as `promptcache serve "
        "--cpu-cache-memory` takes it (4GiB, 512MB or bytes): prints the blocks and cached "
        "prefixes it holds",
    )
    parser.add_argument(
        "--headroom",
        type=float,
        default=DEFAULT_HEADROOM,
        metavar="FRACTION",
        help="share of --memory kept free for activations, the CUDA context and "
        f"fragmentation (default {DEFAULT_HEADROOM:g}, as vLLM's gpu_memory_utilization=0.9)",
    )
    parser.add_argument(
        "--block-size", type=int, default=16, help="tokens per KV block (default 16)"
    )
    parser.add_argument(
        "--max-num-seqs",
        type=int,
        default=64,
        help="running sequences, as `promptcache serve --max-num-seqs` (default 64): sizes "
        "int2's residual slots",
    )
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")


def run(args: argparse.Namespace) -> int:
    """Run ``promptcache kv-plan``: print the plan; 0 on success, 2 with one line on bad input."""
    try:
        context = parse_tokens(args.context)
        if not 0 <= args.headroom < 1:
            raise PlanError(f"--headroom {args.headroom:g}: give a fraction in [0, 1), e.g. 0.1")
        cfg, source, stored = resolve_model(args.model)
        total = parse_bytes(args.memory) if args.memory is not None else None
        cpu_tier = parse_bytes(args.cpu_cache_memory) if args.cpu_cache_memory is not None else None
        headroom_bytes = int(total * args.headroom) if total is not None else None
        memory = (
            total - headroom_bytes if total is not None and headroom_bytes is not None else None
        )
        p = plan(
            cfg,
            context=context,
            batch=args.batch,
            kv_dtype=args.kv_dtype.lower(),
            block_size=args.block_size,
            memory=memory,
            weight_bytes=stored,
            weight_dtype=args.weight_dtype.lower(),
            source=source,
            cpu_cache_memory=cpu_tier,
            max_num_seqs=args.max_num_seqs,
        )
    except (PlanError, ValueError, OSError) as exc:
        print(f"promptcache kv-plan: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        doc = asdict(p)
        if total is not None:
            doc.update(
                memory=total,
                headroom_bytes=headroom_bytes,
                memory_for_weights_and_kv=p.memory,
                weights_fit=(p.memory_after_weights or 0) >= 0,
            )
        print(json.dumps(doc, indent=2))
    else:
        print(format_plan(p, total_memory=total, headroom=args.headroom))
    return 0


__all__ = [
    "plan",
    "KVPlan",
    "PRESETS",
    "parse_bytes",
    "parse_tokens",
    "DEFAULT_HEADROOM",
    "count_parameters",
    "resolve_model",
    "add_arguments",
    "run",
]
