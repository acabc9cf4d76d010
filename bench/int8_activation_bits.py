"""How many bits this CPU's int8-weight linear gives its activations (``weight_dtype="int8"``).

fbgemm's dynamic u8 x s8 linear quantizes activations to 7 bits on an x86 CPU without VNNI
(:func:`local_engine.models.linear.int8_reduce_range`), 8 bits with it. One 576 x 576 layer
(SmolLM2's width) on random data with an outlier channel: the relative error of
:class:`~local_engine.models.linear.Linear` in the int8 format against ``x @ dequant(w).T``, beside
per-token 7-bit and 8-bit simulations of the same activation rounding (the weights are the same
int8 values in all three, so only the activations' rounding differs). The kernel's error sits on
one of the two simulations.

Usage: ``PYTHONPATH=. .venv/bin/python bench/int8_activation_bits.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from local_engine.models.linear import Linear, int8_reduce_range, quantize_int8  # noqa: E402


def simulated(x: torch.Tensor, wd: torch.Tensor, bits: int) -> torch.Tensor:
    """``x @ wd.T`` with ``x`` rounded as the engine's int8 path does: each row divided by its
    own max, then one asymmetric ``bits``-bit scale and zero point over the whole input."""
    amax = x.abs().amax(1, keepdim=True)
    xs = x / amax
    lo, hi = min(0.0, xs.min().item()), max(0.0, xs.max().item())
    qmax = 2**bits - 1
    scale = (hi - lo) / qmax
    zero = round(-lo / scale)
    xq = (torch.round(xs / scale) + zero).clamp(0, qmax)
    return ((xq - zero) * scale * amax) @ wd.T


def main() -> int:
    torch.manual_seed(0)
    w = torch.randn(576, 576) * 0.05
    x = torch.randn(8, 576)
    x[:, 3] *= 20  # an outlier channel, as LLM activations have
    lin = Linear(576, 576)
    q, s = quantize_int8(w)
    lin.set_int8(q, s)
    wd = q.float() * s[:, None]
    ref = x @ wd.T

    def rel(y: torch.Tensor) -> float:
        return float((y - ref).norm() / ref.norm())

    print(f"reduce_range (no VNNI): {int8_reduce_range()}")
    print("| output | relative error |")
    print("|---|---|")
    print(f"| Linear, int8 format (this CPU) | {rel(lin(x)):.4f} |")
    print(f"| 7-bit activations, simulated | {rel(simulated(x, wd, 7)):.4f} |")
    print(f"| 8-bit activations, simulated | {rel(simulated(x, wd, 8)):.4f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
