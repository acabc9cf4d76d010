"""The engine's own CPU kernels (C++, AVX-512 / AVX2), built on first use and cached.

What is here: small-M linear layers (``linear.cpp``) over weights packed in panels of 32
output columns, so that one thread streams each weight byte once, front to back. A batch-1
decode step is a GEMV per layer; oneMKL's float32 GEMV streams 11-18 GB/s on one Zen 4 core
where a plain read gets 25, and fbgemm's int8 linear has a ~15-25 us fixed cost per call
(``bench/RESULTS.md`` "## cpu"). The kernels here run at the read bandwidth for one row and
stay ahead of oneMKL's GEMM up to prefill sizes (``bench/gemv_cpu.py``).

Build: :func:`kernels` compiles ``*.cpp`` with ``torch.utils.cpp_extension.load`` (g++,
ninja) for the CPU it runs on (``-march=native``: AVX-512 with VNNI/BF16 where the CPU has them,
else AVX2+FMA, else scalar C++), into ``$PROMPTCACHE_KERNEL_CACHE_DIR`` or the user cache
directory's ``kernels`` folder (``~/.cache/promptcache/kernels``), one folder per key: the
sources' SHA-256, the torch version, the compiler's version and the CPU's ISA flags. The first
build takes ~30-60 s (logged when it starts and ends); later processes load the built library
in well under a second (torch's ``FileBaton`` lock in the folder serialises two processes that
build at once). ``PROMPTCACHE_CPU_KERNELS=0`` turns the kernels off. When they are off, the
build fails, or there is no compiler, one log line says why and the callers use their torch
path (:mod:`local_engine.models.linear`).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
from pathlib import Path

import torch

from local_engine.ops.extension_build import ENV_DIR, cache_dir, load_or_none
from local_engine.ops.extension_build import build_key as source_key

logger = logging.getLogger("local_engine")

ENV_ENABLE = "PROMPTCACHE_CPU_KERNELS"
SOURCES = ("linear.cpp", "decode.cpp", "kernels.h")
NB = 32  # output columns per panel (linear.cpp's NB)
# -ffp-contract=off: a scalar a * b + c stays two roundings (the torch path's rotary)
CFLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fopenmp", "-DNDEBUG")
_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16")


def cpu_flags() -> tuple[str, ...]:
    """The ISA flags that change what ``-march=native`` compiles (``/proc/cpuinfo``), sorted;
    empty where that file is missing."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    return tuple(sorted(f for f in _FLAGS if f in have))
    except OSError:
        pass
    return ()


def _compiler_version(cxx: str) -> str:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.splitlines()[0] if out.stdout else ""


def build_key(cxx: str) -> str:
    """Hex key of one build: sources, compiler flags, torch version, compiler version, CPU
    flags."""
    parts = (*CFLAGS, torch.__version__, _compiler_version(cxx), *cpu_flags())
    return source_key(Path(__file__).parent, SOURCES, parts)


def disabled_reason() -> str | None:
    """Why the kernels cannot be used here without trying a build (None: worth trying)."""
    if os.environ.get(ENV_ENABLE, "1").strip().lower() in ("0", "false", "no", "off"):
        return f"{ENV_ENABLE}={os.environ[ENV_ENABLE]}"
    if not torch.backends.cpu.get_cpu_capability().startswith(("AVX2", "AVX512")):
        return f"CPU capability {torch.backends.cpu.get_cpu_capability()} (needs AVX2 or AVX-512)"
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        return f"no C++ compiler ({cxx!r} not on PATH)"
    if shutil.which("ninja") is None:
        try:
            import ninja  # type: ignore[import-not-found]  # noqa: F401  (pip's ninja ships the binary)
        except ImportError:
            return "ninja is not installed (pip install ninja)"
    return None


@functools.cache
def kernels():
    """The built extension module (``isa()``, ``linear_f32``, ``linear_bf16``, ``linear_int8``;
    see ``linear.cpp``), or None when the kernels are off or cannot be built (logged once)."""
    reason = disabled_reason()
    if reason is not None:
        logger.info("CPU kernels: off (%s); using the torch path", reason)
        return None
    from torch.utils import cpp_extension

    cxx = os.environ.get("CXX", "c++")
    try:
        key = build_key(cxx)
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("CPU kernels: cannot run %s (%s); using the torch path", cxx, exc)
        return None
    folder = cache_dir() / key
    here = Path(__file__).parent
    return load_or_none(
        "CPU kernels",
        folder,
        lambda: cpp_extension.load(
            name=f"promptcache_cpu_{key}",
            sources=[str(here / s) for s in SOURCES if s.endswith(".cpp")],
            extra_cflags=list(CFLAGS),
            extra_ldflags=["-fopenmp"],
            build_directory=str(folder),
            verbose=False,
        ),
        lambda mod: mod.isa(),
        "first use, ~30-60 s",
        "using the torch path",
    )


