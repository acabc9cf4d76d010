"""The model's linear layers (``y = x @ W^T``) and the layouts their weights are stored in.

One :class:`Linear` module, three storage formats chosen once the weights are loaded:

- ``"dense"``: ``weight`` ``[out, in]`` in the activation dtype, ``F.linear`` (the reference
  layout of ``nn.Linear``; what CUDA runs and what CUDA graphs capture).
- ``"dense_t"`` (the CPU, float32 or bfloat16): ``weight_t`` ``[in, out]`` contiguous, one
  ``torch.mm(x, weight_t)``. A batch-1 decode step is a GEMV per layer; with oneMKL on this
  2-core AMD EPYC (Zen 4), one thread, the ``[out, in]`` layout streams 12-13 GB/s and the
  ``[in, out]`` one 24-29 GB/s (``bench/profile_cpu.py``, ``bench/RESULTS.md`` "## cpu"), so
  transposing once at load halves the matmul time of a decode step. Prefill GEMMs run at the
  same speed in either layout. Wide-input matrices (``out < in``: ``down_proj``) stream faster
  in ``[out, in]`` and stay ``"dense"`` (:func:`~local_engine.models.weights.float32_transposed`).
- ``"bf16"`` (the CPU): ``weight`` ``[out, in]`` bfloat16, reordered once into oneDNN's
  blocked layout (``torch.ops.mkldnn._reorder_linear_weight``, the packing torch's inductor
  uses for CPU linears) and run by ``torch.ops.mkldnn._linear_pointwise``, which uses the
  AVX512-BF16 dot products where the CPU has them. Measured here (one thread, cold weights):
  27-37 GB/s float32-equivalent against 13-20 for float32 ``dense_t`` and 15-19 for a plain
  bfloat16 ``F.linear``. The input is rounded to bfloat16 and the output returned in ``x``'s
  dtype. Without oneDNN bfloat16 support it falls back to ``F.linear`` in bfloat16.
- ``"int8"`` (the CPU): symmetric per-output-channel int8 weights (``scale = max|w_row| /
  127``), prepacked for fbgemm and run by ``torch.ops.quantized.linear_dynamic``, which
  quantizes its input to uint8 on the fly and returns float32 (one scale per call, so rows are
  first divided by their own max and multiplied back: one scale per token)
  (Jacob et al. 2018, "Quantization and Training of Neural Networks for Efficient
  Integer-Arithmetic-Only Inference"; torch's dynamically quantized ``Linear``). A quarter of
  float32's bytes per token.

:func:`quantize_int8` is the one quantizer (the weight cache stores its output, so a warm start
only prepacks).

**The engine's own kernels** (:mod:`local_engine.ops.cpu`, C++ AVX-512/AVX2, built on first
use; off with ``PROMPTCACHE_CPU_KERNELS=0``; ``PROMPTCACHE_CPU_ISA=avx2`` forces the AVX2 build). Where they are built every CPU format also gets
a panel-packed copy of its weight (32 output columns per panel, read front to back once per
call):

- float32 (format ``"panels"``): the panels replace ``weight_t``/``weight`` and serve every
  row count: one row streams at the plain-read bandwidth (22-25 GB/s here against oneMKL's
  11-18) and 8-512 rows run 1.0-3.3x faster than oneMKL's GEMM (``bench/gemv_cpu.py``,
  ``bench/RESULTS.md`` "## cpu", session 3). Same products, another summation order: relative
  error ~1e-6 against ``F.linear``.
- bfloat16: up to :data:`BF16_KERNEL_ROWS` rows ``vdpbf16ps`` (on AVX2: widened to float32
  and FMA) over the panels (input rounded
  to bfloat16 as before; float32 accumulation and a float32 output, where oneDNN rounds its
  output to bfloat16); more rows stay on oneDNN, which is faster there. The plain bfloat16
  ``weight`` is then dropped (:meth:`Linear.dense_weight` unpacks the panels).
- int8: up to :data:`INT8_KERNEL_ROWS` rows (:data:`INT8_KERNEL_ROWS_AVX2` without
  AVX512-VNNI) over the panels with fbgemm's arithmetic and
  8-bit activations (the activations' uint8 parameters from ATen's
  ``ChooseQuantizationParams``, exact int32 sums by ``vpdpbusd``, or on AVX2 without VNNI by
  int16 ``vpmaddwd``; one row gives fbgemm-with-VNNI's result bit for bit), one parameter
  pair per row; more rows stay on fbgemm, which is faster there (and on a CPU without VNNI
  quantizes them to 7 bits, :func:`int8_reduce_range`).

Without the kernels the torch paths above run unchanged.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..ops import cpu as cpu_kernels

FORMATS = ("dense", "dense_t", "panels", "bf16", "int8")
BF16_KERNEL_ROWS = 32  # up to this many rows the bfloat16 kernel beats oneDNN (bench/gemv_cpu.py)
INT8_KERNEL_ROWS = 16  # ... and the int8 kernel beats fbgemm
# the AVX2 int8 kernel (no VNNI: vpmaddubsw/vpmaddwd) against fbgemm's AVX2 7-bit path, forced
# AVX2 on the Zen 4 box, 2026-12-03 (`bench/gemv_cpu.py`; the table is in
# `git show a1a9a10:bench/results/cpu_avx2.md`): 1 row 2-3x faster, 2-4 rows
# 0.5-1.5x, 5 rows 0.7x, 16 rows 0.55x; up to 4 rows it keeps the fused layer for small
# verifications, whose saved per-layer calls outweigh that
INT8_KERNEL_ROWS_AVX2 = 4


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row int8: ``w ~= q * scale[:, None]``.

    Args:
        w: float ``[out, in]``.

    Returns:
        ``(q, scale)``: int8 ``[out, in]`` in ``[-127, 127]`` and float32 ``[out]``
        (``max|w_row| / 127``; rows of zeros get scale 1 and q 0).
    """
    w = w.float()
    amax = w.abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q, scale


