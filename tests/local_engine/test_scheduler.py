"""Scheduler without a model: a driver plays the runner's part (marks scheduled tokens computed,
appends a token when a sequence samples). Token budget, max_num_seqs, chunked prefill, FCFS,
prefix-aware holding back, preemption by recompute, abort; and hypothesis property tests over
random interleavings of add / step / abort / preemption."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local_engine.kv_cache import KVCacheManager
from local_engine.sampling import SamplingParams
from local_engine.scheduler import Scheduler
from local_engine.sequence import Sequence, SequenceStatus

BS = 16


class Driver:
    def __init__(
        self, num_blocks=64, max_num_seqs=8, budget=64, chunked=True, caching=True, cpu_blocks=0
    ):
        self.kv = KVCacheManager(num_blocks, BS, caching, cpu_blocks)
        self.sched = Scheduler(self.kv, max_num_seqs, budget, chunked)
        self.rng = random.Random(0)
        self.done = {}

    def add(self, sid, tokens, max_new=4):
        seq = Sequence(sid, sid, 0, list(tokens), SamplingParams(max_tokens=max_new))
        # as LLMEngine.add_request: refuse what could never be scheduled, cap the growth
        assert len(tokens) + 1 <= self.sched.max_sequence_tokens
        seq.max_total_len = min(len(tokens) + max_new, self.sched.max_sequence_tokens)
        self.sched.add(seq)
        return seq

    def step(self):
        out = self.sched.schedule()
        for s in out.scheduled:
            assert s.num_computed == s.seq.num_computed_tokens
        self.advance(out)
        return out

    def advance(self, out):
        """What the engine does after a step's forward: tokens computed, full blocks cached, a
        random token sampled where the step samples, sequences at their length finished."""
        for s in out.scheduled:
            seq = s.seq
            seq.num_computed_tokens += s.num_new_tokens
            self.kv.cache_computed_blocks(seq)
            if s.samples:
                seq.all_token_ids.append(self.rng.randrange(1000))
                if seq.num_tokens >= seq.max_total_len:
                    self.sched.finish(seq, SequenceStatus.FINISHED_LENGTH)
                    self.done[seq.seq_id] = seq

    def abort(self, seq):
        if not seq.is_finished:
            self.sched.finish(seq, SequenceStatus.FINISHED_ABORTED)

    def check(self):
        self.sched.check_invariants()


def test_token_budget_and_chunked_prefill_do_not_stall_decodes():
    d = Driver(budget=32)
    d.add("a", range(10), max_new=20)
    d.step()  # a prefilled
    long = d.add("long", range(100, 200), max_new=2)  # 100-token prompt
    out = d.step()
    got = {s.seq.seq_id: s.num_new_tokens for s in out.scheduled}
    assert got == {"a": 1, "long": 31}  # the decode runs; the prompt takes the rest
    assert out.num_batched_tokens == 32
    for _ in range(3):
        out = d.step()
        got = {s.seq.seq_id: s.num_new_tokens for s in out.scheduled}
        assert got["a"] == 1 and sum(got.values()) <= 32
    assert long.num_computed_tokens == 100 - 1 + 1  # 31 + 31 + 31 + 7 = 100, then it samples
    assert long.num_output_tokens == 1


def test_without_chunking_a_prompt_waits_for_a_step_with_room():
    d = Driver(budget=32, chunked=False)
    d.add("a", range(20))
    d.add("b", range(100, 120))
    out = d.step()
    assert [(s.seq.seq_id, s.num_new_tokens) for s in out.scheduled] == [
        ("a", 20)
    ]  # b: 20 > 12 left
    out = d.step()
    assert [(s.seq.seq_id, s.num_new_tokens) for s in out.scheduled] == [("a", 1), ("b", 20)]
    assert d.sched.max_sequence_tokens == 32  # longer prompts are refused at the door


def test_max_num_seqs():
    d = Driver(max_num_seqs=2, budget=1000)
    for i in range(4):
        d.add(f"r{i}", range(i * 100, i * 100 + 5))
    out = d.step()
    assert [s.seq.seq_id for s in out.scheduled] == ["r0", "r1"]
    assert d.sched.num_waiting == 2


def test_fcfs_and_no_starvation():
    d = Driver(num_blocks=12, max_num_seqs=4, budget=64)
    [d.add(f"r{i}", range(i * 100, i * 100 + 40), max_new=8) for i in range(6)]
    first_scheduled = {}
    for step in range(200):
        out = d.step()
        for s in out.scheduled:
            first_scheduled.setdefault(s.seq.seq_id, step)
        d.check()
        if not d.sched.has_unfinished():
            break
    assert len(d.done) == 6  # everyone finished
    order = sorted(first_scheduled, key=lambda k: (first_scheduled[k], int(k[1:])))
    assert order == [f"r{i}" for i in range(6)]  # admitted in arrival order
    assert d.kv.num_free_blocks == d.kv.num_blocks


def test_prefix_aware_holding_back():
    d = Driver(budget=80)
    shared = list(range(1000, 1064))  # 4 blocks
    d.add("a", shared + [1, 2, 3])
    b = d.add("b", shared + [4, 5, 6])
    d.add("c", range(5000, 5010))  # unrelated: not blocked by b being held back
    out = d.step()
    assert [(s.seq.seq_id, s.num_new_tokens) for s in out.scheduled] == [("a", 67), ("c", 10)]
    assert b.status == SequenceStatus.WAITING
    out = d.step()
    assert b.num_cached_tokens == 64  # it hit the blocks a computed instead of recomputing them
    assert ("b", 3) in [(s.seq.seq_id, s.num_new_tokens) for s in out.scheduled]
    assert d.kv.prefix_cache_hits == 64


def test_prefix_aware_holding_back_with_chunked_prefill():
    d = Driver(budget=40)
    shared = list(range(1000, 1064))
    a = d.add("a", shared + [1, 2, 3])
    b = d.add("b", shared + [4, 5, 6])
    d.step()  # a computes 40 of 67; b would recompute blocks 2-3 if admitted now
    assert b.status == SequenceStatus.WAITING and a.num_computed_tokens == 40
    while a.in_prefill:
        d.step()
    while b.num_cached_tokens < 0:
        d.step()
    assert b.num_cached_tokens == 64


def test_preemption_by_recompute_newest_first_and_resume():
    d = Driver(num_blocks=6, max_num_seqs=4, budget=256)
    a = d.add("a", range(30), max_new=40)  # 2 blocks, grows to 70 tokens = 5 blocks
    b = d.add("b", range(100, 130), max_new=40)
    d.step()
    assert a.status == b.status == SequenceStatus.RUNNING
    preempted = []
    for _ in range(200):
        out = d.step()
        preempted += [s.seq_id for s in out.preempted]
        d.check()
        if not d.sched.has_unfinished():
            break
    assert preempted and preempted[0] == "b"  # the newest running request gives way
    assert set(d.done) == {"a", "b"} and b.num_preemptions >= 1
    assert a.num_output_tokens == 40 and b.num_output_tokens == 40
    assert d.kv.num_free_blocks == d.kv.num_blocks


def test_preemption_swaps_to_cpu_when_there_is_room():
    d = Driver(num_blocks=6, max_num_seqs=4, budget=256, cpu_blocks=8)
    d.add("a", range(30), max_new=40)
    d.add("b", range(100, 130), max_new=40)
    swapped_out = swapped_in = 0
    for _ in range(300):
        out = d.step()
        swapped_out += len(out.swap_out)
        swapped_in += len(out.swap_in)
        if out.preempted:
            assert out.preempted[0].status == SequenceStatus.SWAPPED
            assert out.preempted[0].num_computed_tokens > 0  # kept: nothing to recompute
        d.check()
        if not d.sched.has_unfinished():
            break
    assert d.sched.num_swaps >= 1 and swapped_out >= 1 and swapped_in == swapped_out
    assert set(d.done) == {"a", "b"}
    assert len(d.kv.free_cpu_blocks) == 8 and d.kv.num_free_blocks == 6


def test_abort_frees_blocks_at_once():
    d = Driver()
    a = d.add("a", range(50), max_new=100)
    w = d.add("w", range(300, 310))
    d.step()
    held = d.kv.num_blocks - d.kv.num_free_blocks
    assert held > 0
    d.abort(a)
    d.abort(w)
    assert d.kv.num_free_blocks == d.kv.num_blocks
    assert not d.sched.has_unfinished()
    d.check()


# ---- property tests --------------------------------------------------------------------

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 70), st.integers(1, 12), st.integers(0, 3)),
        st.tuples(st.just("step")),
        st.tuples(st.just("abort"), st.integers(0, 30)),
        st.tuples(st.just("preempt")),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=ops,
    num_blocks=st.integers(6, 24),
    budget=st.integers(8, 96),
    caching=st.booleans(),
    chunked=st.booleans(),
    cpu_blocks=st.sampled_from([0, 4, 16]),
)
def test_random_interleavings_keep_the_pool_consistent(
    ops, num_blocks, budget, caching, chunked, cpu_blocks
):
    d = Driver(
        num_blocks=num_blocks,
        max_num_seqs=4,
        budget=budget,
        chunked=chunked,
        caching=caching,
        cpu_blocks=cpu_blocks,
    )
    seqs = []
    prefixes = [list(range(p * 1000, p * 1000 + 64)) for p in range(4)]
    for op in ops:
        if op[0] == "add":
            _, plen, max_new, prefix = op
            if plen + 1 > d.sched.max_sequence_tokens:
                continue  # the engine refuses what can never be scheduled (tested elsewhere)
            toks = (prefixes[prefix] + list(range(len(seqs) * 7, len(seqs) * 7 + plen)))[:plen]
            seqs.append(d.add(f"s{len(seqs)}", toks, max_new))
        elif op[0] == "step":
            d.step()
        elif op[0] == "abort" and seqs:
            d.abort(seqs[op[1] % len(seqs)])
        elif op[0] == "preempt" and d.sched.running:
            victim = d.sched.running.pop()
            d.sched._preempt(victim)
        # every block's ref count equals the number of block tables holding it; nothing is
        # both free and held; free lists have no duplicates (check_invariants raises otherwise)
        d.check()
    for _ in range(2000):  # drain
        if not d.sched.has_unfinished():
            break
        d.step()
        d.check()
    assert not d.sched.has_unfinished()
    assert d.kv.num_free_blocks == d.kv.num_blocks  # after all requests end, every block is free
    assert len(d.kv.free_cpu_blocks) == cpu_blocks and not d.kv.swapped
    assert all(b.ref_cnt == 0 for b in d.kv.pool.blocks)
    for s in seqs:
        if s.status == SequenceStatus.FINISHED_LENGTH:
            assert s.num_tokens == s.max_total_len


# ---- CPU tier: the same machinery with the runner's copies simulated on contents ----------


class TierDriver(Driver):
    """A :class:`Driver` with a CPU tier behind the pool (and swap space sharing its host
    blocks) that also plays the runner's copies on *contents*: every device block and host
    block holds, per slot, the ``(cache salt, position, token)`` written there. Before a
    sequence computes, every position it attends must hold its own salt and token: a block in
    the wrong place, a copy to the wrong slot, a stale restore or a hit across salts fails it.
    A restore's copy lands only when :meth:`complete_restores` says it is done (as late as
    an asynchronous copy may): a host block overwritten, or a device block handed to someone
    else, while the copy is in flight shows up as wrong contents."""

    def __init__(self, num_blocks, max_num_seqs, budget, chunked, cpu_blocks, tier_blocks):
        self.kv = KVCacheManager(num_blocks, BS, True, cpu_blocks, tier_blocks)
        self.sched = Scheduler(self.kv, max_num_seqs, budget, chunked)
        self.rng = random.Random(0)
        self.done = {}
        self.dev: dict[int, list] = {}
        self.host: dict[int, list] = {}
        self.in_flight: list = []  # RestoreJobs issued, copies not landed yet
        self.finished_jobs: list[int] = []

    def add(self, sid, tokens, max_new=4, salt=None):
        seq = super().add(sid, tokens, max_new)
        seq.cache_salt = salt
        return seq

    def complete_restores(self):
        """The copies of every restore issued so far land now (reported at the next step)."""
        for job in self.in_flight:
            for h, d in job.copies:
                self.dev[d] = list(self.host[h])
            self.finished_jobs.append(job.job_id)
        self.in_flight = []

    def step(self):
        if self.finished_jobs:  # as LLMEngine.step: the runner's poll, before scheduling
            self.kv.finish_restores(self.finished_jobs)
            self.finished_jobs = []
        out = self.sched.schedule()
        if out.is_empty and not out.has_transfers:
            return out  # the engine runs nothing (a pending swap-out is carried over)
        empty = [None] * BS
        for d, h in out.tier_offload:  # the engine's order: offload, swap out/in, restore
            self.host[h] = list(self.dev.get(d, empty))
        for d, h in out.swap_out:
            self.host[h] = list(self.dev.get(d, empty))
        for h, d in out.swap_in:
            self.dev[d] = list(self.host[h])
        self.in_flight += out.tier_restore  # the copies land in complete_restores
        for s, d in out.block_copies:
            self.dev[d] = list(self.dev.get(s, empty))
        for s in out.scheduled:
            seq = s.seq
            table = self.kv.block_ids(seq.seq_id)
            for p in range(s.num_computed):
                got = self.dev.get(table[p // BS], empty)[p % BS]
                assert got == (seq.cache_salt, p, seq.all_token_ids[p]), (
                    f"{seq.seq_id} position {p}: block {table[p // BS]} holds {got}"
                )
            for p in range(s.num_computed, s.num_computed + s.num_new_tokens):
                self.dev.setdefault(table[p // BS], list(empty))[p % BS] = (
                    seq.cache_salt,
                    p,
                    seq.all_token_ids[p],
                )
        self.advance(out)
        return out


def test_tier_driver_restores_an_evicted_prefix_with_its_contents():
    d = TierDriver(num_blocks=10, max_num_seqs=4, budget=64, chunked=True, cpu_blocks=0,
                   tier_blocks=32)  # fmt: skip
    prompts = [list(range(p * 100, p * 100 + 70)) for p in range(4)]
    for i, p in enumerate(prompts):  # one at a time: 5 blocks each, 4 of them full
        d.add(f"p{i}", p, max_new=5)
        while d.sched.has_unfinished():
            d.step()
            d.check()
    # 16 full blocks went through a 10-block pool in LRU order: p0's 4 (the oldest) left first
    again = d.add("again", prompts[0], max_new=2)
    d.step()
    assert again.status == SequenceStatus.RESTORING and again.num_cached_tokens == 64
    assert again.num_cpu_cached_tokens == 64
    d.complete_restores()
    while d.sched.has_unfinished():
        d.step()  # the content check: the restored blocks hold p0's tokens
        d.check()
    assert d.kv.prefix_cache_hits_cpu == 64 and again.num_output_tokens == 2


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rnd=st.randoms(use_true_random=False),
    num_blocks=st.integers(6, 16),
    budget=st.integers(8, 96),
    chunked=st.booleans(),
    cpu_blocks=st.sampled_from([0, 4, 16]),
    tier_blocks=st.sampled_from([1, 3, 8, 32]),
    p_abort=st.sampled_from([0.0, 0.05, 0.2]),
    p_preempt=st.sampled_from([0.0, 0.05, 0.2]),
    p_done=st.sampled_from([0.1, 0.5, 1.0]),
)
def test_random_interleavings_keep_both_tiers_consistent(
    rnd, num_blocks, budget, chunked, cpu_blocks, tier_blocks, p_abort, p_preempt, p_done
):
    """A random walk of 150 ops: add (three shared 64-token prefixes, three cache salts),
    step, abort (RESTORING ones included), preemption (recompute or swap), restore completion,
    with evictions to and restores from the CPU tier. After every op both pools' invariants
    hold (ref counts, one place per block, one tier per hash, pins = restores in flight, swap
    within its floor, the host blocks partitioned), every computed position holds its
    sequence's own salt and token, and at idle nothing leaks."""
    d = TierDriver(num_blocks, 4, budget, chunked, cpu_blocks, tier_blocks)
    seqs = []
    prefixes = [list(range(p * 1000, p * 1000 + 64)) for p in range(3)]
    for _ in range(150):
        r = rnd.random()
        if r < 0.3:
            plen = rnd.randint(17, 70)
            if plen + 1 <= d.sched.max_sequence_tokens:
                base = prefixes[rnd.randrange(3)]
                toks = (base + list(range(len(seqs) * 7, len(seqs) * 7 + plen)))[:plen]
                salt = rnd.choice([None, None, "a", "b"])
                seqs.append(d.add(f"s{len(seqs)}", toks, rnd.randint(1, 6), salt))
        elif r < 0.3 + p_abort and seqs:
            victim = rnd.choice(seqs)
            d.abort(victim)
        elif r < 0.3 + p_abort + p_preempt and d.sched.running:
            victim = d.sched.running.pop()
            d.sched._preempt(victim)
        else:
            d.step()
        if rnd.random() < p_done:
            d.complete_restores()
        d.check()
    for _ in range(2000):  # drain
        if not d.sched.has_unfinished() and not d.kv.num_restores_in_flight:
            break
        d.complete_restores()
        d.step()
        d.check()
    d.kv.end_step()
    assert not d.sched.has_unfinished() and not d.kv.num_restores_in_flight
    assert d.kv.num_free_blocks == d.kv.num_blocks
    assert all(b.ref_cnt == 0 for b in d.kv.pool.blocks)
    host = d.kv.host
    assert host.swap_used == 0 and not host.pins and not d.kv.swapped
    assert len(host.free) + host.num_tier_resident == host.num_blocks
    assert not d.kv.restoring and not d.kv.has_restored
    for s in seqs:
        if s.status == SequenceStatus.FINISHED_LENGTH:
            assert s.num_tokens == s.max_total_len
