"""Block pool and KV-cache manager, without a model: reference counts, prefix hits, the
at-least-one-token rule, LRU eviction order, tail-first freeing, copy-on-write, invariants."""

from __future__ import annotations

import pytest

from local_engine.kv_cache import BlockPool, KVCacheManager, PoolInvariantError, hash_block_tokens
from local_engine.sampling import SamplingParams
from local_engine.sequence import Sequence

BS = 16


def make_seq(sid, tokens, salt=None):
    return Sequence(sid, sid, 0, list(tokens), SamplingParams(), cache_salt=salt)


def admit(kv, seq):
    """What the scheduler does for a waiting sequence: look up, allocate the rest, and (after
    the step ran) register the computed blocks."""
    hits, cached = kv.get_computed_blocks(seq)
    n = seq.num_tokens - cached
    copies = kv.allocate_slots(seq, n, hits)
    assert copies == []
    seq.num_computed_tokens = seq.num_tokens
    kv.cache_computed_blocks(seq)
    return cached


def test_chain_hash_depends_on_parent_tokens_and_salt():
    a = hash_block_tokens(None, list(range(16)))
    assert a == hash_block_tokens(None, list(range(16)))
    assert len(a) == 32
    assert a != hash_block_tokens(None, list(range(1, 17)))
    assert hash_block_tokens(a, [5] * 16) != hash_block_tokens(None, [5] * 16)
    assert hash_block_tokens(None, [5] * 16, ("salt", "x")) != hash_block_tokens(
        None, [5] * 16, ("salt", "y")
    )


def test_prefix_hit_rounds_down_to_blocks_and_shares_blocks():
    kv = KVCacheManager(32, BS)
    a = make_seq("a", range(100, 150))  # 50 tokens: 3 full blocks + 2
    assert admit(kv, a) == 0
    b = make_seq("b", list(range(100, 140)) + [7] * 10)  # shares 40 tokens
    assert admit(kv, b) == 32  # 40 rounded down to whole blocks
    assert kv.block_ids("a")[:2] == kv.block_ids("b")[:2]
    assert kv.block_ids("a")[2] != kv.block_ids("b")[2]
    kv.check_invariants()
    assert [kv.pool.blocks[i].ref_cnt for i in kv.block_ids("a")[:2]] == [2, 2]


def test_fully_cached_prompt_recomputes_last_block():
    kv = KVCacheManager(16, BS)
    admit(kv, make_seq("a", range(64)))
    b = make_seq("b", range(64))
    hits, cached = kv.get_computed_blocks(b)
    assert cached == 48 and len(hits) == 3  # at least one token left to compute
    c = make_seq("c", range(65))
    assert kv.get_computed_blocks(c)[1] == 64


def test_partial_block_is_never_shared():
    kv = KVCacheManager(16, BS)
    admit(kv, make_seq("a", range(20)))
    b = make_seq("b", range(20))
    assert kv.get_computed_blocks(b)[1] == 16


def test_freed_cached_blocks_stay_reusable_and_lru_is_evicted_first():
    kv = KVCacheManager(6, BS)
    for name, start in [("p1", 0), ("p2", 1000), ("p3", 2000)]:
        s = make_seq(name, range(start, start + 32))  # 2 full blocks each
        admit(kv, s)
        kv.free(s)
    assert kv.num_free_blocks == 6 and len(kv.pool.cached_free) == 6
    # touch p1 again (hit), so p2 is now the least recently used prefix
    again = make_seq("p1-again", list(range(0, 32)) + [1])
    assert admit(kv, again) == 32
    kv.free(again)
    # a new 2-block request must evict exactly p2's two blocks (the LRU ones)
    new = make_seq("new", range(5000, 5032))
    admit(kv, new)
    kv.free(new)
    assert kv.get_computed_blocks(make_seq("x", list(range(1000, 1032)) + [1]))[1] == 0  # p2 lost
    assert kv.get_computed_blocks(make_seq("y", list(range(0, 32)) + [1]))[1] == 32  # p1 kept
    assert kv.get_computed_blocks(make_seq("z", list(range(2000, 2032)) + [1]))[1] == 32  # p3 kept
    assert kv.pool.num_evictions == 2


