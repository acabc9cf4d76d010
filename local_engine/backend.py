"""Choosing a compute backend: ``"torch"`` (the reference, any device) or ``"triton"`` (GPU
kernels; on the CPU only under ``TRITON_INTERPRET=1``). Used by :mod:`local_engine.attention` and
:mod:`local_engine.ops`, which keep one module per backend with the same functions."""

from __future__ import annotations

import importlib
from types import ModuleType

import torch

BACKENDS = ("torch", "triton")


def backend_module(
    backend: str | None, t: torch.Tensor, torch_module: str, triton_module: str, what: str
) -> ModuleType:
    """The module implementing ``backend`` (``None``: triton for CUDA tensors, torch otherwise),
    imported on first use so the torch path never imports triton.

    Raises:
        ValueError: ``backend`` is not one of :data:`BACKENDS` (the message names ``what``).
        ModuleNotFoundError: the triton backend without triton installed (``name`` is
            ``"triton"``; the message names the ``gpu`` extra that installs it).
    """
    if backend is None:
        backend = "triton" if t.is_cuda else "torch"
    if backend == "torch":
        return importlib.import_module(torch_module)
    if backend == "triton":
        try:
            return importlib.import_module(triton_module)
        except ModuleNotFoundError as exc:
            if exc.name != "triton":
                raise
            raise ModuleNotFoundError(
                f"the {what} triton backend needs triton: pip install 'promptcache[gpu]'",
                name="triton",
            ) from exc
    raise ValueError(f"unknown {what} backend {backend!r}; expected one of {BACKENDS}")
