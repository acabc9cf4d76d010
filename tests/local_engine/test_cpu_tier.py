"""The CPU tier of the prefix cache (``EngineConfig.cpu_cache_memory``): the host allocator
shared with swap (LRU, pins, swap's floor), and whole-engine runs on a tiny random-weight model
with a tiny device pool (the "device" is the CPU here; the tier is still a separate pool):
evicted prefixes come back from the tier counted as cached, with the same greedy output as a
recompute; a restore racing an abort; a restore under eviction pressure; a prefix evicted from
the tier meanwhile; salts; bad sizes."""

from __future__ import annotations

import random

import pytest

from local_engine import SamplingParams
from local_engine.errors import EngineError
from local_engine.kv_cache.block_pool import PoolInvariantError
from local_engine.kv_cache.cpu_tier import HostBlockPool

from .attention.test_triton_cuda_graphs import tiny_model_folder

BS = 16
PROMPT_LEN = 70  # 4 full blocks + 6 tokens; with 5 output tokens a request holds 5 blocks
NUM_BLOCKS = 10  # the device pool: two requests' worth
GREEDY = SamplingParams(temperature=0.0, max_tokens=5)


# ---- the host allocator ------------------------------------------------------------------


def h(i: int) -> bytes:
    return i.to_bytes(32, "little")


def test_tier_is_lru_and_takes_swaps_unused_floor():
    pool = HostBlockPool(num_swap_blocks=2, num_tier_blocks=3)
    slots = [pool.tier_store(h(i)) for i in range(5)]  # the tier may use swap's idle floor
    assert sorted(slots) == [0, 1, 2, 3, 4] and pool.num_tier_resident == 5
    assert pool.tier_store(h(5)) is not None  # full: the least recently stored one goes
    assert pool.tier_lookup(h(0)) is None and pool.tier_lookup(h(1)) is not None
    assert pool.num_tier_evictions == 1
    pool.check([])


def test_swap_reclaims_its_floor_from_the_tier_but_not_more():
    pool = HostBlockPool(num_swap_blocks=2, num_tier_blocks=3)
    for i in range(5):
        pool.tier_store(h(i))
    assert pool.swap_available() == 2  # its floor, taken from the tier's oldest blocks
    got = pool.swap_alloc(2)
    assert pool.tier_lookup(h(0)) is None and pool.tier_lookup(h(1)) is None
    assert pool.num_tier_resident == 3 and pool.swap_available() == 0
    with pytest.raises(ValueError):
        pool.swap_alloc(1)
    pool.check(got)
    pool.swap_release(got)  # free from the next step only
    assert pool.free == [] and pool.num_free_slots() == 2
    pool.end_step()
    assert sorted(pool.free) == sorted(got)
    assert pool.tier_store(h(7)) in got  # the tier takes free slots before evicting
    assert pool.num_tier_resident == 4
    pool.check([])


def test_pinned_tier_blocks_are_never_evicted_and_a_full_pinned_tier_refuses():
    pool = HostBlockPool(num_swap_blocks=1, num_tier_blocks=2)
    for i in range(3):
        pool.tier_store(h(i))
    pool.pin([h(0), h(1), h(2)])
    assert pool.tier_store(h(9)) is None and pool.num_offers_refused == 1
    assert pool.swap_available() == 0  # swap cannot take a slot a restore is reading
    assert not pool.tier_remove(h(0))  # pinned: stays
    pool.unpin([h(0)])
    assert pool.tier_store(h(9)) is not None  # h(0) was the LRU unpinned one
    assert pool.tier_lookup(h(0)) is None
    with pytest.raises(PoolInvariantError):
        pool.unpin([h(0)])
    pool.unpin([h(1), h(2)])
    pool.check([])


# ---- the engine --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_model_folder(tmp_path_factory.mktemp("tiny_tier"))


def make_engine(folder, cpu_blocks: int, num_blocks: int = NUM_BLOCKS, **kw):
    from local_engine.engine import LLMEngine
    from local_engine.runner import kv_block_bytes

    kw.setdefault("max_num_batched_tokens", 64)
    probe = LLMEngine.from_config(folder, device="cpu", num_kv_blocks=1)
    bb = kv_block_bytes(probe.model_config, BS, probe.runner.kv_format)
    return LLMEngine.from_config(
        folder,
        device="cpu",
        seed=0,
        max_num_seqs=8,
        num_kv_blocks=num_blocks,
        debug_checks=True,
        cpu_cache_memory=cpu_blocks * bb,
        **kw,
    )


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(256) for _ in range(PROMPT_LEN)] for _ in range(n)]


