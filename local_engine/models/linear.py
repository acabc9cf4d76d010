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
"""

from __future__ import annotations

import functools
import warnings

import torch
import torch.nn.functional as F
from torch import nn

FORMATS = ("dense", "dense_t", "bf16", "int8")


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
    AVX-VNNI (``vpdpbusd``, int32 accumulation) the full 8 bits are safe and halve the error."""
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
    :meth:`set_bf16` and :meth:`set_int8` switch formats (see the module docstring)."""

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

    def set_dense_t(self, weight_t: torch.Tensor) -> None:
        """Store ``weight_t`` ``[in, out]`` (float32 or bfloat16) and drop ``weight``."""
        if tuple(weight_t.shape) != (self.in_features, self.out_features):
            raise ValueError(
                f"weight_t must be [{self.in_features}, {self.out_features}], "
                f"got {tuple(weight_t.shape)}"
            )
        self.weight_t = weight_t.contiguous()
        self.weight = None
        self.format = "dense_t"

    def set_dense(self, weight: torch.Tensor) -> None:
        """Store ``weight`` ``[out, in]`` as it is (the CPU's float32 layout for ``out < in``,
        see :func:`local_engine.models.weights.float32_transposed`)."""
        if tuple(weight.shape) != (self.out_features, self.in_features):
            raise ValueError(
                f"weight must be [{self.out_features}, {self.in_features}], "
                f"got {tuple(weight.shape)}"
            )
        self.weight = nn.Parameter(weight.contiguous(), requires_grad=False)
        self.weight_t = None
        self.format = "dense"

    def set_bf16(self, weight: torch.Tensor) -> None:
        """Store ``weight`` ``[out, in]`` as bfloat16, reordered for oneDNN when it supports
        bfloat16 on this CPU."""
        if tuple(weight.shape) != (self.out_features, self.in_features):
            raise ValueError(
                f"weight must be [{self.out_features}, {self.in_features}], "
                f"got {tuple(weight.shape)}"
            )
        w = weight.to(torch.bfloat16).contiguous()
        self._packed = None
        if torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported():
            self._packed = torch.ops.mkldnn._reorder_linear_weight(w, 1)
        self.weight = nn.Parameter(w, requires_grad=False)
        self.format = "bf16"

    def set_int8(self, qweight: torch.Tensor, scale: torch.Tensor) -> None:
        """Store int8 ``qweight`` ``[out, in]`` and float32 ``scale`` ``[out]`` (from
        :func:`quantize_int8`), prepack them for fbgemm, drop ``weight``.

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
        self.weight = None
        self.format = "int8"

    def dense_weight(self) -> torch.Tensor:
        """The weight as float ``[out, in]`` whatever the format (int8: dequantized)."""
        if self.format == "dense_t":
            assert self.weight_t is not None
            return self.weight_t.t()
        if self.format == "int8":
            assert self.qweight is not None and self.scale is not None
            return self.qweight.float() * self.scale[:, None]
        assert self.weight is not None
        return self.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
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


__all__ = ["FORMATS", "Linear", "int8_reduce_range", "quantize_int8"]
