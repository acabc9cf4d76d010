"""``ModelRunner.prepare`` (one host buffer, NumPy over the batch) against the per-sequence
definition of every batch tensor, on schedules from the real scheduler: decode-only steps,
prefill chunks mixed with decodes, sequences that do not sample this step, copy-on-write forks
and the block tables as lists or as the KV manager's gathered array."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from local_engine.config import EngineConfig, ModelConfig
from local_engine.kv_cache import KVCacheManager
from local_engine.runner import ModelRunner
from local_engine.sampling import SamplingParams
from local_engine.scheduler import Scheduler
from local_engine.sequence import Sequence, SequenceStatus

BS = 16


def make_runner(device="cpu"):
    mc = ModelConfig(
        name="tiny",
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        head_dim=16,
        intermediate_size=64,
        vocab_size=1000,
    )
    cfg = EngineConfig(
        device=device, dtype="float32", block_size=BS, num_threads=1, enforce_eager=True
    )
    r = ModelRunner(cfg, mc, None, 512)
    r.allocate_kv_cache(64)
    return r


@pytest.fixture(scope="module")
def runner():
    return make_runner()


def expected(sched, tables):
    """Each tensor from its definition, one sequence and one token at a time."""
    ids, pos, slots, cu, lens, lidx, rows = [], [], [], [0], [], [], []
    for i, (s, table) in enumerate(zip(sched.scheduled, tables)):
        for p in range(s.num_computed, s.num_computed + s.num_new_tokens):
            ids.append(s.seq.all_token_ids[p])
            pos.append(p)
            slots.append(table[p // BS] * BS + p % BS)  # block of the token, offset in it
        cu.append(cu[-1] + s.num_new_tokens)
        lens.append(s.num_computed + s.num_new_tokens)
        if s.num_computed + s.num_new_tokens == len(s.seq.all_token_ids):
            lidx.append(cu[-1] - 1)
            rows.append(i)
    width = max([len(t) for t in tables] + [1])
    bt = [list(t) + [0] * (width - len(t)) for t in tables]
    return dict(ids=ids, pos=pos, slots=slots, cu=cu, lens=lens, lidx=lidx, rows=rows, bt=bt)


def check(batch, exp, decode):
    m = batch.meta
    assert batch.input_ids.tolist() == exp["ids"]
    assert batch.positions.tolist() == exp["pos"]
    assert m.slot_mapping.tolist() == exp["slots"]
    assert m.cu_seqlens_q.tolist() == exp["cu"]
    assert m.seq_lens.tolist() == exp["lens"]
    assert m.logits_indices.tolist() == exp["lidx"]
    assert batch.sample_rows == exp["rows"]
    assert m.block_tables.tolist() == exp["bt"]
    assert batch.is_decode == decode
    for t, dtype in (
        (batch.input_ids, torch.int64),
        (batch.positions, torch.int64),
        (m.slot_mapping, torch.int64),
        (m.logits_indices, torch.int64),
        (m.block_tables, torch.int32),
        (m.cu_seqlens_q, torch.int32),
        (m.seq_lens, torch.int32),
    ):
        assert t.dtype == dtype and t.is_contiguous()
        assert t.data_ptr() % 16 == 0  # kernels specialise on 16-byte aligned pointers


def schedules(budget, chunked, seed):
    """(SchedulerOutput, block-id lists, gathered block-table array) of each step of a random
    workload run through the real scheduler and KV manager (prefix hits, chunked prefill,
    decodes, finishing), the tokens sampled at random."""
    rng = random.Random(seed)
    kv = KVCacheManager(64, BS, enable_caching=True)
    sched = Scheduler(
        kv, max_num_seqs=6, max_num_batched_tokens=budget, enable_chunked_prefill=chunked
    )
    shared = [rng.randrange(1000) for _ in range(40)]  # prefix-cache hits for some requests
    n_added = 0
    for _ in range(120):
        if n_added < 14 and rng.random() < 0.3:
            prompt = (shared if rng.random() < 0.5 else []) + [
                rng.randrange(1000) for _ in range(rng.randrange(1, 60))
            ]
            seq = Sequence(f"s{n_added}", f"s{n_added}", 0, prompt, SamplingParams())
            seq.max_total_len = len(prompt) + rng.randrange(1, 30)
            sched.add(seq)
            n_added += 1
        out = sched.schedule()
        if out.is_empty:
            if n_added >= 14 and not sched.has_unfinished():
                break
            continue
        ids = [s.seq.seq_id for s in out.scheduled]
        yield out, [kv.block_ids(i) for i in ids], kv.block_table_array(ids)
        for s in out.scheduled:  # what the engine does after the forward
            seq = s.seq
            seq.num_computed_tokens = s.num_computed + s.num_new_tokens
            kv.cache_computed_blocks(seq)
            if s.samples:
                seq.all_token_ids.append(rng.randrange(1000))
                if seq.num_tokens >= seq.max_total_len:
                    sched.finish(seq, SequenceStatus.FINISHED_LENGTH)
        sched.check_invariants()


@pytest.mark.parametrize("budget,chunked", [(64, True), (40, True), (512, False)])
def test_prepare_matches_the_per_token_definition(runner, budget, chunked):
    kinds = set()
    for out, lists, array in schedules(budget, chunked, seed=budget):
        exp = expected(out, lists)
        decode = all(s.num_new_tokens == 1 for s in out.scheduled)
        kinds.add(decode)
        check(runner.prepare(out, lists), exp, decode)
        check(runner.prepare(out, array), exp, decode)
    assert kinds == {True, False}  # both the decode-only and the mixed path were exercised


@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (the pinned-buffer copy)"
)
def test_prepare_on_cuda_matches_the_definition_step_after_step():
    """On CUDA the inputs go through one reused pinned host buffer and one non-blocking copy:
    each step's tensors, read back after the next step was prepared (its copy waits for the
    previous one), hold their own step's values; steps without a sampling row (prefill chunks,
    no synchronising sample) come in between."""
    runner = make_runner("cuda")
    prev = None
    for out, lists, array in schedules(40, True, seed=7):
        batch = runner.prepare(out, array)
        if prev is not None:
            check_on_host(*prev)
        prev = (batch, expected(out, lists), all(s.num_new_tokens == 1 for s in out.scheduled))
    check_on_host(*prev)


def check_on_host(batch, exp, decode):
    assert batch.input_ids.device.type == "cuda"
    torch.cuda.synchronize()
    check(batch, exp, decode)


def test_prepare_after_a_copy_on_write_fork(runner):
    """Two samples sharing a partial block: the child's first write copies it, and its row of
    the block table (list or gathered array) names the copy."""
    kv = KVCacheManager(16, BS)
    parent = Sequence("p", "p", 0, list(range(20)), SamplingParams())
    kv.allocate_slots(parent, 20)
    parent.num_computed_tokens = 20
    parent.all_token_ids.append(7)
    child = Sequence("p#1", "p", 1, list(range(20)), SamplingParams())
    child.all_token_ids.append(9)
    child.num_computed_tokens = 20
    kv.fork(parent, child)
    from local_engine.scheduler import ScheduledSequence, SchedulerOutput

    copies = kv.allocate_slots(child, 1)
    assert copies and kv.allocate_slots(parent, 1) == []
    out = SchedulerOutput([ScheduledSequence(parent, 20, 1), ScheduledSequence(child, 20, 1)])
    lists = [kv.block_ids("p"), kv.block_ids("p#1")]
    assert lists[0][0] == lists[1][0] and lists[0][1] != lists[1][1]
    exp = expected(out, lists)
    assert exp["slots"] == [
        lists[0][1] * BS + 4,
        lists[1][1] * BS + 4,
    ]  # token 20: block 1, offset 4
    check(runner.prepare(out, kv.block_table_array(["p", "p#1"])), exp, True)
    kv.check_invariants()


def test_block_table_array_pads_with_zero_and_sizes_to_the_longest(runner):
    kv = KVCacheManager(32, BS)
    a = Sequence("a", "a", 0, list(range(50)), SamplingParams())  # 4 blocks
    b = Sequence("b", "b", 0, list(range(5)), SamplingParams())  # 1 block
    kv.allocate_slots(a, 50)
    kv.allocate_slots(b, 5)
    arr = kv.block_table_array(["b", "a", "nobody"])
    assert arr.dtype == np.int32 and arr.shape == (3, 4)
    assert arr[0].tolist() == kv.block_ids("b") + [0, 0, 0]
    assert arr[1].tolist() == kv.block_ids("a")
    assert arr[2].tolist() == [0, 0, 0, 0]
    kv.free(a)
    assert kv.block_table_array(["a", "b"]).tolist() == [[0], kv.block_ids("b")]
    assert kv.block_table_array([]).shape == (0, 1)


@pytest.mark.parametrize(
    "num_tokens,num_seqs,max_blocks,num_logits", [(1, 1, 1, 1), (37, 3, 5, 2), (8, 8, 1, 0)]
)
def test_host_layout_parts_are_aligned_disjoint_and_in_order(
    num_tokens, num_seqs, max_blocks, num_logits
):
    from local_engine.runner import HostLayout

    lay = HostLayout.plan(num_tokens, num_seqs, max_blocks, num_logits)
    parts64 = [
        (lay.input_ids, num_tokens),
        (lay.positions, num_tokens),
        (lay.slot_mapping, num_tokens),
        (lay.logits_indices, num_logits),
        (lay.int32, lay.int32_len),
    ]
    for (off, size), (nxt, _) in zip(parts64, parts64[1:]):
        assert off % 2 == 0 and off + size <= nxt  # 16-byte aligned, no overlap
    assert lay.int32 % 2 == 0 and lay.int32 + lay.int32_len <= lay.total
    parts32 = [
        (lay.block_tables, num_seqs * max_blocks),
        (lay.cu_seqlens_q, num_seqs + 1),
        (lay.seq_lens, num_seqs),
    ]
    for (off, size), (nxt, _) in zip(parts32, parts32[1:] + [(2 * lay.int32_len, 0)]):
        assert off % 4 == 0 and off + size <= nxt
    # (37, 3, 5, 2) by hand: int64 parts 38, 38, 38, 2 entries at 0, 38, 76, 114; the int32
    # part at 116 holds block tables 15 -> cu at 16, 4 -> seq_lens at 20, 3 -> 24 int32 = 12
    if (num_tokens, num_seqs, max_blocks, num_logits) == (37, 3, 5, 2):
        assert (lay.input_ids, lay.positions, lay.slot_mapping, lay.logits_indices) == (
            0,
            38,
            76,
            114,
        )
        assert (lay.int32, lay.cu_seqlens_q, lay.seq_lens, lay.int32_len, lay.total) == (
            116,
            16,
            20,
            12,
            128,
        )