def run(eng, rid, ids, salt=None, params=GREEDY, max_steps=10_000):
    """Add a request and step until it finishes; its final output."""
    eng.add_request(rid, ids, params, cache_salt=salt)
    for _ in range(max_steps):
        for o in eng.step():
            if o.finished and o.request_id == rid:
                return o
    raise AssertionError(f"{rid} did not finish in {max_steps} steps")


def idle_checks(eng):
    kv = eng.kv_cache_manager
    kv.end_step()
    eng.scheduler.check_invariants()
    assert kv.num_free_blocks == kv.num_blocks and not kv.num_restores_in_flight
    assert not kv.host.pins and kv.host.swap_used == 0
    assert len(kv.host.free) + kv.host.num_tier_resident == kv.host.num_blocks


def test_an_evicted_prefix_comes_back_from_the_tier_counted_as_cached(folder):
    """Four 70-token prompts through a 10-block pool, then the first again. Each request holds
    5 blocks (75 tokens), 4 of them full and cached when it ends: 16 cached blocks went
    through a pool of 10, so at least 6 were evicted, least recently used first: all 4 of the
    first prompt's. Its rerun finds ``(70 - 1) // 16 = 4`` blocks = 64 tokens in the CPU tier
    (one token is always computed) and computes only the last 6; with the tier off it
    recomputes all 70. The greedy tokens are the same in all three runs (the first
    computation, the restore, the recompute), and the same as a big pool's device hit."""
    ps = prompts(4)
    on, off = make_engine(folder, cpu_blocks=64), make_engine(folder, cpu_blocks=0)
    firsts = [run(on, f"p{i}", p) for i, p in enumerate(ps)]
    for i, p in enumerate(ps):
        run(off, f"p{i}", p)
    assert all(o.num_cached_tokens == 0 for o in firsts)
    again_on, again_off = run(on, "again", ps[0]), run(off, "again", ps[0])
    assert (again_on.num_cached_tokens, again_on.num_cpu_cached_tokens) == (64, 64)
    assert again_on.num_gpu_cached_tokens == 0
    assert (again_off.num_cached_tokens, again_off.num_cpu_cached_tokens) == (0, 0)
    assert again_on.token_ids == again_off.token_ids == firsts[0].token_ids
    big = make_engine(folder, cpu_blocks=0, num_blocks=64)
    run(big, "p0", ps[0])
    hit = run(big, "again", ps[0])
    assert hit.num_cached_tokens == 64 and hit.token_ids == again_on.token_ids
    m = on.metrics
    assert m.prefix_cache_hits_cpu == 64 and m.prefix_cache_hits == 64
    assert m.prefix_cache_hits_gpu == 0 and m.prefix_cache_queries == 5 * PROMPT_LEN
    bb = on.runner.kv_transfer.block_bytes
    assert m.kv_bytes_cpu_to_gpu == 4 * bb  # the four restored blocks, no more
    assert m.kv_bytes_gpu_to_cpu == on.kv_cache_manager.num_blocks_offloaded * bb > 0
    assert m.kv_bytes_gpu_to_cpu == on.kv_cache_manager.pool.num_evictions * bb  # room for all
    # the restored blocks moved (one tier at a time): the tier no longer holds them
    assert m.cpu_cache_blocks_resident == on.kv_cache_manager.num_blocks_offloaded - 4
    idle_checks(on)


def test_a_restore_racing_an_abort_and_decodes_that_never_wait(folder):
    """The tier's copy back is held in flight (as on CUDA): the request waits RESTORING while
    another request keeps decoding every step; it is aborted before the copy is done; its
    fresh device blocks come back only once the copy is done, the tier keeps the prefix, and
    a later request restores it intact."""
    ps = prompts(4)
    eng = make_engine(folder, cpu_blocks=64)
    firsts = [run(eng, f"p{i}", p) for i, p in enumerate(ps)]
    xfer = eng.runner.kv_transfer
    held: list[int] = []
    real_poll = xfer.poll
    release = False

    def poll():
        held.extend(real_poll())
        if not release:
            return []
        out = held[:]
        held.clear()
        return out

    xfer.poll = poll
    long = SamplingParams(temperature=0.0, max_tokens=30)
    eng.add_request("busy", prompts(1, seed=7)[0][:20], long)
    eng.step()  # busy prefills
    eng.add_request("victim", ps[0], GREEDY)
    kv = eng.kv_cache_manager
    busy_tokens = []
    for _ in range(4):
        outs = {o.request_id: o for o in eng.step()}
        assert "victim" not in outs  # not run: its copy is in flight
        busy_tokens.append(len(outs["busy"].token_ids))
    assert busy_tokens == sorted(busy_tokens) and busy_tokens[-1] - busy_tokens[0] == 3
    assert kv.num_restores_in_flight == 1 and len(kv.host.pins) == 4
    free_before = kv.num_free_blocks
    eng.abort_request("victim")
    eng.scheduler.check_invariants()  # its 4 restoring blocks stay held (orphaned)
    assert kv.num_free_blocks == free_before + 1  # only its block for the new tokens came back
    release = True
    for _ in range(100):
        if not eng.has_unfinished_requests():
            break
        eng.step()
    eng.step()  # nothing to run: the finished copy is reported and its blocks come back
    idle_checks(eng)
    assert kv.host.num_tier_resident >= 4  # the tier kept the prefix
    again = run(eng, "again", ps[0])
    assert (again.num_cached_tokens, again.num_cpu_cached_tokens) == (64, 64)
    assert again.token_ids == firsts[0].token_ids
    idle_checks(eng)


