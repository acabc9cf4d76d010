"""The triton backend without triton installed names the ``gpu`` extra (issue 31: the CPU
engine's ``[engine]`` extra no longer pulls triton)."""

from __future__ import annotations

import sys

import pytest
import torch

from local_engine.backend import backend_module


def test_triton_backend_without_triton_names_the_gpu_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.delitem(sys.modules, "local_engine.ops.triton_ops", raising=False)
    t = torch.zeros(1)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'promptcache\[gpu\]'") as info:
        backend_module(
            "triton", t, "local_engine.ops.torch_ops", "local_engine.ops.triton_ops", "ops"
        )
    assert info.value.name == "triton"
    # the torch path never needs triton
    mod = backend_module(
        None, t, "local_engine.ops.torch_ops", "local_engine.ops.triton_ops", "ops"
    )
    assert mod.__name__ == "local_engine.ops.torch_ops"
