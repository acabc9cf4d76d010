"""The prepared-weight cache (:mod:`local_engine.loader.weight_cache`): key, round trip, a
corrupt file detected and rebuilt, two processes writing at once.

Small synthetic tensors and a fake model file, except the last (slow) test, which loads the real
GGUF file twice through :func:`local_engine.loader.load_model`.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from local_engine.config import ModelConfig
from local_engine.loader import LoadedModel, TokenizerSpec
from local_engine.loader import weight_cache as wc


def _loaded(path: Path, seed: int = 0) -> LoadedModel:
    g = torch.Generator().manual_seed(seed)
    tensors = {
        "embed_tokens.weight": torch.randn(16, 8, generator=g),
        "lm_head.weight_t": torch.randn(8, 16, generator=g),
        "layers.0.mlp.down_proj.qweight": torch.randint(-127, 128, (8, 12), generator=g).to(
            torch.int8
        ),
        "layers.0.mlp.gate_up_proj.weight": torch.randn(24, 8, generator=g).bfloat16(),
    }
    cfg = ModelConfig("tiny", 8, 1, 2, 1, 4, 12, 16)
    tok = TokenizerSpec(
        tokens=["a", "b", "\u00e9\u65e5"], merges=["a b"], special_tokens={"x": "y"}
    )
    return LoadedModel(cfg, tensors, tok, path, weight_dtype="float32")


@pytest.fixture
def model_file(tmp_path, monkeypatch):
    monkeypatch.setenv(wc.ENV_DIR, str(tmp_path / "cache"))
    f = tmp_path / "tiny.gguf"
    f.write_bytes(b"GGUF" + bytes(range(256)) * 10)
    return f


def test_key_follows_the_file_bytes_dtype_and_version(model_file, tmp_path):
    import hashlib

    a = wc.cache_path(model_file, "float32", torch.float32)
    assert a.parent == tmp_path / "cache"
    expected = hashlib.sha256(b"tiny.gguf\0" + model_file.read_bytes()).hexdigest()[:32]
    assert (
        a.name
        == f"{expected}-float32-float32-f{wc.CACHE_FORMAT}-v{wc.engine_version()}.safetensors"
    )
    assert wc.cache_path(model_file, "int8", torch.float32) != a
    assert wc.cache_path(model_file, "float32", torch.bfloat16) != a
    model_file.write_bytes(model_file.read_bytes() + b"!")  # another file content, another key
    assert wc.cache_path(model_file, "float32", torch.float32) != a


def test_round_trip_and_second_load_skips_the_build(model_file):
    original = _loaded(model_file)
    builds = []

    def build():
        builds.append(1)
        return original

    first = wc.load_cached(model_file, "float32", torch.float32, build)
    second = wc.load_cached(model_file, "float32", torch.float32, build)
    assert builds == [1] and first is original
    assert second.config == original.config and second.tokenizer == original.tokenizer
    assert second.weight_dtype == "float32"
    assert set(second.weights) == set(original.weights)
    for k, t in original.weights.items():
        assert second.weights[k].dtype == t.dtype and torch.equal(second.weights[k], t)
    files = os.listdir(wc.cache_dir())
    assert len(files) == 1 and not files[0].endswith(".tmp")


def _corrupt_flip(file: Path):
    data = bytearray(file.read_bytes())
    data[-5] ^= 0x40  # a bit in the last tensor's bytes: only the CRC notices
    file.write_bytes(bytes(data))


def _corrupt_truncate(file: Path):
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def _corrupt_garbage(file: Path):
    file.write_bytes(b"\xff" * 64)


@pytest.mark.parametrize("corrupt", [_corrupt_flip, _corrupt_truncate, _corrupt_garbage])
def test_corrupt_cache_is_detected_and_rebuilt(model_file, corrupt, caplog):
    original = _loaded(model_file)
    wc.load_cached(model_file, "float32", torch.float32, lambda: original)
    file = wc.cache_path(model_file, "float32", torch.float32)
    corrupt(file)
    with pytest.raises(wc.CorruptCacheError):
        wc.read_cache(file, model_file)
    builds = []

    def build():
        builds.append(1)
        return original

    with caplog.at_level(logging.WARNING, logger="local_engine"):
        again = wc.load_cached(model_file, "float32", torch.float32, build)
    assert builds == [1] and again is original
    assert any("corrupt" in r.getMessage() for r in caplog.records)
    reread = wc.read_cache(file, model_file)  # the rebuilt file is whole again
    assert torch.equal(reread.weights["lm_head.weight_t"], original.weights["lm_head.weight_t"])


def test_stale_format_is_rebuilt(model_file, monkeypatch):
    wc.load_cached(model_file, "float32", torch.float32, lambda: _loaded(model_file))
    file = wc.cache_path(model_file, "float32", torch.float32)
    monkeypatch.setattr(wc, "CACHE_FORMAT", wc.CACHE_FORMAT + 1)
    with pytest.raises(wc.CorruptCacheError, match="format"):
        wc.read_cache(file, model_file)


def test_unwritable_cache_dir_only_costs_the_speedup(model_file, tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv(wc.ENV_DIR, str(blocker / "cache"))
    original = _loaded(model_file)
    with caplog.at_level(logging.WARNING, logger="local_engine"):
        assert wc.load_cached(model_file, "float32", torch.float32, lambda: original) is original
    assert any("cannot write" in r.getMessage() for r in caplog.records)


_WRITER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {root!r})
    from pathlib import Path
    import torch
    from local_engine.loader import weight_cache as wc
    sys.path.insert(0, {tests!r})
    from test_weight_cache import _loaded
    seed, start = int(sys.argv[1]), float(sys.argv[2])
    model = Path({model!r})
    while time.time() < start:
        time.sleep(0.001)
    for i in range(15):  # write the same key over and over, each time with different bytes
        loaded = _loaded(model, seed=seed * 100 + i)
        assert wc.write_cache(wc.cache_path(model, "float32", torch.float32), loaded)
    """
)