def test_pinned_blocks_survive_tier_pressure_during_a_restore(folder):
    """While a restore is in flight, other prompts evict enough blocks to overflow a small
    tier: the blocks being copied are pinned, so the restored prefix is intact."""
    ps = prompts(6, seed=3)
    eng = make_engine(folder, cpu_blocks=6)
    first = run(eng, "p0", ps[0])
    run(eng, "p1", ps[1])
    # p0 leaves 4 cached blocks and 6 plain free ones; p1 takes 5 plain ones; p2 takes the last
    # 2 plain ones and evicts 3, least recently used first: p0's blocks freed tail first, so
    # its blocks 3, 2, 1 go to the tier and block 0 stays on the device
    run(eng, "p2", ps[2])
    kv = eng.kv_cache_manager
    xfer = eng.runner.kv_transfer
    held: list[int] = []
    real_poll = xfer.poll
    state = {"release": False}

    def poll():
        held.extend(real_poll())
        out = held[:] if state["release"] else []
        if state["release"]:
            held.clear()
        return out

    xfer.poll = poll
    eng.add_request("back", ps[0], GREEDY)
    eng.step()
    assert kv.num_restores_in_flight == 1
    pinned = set(kv.host.pins)
    evictions = kv.host.num_tier_evictions
    run(eng, "p3", ps[3])
    run(eng, "p4", ps[4])
    assert kv.host.num_tier_evictions > evictions  # the tier overflowed meanwhile
    assert pinned <= set(kv.host.tier)  # but kept what the restore reads
    state["release"] = True
    back = None
    for _ in range(100):
        for o in eng.step():
            if o.request_id == "back" and o.finished:
                back = o
        if back is not None:
            break
    assert back is not None
    assert (back.num_cached_tokens, back.num_cpu_cached_tokens) == (64, 48)
    assert back.token_ids == first.token_ids
    eng.step()
    idle_checks(eng)


def test_a_prefix_evicted_from_the_tier_meanwhile_is_recomputed(folder):
    """A 4-block tier: six prompts later (24 cached blocks through a 10-block pool, at least
    14 evictions, each offered to the tier in LRU order) the first prompt's blocks, the first
    4 offered, were pushed out by at least 10 later ones. Its rerun finds nothing in either
    tier and recomputes, with the same output."""
    ps = prompts(7, seed=5)
    eng = make_engine(folder, cpu_blocks=4)
    first = run(eng, "p0", ps[0])
    for i in range(1, 7):
        run(eng, f"p{i}", ps[i])
    again = run(eng, "again", ps[0])
    assert (again.num_cached_tokens, again.num_cpu_cached_tokens) == (0, 0)
    assert again.token_ids == first.token_ids
    assert eng.kv_cache_manager.host.num_tier_evictions >= 10
    idle_checks(eng)


def test_cache_salts_isolate_tenants_in_the_cpu_tier(folder):
    ps = prompts(4, seed=9)
    eng = make_engine(folder, cpu_blocks=64)
    a = run(eng, "a0", ps[0], salt="tenant-a")
    for i in range(1, 4):
        run(eng, f"a{i}", ps[i], salt="tenant-a")
    other = run(eng, "b0", ps[0], salt="tenant-b")
    unsalted = run(eng, "n0", ps[0])
    assert other.num_cached_tokens == 0 and unsalted.num_cached_tokens == 0
    mine = run(eng, "a0-again", ps[0], salt="tenant-a")
    assert (mine.num_cached_tokens, mine.num_cpu_cached_tokens) == (64, 64)
    assert mine.token_ids == a.token_ids == other.token_ids
    idle_checks(eng)


