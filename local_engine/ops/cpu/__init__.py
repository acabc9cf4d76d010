"""The engine's own CPU kernels (C++, AVX-512 / AVX2), built on first use and cached.

What is here: small-M linear layers (``linear_*.cpp``) over weights packed in panels of 32
output columns, so that one thread streams each weight byte once, front to back, and a
one-call decoder layer (``decode.cpp``, :mod:`.layer`). A batch-1 decode step is a GEMV per
layer; oneMKL's float32 GEMV streams 11-18 GB/s on one Zen 4 core where a plain read gets 25,
and fbgemm's int8 linear has a ~15-25 us fixed cost per call (``bench/RESULTS.md`` "## cpu").
The kernels here run at the read bandwidth for one row and stay ahead of oneMKL's GEMM up to
prefill sizes (``bench/gemv_cpu.py``).

**Instruction set.** One build per machine, for the instruction set its CPU runs (read from
``/proc/cpuinfo``): ``"avx512"`` (AVX-512F/BW/VL, with AVX512-VNNI and AVX512-BF16 where the
CPU has them) or ``"avx2"`` (AVX2 + FMA, with AVX-VNNI where present); only that one is
compiled. ``PROMPTCACHE_CPU_ISA=avx2`` forces the AVX2 build on an AVX-512 CPU (to measure
or test what AVX2-only machines run; ``=avx512`` or ``=native`` pick the default); a value the
CPU cannot run, or an unknown one, turns the kernels off with one log line. Every build has the
float32, bfloat16 and int8 linears and the decoder layer (:func:`has`).

**Build**: :func:`kernels` compiles the ``*.cpp`` files with ``torch.utils.cpp_extension.load``
(g++, ninja, ``MAX_JOBS`` = the cores this process may use unless set), into
``$PROMPTCACHE_KERNEL_CACHE_DIR`` or the user cache directory's ``kernels`` folder
(``~/.cache/promptcache/kernels``), one folder per key: the sources' SHA-256, the flags (the
instruction set's), the torch version, the compiler's version and the CPU's ISA flags. The
kernel files include no torch header and compile in a few seconds each, in parallel; only
``bindings.cpp`` includes torch's (pybind11 casters and ``ATen/core/Tensor.h``). The first
build takes 16-24 s on 2 cores at low load (bench/RESULTS.md "## cpu-avx2"; logged when it starts and ends); later processes load the
built library in well under a second (torch's ``FileBaton`` lock in the folder serialises
two processes that build at once). ``PROMPTCACHE_CPU_KERNELS=0`` turns the kernels off. When
they are off, the build fails, or there is no compiler, one log line says why and the callers
use their torch path (:mod:`local_engine.models.linear`).
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
ENV_ISA = "PROMPTCACHE_CPU_ISA"
SOURCES = (
    "kernels.h",
    "bindings.cpp",
    "threads.cpp",
    "run_linear.cpp",
    "linear_f32.cpp",
    "linear_bf16.cpp",
    "linear_int8.cpp",
    "attention.cpp",
    "decode.cpp",
)
NB = 32  # output columns per panel (kernels.h's NB)
# -ffp-contract=off: a scalar a * b + c stays two roundings (the torch path's rotary)
CFLAGS = ("-O3", "-ffp-contract=off", "-fopenmp", "-DNDEBUG")
# the compiler's target per instruction set: the CPU's own (-march=native) when it is the
# native choice; a forced AVX2 build on an AVX-512 CPU gets x86-64-v3 (AVX2, FMA, BMI2, F16C:
# what AVX2 CPUs since Haswell / Zen 1 have), tuned for this CPU
_ISA_FLAGS = {"native": ("-march=native",), "avx2": ("-march=x86-64-v3", "-mtune=native")}
_NEEDS = {
    "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2", "fma"),
    "avx2": ("avx2", "fma"),
}
_FLAGS = (
    "avx2",
    "fma",
    "avx_vnni",
    "avx512f",
    "avx512bw",
    "avx512dq",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
)


@functools.cache
def cpu_flags() -> tuple[str, ...]:
    """The ISA flags that change what the kernels compile to (``/proc/cpuinfo``), sorted;
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


def native_isa() -> str | None:
    """``"avx512"`` or ``"avx2"``: the best instruction set of this CPU the kernels have a
    build for; None for neither."""
    have = set(cpu_flags())
    return next((isa for isa, need in _NEEDS.items() if have.issuperset(need)), None)


def selected_isa() -> tuple[str | None, str | None]:
    """``(isa, None)``: the build this process uses (``$PROMPTCACHE_CPU_ISA``, else the CPU's
    own); ``(None, reason)`` when none can run here."""
    want = os.environ.get(ENV_ISA, "").strip().lower()
    native = native_isa()
    if want in ("", "native", "auto"):
        return (native, None) if native else (None, "the CPU has neither AVX2+FMA nor AVX-512")
    if want not in _NEEDS:
        return None, f"{ENV_ISA}={want!r} is not one of avx512, avx2, native"
    missing = [f for f in _NEEDS[want] if f not in cpu_flags()]
    if missing:
        return None, f"{ENV_ISA}={want} but the CPU lacks {', '.join(missing)}"
    return want, None


