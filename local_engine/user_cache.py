"""The engine's folders under the user cache directory (``~/.cache/promptcache/<name>`` on
Linux, by ``platformdirs``), each overridable by its own environment variable: the prepared
weights (``loader.weight_cache``) and the compiled kernels (``ops.extension_build``)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_folder(env: str, name: str) -> Path:
    """``$env`` (``~`` expanded) if set and non-empty, else the user cache directory's ``name``
    folder (``platformdirs.user_cache_dir("promptcache") / name``). Not created here."""
    override = os.environ.get(env)
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("promptcache", appauthor=False)) / name


__all__ = ["cache_folder"]
