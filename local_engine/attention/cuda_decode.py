"""The CUDA decode kernel for INT8 / FP8 E4M3 / 16-bit KV caches: build, support check, launch.

The kernel (``csrc/decode_1b.cuh``, its header says how it is laid out and why) runs decode-shaped
calls of :func:`local_engine.attention.triton_backend.paged_attention` over a quantized cache
when :func:`unsupported_reason` finds nothing against it; every other call, and every call
where it is off or cannot be built, runs the Triton kernel (one log line says why, once).

Build: ``torch.utils.cpp_extension.load`` with nvcc (``CUDA_HOME``) for the device's compute
capability (``-gencode=arch=compute_XY,code=sm_XY``), on first use, into the kernel cache that
the CPU kernels use (:func:`local_engine.ops.extension_build.cache_dir`,
``~/.cache/promptcache/kernels``;
``$PROMPTCACHE_KERNEL_CACHE_DIR``), one folder per key (the sources' SHA-256, the compiled
configurations, torch's and nvcc's versions, the capability). ``PROMPTCACHE_CUDA_DECODE=0``
turns it off. ``PROMPTCACHE_DECODE_VARIANTS`` (``"2,4,3;4,4,2"``: steps, warps, stages)
compiles other configurations in (the benchmark's grid).

Launch rule (:func:`decode_config`): a pure function of shapes, so a call can be captured in a
CUDA graph. Measured on H200s, bench/RESULTS.md "## kvquant", sessions 4-6.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from local_engine.attention.split_k import alloc_partials
from local_engine.kv_cache.quant import FP8_MIN_CAPABILITY, is_quantized
from local_engine.ops.extension_build import build_key as source_key
from local_engine.ops.extension_build import cache_dir, load_or_none

logger = logging.getLogger("local_engine")

ENV_ENABLE = "PROMPTCACHE_CUDA_DECODE"
ENV_VARIANTS = "PROMPTCACHE_DECODE_VARIANTS"
HERE = Path(__file__).parent / "csrc"
SOURCES = ("decode_1b.cu", "decode_1b.cuh")
#: (steps, warps, stages) compiled by default (every configuration the rule picks, 1-byte and
#: 16-bit); steps = KV blocks of 16 tokens per warp tile.
DEFAULT_VARIANTS = ((2, 4, 3), (2, 4, 2), (2, 8, 2), (2, 2, 2), (1, 4, 3))
BLOCK_SIZE = 16
#: Shared memory one CTA may take on sm_90 (227 KiB; the H100/H200 SM has 228).
MAX_SMEM = 227 * 1024
#: Whether ``decode_kernel="auto"`` sends decode over 16-bit caches here too: the layout sweep
#: (bench/RESULTS.md "## kvquant", session 4) has this kernel at 0.93-1.22 of SDPA on every
#: row where the Triton kernel is at 0.87-1.00.
AUTO_16BIT = True
HEAD_DIMS = (64, 128)
MAX_GROUP = 8  # query heads per KV head the kernel holds (the MMA's n8 side; the kernel's GP)


@dataclass(frozen=True)
class DecodeConfig:
    """One launch of the kernel: ``steps`` KV blocks (16 tokens each) per warp tile, ``warps``
    per CTA, ``stages`` of the per-warp copy pipeline, ``num_segments`` key-range segments
    (split-K, 1 = none), and at most ``ctas_per_sm`` CTAs on one SM (0: as many as fit; else
    the launch asks for enough shared memory that one more does not fit, which bounds the
    bytes in flight per SM: :meth:`launch_smem_bytes`)."""

    steps: int
    warps: int
    stages: int
    num_segments: int = 1
    ctas_per_sm: int = 0

    def smem_bytes(self, head_dim: int, elem_bytes: int = 1) -> int:
        """Dynamic shared memory of one CTA (bytes): the pipelines (K and V tiles of
        ``elem_bytes`` values, plus float32 scales for 1-byte caches), or the final merge if
        larger."""
        tile = 16 * self.steps
        stage = 2 * tile * head_dim * elem_bytes + (2 * tile * 4 if elem_bytes == 1 else 0)
        return max(self.warps * self.stages * stage, self.warps * MAX_GROUP * (head_dim + 2) * 4)

    def launch_smem_bytes(
        self, head_dim: int, elem_bytes: int, smem_per_sm: int, reserved_per_cta: int
    ) -> int:
        """Dynamic shared memory (bytes) the launch asks for on an SM of ``smem_per_sm`` bytes
        whose driver reserves ``reserved_per_cta`` for each CTA (the device's attributes, e.g.
        233,472 and 1,024 on sm_90): :meth:`smem_bytes`, raised with ``ctas_per_sm`` = c > 0 to
        the least amount at which c + 1 CTAs exceed the SM.

        Raises:
            ValueError: c CTAs of the kernel's own need do not fit on the SM."""
        need = self.smem_bytes(head_dim, elem_bytes)
        c = self.ctas_per_sm
        if c <= 0:
            return need
        if c * (need + reserved_per_cta) > smem_per_sm:
            raise ValueError(
                f"ctas_per_sm={c}: {c} CTAs of {need} bytes of shared memory (+{reserved_per_cta} "
                f"reserved each) do not fit on an SM of {smem_per_sm}"
            )
        return max(need, smem_per_sm // (c + 1) - reserved_per_cta + 1)


def _env_off() -> str | None:
    v = os.environ.get(ENV_ENABLE, "1").strip().lower()
    return f"{ENV_ENABLE}={os.environ[ENV_ENABLE]}" if v in ("0", "false", "no", "off") else None


def variants() -> tuple[tuple[int, int, int], ...]:
    """The (steps, warps, stages) configurations to compile: ``$PROMPTCACHE_DECODE_VARIANTS``
    (``"2,4,3;4,4,2"``), else :data:`DEFAULT_VARIANTS`.

    The list adds to the defaults: the launch rule's configurations stay compiled in, so
    ``decode_kernel="auto"`` never picks one that is not.

    Raises:
        ValueError: a malformed variant list (steps 1, 2 or 4 (1: 16-bit caches only), warps 1-16, stages 2-6)."""
    raw = os.environ.get(ENV_VARIANTS, "").strip()
    if not raw:
        return DEFAULT_VARIANTS
    out = list(DEFAULT_VARIANTS)
    for part in filter(None, (p.strip() for p in raw.split(";"))):
        try:
            s, w, st = (int(x) for x in part.split(","))
        except ValueError:
            raise ValueError(
                f"{ENV_VARIANTS}: {part!r} is not 'steps,warps,stages' (e.g. '2,4,3;4,4,2')"
            ) from None
        if s not in (1, 2, 4) or not 1 <= w <= 16 or not 2 <= st <= 6:
            raise ValueError(
                f"{ENV_VARIANTS}: {part!r} out of range (steps 1|2|4, warps 1-16, stages 2-6)"
            )
        out.append((s, w, st))
    return tuple(dict.fromkeys(out))


def _nvcc() -> str | None:
    from torch.utils import cpp_extension

    home = cpp_extension.CUDA_HOME
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def build_key(arch: str, nvcc: str, configs) -> str:
    """Hex key of one build: sources, configurations, torch, nvcc, compute capability."""
    ver = subprocess.run(
        [nvcc, "--version"], capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    parts = (repr(configs), torch.__version__, ver.splitlines()[-1] if ver else "", arch)
    return source_key(HERE, SOURCES, parts)


@functools.cache
def _module(device_index: int):
    """The built extension for CUDA device ``device_index`` (``decode_1b``, ``occupancy``,
    ``smem_limits``, ``variants``), or None (logged once with the reason)."""
    reason = _env_off()
    if reason is None and not torch.version.cuda:
        reason = "this torch has no CUDA"
    nvcc = _nvcc()
    if reason is None and nvcc is None:
        reason = "no nvcc (set CUDA_HOME)"
    if reason is not None or nvcc is None:
        logger.info("CUDA decode kernel: off (%s); decode uses the Triton kernel", reason)
        return None
    from torch.utils import cpp_extension

    try:
        major, minor = torch.cuda.get_device_capability(device_index)
        arch = f"{major}{minor}"
        configs = variants()
        key = build_key(arch, nvcc, configs)
    except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as exc:
        logger.warning("CUDA decode kernel: off (%s); decode uses the Triton kernel", exc)
        return None
    folder = cache_dir() / f"cuda-{key}"

    def load():
        folder.mkdir(parents=True, exist_ok=True)
        wrapper = folder / "decode_1b_build.cu"
        defs = " ".join(f"X({s}, {w}, {st})" for s, w, st in configs)
        text = f'#define DECODE_VARIANTS {defs}\n#include "{HERE / "decode_1b.cu"}"\n'
        if not wrapper.exists() or wrapper.read_text() != text:
            wrapper.write_text(text)
        return cpp_extension.load(
            name=f"promptcache_decode1b_{key}",
            sources=[str(wrapper)],
            extra_cuda_cflags=[
                "-O3",
                "-std=c++17",
                f"-gencode=arch=compute_{arch},code=sm_{arch}",
                f"-I{HERE}",
            ],
            extra_cflags=["-O3"],
            build_directory=str(folder),
            verbose=False,
        )

    return load_or_none(
        "CUDA decode kernel",
        folder,
        load,
        lambda mod: f"sm_{arch}",
        "first use, ~1-2 min",
        "decode uses the Triton kernel",
    )


def _device_index(device: torch.device) -> int:
    """The CUDA ordinal of ``device`` (the current device for a bare ``"cuda"``)."""
    return device.index if device.index is not None else torch.cuda.current_device()


@functools.cache
def _device_limits(device_index: int) -> tuple[tuple[int, int], int]:
    """``(compute capability, opt-in shared memory per CTA in bytes)`` of the device, read once
    (99 KiB on sm_86 / sm_89 / sm_120, 163 KiB on sm_80, 227 KiB on sm_90)."""
    props = torch.cuda.get_device_properties(device_index)
    return (props.major, props.minor), int(
        getattr(props, "shared_memory_per_block_optin", MAX_SMEM)
    )


@functools.cache
def _smem_limits(device_index: int) -> tuple[int, int]:
    """``(shared memory per SM, shared memory reserved per CTA)`` in bytes (the device
    attributes, read by the built extension)."""
    per_sm, reserved = _built(device_index).smem_limits(device_index)
    return int(per_sm), int(reserved)


def _built(device_index: int):
    """The built extension for the device.

    Raises:
        RuntimeError: it is not built (off, no nvcc, or a failed build: the log says which)."""
    mod = _module(device_index)
    if mod is None:
        raise RuntimeError("the CUDA decode kernel is not available (see the log)")
    return mod


def _launch_smem(cfg: DecodeConfig, device_index: int, head_dim: int, elem_bytes: int) -> int:
    """The dynamic shared memory to launch ``cfg`` with: 0 (the kernel's own need) unless
    ``cfg.ctas_per_sm`` asks for more (:meth:`DecodeConfig.launch_smem_bytes`).

    Raises:
        ValueError: the padded amount is past the device's per-CTA opt-in limit."""
    if cfg.ctas_per_sm <= 0:
        return 0
    per_sm, reserved = _smem_limits(device_index)
    smem = cfg.launch_smem_bytes(head_dim, elem_bytes, per_sm, reserved)
    optin = _device_limits(device_index)[1]
    if smem > optin:
        raise ValueError(
            f"ctas_per_sm={cfg.ctas_per_sm} needs {smem} bytes; the device allows {optin}"
        )
    return smem


def _cache_args(q, k_cache, v_cache, k_scale, v_scale, block_tables, cu_seqlens_q, seq_lens):
    """The extension's tensor arguments from ``q`` on (16-bit caches: ``k_cache`` stands in for
    the scales, which the kernel does not read)."""
    ks = k_scale if k_scale is not None else k_cache
    vs = v_scale if v_scale is not None else k_cache
    return (q, k_cache, v_cache, ks, vs, block_tables, cu_seqlens_q, seq_lens)


def _launch_args(cfg: DecodeConfig, q: torch.Tensor, k_cache: torch.Tensor) -> tuple[int, ...]:
    """The extension's ``(steps, warps, stages, min_smem)`` for ``cfg`` on ``q``'s device."""
    smem = _launch_smem(cfg, _device_index(q.device), q.shape[2], k_cache.element_size())
    return (int(cfg.steps), int(cfg.warps), int(cfg.stages), smem)


def launch_occupancy(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
    block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    cfg: DecodeConfig,
) -> int:
    """How many CTAs of ``cfg``'s launch on this decode call fit on one SM
    (``cudaOccupancyMaxActiveBlocksPerMultiprocessor`` for the instantiation the call's dtypes
    and head_dim select, with the launch's shared memory; nothing is launched). The tensors are
    :func:`paged_decode`'s.

    Raises:
        RuntimeError: the kernel is not built, or ``cfg`` is not compiled in.
        ValueError: ``cfg.ctas_per_sm`` needs more shared memory than the device allows."""
    mod = _built(_device_index(q.device))
    args = _cache_args(q, k_cache, v_cache, k_scale, v_scale, block_tables, cu_seqlens_q, seq_lens)
    # the output argument: only its dtype is read, q's
    return int(mod.occupancy(q, *args, *_launch_args(cfg, q, k_cache)))


def _aligned(t: torch.Tensor, nbytes: int = 16) -> bool:
    return t.data_ptr() % nbytes == 0


def unsupported_reason(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
    out: torch.Tensor,
) -> str | None:
    """Why the kernel cannot run this decode call (None: it can), without building it.

    Needs: CUDA tensors; bf16/fp16 queries and output with unit last stride and 16-byte rows;
    an INT8 cache (compute capability >= 8.0), FP8 E4M3 (>= 8.9) or a cache of the queries'
    dtype (>= 8.0); head_dim 64 or 128; block size 16; at most 8 query heads per KV head.
    1-byte caches in the ``v_token_minor`` layout of :mod:`local_engine.kv_cache.quant` (V
    ``[kv_heads, head_dim, 16]`` and the float32 scales ``[kv_heads, 16]`` per block), 16-bit
    caches token-major; rows 16-byte aligned."""
    off = _env_off()
    if off:
        return off
    if not q.is_cuda:
        return "not a CUDA tensor"
    if q.dtype not in (torch.bfloat16, torch.float16) or out.dtype != q.dtype:
        return f"queries of {q.dtype} (needs bfloat16 or float16)"
    if k_cache.dtype == torch.uint8:
        return "a packed INT4 / int2 cache (the Triton kernel reads it)"
    one_byte = is_quantized(k_cache)
    if not one_byte and k_cache.dtype != q.dtype:
        return f"cache of {k_cache.dtype} with {q.dtype} queries"
    cap, smem_optin = _device_limits(_device_index(q.device))
    if cap < (FP8_MIN_CAPABILITY if one_byte and k_cache.dtype != torch.int8 else (8, 0)):
        return f"compute capability {cap[0]}.{cap[1]}"
    _, bs, hkv, d = k_cache.shape
    if d not in HEAD_DIMS or bs != BLOCK_SIZE:
        return f"head_dim {d} / block_size {bs} (needs 64 or 128 / 16)"
    need = rule_smem_bytes(d, k_cache.element_size())
    if need > smem_optin:
        return f"{smem_optin} bytes of shared memory per block (the launch rule takes up to {need})"
    if q.shape[1] // hkv > MAX_GROUP:
        return f"group of {q.shape[1] // hkv} query heads per KV head (at most {MAX_GROUP})"
    if (
        q.stride(2) != 1
        or out.stride(2) != 1
        or any(s % 8 for s in (q.stride(0), q.stride(1), out.stride(0), out.stride(1)))
        or not (_aligned(q) and _aligned(out))
    ):
        return "queries/output not in 16-byte rows"
    per16 = 16 // k_cache.element_size()  # elements in 16 bytes
    if k_cache.stride(3) != 1 or any(k_cache.stride(i) % per16 for i in range(3)):
        return "K rows not 16-byte aligned"
    if not one_byte:
        if v_cache.stride(3) != 1 or any(v_cache.stride(i) % per16 for i in range(3)):
            return "V rows not 16-byte aligned"
        return None if _aligned(k_cache) and _aligned(v_cache) else "caches not 16-byte aligned"
    assert k_scale is not None and v_scale is not None
    if (
        v_cache.stride(1) != 1
        or v_cache.stride(3) != BLOCK_SIZE
        or v_cache.stride(0) % 16
        or v_cache.stride(2) % 16
    ):
        return "V not token-minor ([kv_heads, head_dim, 16] per block)"
    if (
        k_scale.stride() != v_scale.stride()
        or k_scale.stride(1) != 1
        or k_scale.stride(2) != BLOCK_SIZE
        or k_scale.stride(0) % 4
    ):
        return "scales not token-minor ([kv_heads, 16] per block)"
    if not all(_aligned(t) for t in (k_cache, v_cache, k_scale, v_scale)):
        return "cache views not 16-byte aligned"
    return None


#: Launch rule for 1-byte caches (H200; session 4 runs 1-2 and session 6 runs 1-2,
#: bench/RESULTS.md "## kvquant"): tiles of 2 blocks (32 keys) and, by the CTAs per SM the grid
#: needs (k = ceil(CTAs / SMs)), a configuration that holds the whole grid in one wave (up to
#: k = 4) with at least 4 warps per SM: a partial last wave costs more than any tile choice gains (64 x 4k,
#: 512 CTAs, session 6 run 2: 0.134 ms in one wave of up to 6 two-warp CTAs per SM against
#: 0.160-0.186 for 1.3 waves of 2-warp CTAs, 0.151 for 1.3 waves of 4-warp ones, 0.137 for two
#: waves of 4-warp CTAs two per SM);
#: - k <= 1: 8 warps, 2 stages (132 KiB at d128: one CTA per SM whatever the block scheduler
#:   does; with 4-warp CTAs two could share an SM and leave another idle: FP8 16 x 32k, 128
#:   CTAs, 0.264 and 0.290 ms in two runs against 0.266 at 8 warps; d64 16 x 32k 0.155 vs 0.184);
#: - k = 2: 4 warps, 3 stages (99 KiB, two per SM). 2 warps x 3 stages was faster at 264 CTAs
#:   (33 x 8k: 0.134 against 0.141 ms) but at 133 CTAs would leave 2 warps on most SMs (16 x
#:   32k, 128 CTAs of 2 warps: 0.476 ms against 0.253 for 4 warps);
#: - k = 3, 4: 2 warps, 2 stages (33 KiB, up to six per SM; 64 x 4k 0.134 ms against 0.136 at
#:   3 stages and 0.137 for 4 warps x 3 stages; d64 0.079 against 0.085 / 0.087; just below
#:   the tier, 264 CTAs of 33 x 8k, 0.142 against 0.141 for 4 x 3).
#:   Ragged contexts are slower so (64 x ~4k, contexts in [1k, 7k]: 0.175 against 0.164 for 4
#:   warps x 3 stages in two waves and 0.153 for 8 warps in four): the longest items run last,
#:   on two warps each, where more waves let the block scheduler balance; the rule sees shapes
#:   only (a CUDA graph fixes the launch), so it takes the uniform batch's best;
#: - more: 4 warps, 2 stages (66 KiB, three per SM, many waves: 256 x 1k 0.142 ms, within 1%
#:   of the best, 2 warps x 3 stages at 0.141; ragged 256 x ~1k: the best).
#: Split-K only until the grid has one CTA per SM: four warps streaming their own pipelines
#: reach the SM's share of the bandwidth, and a split costs CTA starts and the merge (16 x 32k
#: INT8 unsplit 0.261 ms, 2 segments 0.268, 4 segments 0.280), with at least
#: MIN_TILES_PER_WARP tiles for each warp of a segment.
ONE_PER_SM = DecodeConfig(2, 8, 2)
TWO_PER_SM = DecodeConfig(2, 4, 3)
FOUR_PER_SM = DecodeConfig(2, 2, 2)
MANY_WAVES = DecodeConfig(2, 4, 2)
#: 16-bit caches (twice the bytes per tile; session 4 runs 3-5, the 40-row layout sweep): at most
#: one CTA per SM, 32-key tiles in 128 KiB (d128: 4 warps x 2 stages; d64: 8 x 2), e.g. 32/4
#: d128 1 x 32k 1.00-1.01 of SDPA against 0.98 for 16-key tiles at 8 warps, 28/4 d64 1 x 32k
#: 1.20-1.22 vs 1.06; more CTAs: 16-key tiles, 4 warps x 3 stages (d128 96 KiB, two per SM;
#: d64 48 KiB, four), within 0-4% of each row's best in every run (0.92-0.99 of SDPA). Three
#: per SM (16-key tiles x 2 stages at d128; 32-key x 2 at d64) was as fast in one run and 0.89-0.90
#: in another (32/16 d64 32 x 8k; 32/32 d128 32 x 8k; 28/4, 32/4 d128 256 x 1k).
ONE_PER_SM_16 = {128: DecodeConfig(2, 4, 2), 64: DecodeConfig(2, 8, 2)}
MORE_PER_SM_16 = {128: DecodeConfig(1, 4, 3), 64: DecodeConfig(1, 4, 3)}
RULE = DecodeConfig(2, 4, 3)  # the split-K sizing's base: segments of 4 warps' tiles
MIN_TILES_PER_WARP = 4
MAX_SEGMENTS = 128


def decode_config(
    num_tokens: int,
    num_kv_heads: int,
    head_dim: int,
    max_context: int,
    sm_count: int,
    base: DecodeConfig | None = None,
    elem_bytes: int = 1,
) -> DecodeConfig:
    """The launch for a decode call of ``num_tokens`` tokens (a pure function of shapes).

    ``num_segments = prev_pow2(sm_count / (num_tokens * num_kv_heads))``, capped by
    :data:`MAX_SEGMENTS` and so that a segment of the longest context (``max_context``, the
    block table's capacity) gives each of 4 warps :data:`MIN_TILES_PER_WARP` tiles; then the
    tiles / warps / stages by the CTA count (see :data:`ONE_PER_SM`), unless ``base`` fixes them
    (benchmarks); ``elem_bytes`` 2 (a 16-bit cache) takes :data:`ONE_PER_SM_16` /
    :data:`MORE_PER_SM_16`."""
    ctas = max(1, num_tokens * num_kv_heads)
    want = sm_count // ctas
    by_len = max_context // (16 * RULE.steps * RULE.warps * MIN_TILES_PER_WARP)
    n = min(want, by_len, MAX_SEGMENTS)
    segs = 1 << (n.bit_length() - 1) if n >= 2 else 1
    if base is None:
        ctas *= segs
        if elem_bytes != 1:
            base = (ONE_PER_SM_16 if ctas <= sm_count else MORE_PER_SM_16)[head_dim]
        elif ctas <= sm_count:
            base = ONE_PER_SM
        elif ctas <= 2 * sm_count:
            base = TWO_PER_SM
        elif ctas <= 4 * sm_count:
            base = FOUR_PER_SM
        else:
            base = MANY_WAVES
    return replace(base, num_segments=segs)


@functools.cache
def rule_smem_bytes(head_dim: int, elem_bytes: int = 1) -> int:
    """The most dynamic shared memory (bytes) a launch of :func:`decode_config` takes (no
    ``base``) for ``head_dim`` and values of ``elem_bytes`` bytes."""
    rule: tuple[DecodeConfig, ...]
    if elem_bytes == 2:
        rule = (ONE_PER_SM_16[head_dim], MORE_PER_SM_16[head_dim])
    else:
        rule = (ONE_PER_SM, TWO_PER_SM, FOUR_PER_SM, MANY_WAVES)
    return max(c.smem_bytes(head_dim, elem_bytes) for c in rule)


def available(device: torch.device) -> bool:
    """Whether the kernel is built (building it now if needed) for ``device``."""
    return _module(_device_index(device)) is not None


def paged_decode(
    out: torch.Tensor,
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
    block_tables: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seq_lens: torch.Tensor,
    qk_scale: float,
    sm_count: int,
    cfg: DecodeConfig | None = None,
    num_segments: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """Launch the kernel on a decode-shaped call (the caller checked :func:`unsupported_reason`
    and :func:`available`). ``qk_scale`` is the softmax scale times log2(e); the launch is
    ``cfg`` or :func:`decode_config` for these shapes on ``sm_count`` SMs, with
    ``num_segments`` if given.

    Returns:
        None when ``out`` (``[num_tokens, num_heads, head_dim]``, q's dtype) holds the
        attention; with split-K, the float32 partials ``(seg_out [num_tokens, num_heads,
        num_segments, head_dim], seg_max, seg_sum [num_tokens, num_heads, num_segments])``
        (base-2 maxima) for :func:`local_engine.attention.triton_backend.merge_segments`.

    Raises:
        ValueError: ``num_tokens != num_seqs`` (the kernel reads ``cu_seqlens_q[token]``).
        RuntimeError: the kernel is not built, or a configuration that is not compiled in
            (``variants()``)."""
    num_tokens, num_heads, head_dim = q.shape
    if num_tokens != seq_lens.shape[0] or cu_seqlens_q.shape[0] != seq_lens.shape[0] + 1:
        raise ValueError(
            f"paged_decode needs a decode-shaped call (num_tokens == num_seqs); got q "
            f"{tuple(q.shape)}, seq_lens {tuple(seq_lens.shape)}, cu_seqlens_q "
            f"{tuple(cu_seqlens_q.shape)}"
        )
    mod = _built(_device_index(q.device))
    if cfg is None:
        cfg = decode_config(
            num_tokens,
            k_cache.shape[2],
            head_dim,
            block_tables.shape[1] * k_cache.shape[1],
            sm_count,
            elem_bytes=k_cache.element_size(),
        )
    if num_segments is not None:
        cfg = replace(cfg, num_segments=num_segments)
    parts: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    if cfg.num_segments > 1:
        parts = alloc_partials(num_tokens, num_heads, cfg.num_segments, head_dim, q.device)
    seg_out, seg_max, seg_sum = parts or (out, out, out)  # unused placeholders when not split
    args = _cache_args(q, k_cache, v_cache, k_scale, v_scale, block_tables, cu_seqlens_q, seq_lens)
    mod.decode_1b(
        out,
        seg_out,
        seg_max,
        seg_sum,
        *args,
        float(qk_scale),
        int(cfg.num_segments),
        *_launch_args(cfg, q, k_cache),
    )
    return parts


__all__ = [
    "DecodeConfig",
    "RULE",
    "available",
    "decode_config",
    "launch_occupancy",
    "paged_decode",
    "unsupported_reason",
    "variants",
]
