"""Building the engine's own compiled extensions (the C++ CPU kernels, the CUDA decode kernel):
where they are cached and how a build that fails leaves the fallback path.

Both are built with ``torch.utils.cpp_extension.load`` on first use into one folder per build
key under :func:`cache_dir` (``$PROMPTCACHE_KERNEL_CACHE_DIR``, else the user cache directory's
``kernels`` folder, ``~/.cache/promptcache/kernels``); torch's ``FileBaton`` lock in the folder
serialises two processes that build at once. :func:`load_or_none` logs when a build starts and
ends, and turns any failure into one warning and ``None``, so callers keep their fallback.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from local_engine.user_cache import cache_folder

logger = logging.getLogger("local_engine")

ENV_DIR = "PROMPTCACHE_KERNEL_CACHE_DIR"


def cache_dir() -> Path:
    """``$PROMPTCACHE_KERNEL_CACHE_DIR``, else the user cache directory's ``kernels`` folder."""
    return cache_folder(ENV_DIR, "kernels")


def build_key(folder: Path, sources: Iterable[str], parts: Iterable[str]) -> str:
    """16 hex digits of SHA-256 over each source file of ``folder`` (name and bytes) and the
    other ``parts`` of a build (flags, tool versions, the target): a new key, a new build."""
    h = hashlib.sha256()
    for name in sources:
        h.update(name.encode() + b"\0" + (folder / name).read_bytes())
    for part in parts:
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:16]


def load_or_none(
    label: str,
    folder: Path,
    load: Callable[[], Any],
    describe: Callable[[Any], str],
    first_build: str,
    fallback: str,
) -> Any:
    """``load()`` (a ``cpp_extension.load`` building into ``folder``), logged as ``label``:
    "building in ``folder`` (``first_build``)" when nothing is built there yet, then "built" or
    "loaded", ``describe(module)`` and the seconds it took. Any exception (a compiler error, a
    read-only cache, a missing header) is one warning naming ``fallback``, and None."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        built = any(folder.glob("*.so"))
        if not built:
            logger.info("%s: building in %s (%s)", label, folder, first_build)
        t0 = time.perf_counter()
        mod = load()
        logger.info(
            "%s: %s %s (%s, %.1f s)",
            label,
            "loaded" if built else "built",
            folder,
            describe(mod),
            time.perf_counter() - t0,
        )
        return mod
    except Exception as exc:
        lines = str(exc).strip().splitlines()
        logger.warning(
            "%s: build failed (%s: %s); %s",
            label,
            type(exc).__name__,
            lines[-1] if lines else "",
            fallback,
        )
        return None


__all__ = ["ENV_DIR", "build_key", "cache_dir", "load_or_none"]
