"""On-disk cache of prepared weights, so a second start skips reading and dequantizing the model.

Reading the embedded GGUF file costs about 5 s on this 2-core machine (``gguf.GGUFReader``
parses the 49k-token vocabulary field by field) and dequantizing its Q4_1/Q8_0 blocks to
float32 1-2 s more; the prepared tensors (:mod:`local_engine.models.weights`) load from one
safetensors file in a fraction of a second.

One file per (model file content, weight dtype, activation dtype, engine version, cache format):
``<cache dir>/<sha256 of the model file(s), 32 hex>-<weight dtype>-<act dtype>-f<format>-
v<engine version>.safetensors``. The cache directory is ``$PROMPTCACHE_WEIGHT_CACHE_DIR`` when
set, else ``platformdirs.user_cache_dir("promptcache") / "weights"`` (``~/.cache/promptcache/
weights`` on Linux). The file's metadata holds the model config, the tokenizer description and
a CRC-32 of every tensor's bytes.

Safety:

- Two processes writing at once: each writes its own temporary file in the cache directory and
  renames it onto the final name (``os.replace``, atomic on POSIX and Windows); a reader sees
  either no file or a complete one, and the last complete writer wins.
- A corrupt or stale file (truncated, unreadable header, other format or version, CRC
  mismatch, missing tensor) is reported with a warning, deleted and rebuilt.
- A cache directory that cannot be written only costs the speed-up (a warning is logged).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import mmap
import os
import struct
import tempfile
import zlib
from pathlib import Path

import torch

from ..config import ModelConfig
from ..user_cache import cache_folder
from . import LoadedModel, TokenizerSpec

logger = logging.getLogger("local_engine")

CACHE_FORMAT = 3  # bump when the prepared layout (local_engine.models.weights) changes (2: float32 down_proj [out, in]; 3: float32 C++ kernel panels)
ENV_DIR = "PROMPTCACHE_WEIGHT_CACHE_DIR"


def cache_dir() -> Path:
    """``$PROMPTCACHE_WEIGHT_CACHE_DIR``, else the user cache directory's ``weights`` folder."""
    return cache_folder(ENV_DIR, "weights")


def engine_version() -> str:
    """The installed promptcache distribution's version (the engine ships in it)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("promptcache")
    except PackageNotFoundError:
        return "0+unknown"


def model_files(path: Path) -> list[Path]:
    """The files whose bytes define the weights: the ``.gguf`` file, or an HF folder's
    ``config.json`` and ``*.safetensors``."""
    if path.is_file():
        return [path]
    return [path / "config.json", *sorted(path.glob("*.safetensors"))]


def model_hash(path: Path) -> str:
    """SHA-256 (hex) over the model files' names and bytes, read in 8 MiB chunks (the
    embedded 98 MB GGUF: about 0.2 s)."""
    h = hashlib.sha256()
    for f in model_files(path):
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as fh:
            while chunk := fh.read(8 << 20):
                h.update(chunk)
    return h.hexdigest()


def cache_path(
    path: Path, weight_dtype: str, act_dtype: torch.dtype, digest: str | None = None
) -> Path:
    """Where the prepared weights of the model at ``path`` live (see the module docstring)."""
    act = str(act_dtype).replace("torch.", "")
    digest = digest or model_hash(path)
    name = f"{digest[:32]}-{weight_dtype}-{act}-f{CACHE_FORMAT}-v{engine_version()}.safetensors"
    return cache_dir() / name


def tensors_crc32(tensors: dict[str, torch.Tensor]) -> str:
    """CRC-32 (8 hex digits) of every tensor's bytes, in name order (0.3 s per 540 MB)."""
    crc = 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        crc = zlib.crc32(name.encode(), crc)
        if t.numel():
            crc = zlib.crc32(t.reshape(-1).view(torch.uint8).numpy().data, crc)
    return f"{crc:08x}"


class CorruptCacheError(Exception):
    """A cache file that cannot be used (the message says why)."""


_DTYPES = {
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "I32": torch.int32,
    "I64": torch.int64,
}