def test_plain_free_blocks_are_used_before_evicting_cached_ones():
    kv = KVCacheManager(4, BS)
    a = make_seq("a", range(32))
    admit(kv, a)
    kv.free(a)
    b = make_seq("b", range(500, 532))  # needs 2: the 2 never-used blocks, no eviction
    admit(kv, b)
    assert kv.pool.num_evictions == 0
    assert kv.get_computed_blocks(make_seq("c", list(range(32)) + [0]))[1] == 32


def test_tail_first_freeing_evicts_unshared_tail_before_shared_prefix():
    kv = KVCacheManager(4, BS)
    a = make_seq("a", range(48))  # 3 full blocks
    admit(kv, a)
    kv.free(a)  # frees block 2, then 1, then 0: the tail is least recently used
    b = make_seq("b", range(900, 932))  # needs 2 blocks: 1 plain free + evict 1 cached
    admit(kv, b)
    assert kv.pool.num_evictions == 1
    # the prefix blocks 0-1 survive, the tail block 2 was evicted
    assert kv.get_computed_blocks(make_seq("c", list(range(48)) + [0]))[1] == 32


def test_copy_on_write_after_fork():
    kv = KVCacheManager(8, BS)
    parent = make_seq("p", range(20))  # 1 full block + 4 tokens in a partial block
    admit(kv, parent)
    child = Sequence("p#1", "p", 1, list(range(20)), SamplingParams())
    child.num_computed_tokens = 20
    kv.fork(parent, child)
    assert kv.block_ids("p") == kv.block_ids("p#1")
    kv.check_invariants()
    parent.all_token_ids.append(1)
    child.all_token_ids.append(2)
    partial = kv.block_ids("p")[1]
    copies = kv.allocate_slots(child, 1)  # writes token 20 into the shared partial block
    assert len(copies) == 1 and copies[0][0] == partial
    assert kv.block_ids("p#1")[1] == copies[0][1] != partial
    assert kv.block_ids("p#1")[0] == kv.block_ids("p")[0]  # the full block stays shared
    assert kv.allocate_slots(parent, 1) == []  # now the only holder: writes in place
    kv.check_invariants()
    kv.free(parent)
    kv.free(child)
    assert kv.num_free_blocks == 8
    kv.check_invariants()


def test_allocation_failure_changes_nothing():
    kv = KVCacheManager(3, BS)
    a = make_seq("a", range(40))
    admit(kv, a)
    b = make_seq("b", range(100, 140))
    assert kv.allocate_slots(b, 40) is None
    assert kv.block_ids("b") == [] and kv.num_free_blocks == 0
    kv.check_invariants()


def test_invariant_check_fails_loudly_on_corruption():
    kv = KVCacheManager(4, BS)
    a = make_seq("a", range(20))
    admit(kv, a)
    kv.pool.blocks[kv.block_ids("a")[0]].ref_cnt += 1
    with pytest.raises(PoolInvariantError, match="ref count"):
        kv.check_invariants()
    pool = BlockPool(4)
    pool.free_uncached.append(pool.free_uncached[0])
    with pytest.raises(PoolInvariantError):
        pool.check()
    pool = BlockPool(2)
    (b,) = pool.allocate(1)
    pool.free([b])
    with pytest.raises(PoolInvariantError, match="double free"):
        pool.free([b])


def test_salted_requests_never_share():
    kv = KVCacheManager(16, BS)
    admit(kv, make_seq("a", range(40), salt="t1"))
    assert kv.get_computed_blocks(make_seq("b", range(40), salt="t2"))[1] == 0
    assert kv.get_computed_blocks(make_seq("c", range(40)))[1] == 0
    assert kv.get_computed_blocks(make_seq("d", range(40), salt="t1"))[1] == 32


