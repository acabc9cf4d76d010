"""The interpreter's loop bounds (:mod:`local_engine.attention.triton_interpreter`): a
``tl.range`` whose end is derived from ``tl.program_id`` (a shape-[1] array in the interpreter)
runs, and counts the values worked out by hand. Triton 3.6's interpreter under NumPy 2.4 fails
this without the shim ("only 0-dimensional arrays can be converted to Python scalars")."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere in this process

import torch
import triton
import triton.language as tl

from local_engine.attention import triton_backend  # noqa: F401  (installs the shim)
from local_engine.attention.triton_interpreter import squeeze_scalar_index


@triton.jit
def _sum_below(out_ptr):
    pid = tl.program_id(0)
    acc = 0
    for t in tl.range(0, pid + 3, num_stages=2):
        acc += t
    tl.store(out_ptr + pid, acc)


def test_loop_bound_from_program_id_runs_in_the_interpreter():
    out = torch.zeros(3, dtype=torch.int32)
    _sum_below[(3,)](out)
    # program p sums 0 .. p + 2: 0+1+2 = 3, 0+..+3 = 6, 0+..+4 = 10
    assert out.tolist() == [3, 6, 10]


def test_shim_is_installed_once():
    squeeze_scalar_index()
    assert squeeze_scalar_index() is False  # already wrapped: nothing more to do