def _map_safetensors(file: Path) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """Metadata and tensors of a safetensors file through one private memory map of one open
    file: a writer that renames a new file onto the path meanwhile cannot mix two files'
    header and data (``safetensors.safe_open`` reopens the path for the data). The tensors
    view the mapping (copy-on-write), so nothing is copied.

    Raises:
        CorruptCacheError: not a well-formed safetensors file.
    """
    try:
        with open(file, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    except ValueError as exc:  # an empty file
        raise CorruptCacheError(f"unreadable ({exc})") from exc
    try:
        (n,) = struct.unpack("<Q", mm[:8])
        if not 0 < n <= len(mm) - 8:
            raise ValueError(f"header length {n} in a {len(mm)}-byte file")
        header = json.loads(bytes(mm[8 : 8 + n]))
        meta = header.pop("__metadata__", None) or {}
        base, tensors = 8 + n, {}
        for name, info in header.items():
            dtype = _DTYPES[info["dtype"]]
            start, end = info["data_offsets"]
            shape = [int(d) for d in info["shape"]]
            size = torch.empty((), dtype=dtype).element_size()
            count = 1
            for d in shape:
                count *= d
            if not 0 <= start <= end <= len(mm) - base or end - start != count * size:
                raise ValueError(f"{name}: offsets {start}..{end} do not fit the file or shape")
            if count == 0:
                tensors[name] = torch.empty(shape, dtype=dtype)
            else:
                flat = torch.frombuffer(mm, dtype=dtype, count=count, offset=base + start)
                tensors[name] = flat.view(shape)
    except (struct.error, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise CorruptCacheError(f"unreadable ({exc!r})") from exc
    return meta, tensors


def read_cache(file: Path, model_path: Path) -> LoadedModel:
    """Load a cache file written by :func:`write_cache`.

    Raises:
        FileNotFoundError: no such file.
        CorruptCacheError: unreadable, of another format or version, or a CRC mismatch.
    """
    if not file.is_file():
        raise FileNotFoundError(file)
    meta, tensors = _map_safetensors(file)
    if meta.get("format") != str(CACHE_FORMAT) or meta.get("engine_version") != engine_version():
        raise CorruptCacheError(
            f"format {meta.get('format')!r} / engine {meta.get('engine_version')!r} is not "
            f"{CACHE_FORMAT} / {engine_version()}"
        )
    crc = tensors_crc32(tensors)
    if crc != meta.get("crc32"):
        raise CorruptCacheError(f"CRC-32 {crc} != recorded {meta.get('crc32')!r}")
    try:
        config = ModelConfig(**json.loads(meta["config"]))
        tokenizer = TokenizerSpec(**json.loads(meta["tokenizer"]))
        weight_dtype = meta["weight_dtype"]
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptCacheError(f"bad metadata ({exc!r})") from exc
    return LoadedModel(config, tensors, tokenizer, model_path, weight_dtype=weight_dtype)


def write_cache(file: Path, loaded: LoadedModel) -> bool:
    """Write ``loaded`` (prepared weights) to ``file`` atomically: a temporary file in the same
    directory, flushed to disk, then ``os.replace``. Returns False (with a warning) when the
    directory cannot be written."""
    from safetensors.torch import save_file

    meta = {
        "format": str(CACHE_FORMAT),
        "engine_version": engine_version(),
        "weight_dtype": str(loaded.weight_dtype),
        "model": str(loaded.path),
        "config": json.dumps(dataclasses.asdict(loaded.config)),
        "tokenizer": json.dumps(dataclasses.asdict(loaded.tokenizer)),
        "crc32": tensors_crc32(loaded.weights),
    }
    tmp = None
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=file.name + ".", suffix=".tmp")
        os.close(fd)
        save_file({k: v.contiguous() for k, v in loaded.weights.items()}, tmp, metadata=meta)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, file)
        tmp = None
        return True
    except OSError as exc:
        logger.warning("weight cache: cannot write %s (%s); next start rebuilds it", file, exc)
        return False
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def load_cached(path: Path, weight_dtype: str, act_dtype: torch.dtype, build) -> LoadedModel:
    """The prepared weights of the model at ``path``: from the cache when a valid file is there,
    else ``build()`` (a :class:`LoadedModel` with prepared weights), written to the cache.

    A corrupt file is logged, removed and rebuilt."""
    file = cache_path(path, weight_dtype, act_dtype)
    try:
        loaded = read_cache(file, path)
        logger.info("weight cache: loaded %s", file)
        return loaded
    except FileNotFoundError:
        pass
    except CorruptCacheError as exc:
        logger.warning("weight cache: %s is corrupt (%s); rebuilding it", file, exc)
        try:
            file.unlink()
        except OSError:
            pass
    loaded = build()
    if write_cache(file, loaded):
        logger.info("weight cache: wrote %s", file)
    return loaded


__all__ = [
    "CACHE_FORMAT",
    "CorruptCacheError",
    "cache_dir",
    "cache_path",
    "load_cached",
    "model_hash",
    "read_cache",
    "tensors_crc32",
    "write_cache",
]