def test_quantized_blocks_travel_with_their_scales(folder):
    """int8 KV: the tier carries the values and the per-token-head scales inside each block;
    the rerun restores them byte for byte (same greedy tokens as the first computation)."""
    ps = prompts(4, seed=11)
    eng = make_engine(folder, cpu_blocks=64, kv_cache_dtype="int8")
    firsts = [run(eng, f"p{i}", p) for i, p in enumerate(ps)]
    again = run(eng, "again", ps[0])
    assert again.num_cpu_cached_tokens == 64 and again.token_ids == firsts[0].token_ids
    idle_checks(eng)


def test_swap_and_the_tier_share_the_host_pool(folder):
    """Swap space and the tier together: preemptions swap while the tier holds evicted
    prefixes; outputs match a run without either, and nothing leaks."""
    from local_engine.engine import LLMEngine
    from local_engine.runner import kv_block_bytes

    ps = prompts(6, seed=13)
    probe = LLMEngine.from_config(folder, device="cpu", num_kv_blocks=1)
    bb = kv_block_bytes(probe.model_config, BS, probe.runner.kv_format)
    both = make_engine(folder, cpu_blocks=24, swap_space=8 * bb, max_num_batched_tokens=32)
    plain = make_engine(folder, cpu_blocks=0, num_blocks=64)
    params = SamplingParams(temperature=0.0, max_tokens=12)
    outs = {}
    for rnd in range(2):  # six at once: preemptions swap; then again: the tier serves them
        for i, p in enumerate(ps):
            both.add_request(f"r{rnd}-{i}", p, params)
        while both.has_unfinished_requests():
            for o in both.step():
                if o.finished:
                    outs[o.request_id] = o
    for i, p in enumerate(ps):
        ref = run(plain, f"ref{i}", p, params=params)
        assert outs[f"r0-{i}"].token_ids == ref.token_ids == outs[f"r1-{i}"].token_ids
    m = both.metrics
    assert m.num_swaps >= 1 and m.prefix_cache_hits_cpu > 0
    both.step()
    idle_checks(both)


def test_bad_sizes_are_refused(folder):
    from local_engine.config import EngineConfig

    with pytest.raises(EngineError, match="cpu_cache_memory"):
        EngineConfig(cpu_cache_memory=-1)
    with pytest.raises(EngineError, match="enable_prefix_caching"):
        EngineConfig(cpu_cache_memory=1 << 20, enable_prefix_caching=False)
    from local_engine.engine import LLMEngine

    with pytest.raises(EngineError, match="holds no KV block"):
        LLMEngine.from_config(folder, device="cpu", num_kv_blocks=4, cpu_cache_memory=10)


def test_serve_flag_parses_human_sizes_and_refuses_nonsense(capsys):
    import argparse

    from local_engine.server import cli

    assert cli.parse_size("4GiB") == 4 * 2**30
    assert cli.parse_size("512MiB") == 512 * 2**20
    assert cli.parse_size("2GB") == 2 * 10**9
    assert cli.parse_size("1048576") == 1048576
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--cpu-cache-memory", "lots", "--port", "0"])
    assert cli.run(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--cpu-cache-memory" in err[0] and "4GiB" in err[0]


def test_the_real_model_restores_the_same_greedy_continuation(engine_factory):
    """SmolLM2-135M (the embedded GGUF, float32): the same arithmetic as the tiny model's
    test (70-token prompts, a 10-block pool, the first prompt's 4 full blocks evicted to the
    tier): 64 tokens come back from the tier and the greedy continuation equals both the
    first computation and the tier-off recompute."""
    block_bytes = 2 * 30 * 3 * 64 * 4 * BS  # 30 layers, 3 KV heads of 64, float32: 737,280
    on = engine_factory(num_kv_blocks=NUM_BLOCKS, cpu_cache_memory=64 * block_bytes,
                        max_num_batched_tokens=64, debug_checks=True)  # fmt: skip
    off = engine_factory(num_kv_blocks=NUM_BLOCKS, max_num_batched_tokens=64)
    ps = [[(i * 7919 + 13 * j) % 49152 for j in range(PROMPT_LEN)] for i in range(4)]
    firsts = [run(on, f"p{i}", p) for i, p in enumerate(ps)]
    for i, p in enumerate(ps):
        run(off, f"p{i}", p)
    again_on, again_off = run(on, "again", ps[0]), run(off, "again", ps[0])
    assert (again_on.num_cached_tokens, again_on.num_cpu_cached_tokens) == (64, 64)
    assert again_off.num_cached_tokens == 0
    assert again_on.token_ids == again_off.token_ids == firsts[0].token_ids
    idle_checks(on)
