"""Triton backend of :mod:`local_engine.attention`: paged attention and the KV-cache write.

Entry points (same contract as :mod:`local_engine.attention.torch_ref`):
:func:`paged_attention` and :func:`write_kv_cache`. The kernels live in
:mod:`~local_engine.attention.triton_attention` and :mod:`~local_engine.attention.triton_kv_write`.

On CUDA tensors the kernels are compiled; on CPU tensors they run only when the interpreter is
on (``TRITON_INTERPRET=1`` set before ``triton`` is first imported), which is how CI tests them.

Launch choices depend on tensor shapes only (never on tensor values), so a call costs no
device-to-host sync and can be captured in a CUDA graph:

- *decode-shaped* calls (``num_tokens == num_seqs``) run the kernel's ``DECODE`` mode: one
  program per token and KV head, ``BLOCK_M = max(16, next_pow2(G))`` rows (the token's
  query-head group); others use ``BLOCK_M = 128`` rows (``128 // G`` tokens times the ``G``
  heads of one KV head).
- quantized caches: FP8 with 16-bit queries multiplies in fp16, INT8 in the query dtype
  (``KV_CVT``, :func:`kv_cvt_of`).
- split-K (flash-decoding) is chosen by :func:`choose_num_segments` from the grid size, the
  SM count and the longest context the block table can hold (``block_tables.shape[1] *
  block_size``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from dataclasses import dataclass

import torch
import triton

from local_engine.attention import cuda_decode, triton_int2, triton_kv_write
from local_engine.attention.split_k import alloc_partials
from local_engine.attention.triton_attention import _reduce_segments_kernel, paged_attention_kernel
from local_engine.attention.triton_interpreter import squeeze_scalar_index
from local_engine.kv_cache import int2
from local_engine.kv_cache.quant import rotate_int4

LOG2E = 1.4426950408889634
logger = logging.getLogger("local_engine")

if os.environ.get("TRITON_INTERPRET") == "1":
    squeeze_scalar_index()  # triton 3.6 interpreter + NumPy 2.4: loop bounds


@dataclass(frozen=True)
class KernelConfig:
    """Tile sizes and launch options of :func:`paged_attention_kernel`.

    ``block_m``: query rows per program (tokens x heads of one KV head); ``tile_n``: keys per
    inner step; ``num_warps``/``num_stages``: Triton launch options; ``maxnreg``: a cap on
    registers per thread (Triton's ``maxnreg``; None = the compiler's choice).
    """

    block_m: int
    tile_n: int
    num_warps: int
    num_stages: int
    maxnreg: int | None = None


# Chosen by the sweep in bench/kernels.py on an H200 (see bench/RESULTS.md, "## triton").
# 2026-11-29 sweep (32q/8kv heads, d=128, bf16, block 16): decode (16, 64, 4, 2) was best on
# 64x4096, 256x1024 and 16x32768 (4.28/4.16/4.33 TB/s of KV bytes); prefill (128, 32, 4, 3)
# was best on 8 x 512 new over a 4096 prefix (334 TFLOP/s; (128, 128, 8, 3) 323).
# Decode tiles now come from decode_config (the same (16, 64, 4, 2) at d128 bf16).
DECODE_CONFIG = {64: KernelConfig(16, 64, 4, 2), 128: KernelConfig(16, 64, 4, 2)}
PREFILL_CONFIG = {64: KernelConfig(128, 32, 4, 3), 128: KernelConfig(128, 32, 4, 3)}

#: Bytes of K one decode tile loads (TILE_N keys x head_dim x element bytes): the 2026-11-29
#: best d128 bf16 tile (64 keys) is 16 KiB; other head dims / element sizes keep the bytes.
#: Wide groups (more than 4 query heads per KV head) with rows of >= 256 bytes (d128 bf16)
#: take twice that when the launch has few programs (2026-12-01 layout sweeps,
#: bench/RESULTS.md "## kvquant": 28/4 d128 0.68-0.71 of SDPA at 16 KiB -> 0.83-0.89 at 32 KiB
#: and 8 warps, 1 x 32k .. 32 x 8k), with 4 warps since session 3 (28/4 d128 8 x 8k 0.0428 vs
#: 0.0457 ms at 8 warps, 32 x 8k 0.1342 vs 0.1437, 1 x 32k 0.0287 vs 0.0291; 32/4 1 x 32k
#: 0.0284 vs 0.0289). At d64 the doubled tile (256 keys) lost to 16 KiB in the
#: session-2 grid (28/4 1 x 32k 0.73 vs 0.77, 8 x 8k 0.74 vs 0.81; 32/4 0.69 vs 0.74), so the
#: doubling needs 256-byte rows.
DECODE_TILE_BYTES = 16384
DECODE_TILE_MIN, DECODE_TILE_MAX = 32, 256
#: 1-byte (FP8/INT8) caches: 4 KiB K tiles (d128: 32 keys, d64: 64), one warp, 3 stages.
#: Session 2 (bench/RESULTS.md, "## kvquant") found 32 keys per warp best at every tile size
#: and the smallest (64 keys / 2 warps) fastest; session 3 (2026-12-01, the V-token-minor
#: layout) went to one warp: 32/8 d128 at 32 keys / 1 warp / 3 stages, INT8 0.365 ms at
#: 16 x 32k (8 segments) and 0.188 at 256 x 1k against 0.429 / 0.212 at 64 keys / 2 warps;
#: FP8 0.363 / 0.185 against 0.393 / 0.189; at d64, 64 keys / 1 warp 0.116 / 0.218 ms (INT8
#: 64 x 4k / 16 x 32k) against 0.140 / 0.291 at 64 keys / 2 warps. The kernel needs ~254
#: registers a thread either way, so an SM holds 8 warps: 1-warp programs double the
#: programs per SM (the split target below).
DECODE_TILE_BYTES_1B = 4096
DECODE_WARPS_1B = 1
DECODE_STAGES_1B = 3
#: Split-K target of 1-byte decode: this many warps per SM (programs per SM = it / warps).
#: 64 x 4k at 1 warp then takes 2 segments (1,024 programs); 64 keys / 2 warps keeps the
#: session-2 target of 4 programs per SM (1 segment).
SPLIT_WARPS_PER_SM_1B = 8
#: int2 decode (keys and values dequantized to float32 in registers, per-channel key scales
#: gathered per key): the 1-byte tile (32 keys at d128) on 2 warps, 2 stages. H200,
#: 2026-12-03 (bench/RESULTS.md, "## kv-hierarchy"), 32/8 d128: 0.684 / 1.389 ms at 64 x 4k
#: / 16 x 32k against 1.011 / 1.968 on the 1-byte rule's 1 warp; 64 keys / 4 warps 0.775 /
#: 1.573; 64 keys / 2 warps and 128 / 4 slower than 1 warp.
INT2_DECODE_WARPS = 2
WIDE_GROUP = 4  # groups above this may get the doubled tile
WIDE_ROW_BYTES = 256  # ... when a K row (head_dim x element bytes) is at least this long
FEW_PROGRAMS_PER_SM = 1 / 8  # "few programs": fewer than sm_count / 8 (1 x 32k at <= 16 KV heads)


def decode_config(
    head_dim: int,
    group: int,
    elem_bytes: int,
    num_programs: int | None = None,
    sm_count: int = 132,
) -> KernelConfig:
    """Tiles of a decode launch (a pure function of these shapes: CUDA-graph safe).

    ``BLOCK_M = max(16, next_pow2(group))`` query rows (one token's query-head group);
    ``TILE_N`` keys so that one K tile is :data:`DECODE_TILE_BYTES` (d128 bf16: 64, d64 bf16:
    128); 4 warps; 2 stages, 3 for rows under 256 bytes when the launch has few programs
    (``num_programs`` = tokens x KV heads of the unsplit launch, fewer than ``sm_count / 8``;
    with the undoubled tile and 4-tile segments, 28/4, 32/4, 32/8 d64 at 1 x 32k went 0.71 /
    0.70 / 0.79 -> 0.76 / 0.74 / 0.81 of SDPA). A group above
    :data:`WIDE_GROUP` with rows of at least :data:`WIDE_ROW_BYTES` gets twice the tile bytes
    (4 warps) when the launch has few programs or, for a group that is not a power of two (7:
    BLOCK_M rows half used), fewer than ``2 * sm_count``. 1-byte caches: tiles of
    :data:`DECODE_TILE_BYTES_1B` (d128: 32 keys, d64: 64), :data:`DECODE_WARPS_1B` warp,
    :data:`DECODE_STAGES_1B` stages.
    """
    d_pad = max(16, triton.next_power_of_2(head_dim))
    block_m = max(16, triton.next_power_of_2(group))
    row_bytes = d_pad * elem_bytes
    if elem_bytes == 1:
        tile_n = min(max(DECODE_TILE_BYTES_1B // row_bytes, DECODE_TILE_MIN), DECODE_TILE_MAX)
        return KernelConfig(block_m, tile_n, DECODE_WARPS_1B, DECODE_STAGES_1B)
    p = num_programs if num_programs is not None else 1
    pow2 = group & (group - 1) == 0
    few = p < sm_count * FEW_PROGRAMS_PER_SM
    wide = (
        group > WIDE_GROUP
        and row_bytes >= WIDE_ROW_BYTES
        and (few or (not pow2 and p < 2 * sm_count))
    )
    tile_bytes = DECODE_TILE_BYTES * (2 if wide else 1)
    tile_n = triton.next_power_of_2(max(1, tile_bytes // row_bytes))
    tile_n = min(max(tile_n, DECODE_TILE_MIN), DECODE_TILE_MAX)
    warps = 4
    stages = 3 if few and row_bytes < WIDE_ROW_BYTES else 2
    return KernelConfig(block_m, tile_n, warps, stages)


# Split-K rule (see choose_num_segments). The 2026-11-29 split grid (132 SMs, 32q/8kv, d128)
# found the best segment count at about 4-8 busy programs per SM; the layout sweep showed the
# old cap of 32 segments starving the GPU when few KV heads x sequences exist (16/2 at 1 x 32k:
# 64 programs on 132 SMs), so the cap is now 256 (the merge loops over segments) and only a
# minimum segment length limits the split.
SPLIT_TARGET_PROGRAMS_PER_SM = 4.0  # at 16 KiB tiles: segments = prev_pow2(target * SMs / programs)
SPLIT_TILE_BYTES_PER_SM = 4 * 16384  # the target scales as 64 KiB / tile bytes (32 KiB tiles: 2)
# no segment shorter than this many key tiles: 2 -> 4 in session 2 (2026-12-01 grid: 28/4 and
# 32/4 d64 at 1 x 32k with 16 KiB tiles, 64 segments of 4 tiles 0.77 / 0.74 of SDPA, 128 of 2
# tiles 0.67 / 0.64; the other 1 x 32k and 8 x 8k rows' choices were already >= 4 tiles)
SPLIT_MIN_TILES_PER_SEGMENT = 4
SPLIT_MAX_SEGMENTS = 256
#: Partial-output values (segments x head_dim_pad) the merge loads per step: every segment at
#: once up to 64 segments at d128 / 128 at d64 (2026-12-01 session 3: the two-pass merge over
#: chunks of 32, max first then sums, took 4.8 us of a 16 us 1 x 32k call, 32/4 d64, against
#: cuDNN's 3.7 us reduction; bench/RESULTS.md "## kvquant").
MERGE_CHUNK_ELEMS = 8192


def _sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of ``device`` (4 for the CPU interpreter)."""
    if device.type != "cuda":
        return 4  # interpreter: a small pretend GPU so the split path is exercised
    idx = device.index if device.index is not None else torch.cuda.current_device()
    return _cuda_sm_count(idx)


@functools.cache
def _cuda_sm_count(idx: int) -> int:
    """Multiprocessor count of CUDA device ``idx``, read once per device."""
    return int(torch.cuda.get_device_properties(idx).multi_processor_count)


def choose_num_segments(
    num_programs: int,
    max_context: int,
    sm_count: int,
    tile_n: int = 64,
    tile_bytes: int = DECODE_TILE_BYTES,
) -> int:
    """Number of key-range segments for split-K (1 = no split).

    Args:
        num_programs: busy programs of the unsplit launch (sequences' q-blocks x KV heads).
        max_context: the longest context the launch may see, in tokens (an upper bound).
        sm_count: streaming multiprocessors of the device.
        tile_n: keys per tile of the launch.
        tile_bytes: bytes of one K tile (``tile_n x head_dim x element bytes``).

    Returns ``prev_pow2(floor(target * sm_count / num_programs))`` with ``target =
    SPLIT_TILE_BYTES_PER_SM / tile_bytes`` busy programs per SM (4 at 16 KiB tiles), capped
    at ``SPLIT_MAX_SEGMENTS`` and so that a segment holds at least
    ``SPLIT_MIN_TILES_PER_SEGMENT`` tiles of the longest context: split only while the grid
    leaves the SMs short of work. The group size and head_dim enter through ``num_programs``
    (one program per KV head serves its whole query-head group) and ``tile_n``
    (:func:`decode_config`).
    """
    target = max(1.0, SPLIT_TILE_BYTES_PER_SM / max(tile_bytes, 1))
    want = int(target * sm_count // max(num_programs, 1))
    by_len = max_context // (tile_n * SPLIT_MIN_TILES_PER_SEGMENT)
    n = min(want, by_len, SPLIT_MAX_SEGMENTS)
    if n < 2:
        return 1
    return 1 << (n.bit_length() - 1)


def split_tile_bytes(config: KernelConfig, head_dim: int, elem_bytes: int, decode: bool) -> int:
    """Tile bytes that :func:`choose_num_segments` sizes the split-K target by (its target is
    ``SPLIT_TILE_BYTES_PER_SM / this`` programs per SM): the K tile's ``tile_n x head_dim_pad
    x elem_bytes``, but for decode at least :data:`DECODE_TILE_BYTES`, and for 1-byte decode
    ``SPLIT_TILE_BYTES_PER_SM * num_warps / SPLIT_WARPS_PER_SM_1B`` (8 warps per SM: 1-warp
    programs 8 per SM, 2-warp programs 4 per SM as in session 2: FP8 64 x 4k at 64 keys /
    2 warps, 1 segment 0.197 ms vs 2 segments 0.263; INT8 0.204 vs 0.224)."""
    if decode and elem_bytes == 1:
        return SPLIT_TILE_BYTES_PER_SM * config.num_warps // SPLIT_WARPS_PER_SM_1B
    b = config.tile_n * head_dim_pad_of(head_dim) * elem_bytes
    return max(b, DECODE_TILE_BYTES) if decode else b


def head_dim_pad_of(head_dim: int) -> int:
    """head_dim padded to a power of two (at least 16), as the kernels tile it."""
    return max(16, triton.next_power_of_2(head_dim))


def token_minor_ok(t: torch.Tensor, tile_n: int) -> bool:
    """Whether a paged view ``t`` (``[num_blocks, block_size, ...]``, V values or scales) is
    token-minor in runs the kernel may declare contiguous and aligned (its ``V_TOKEN_MINOR`` /
    ``SCALE_TOKEN_MINOR`` hints): unit stride over the block's tokens, every other stride a
    multiple of ``block_size``, ``block_size`` a power of two no larger than ``tile_n``
    (:data:`local_engine.kv_cache.quant.DEFAULT_LAYOUT`'s V and scales, block 16). Other
    strides still run, without the hints."""
    bs = t.shape[1]
    return (
        t.stride(1) == 1
        and bs & (bs - 1) == 0
        and bs <= tile_n
        and all(t.stride(i) % bs == 0 for i in range(t.dim()) if i != 1)
    )


def _alloc(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Uninitialised buffer (tests replace this to poison outputs and scratch)."""
    return torch.empty(shape, dtype=dtype, device=device)


def _dot_mode(q: torch.Tensor) -> int:
    if q.dtype == torch.float32:
        return 1
    if not q.is_cuda and q.dtype == torch.bfloat16:
        return 2
    return 0


#: ``KV_CVT`` per quantized format (``QUANT`` 1 = INT8, 2 = FP8) for 16-bit queries: INT8 keeps
#: bf16 products (Triton converts INT8 -> bf16 with integer tricks; -> fp16 costs an I2F per
#: value), FP8 takes fp16 products (E4M3 -> fp16 is one paired cvt; -> bf16 adds an F2F per
#: value). Measured on the H200, 2026-12-01 session 2 (bench/RESULTS.md, "## kvquant"), 32/8
#: d128 at the decode_config tile (64 keys, 2 warps, 3 stages), 64 x 4k / 16 x 32k / 256 x 1k:
#: INT8 0.204 / 0.432 / 0.215 ms (mode 0) vs 0.247 / 0.605 / 0.257 (mode 1); FP8 0.197 / 0.509
#: / 0.210 (mode 1) vs 0.244 / 0.491 / 0.251 (mode 0: ahead only at 16 x 32k).
KV_CVT_BY_QUANT = {1: 0, 2: 1, 3: 0}  # INT4: unpacked to small integers, exact in bf16


def kv_cvt_of(q: torch.Tensor, quant: int, kv_cvt: int | None = None) -> int:
    """The kernel's ``KV_CVT`` for queries ``q`` over a cache of kind ``quant``: 0 for float
    caches and float32 queries; otherwise ``kv_cvt`` if given (0 or 1), else
    :data:`KV_CVT_BY_QUANT` (the same choice on the GPU and in the interpreter)."""
    if not quant or q.dtype == torch.float32 or quant in (3, 4):
        return 0  # INT4's unpacked integers / int2's dequantized floats: query-dtype products
    if kv_cvt is not None:
        if kv_cvt not in (0, 1):
            raise ValueError(f"kv_cvt must be 0 (query-dtype products) or 1 (fp16); got {kv_cvt}")
        return kv_cvt
    return KV_CVT_BY_QUANT[quant]


#: Packed INT4 decode and prefill (``QUANT`` 3): ``(INT4_CVT, INT4_FOLD)`` of the kernel.
#: ``INT4_CVT`` 1 / 2: the split-half program of :mod:`~local_engine.attention.triton_int4`
#: (one packed load, the query's halves against the low / high nibbles, the output in two
#: halves), its operands built by the magic-number trick with Triton bit operations / inline
#: PTX ``prmt``; 0: the per-element nibble select over the whole head dim (before
#: 2026-12-03). ``INT4_FOLD``: the code offset subtracted once per row, not per value.
#: H200, 2026-12-03 (bench/RESULTS.md "## kv-hierarchy", bench/kv_int4_variants.py), 32/8
#: d128 bf16, CUDA-graph replays: (2, True) at 32 keys / 1 warp / 3 stages 0.1458 ms at
#: 64 x 4k and 0.2645 ms at 16 x 32k (1.66x / 1.81x bf16's 0.2413 / 0.4790) against 0.4478 /
#: 0.8734 for (0, False); other tiles of (2, True): 32/1/2 0.1525 / 0.2786, 64/2/3 0.1776 /
#: 0.3441, 64/4/2 0.1858 / 0.5778, 128/4/2 0.2375 / 0.4113. Prefill 8 x 512 over 4k: 1.62
#: ms against 1.88 (bf16 0.88). A query rotation inside the kernel (a Sylvester Hadamard
#: ``tl.dot``) passed the interpreter but gave wrong results compiled (triton 3.6, sm_90:
#: relative errors 0.8 to NaN); not kept.
INT4_VARIANT = (2, True)
#: Its decode tiles are the 1-byte rule's (:func:`decode_config`: 32 keys / 1 warp / 3
#: stages at d128, the best above) and so is its split-K (:func:`split_tile_bytes`): 2
#: segments at 64 x 4k (1: 0.2063 ms, 4: 0.1546), 8 at 16 x 32k (4: 0.4035, 16: 0.2680).
#: The split-half program multiplies ``[rows, head_dim / 2]`` halves: tl.dot needs depth >= 16.
INT4_SPLIT_MIN_DIM = 32


def int4_variant_of(head_dim: int, variant: tuple[int, bool] | None = None) -> tuple[int, bool]:
    """``(INT4_CVT, INT4_FOLD)`` of a packed INT4 launch: ``variant`` if given (``INT4_CVT``
    0 to 2), else :data:`INT4_VARIANT`; ``(0, False)`` (the nibble select) for head dims
    under :data:`INT4_SPLIT_MIN_DIM`.

    Raises:
        ValueError: an unknown ``INT4_CVT``, or a split-half variant for a head dim under
            :data:`INT4_SPLIT_MIN_DIM`."""
    cvt, fold = variant if variant is not None else INT4_VARIANT
    if cvt not in (0, 1, 2):
        raise ValueError(
            f"INT4_CVT must be 0 (nibble select), 1 (magic, bit ops) or 2 (magic, PTX); got {cvt}"
        )
    if head_dim < INT4_SPLIT_MIN_DIM:
        if variant is not None and cvt:
            raise ValueError(f"the split-half INT4 program needs head_dim >= 32; got {head_dim}")
        return 0, False
    return cvt, bool(fold) and cvt != 0


def _check_runnable(t: torch.Tensor) -> None:
    if not t.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(
            "the Triton attention backend needs CUDA tensors; on the CPU it runs only under "
            "TRITON_INTERPRET=1 (set before triton is imported) — use backend='torch' instead"
        )


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float | None = None,
    *,
    config: KernelConfig | None = None,
    num_segments: int | None = None,
    out: torch.Tensor | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    kv_cvt: int | None = None,
    decode_kernel: str = "auto",
    cuda_config: cuda_decode.DecodeConfig | None = None,
    int4_variant: tuple[int, bool] | None = None,
) -> torch.Tensor:
    """See :func:`local_engine.attention.paged_attention`.

    Extra keyword arguments (for benchmarks, tests and CUDA graphs): ``config`` overrides the
    tile choice; ``num_segments`` forces the split-K segment count (1 = no split); ``out``
    (``[num_tokens, num_heads, head_dim]``, q's dtype, contiguous last dim) receives the result;
    ``kv_cvt`` forces the quantized-value conversion (:func:`kv_cvt_of`). ``decode_kernel``:
    ``"auto"`` runs decode-shaped calls (1-byte caches, and 16-bit ones while
    ``cuda_decode.AUTO_16BIT``) on the CUDA kernel
    (:mod:`~local_engine.attention.cuda_decode`) where it supports the call and is built, and
    on the Triton kernel otherwise (or when ``config`` / ``kv_cvt`` is given); ``"triton"``
    always the Triton kernel; ``"cuda"`` the CUDA kernel or a RuntimeError saying why not.
    ``cuda_config`` overrides the CUDA kernel's launch (its ``num_segments`` too, unless
    ``num_segments`` is given). ``int4_variant`` (packed INT4 caches): ``(INT4_CVT,
    INT4_FOLD)`` of the kernel instead of :func:`int4_variant_of`'s (benchmarks, tests).

    Raises:
        ValueError: ``num_heads`` not a multiple of ``num_kv_heads``, or shapes that disagree.
        RuntimeError: CPU tensors without the Triton interpreter.
    """
    _check_runnable(q)
    if decode_kernel not in ("auto", "triton", "cuda"):
        raise ValueError(f"decode_kernel must be 'auto', 'triton' or 'cuda'; got {decode_kernel!r}")
    if q.dim() != 3:
        raise ValueError(f"q must be [num_tokens, num_heads, head_dim]; got {tuple(q.shape)}")
    num_tokens, num_heads, head_dim = q.shape
    is_int2 = int2.is_int2(k_cache, k_scale)
    # packed INT4 (uint8) stores head_dim // 2 bytes per token-head; int2's codes D/4
    stored_dim = head_dim // 2 if triton_kv_write.quant_mode(k_cache) == 3 else head_dim
    if is_int2:
        stored_dim = head_dim // 4
    v_dim = stored_dim
    if (
        k_cache.dim() != 4
        or v_cache.shape[:3] != k_cache.shape[:3]
        or k_cache.shape[3] != stored_dim
        or v_cache.shape[3] != v_dim
    ):
        raise ValueError(
            f"caches must be [num_blocks, block_size, num_kv_heads, {stored_dim}] (V: {v_dim}); "
            f"got {tuple(k_cache.shape)} and {tuple(v_cache.shape)}"
        )
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    num_seqs = seq_lens.shape[0]
    if (
        cu_seqlens_q.shape != (num_seqs + 1,)
        or block_tables.dim() != 2
        or block_tables.shape[0] != num_seqs
    ):
        raise ValueError(
            f"expected cu_seqlens_q [{num_seqs + 1}] and block_tables [{num_seqs}, max_blocks]; got "
            f"{tuple(cu_seqlens_q.shape)} and {tuple(block_tables.shape)}"
        )
    if k_cache.stride(3) != 1:
        raise ValueError("k_cache needs a contiguous last (head_dim) dimension")
    quant = 4 if is_int2 else triton_kv_write.quant_mode(k_cache)
    k_meta = k_cache
    if quant == 4:  # int2: K scales/minima by the block stride; the scale strides are V's pairs
        assert k_scale is not None and v_scale is not None
        k_meta, k_scale = k_scale, v_scale
    elif quant:
        k_scale, v_scale = triton_kv_write.check_scale_layout(k_scale, v_scale)
    else:
        k_scale = v_scale = k_cache  # unused
    if scale is None:
        scale = head_dim**-0.5
    if out is None:
        out = _alloc((num_tokens, num_heads, head_dim), q.dtype, q.device)
    elif out.shape != q.shape or out.dtype != q.dtype or out.stride(2) != 1:
        raise ValueError(f"out must be {tuple(q.shape)} {q.dtype} with a contiguous last dim")
    if num_tokens == 0 or num_seqs == 0:
        return out
    i4_cvt, i4_fold = int4_variant_of(head_dim, int4_variant) if quant == 3 else (0, False)
    if i4_cvt == 2 and not q.is_cuda:
        i4_cvt = 1  # the interpreter runs no PTX: the same operand values by 1's code
    if quant == 3:  # INT4 keys are rotated (kv_cache.quant): rotate the queries alike
        q = rotate_int4(q)
    if q.stride(2) != 1:
        q = q.contiguous()
    q_rot = q  # (unused)
    v_scale_arg = v_scale
    # int2 reads no V stride there: the pool's block count (pseudo-blocks included) bounds
    # the residual slot ids it reads (a decode graph's padding reads block 0 with ctx 1)
    stride_vd = k_cache.shape[0] if quant == 4 else v_cache.stride(3)
    if block_tables.stride(1) != 1:
        block_tables = block_tables.contiguous()

    group = num_heads // num_kv_heads
    decode = num_tokens == num_seqs
    if decode_kernel == "cuda" and not decode:
        raise ValueError(
            f"decode_kernel='cuda' runs decode-shaped calls only (num_tokens == num_seqs); got "
            f"{num_tokens} tokens in {num_seqs} sequences"
        )
    if (
        decode
        and (quant or cuda_decode.AUTO_16BIT or decode_kernel == "cuda")
        and (
            decode_kernel == "cuda"
            or (decode_kernel == "auto" and config is None and kv_cvt is None)
        )
    ):
        why = cuda_decode.unsupported_reason(q, k_cache, v_cache, k_scale, v_scale, out)
        if why is None and not cuda_decode.available(q.device):
            why = "not built (see the log)"
        if why is None:
            parts = cuda_decode.paged_decode(
                out,
                q,
                k_cache,
                v_cache,
                k_scale,
                v_scale,
                block_tables,
                cu_seqlens_q,
                seq_lens,
                float(scale) * LOG2E,
                _sm_count(q.device),
                cuda_config,
                num_segments,
            )
            if parts is not None:
                merge_segments(out, *parts)
            return out
        if decode_kernel == "cuda":
            raise RuntimeError(f"the CUDA decode kernel cannot run this call: {why}")
        _log_fallback_once(why)
    if config is None:
        if decode:
            config = decode_config(
                head_dim,
                group,
                k_cache.element_size(),
                num_seqs * num_kv_heads,
                _sm_count(q.device),
            )
            if quant == 4:
                config = dataclasses.replace(config, num_warps=INT2_DECODE_WARPS, num_stages=2)
        else:
            config = PREFILL_CONFIG.get(head_dim) or PREFILL_CONFIG[128]
    block_m = max(config.block_m, 16, triton.next_power_of_2(group))
    # decode: one program per token (the kernel's DECODE mode), else q-blocks of block_q tokens
    block_q = 1 if decode else block_m // group
    num_q_blocks = num_tokens if decode else num_tokens // block_q + num_seqs
    if num_segments is None:
        max_context = block_tables.shape[1] * block_size
        busy = num_q_blocks
        tile_bytes = split_tile_bytes(config, head_dim, k_cache.element_size(), decode)
        num_segments = choose_num_segments(
            busy * num_kv_heads, max_context, _sm_count(q.device), config.tile_n, tile_bytes
        )
    head_dim_pad = max(16, triton.next_power_of_2(head_dim))
    split = num_segments > 1
    if split:
        seg_out, seg_max, seg_sum = alloc_partials(
            num_tokens, num_heads, num_segments, head_dim_pad, q.device, alloc=_alloc
        )
    else:
        seg_out = seg_max = seg_sum = out  # unused
    dot_mode = _dot_mode(q)
    cvt = kv_cvt_of(q, quant, kv_cvt)
    v_minor = bool(quant) and token_minor_ok(v_cache, config.tile_n)
    s_minor = bool(quant) and token_minor_ok(k_scale, config.tile_n)
    paged_attention_kernel[(num_q_blocks, num_kv_heads, num_segments)](
        out,
        seg_out,
        seg_max,
        seg_sum,
        q,
        q_rot,
        k_cache,
        k_meta,
        v_cache,
        k_scale,
        v_scale_arg,
        block_tables,
        cu_seqlens_q,
        seq_lens,
        float(scale) * LOG2E,
        num_seqs,
        num_segments,
        q.stride(0),
        q.stride(1),
        out.stride(0),
        out.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        v_cache.stride(0),
        v_cache.stride(1),
        v_cache.stride(2),
        block_tables.stride(0),
        k_scale.stride(0) if quant else 0,
        k_scale.stride(1) if quant else 0,
        stride_vd,
        k_scale.stride(2) if quant else 0,
        NUM_HEADS=num_heads,
        G=group,
        HEAD_DIM=head_dim,
        HEAD_DIM_PAD=head_dim_pad,
        BLOCK_SIZE=block_size,
        BLOCK_M=block_m,
        BLOCK_Q=block_q,
        TILE_N=config.tile_n,
        SPLIT=split,
        DOT_MODE=dot_mode,
        NUM_STAGES=config.num_stages,
        QUANT=quant,
        KV_CVT=cvt,
        DECODE=decode,
        V_TOKEN_MINOR=v_minor,
        SCALE_TOKEN_MINOR=s_minor,
        INT4_CVT=i4_cvt,
        INT4_FOLD=i4_fold,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        **({"maxnreg": config.maxnreg} if config.maxnreg else {}),
    )
    if split:
        merge_segments(out, seg_out, seg_max, seg_sum)
    return out


@functools.cache
def _log_fallback_once(why: str) -> None:
    logger.info("decode on the Triton kernel: the CUDA decode kernel %s", why)


def merge_chunk(num_segments: int, head_dim_pad: int) -> int:
    """Segments :func:`_reduce_segments_kernel` merges per step: all of them (one round of
    loads) up to :data:`MERGE_CHUNK_ELEMS` partial-output values, else that many (a power
    of two, at least 2)."""
    cap = max(2, MERGE_CHUNK_ELEMS // head_dim_pad)
    return min(triton.next_power_of_2(max(num_segments, 2)), cap)


def merge_segments(
    out: torch.Tensor,
    seg_out: torch.Tensor,
    seg_max: torch.Tensor,
    seg_sum: torch.Tensor,
    seg_chunk: int | None = None,
) -> torch.Tensor:
    """Merge split-K partials into ``out`` ``[num_tokens, num_heads, head_dim]``: ``out[t, h]
    = sum_s w_s o_s / sum_s w_s`` with ``w_s = seg_sum[t, h, s] * 2**(seg_max[t, h, s] -
    max_s seg_max[t, h, s])`` (base-2 maxima, as the attention kernel writes them).

    Args:
        seg_out: float32 ``[num_tokens, num_heads, num_segments, head_dim_pad]`` normalised
            partial outputs; ``seg_max`` / ``seg_sum``: float32 ``[num_tokens, num_heads,
            num_segments]`` row maxima and sums of exponentials (0 for an empty segment).
        seg_chunk: segments per merge step (default :func:`merge_chunk`; tests force small).
    """
    num_tokens, num_heads, num_segments, head_dim_pad = seg_out.shape
    chunk = seg_chunk or merge_chunk(num_segments, head_dim_pad)
    _reduce_segments_kernel[(num_tokens, num_heads)](
        out,
        seg_out,
        seg_max,
        seg_sum,
        num_segments,
        out.stride(0),
        out.stride(1),
        NUM_HEADS=num_heads,
        HEAD_DIM=out.shape[2],
        HEAD_DIM_PAD=head_dim_pad,
        SEG_CHUNK=chunk,
        num_warps=4 if chunk * head_dim_pad <= 4096 else 8,
    )
    return out


def write_kv_cache(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> None:
    """See :func:`local_engine.attention.write_kv_cache` (Triton kernel, one launch).

    Raises:
        ValueError: shapes that disagree.
        RuntimeError: CPU tensors without the Triton interpreter.
    """
    _check_runnable(key)
    if int2.is_int2(k_cache, k_scale):
        triton_int2.write_kv_cache(key, value, k_cache, v_cache, slot_mapping, k_scale, v_scale)
        return
    triton_kv_write.write_kv_cache(
        key, value, k_cache, v_cache, slot_mapping, k_scale=k_scale, v_scale=v_scale
    )


__all__ = [
    "paged_attention",
    "write_kv_cache",
    "choose_num_segments",
    "decode_config",
    "split_tile_bytes",
    "merge_segments",
    "kv_cvt_of",
    "int4_variant_of",
    "KernelConfig",
]
