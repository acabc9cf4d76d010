"""Shared fixtures for the engine tests: the embedded GGUF file, one engine per worker, and the
Hugging Face transformers reference loaded from the same file (slow on 2 cores: once per
session)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the engine tests need the [engine] extra (torch)")

# `make test` runs two xdist workers on two cores: one intra-op thread each. Two threads per
# worker make every operator wait for the other worker's time slices (measured 4-5x slower).
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def gguf_path() -> Path:
    from local_engine.loader import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def hf_dir(gguf_path, tmp_path_factory) -> Path:
    """A folder holding (a link to) the GGUF file, for ``from_pretrained(dir, gguf_file=...)``."""
    d = tmp_path_factory.mktemp("hf_gguf")
    os.symlink(gguf_path, d / gguf_path.name)
    return d


@pytest.fixture(scope="session")
def hf_tokenizer(hf_dir, gguf_path):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(hf_dir), gguf_file=gguf_path.name)


@pytest.fixture(scope="session")
def hf_model(hf_dir, gguf_path):
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(hf_dir), gguf_file=gguf_path.name, dtype=torch.float32
    )
    return model.eval()


@pytest.fixture(scope="session")
def engine_factory():
    """Build engines with overrides; the model file is read and dequantized once per worker
    (the engine copies the weights into its own model, so sharing the loaded dict is safe)."""
    import functools

    import local_engine.engine as engine_mod
    from local_engine.engine import LLMEngine

    original = engine_mod.load_model
    engine_mod.load_model = functools.lru_cache(maxsize=2)(original)

    def make(**overrides):
        overrides.setdefault("num_kv_blocks", 256)
        return LLMEngine.from_model(None, **overrides)

    yield make
    engine_mod.load_model = original


@pytest.fixture(scope="session")
def engine(engine_factory):
    """One shared engine (prefix caching on, 256 blocks). Tests must leave it idle."""
    return engine_factory()


def run_to_completion(engine, max_steps=10_000):
    """Step until idle; returns {request_id: final RequestOutput} and the per-step outputs."""
    final, steps = {}, []
    for _ in range(max_steps):
        if not engine.has_unfinished_requests():
            break
        outs = engine.step()
        steps.append(outs)
        for o in outs:
            if o.finished:
                final[o.request_id] = o
    else:
        raise AssertionError("engine did not finish")
    return final, steps


def all_position_logits(engine, ids):
    """Teacher-forced float32 logits ``[len(ids), vocab]`` from one paged forward over ``ids``
    (a private sequence; its blocks are freed afterwards)."""
    from local_engine.sampling import SamplingParams
    from local_engine.scheduler import ScheduledSequence, SchedulerOutput
    from local_engine.sequence import Sequence

    seq = Sequence("teacher-forcing", "teacher-forcing", 0, list(ids), SamplingParams())
    kv = engine.kv_cache_manager
    assert kv.allocate_slots(seq, len(ids)) is not None
    try:
        sched = SchedulerOutput([ScheduledSequence(seq, 0, len(ids))])
        batch = engine.runner.prepare(sched, [kv.block_ids(seq.seq_id)])
        batch.meta.logits_indices = torch.arange(len(ids))
        return engine.runner.forward_logits(batch)
    finally:
        kv.free(seq)