@functools.cache
def int8_reduce_range() -> bool:
    """Whether fbgemm must quantize activations to 7 bits. Without VNNI its u8 x s8 kernel sums
    pairs of products in int16 (``vpmaddubsw``), which saturates for full-range uint8 inputs;
    torch's ``quantize_dynamic`` sets ``reduce_range=True`` for that reason. With AVX512-VNNI or
    AVX-VNNI (``vpdpbusd``, int32 accumulation) the full 8 bits are safe and halve the error.
    ``FBGEMM_ENABLE_INSTRUCTIONS=AVX2`` (fbgemm's own variable) holds fbgemm to its AVX2
    kernels, as on a CPU without VNNI. (The engine's C++ int8 kernel sums exactly with 8 bits
    on every instruction set.)"""
    if os.environ.get("FBGEMM_ENABLE_INSTRUCTIONS", "").strip().upper() == "AVX2":
        return True
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return not ({"avx512_vnni", "avx_vnni"} & flags)
    except OSError:
        pass
    return True


def _pack_int8(q: torch.Tensor, scale: torch.Tensor):
    """fbgemm's packed weight for int8 ``q`` ``[out, in]`` and float32 ``scale`` ``[out]``."""
    with warnings.catch_warnings():  # torch 2.10+ flags quantized tensors as deprecated
        warnings.simplefilter("ignore")
        qt = torch._make_per_channel_quantized_tensor(
            q, scale.double(), torch.zeros(q.shape[0], dtype=torch.long), 0
        )
        engine = torch.backends.quantized.engine
        if "fbgemm" in torch.backends.quantized.supported_engines:
            torch.backends.quantized.engine = "fbgemm"
        try:
            return torch.ops.quantized.linear_prepack(qt, None)
        finally:
            torch.backends.quantized.engine = engine