def isa() -> str | None:
    """The built kernels' instruction set (``"avx512+bf16+vnni"``, ``"avx2"``...), None when
    off."""
    mod = kernels()
    return None if mod is None else mod.isa()


def has(kind: str) -> bool:
    """Whether a fast kernel for ``kind`` (``"float32"``, ``"bfloat16"``, ``"int8"``) is built:
    float32 needs AVX2+FMA or AVX-512, bfloat16 AVX512-BF16, int8 AVX512-VNNI."""
    name = isa()
    if name is None:
        return False
    if kind == "float32":
        return name.startswith(("avx512", "avx2"))
    if kind == "bfloat16":
        return name.startswith("avx512") and "+bf16" in name
    if kind == "int8":
        return name.startswith("avx512") and "+vnni" in name
    raise ValueError(f"unknown kernel kind {kind!r}")


def _panels(n: int) -> int:
    return (n + NB - 1) // NB


def pack_f32(w: torch.Tensor) -> torch.Tensor:
    """``w`` ``[N, K]`` (float) -> float32 panels ``[ceil(N/32), K, 32]`` (zero-padded columns):
    ``packed[p, k, j] = w[32 p + j, k]``."""
    n, k = w.shape
    p = _panels(n)
    wp = torch.zeros(p * NB, k, dtype=torch.float32)
    wp[:n] = w
    return wp.view(p, NB, k).transpose(1, 2).contiguous()


def unpack_f32(packed: torch.Tensor, n: int) -> torch.Tensor:
    """Inverse of :func:`pack_f32`: float32 ``[N, K]``."""
    p, k, _ = packed.shape
    return packed.transpose(1, 2).reshape(p * NB, k)[:n].contiguous()


def pack_bf16(w: torch.Tensor) -> torch.Tensor:
    """``w`` ``[N, K]`` -> bfloat16 panels ``[ceil(N/32), ceil(K/2), 32, 2]`` (zero-padded):
    ``packed[p, k, j, r] = w[32 p + j, 2 k + r]``, the pair layout of ``vdpbf16ps``."""
    n, k = w.shape
    p, k2 = _panels(n), (k + 1) // 2
    wp = torch.zeros(p * NB, 2 * k2, dtype=torch.bfloat16)
    wp[:n, :k] = w
    return wp.view(p, NB, k2, 2).transpose(1, 2).contiguous()


def unpack_bf16(packed: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """Inverse of :func:`pack_bf16`: bfloat16 ``[N, K]``."""
    p, k2 = packed.shape[0], packed.shape[1]
    return packed.transpose(1, 2).reshape(p * NB, 2 * k2)[:n, :k].contiguous()


def pack_int8(q: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """int8 ``q`` ``[N, K]`` and float32 ``scale`` ``[N]`` (from
    :func:`local_engine.models.linear.quantize_int8`) -> ``(packed, wsum, scale)``: int8
    panels ``[ceil(N/32), ceil(K/4), 32, 4]`` (``packed[p, k, j, r] = q[32 p + j, 4 k + r]``,
    the quad layout of ``vpdpbusd``), int32 column sums ``[32 ceil(N/32)]`` (for the
    activations' zero point) and the scale padded to the same length."""
    n, k = q.shape
    p, k4 = _panels(n), (k + 3) // 4
    qp = torch.zeros(p * NB, 4 * k4, dtype=torch.int8)
    qp[:n, :k] = q
    packed = qp.view(p, NB, k4, 4).transpose(1, 2).contiguous()
    wsum = qp.sum(dim=1, dtype=torch.int32)
    sp = torch.ones(p * NB, dtype=torch.float32)
    sp[:n] = scale
    return packed, wsum, sp


__all__ = [
    "ENV_DIR",
    "ENV_ENABLE",
    "cache_dir",
    "has",
    "isa",
    "kernels",
    "pack_bf16",
    "pack_f32",
    "pack_int8",
    "unpack_bf16",
    "unpack_f32",
]