@pytest.mark.slow
def test_two_processes_writing_at_once_never_expose_a_partial_file(model_file, tmp_path):
    import time

    script = tmp_path / "writer.py"
    script.write_text(
        _WRITER.format(
            root=str(Path(__file__).resolve().parents[2]),
            tests=str(Path(__file__).resolve().parent),
            model=str(model_file),
        )
    )
    start = time.time() + 3.0
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(seed), str(start)], env=os.environ.copy()
        )
        for seed in (1, 2)
    ]
    file = wc.cache_path(model_file, "float32", torch.float32)
    reads = 0
    while any(p.poll() is None for p in procs):
        try:
            got = wc.read_cache(file, model_file)  # a whole file, or none yet: never corrupt
        except FileNotFoundError:
            continue
        assert got.config.name == "tiny"
        reads += 1
    assert [p.returncode for p in procs] == [0, 0]
    assert reads > 0
    wc.read_cache(file, model_file)
    assert os.listdir(file.parent) == [file.name]  # no temporary file left behind


@pytest.mark.slow
def test_real_model_second_load_comes_from_the_cache(tmp_path, monkeypatch, caplog):
    from local_engine.loader import load_model

    monkeypatch.setenv(wc.ENV_DIR, str(tmp_path / "cache"))
    with caplog.at_level(logging.INFO, logger="local_engine"):
        cold = load_model(None, weight_dtype="float32")
        warm = load_model(None, weight_dtype="float32")
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("weight cache: wrote") for m in messages)
    assert any(m.startswith("weight cache: loaded") for m in messages)
    assert warm.config == cold.config and warm.tokenizer == cold.tokenizer
    assert set(warm.weights) == set(cold.weights)
    for k in cold.weights:
        assert torch.equal(warm.weights[k], cold.weights[k]), k