@functools.cache
def _linear_dynamic():
    """``quantized::linear_dynamic``'s resolved overload: calling it skips the op packet's
    per-call overload resolution and script-object scan (~1 us of 120 calls a step)."""
    return torch.ops.quantized.linear_dynamic.default


class Linear(nn.Module):
    """``y = x @ W^T`` without bias; ``x`` ``[T, in]`` -> ``[T, out]`` in ``x``'s dtype.

    Built in the ``"dense"`` format with an uninitialised ``weight`` ``[out, in]`` (no random
    init: every weight is overwritten by the loader). :meth:`set_dense`, :meth:`set_dense_t`,
    :meth:`set_panels`, :meth:`set_bf16` and :meth:`set_int8` switch formats (see the module
    docstring); ``use_kernels`` (default: whenever :mod:`local_engine.ops.cpu` is built) adds
    the C++ kernel's panel copy in the CPU formats."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight: nn.Parameter | None = nn.Parameter(
            torch.empty(out_features, in_features), requires_grad=False
        )
        self.format = "dense"
        self.weight_t: torch.Tensor | None = None
        self.qweight: torch.Tensor | None = None
        self.scale: torch.Tensor | None = None
        self._packed = None
        self._reduce_range = True
        # the C++ kernel: panel-packed weight, the call, and up to how many rows it runs
        self.panels: tuple[torch.Tensor, ...] | None = None
        self._kernel: Callable[[torch.Tensor], torch.Tensor] | None = None
        self._kernel_rows: int | None = None

    def _clear_kernel(self) -> None:
        self.panels, self._kernel, self._kernel_rows = None, None, None

    def _want_kernel(self, kind: str, use_kernels: bool | None) -> bool:
        if use_kernels is None:
            return cpu_kernels.has(kind)
        if use_kernels and not cpu_kernels.has(kind):
            raise RuntimeError(
                f"use_kernels=True but no {kind} CPU kernel is built here "
                f"(isa: {cpu_kernels.isa()}; see the log)"
            )
        return use_kernels

    def set_dense_t(self, weight_t: torch.Tensor, use_kernels: bool | None = None) -> None:
        """Store ``weight_t`` ``[in, out]`` (float32 or bfloat16) and drop ``weight``; a
        float32 one goes to the ``"panels"`` format where the kernels are built."""
        if tuple(weight_t.shape) != (self.in_features, self.out_features):
            raise ValueError(
                f"weight_t must be [{self.in_features}, {self.out_features}], "
                f"got {tuple(weight_t.shape)}"
            )
        if weight_t.dtype == torch.float32 and self._want_kernel("float32", use_kernels):
            self.set_panels(cpu_kernels.pack_f32(weight_t.t()))
            return
        self._clear_kernel()
        self.weight_t = weight_t.contiguous()
        self.weight = None
        self.format = "dense_t"

    def set_panels(self, panels: torch.Tensor) -> None:
        """Store float32 panels ``[ceil(out/32), in, 32]`` (:func:`local_engine.ops.cpu.
        pack_f32`) for the C++ kernel, which then runs every call; drop the other layouts.

        Raises:
            ValueError: wrong shape or dtype.
            RuntimeError: the float32 kernel is not built here.
        """
        p = (self.out_features + cpu_kernels.NB - 1) // cpu_kernels.NB
        if tuple(panels.shape) != (p, self.in_features, cpu_kernels.NB) or (
            panels.dtype != torch.float32
        ):
            raise ValueError(
                f"panels must be float32 [{p}, {self.in_features}, {cpu_kernels.NB}], "
                f"got {panels.dtype} {tuple(panels.shape)}"
            )
        mod = cpu_kernels.kernels()
        if mod is None or not cpu_kernels.has("float32"):
            raise RuntimeError("float32 panels need the CPU kernels (local_engine.ops.cpu)")
        packed, n, fn = panels.contiguous(), self.out_features, mod.linear_f32
        self.panels = (packed,)
        self._kernel = lambda x: fn(x, packed, n)
        self._kernel_rows = None
        self.weight, self.weight_t = None, None
        self.format = "panels"

    def set_dense(self, weight: torch.Tensor, use_kernels: bool | None = None) -> None:
        """Store ``weight`` ``[out, in]`` as it is (the CPU's float32 layout for ``out < in``,
        see :func:`local_engine.models.weights.float32_transposed`)."""
        if tuple(weight.shape) != (self.out_features, self.in_features):
            raise ValueError(
                f"weight must be [{self.out_features}, {self.in_features}], "
                f"got {tuple(weight.shape)}"
            )
        if weight.dtype == torch.float32 and self._want_kernel("float32", use_kernels):
            self.set_panels(cpu_kernels.pack_f32(weight))
            return
        self._clear_kernel()
        self.weight = nn.Parameter(weight.contiguous(), requires_grad=False)
        self.weight_t = None
        self.format = "dense"

    def set_bf16(self, weight: torch.Tensor, use_kernels: bool | None = None) -> None:
        """Store ``weight`` ``[out, in]`` as bfloat16, reordered for oneDNN when it supports
        bfloat16 on this CPU, plus the bfloat16 kernel's panels where it is built."""
        if tuple(weight.shape) != (self.out_features, self.in_features):
            raise ValueError(
                f"weight must be [{self.out_features}, {self.in_features}], "
                f"got {tuple(weight.shape)}"
            )
        w = weight.to(torch.bfloat16).contiguous()
        self._packed = None
        if torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported():
            self._packed = torch.ops.mkldnn._reorder_linear_weight(w, 1)
        self._clear_kernel()
        if self._want_kernel("bfloat16", use_kernels):
            mod = cpu_kernels.kernels()
            assert mod is not None
            packed, n, fn = cpu_kernels.pack_bf16(w), self.out_features, mod.linear_bf16
            self.panels = (packed,)
            self._kernel = lambda x: fn(x, packed, n)
            self._kernel_rows = BF16_KERNEL_ROWS if self._packed is not None else None
        # with both oneDNN's copy and the panels nothing reads the plain one (dense_weight
        # unpacks the panels): 2 copies of the bfloat16 bytes instead of 3
        keep = self.panels is None or self._packed is None
        self.weight = nn.Parameter(w, requires_grad=False) if keep else None
        self.format = "bf16"

    def set_int8(
        self, qweight: torch.Tensor, scale: torch.Tensor, use_kernels: bool | None = None
    ) -> None:
        """Store int8 ``qweight`` ``[out, in]`` and float32 ``scale`` ``[out]`` (from
        :func:`quantize_int8`), prepack them for fbgemm (and into the int8 kernel's panels
        where it is built), drop ``weight``.

        Raises:
            RuntimeError: this torch build has no fbgemm/x86 quantized engine.
        """
        if tuple(qweight.shape) != (self.out_features, self.in_features) or qweight.dtype != (
            torch.int8
        ):
            raise ValueError(
                f"qweight must be int8 [{self.out_features}, {self.in_features}], "
                f"got {qweight.dtype} {tuple(qweight.shape)}"
            )
        if not {"fbgemm", "x86"} & set(torch.backends.quantized.supported_engines):
            raise RuntimeError(
                "weight_dtype='int8' needs torch's fbgemm quantized engine (x86 CPUs); "
                f"this build has {torch.backends.quantized.supported_engines}"
            )
        self.qweight, self.scale = qweight.contiguous(), scale.float().contiguous()
        self._packed = _pack_int8(self.qweight, self.scale)
        self._reduce_range = int8_reduce_range()
        self._clear_kernel()
        if self._want_kernel("int8", use_kernels):
            mod = cpu_kernels.kernels()
            assert mod is not None
            packed, wsum, sp = cpu_kernels.pack_int8(self.qweight, self.scale)
            n, fn = self.out_features, mod.linear_int8
            self.panels = (packed, wsum, sp)
            self._kernel = lambda x: fn(x, packed, wsum, sp, n)
            name = mod.isa()
            vnni512 = name.startswith("avx512") and "vnni" in name
            self._kernel_rows = INT8_KERNEL_ROWS if vnni512 else INT8_KERNEL_ROWS_AVX2
        self.weight = None
        self.format = "int8"

    def kernel_spec(self) -> tuple | None:
        """This layer's C++ kernel as the fused decode layer takes it (:mod:`local_engine.ops.
        cpu.layer`): ``(kind, (a, b, c), out_features, max_rows)`` with kind 0 float32 panels,
        1 bfloat16 panels, 2 int8 panels (``b``, ``c``: the int8 column sums and scales, else
        None) and ``max_rows`` None for any row count; None without a kernel."""
        if self._kernel is None or self.panels is None:
            return None
        kind = {"panels": 0, "bf16": 1, "int8": 2}[self.format]
        ts = (*self.panels, None, None)[:3]
        return kind, ts, self.out_features, self._kernel_rows

    def dense_weight(self) -> torch.Tensor:
        """The weight as float ``[out, in]`` whatever the format (int8: dequantized)."""
        if self.format == "dense_t":
            assert self.weight_t is not None
            return self.weight_t.t()
        if self.format == "panels":
            assert self.panels is not None
            return cpu_kernels.unpack_f32(self.panels[0], self.out_features)
        if self.format == "int8":
            assert self.qweight is not None and self.scale is not None
            return self.qweight.float() * self.scale[:, None]
        if self.format == "bf16" and self.weight is None:
            assert self.panels is not None
            return cpu_kernels.unpack_bf16(self.panels[0], self.out_features, self.in_features)
        assert self.weight is not None
        return self.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernel = self._kernel
        if (
            kernel is not None
            and x.dim() == 2
            and (self._kernel_rows is None or x.shape[0] <= self._kernel_rows)
        ):
            if x.dtype == torch.float32 and x.stride(-1) == 1:
                return kernel(x)
            return kernel(x.float().contiguous()).to(x.dtype)
        if self.format == "dense_t":
            w = self.weight_t
            assert w is not None
            if x.dtype == w.dtype:
                return torch.mm(x, w)
            return torch.mm(x.to(w.dtype), w).to(x.dtype)
        if self.format == "bf16":
            xb = x.to(torch.bfloat16)
            if self._packed is not None:
                y = torch.ops.mkldnn._linear_pointwise(xb, self._packed, None, "none", [], "")
            else:
                y = F.linear(xb, self.dense_weight())
            return y.to(x.dtype)
        if self.format == "int8":
            xf = x if x.dtype == torch.float32 else x.float()
            if xf.shape[0] == 1:
                y = _linear_dynamic()(xf, self._packed, self._reduce_range)
            else:
                # per-token activation scales: linear_dynamic quantizes its whole input with one
                # scale, so rows far below the largest one lose most of their 8 bits; dividing
                # each row by its max |x| first (and multiplying back, exact since the map is
                # linear) gives each token its own scale
                amax = xf.abs().amax(dim=1, keepdim=True).clamp_(min=1e-30)
                y = _linear_dynamic()(xf / amax, self._packed, self._reduce_range)
                y.mul_(amax)
            return y if x.dtype == torch.float32 else y.to(x.dtype)
        return F.linear(x, self.dense_weight())

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, format={self.format}"


__all__ = [
    "BF16_KERNEL_ROWS",
    "FORMATS",
    "INT8_KERNEL_ROWS",
    "INT8_KERNEL_ROWS_AVX2",
    "Linear",
    "int8_reduce_range",
    "quantize_int8",
]
