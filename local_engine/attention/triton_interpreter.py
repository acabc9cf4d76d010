"""Triton interpreter compatibility (``TRITON_INTERPRET=1``: CPU tests only; compiled kernels
are untouched).

The interpreter keeps every scalar (``tl.program_id``, a loaded value, a loop bound derived from
them) as a shape-``[1]`` NumPy array. Triton 3.6's interpreter converts a loop bound with
``int(array)`` (``tensor.__index__``), which NumPy 2.4 rejects for arrays of one dimension
("only 0-dimensional arrays can be converted to Python scalars"), so every ``tl.range`` over a
runtime bound fails there; triton 3.9 squeezes the array first. :func:`squeeze_scalar_index`
installs 3.9's conversion on older interpreters.
"""

from __future__ import annotations

from typing import Any


def squeeze_scalar_index() -> bool:
    """Make the interpreter's ``tensor.__index__`` squeeze its shape-``[1]`` array before
    ``int()`` (the same value: the array holds one element). Idempotent; a no-op (returns
    False) when the interpreter has no ``_patch_lang_tensor`` hook to wrap."""
    from triton.runtime import interpreter

    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "squeezes_index", False):
        return False

    def patch_lang_tensor(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    patch_lang_tensor.squeezes_index = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patch_lang_tensor
    return True


__all__ = ["squeeze_scalar_index"]