def test_a_block_declined_for_a_duplicate_hash_is_registered_once_the_hash_is_free():
    """Two equal prompts computed in the same step: the first registers its full blocks, the
    second's are declined (the hash is taken). Once the first's blocks are evicted, the next
    ``cache_computed_blocks`` of the second registers its own (the skip over already-hashed
    blocks must not skip blocks that were declined), and a third request hits them."""
    kv = KVCacheManager(16, BS)
    prompt = list(range(32)) + [1]  # 2 full blocks + 1 token
    a, b = make_seq("a", prompt), make_seq("b", prompt)
    for s in (a, b):
        assert kv.get_computed_blocks(s) == ([], 0)
        assert kv.allocate_slots(s, len(prompt)) == []
        s.num_computed_tokens = len(prompt)
    kv.cache_computed_blocks(a)
    kv.cache_computed_blocks(b)

    def hashed(sid):
        return [kv.pool.blocks[i].block_hash is not None for i in kv.block_ids(sid)]

    assert hashed("a") == [True, True, False] and hashed("b") == [False, False, False]
    kv.check_invariants()
    kv.free(a)
    assert kv.reset_prefix_cache() == 2  # a's two cached blocks forgotten
    kv.cache_computed_blocks(b)
    assert hashed("b") == [True, True, False]
    hits, cached = kv.get_computed_blocks(make_seq("c", prompt))
    assert cached == 32 and [h.block_id for h in hits] == kv.block_ids("b")[:2]
    kv.check_invariants()


def test_block_table_rows_follow_fork_copy_on_write_swap_and_free():
    """The gathered int32 block tables equal ``block_ids`` (padded with 0) after every kind of
    change to a table."""
    kv = KVCacheManager(24, BS, num_cpu_blocks=8)

    def same():
        ids = list(kv.req_blocks)
        arr = kv.block_table_array(ids)
        width = max([len(kv.block_ids(i)) for i in ids] + [1])
        assert arr.tolist() == [kv.block_ids(i) + [0] * (width - len(kv.block_ids(i))) for i in ids]
        kv.check_invariants()

    p = make_seq("p", range(20))
    kv.allocate_slots(p, 20)
    p.num_computed_tokens = 20
    same()
    child = Sequence("p#1", "p", 1, list(range(20)), SamplingParams())
    child.num_computed_tokens = 20
    kv.fork(p, child)
    same()
    assert kv.allocate_slots(child, 1)  # copy-on-write of the shared partial block
    same()
    assert kv.block_ids("p")[1] != kv.block_ids("p#1")[1]
    assert kv.allocate_slots(p, 30) == []  # grows by two blocks
    same()
    copies = kv.swap_out(p)
    assert len(copies) == 4 and kv.block_table_array(["p"]).tolist() == [[0]]
    same()
    assert len(kv.swap_in(p)) == 4
    same()
    kv.free(child)
    kv.free(p)
    same()
    assert kv.block_table_array(["p", "p#1"]).tolist() == [[0], [0]]


def test_block_table_rows_grow_in_rows_and_columns_and_reuse_released_rows():
    from local_engine.kv_cache.block_table import BlockTableRows

    rows = BlockTableRows(rows=2, cols=2)
    want = {}
    for i in range(40):  # more sequences than rows, longer tables than columns
        sid = f"s{i}"
        want[sid] = [1000 * i + j for j in range(i % 7 + 1)]
        rows.append(sid, want[sid][:2])
        rows.append(sid, want[sid][2:])
    for i in range(0, 40, 3):  # release some, then reuse their rows for new sequences
        rows.release(f"s{i}")
        del want[f"s{i}"]
    for i in range(40, 50):
        want[f"s{i}"] = [7, 8, 9]
        rows.assign(f"s{i}", [7, 8, 9])
    rows.set("s1", 1, 555)
    want["s1"][1] = 555
    ids = sorted(want) + ["never"]
    arr = rows.gather(ids)
    width = max(len(v) for v in want.values())
    assert arr.shape == (len(ids), width) == (len(want) + 1, 7)
    assert arr.tolist() == [want[s] + [0] * (width - len(want[s])) for s in sorted(want)] + [
        [0] * width
    ]
    assert all(rows.ids(s) == want[s] for s in want) and rows.ids("s0") == []
    assert len(set(rows.row_of.values())) == len(want) and 0 not in rows.row_of.values()