def isa_flags(isa: str) -> tuple[str, ...]:
    """The compiler flags of the ``isa`` build on this CPU (``-march=...``)."""
    return _ISA_FLAGS["native"] if isa == native_isa() else _ISA_FLAGS[isa]


def _compiler_version(cxx: str) -> str:
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.splitlines()[0] if out.stdout else ""


def build_key(cxx: str, isa: str) -> str:
    """Hex key of one build: sources, compiler flags, torch version, compiler version, CPU
    flags."""
    parts = (*CFLAGS, *isa_flags(isa), torch.__version__, _compiler_version(cxx), *cpu_flags())
    return source_key(Path(__file__).parent, SOURCES, parts)


def disabled_reason() -> str | None:
    """Why the kernels cannot be used here without trying a build (None: worth trying)."""
    if os.environ.get(ENV_ENABLE, "1").strip().lower() in ("0", "false", "no", "off"):
        return f"{ENV_ENABLE}={os.environ[ENV_ENABLE]}"
    isa, reason = selected_isa()
    if isa is None:
        return reason
    return _toolchain_reason(os.environ.get("CXX", "c++"))


@functools.cache
def _toolchain_reason(cxx: str) -> str | None:
    if shutil.which(cxx) is None:
        return f"no C++ compiler ({cxx!r} not on PATH)"
    if shutil.which("ninja") is None:
        try:
            import ninja  # type: ignore[import-not-found,unused-ignore]  # pip's wheel ships the binary
        except ImportError:
            return "ninja is not installed (pip install ninja)"
        # an unactivated venv: put the wheel's binary on PATH for torch's build to find
        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
    return None


def build_jobs() -> int:
    """Parallel compile jobs: ``$MAX_JOBS`` when set (torch's variable), else the cores this
    process may run on."""
    env = os.environ.get("MAX_JOBS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def kernels():
    """The built extension module (``isa()``, ``linear_f32``, ``linear_bf16``, ``linear_int8``,
    ``decode_layer``; see ``bindings.cpp``) for :func:`selected_isa`, or None when the kernels
    are off or cannot be built (logged once per instruction set)."""
    reason = disabled_reason()
    if reason is not None:
        _log_off(reason)
        return None
    isa, _ = selected_isa()
    assert isa is not None
    return _kernels_for(isa)


@functools.cache
def _log_off(reason: str) -> None:
    logger.info("CPU kernels: off (%s); using the torch path", reason)


@functools.cache
def _kernels_for(isa: str):
    from torch.utils import cpp_extension

    cxx = os.environ.get("CXX", "c++")
    try:
        key = build_key(cxx, isa)
    except (OSError, subprocess.SubprocessError) as exc:
        logger.warning("CPU kernels: cannot run %s (%s); using the torch path", cxx, exc)
        return None
    folder = cache_dir() / key
    here = Path(__file__).parent

    def load():
        jobs = os.environ.get("MAX_JOBS")
        os.environ["MAX_JOBS"] = str(build_jobs())  # read by cpp_extension for ninja -j
        try:
            return cpp_extension.load(
                name=f"promptcache_cpu_{key}",
                sources=[str(here / s) for s in SOURCES if s.endswith(".cpp")],
                extra_cflags=[*CFLAGS, *isa_flags(isa)],
                extra_ldflags=["-fopenmp"],
                build_directory=str(folder),
                verbose=False,
            )
        finally:
            if jobs is None:
                del os.environ["MAX_JOBS"]
            else:
                os.environ["MAX_JOBS"] = jobs

    return load_or_none(
        "CPU kernels",
        folder,
        load,
        lambda mod: mod.isa(),
        f"first use: the {isa} build, {build_jobs()} parallel jobs, ~15-60 s",
        "using the torch path",
    )


def isa() -> str | None:
    """The built kernels' instruction set (``"avx512+bf16+vnni"``, ``"avx2"``...), None when
    off."""
    mod = kernels()
    return None if mod is None else mod.isa()


def has(kind: str) -> bool:
    """Whether a kernel for ``kind`` (``"float32"``, ``"bfloat16"``, ``"int8"``) is built: every
    AVX2 or AVX-512 build has all three (bfloat16 by ``vdpbf16ps`` or by widening to float32,
    int8 by ``vpdpbusd`` or by widening to int16; ``linear_*.cpp``)."""
    if kind not in ("float32", "bfloat16", "int8"):
        raise ValueError(f"unknown kernel kind {kind!r}")
    return (isa() or "").startswith(("avx512", "avx2"))


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
