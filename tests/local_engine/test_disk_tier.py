"""The disk tier of the prefix cache (``EngineConfig.disk_cache_dir``): the block files (format,
checks, atomic writes, the byte cap and its LRU order), whole engines on a tiny random-weight
model (a restart in a new process reads the prefix back from disk with exact per-tier counts
and the recompute's greedy tokens; corrupt, truncated and swapped files are skipped, logged
and recomputed; two processes share one folder), and random interleavings over the three
tiers keeping every pool's invariants."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from local_engine import SamplingParams
from local_engine.errors import EngineError
from local_engine.kv_cache.block_pool import hash_block_tokens
from local_engine.kv_cache.disk_store import (
    HEADER_BYTES,
    BadBlockFile,
    DiskStore,
    unpack_block,
)

from .attention.test_triton_cuda_graphs import tiny_model_folder

BS = 16
PROMPT_LEN = 70  # 4 full blocks + 6 tokens
GREEDY = SamplingParams(temperature=0.0, max_tokens=5)
FP = bytes(range(32))
ROOT = Path(__file__).resolve().parents[2]


def h(i: int) -> bytes:
    return i.to_bytes(32, "little")


def payload(i: int, n: int = 256) -> memoryview:
    return memoryview(bytes((i * 7 + k) % 251 for k in range(n)))


# ---- the files ---------------------------------------------------------------------------


def test_a_block_file_round_trips_and_its_header_is_the_documented_88_bytes(tmp_path):
    st_ = DiskStore(tmp_path, FP, 256, capacity=1 << 20)
    assert st_.write(h(1), payload(1)) == HEADER_BYTES + 256 == 88 + 256
    p = st_.path(h(1))
    assert p == tmp_path / FP.hex()[:16] / h(1).hex()[:2] / (h(1).hex() + ".kvb")
    raw = p.read_bytes()
    assert raw[:8] == b"PCKVBLK\x01" and raw[8:40] == FP and raw[40:72] == h(1)
    assert int.from_bytes(raw[72:80], "little") == 256
    import zlib

    assert int.from_bytes(raw[80:84], "little") == zlib.crc32(bytes(payload(1)))
    assert bytes(st_.read(h(1))) == bytes(payload(1))
    assert st_.write(h(1), payload(1)) == 0  # already there
    # a new store on the folder (a restart) finds it
    again = DiskStore(tmp_path, FP, 256, capacity=1 << 20)
    assert again.contains(h(1)) and len(again) == 1


@pytest.mark.parametrize("damage", ["flip", "truncate", "swap", "foreign", "empty"])
def test_damaged_files_are_refused_logged_once_and_deleted(tmp_path, caplog, damage):
    st_ = DiskStore(tmp_path, FP, 256, capacity=1 << 20)
    st_.write(h(1), payload(1))
    st_.write(h(2), payload(2))
    p1, p2 = st_.path(h(1)), st_.path(h(2))
    raw = bytearray(p1.read_bytes())
    if damage == "flip":
        raw[HEADER_BYTES + 100] ^= 0x10
        p1.write_bytes(bytes(raw))
    elif damage == "truncate":
        p1.write_bytes(bytes(raw[:-9]))
    elif damage == "swap":  # the two files exchange names
        tmp = p1.with_suffix(".x")
        os.replace(p1, tmp)
        os.replace(p2, p1)
        os.replace(tmp, p2)
    elif damage == "foreign":  # another model's file under this name
        other = DiskStore(tmp_path / "other", bytes(32), 256, capacity=1 << 20)
        other.write(h(1), payload(1))
        os.replace(other.path(h(1)), p1)
    else:
        p1.write_bytes(b"")
    caplog.set_level(logging.WARNING, logger="local_engine.kv_cache.disk")
    with pytest.raises(BadBlockFile):
        st_.read(h(1))
    assert len([r for r in caplog.records if "skipping" in r.getMessage()]) == 1
    assert not p1.exists() and not st_.contains(h(1)) and st_.num_bad == 1
    if damage == "swap":
        with pytest.raises(BadBlockFile):
            st_.read(h(2))
    else:
        assert bytes(st_.read(h(2))) == bytes(payload(2))


def test_the_cap_holds_and_evicts_the_least_recently_used_file_across_restarts(tmp_path):
    file_bytes = HEADER_BYTES + 256
    st_ = DiskStore(tmp_path, FP, 256, capacity=3 * file_bytes)
    for i in range(3):
        st_.write(h(i), payload(i))
        os.utime(st_.path(h(i)), (1000 + i, 1000 + i))  # distinct, ordered mtimes
    st_.rescan()
    st_.read(h(0))  # h(0) becomes the most recent (mtime = now)
    st_.write(h(3), payload(3))  # over the cap: h(1), the least recently used, goes
    assert sorted(st_.index) == sorted([h(0), h(2), h(3)])
    assert not st_.path(h(1)).exists() and st_.num_evicted == 1
    files = list(tmp_path.rglob("*.kvb"))
    assert sum(f.stat().st_size for f in files) <= 3 * file_bytes
    # another engine's files count towards the cap too (one folder, one cap)
    other = DiskStore(tmp_path, bytes(32), 256, capacity=3 * file_bytes)
    other.write(h(9), payload(9))
    assert sum(f.stat().st_size for f in tmp_path.rglob("*.kvb")) <= 3 * file_bytes
    with pytest.raises(ValueError, match="holds no KV block"):
        DiskStore(tmp_path, FP, 256, capacity=100)


def test_a_reader_never_sees_a_partial_file(tmp_path):
    """Writes go to a temporary name and are renamed: while a writer rewrites the same block
    over and over, every read of the final name is whole and checks out."""
    import threading

    st_ = DiskStore(tmp_path, FP, 1 << 16, capacity=1 << 30)
    body = memoryview(os.urandom(1 << 16))
    st_.write(h(5), body)
    stop = threading.Event()

    def rewrite():
        w = DiskStore(tmp_path, FP, 1 << 16, capacity=1 << 30)
        while not stop.is_set():
            w.index.clear()  # force a rewrite of the same file
            w.write(h(5), body)

    t = threading.Thread(target=rewrite)
    t.start()
    try:
        for _ in range(200):
            raw = st_.path(h(5)).read_bytes()
            assert bytes(unpack_block(raw, FP, h(5), 1 << 16)) == bytes(body)
    finally:
        stop.set()
        t.join()
    assert not list(tmp_path.rglob("*.tmp"))


# ---- engines -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_model_folder(tmp_path_factory.mktemp("tiny_disk"))


def engine_kwargs(disk_dir, cpu_blocks=0, num_blocks=10, **kw):
    """Engine options of these tests; ``cpu_blocks`` CPU-tier blocks of the tiny model."""
    from local_engine.runner import kv_block_bytes  # noqa: F401 (the engine's own sizing)

    kw.setdefault("max_num_batched_tokens", 64)
    # tiny model, float32: 2 layers x 2 (K, V) x 16 tokens x 2 KV heads x 16 dims x 4 bytes
    block_bytes = 2 * 2 * BS * 2 * 16 * 4
    return dict(
        device="cpu",
        seed=0,
        max_num_seqs=8,
        num_kv_blocks=num_blocks,
        debug_checks=True,
        cpu_cache_memory=cpu_blocks * block_bytes,
        disk_cache_dir=None if disk_dir is None else str(disk_dir),
        **kw,
    )


def make_engine(folder, disk_dir, **kw):
    from local_engine.engine import LLMEngine

    return LLMEngine.from_config(folder, **engine_kwargs(disk_dir, **kw))


def prompts(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(256) for _ in range(PROMPT_LEN)] for _ in range(n)]


def run(eng, rid, ids, params=GREEDY, max_steps=10_000):
    eng.add_request(rid, ids, params)
    for _ in range(max_steps):
        for o in eng.step():
            if o.finished and o.request_id == rid:
                return o
    raise AssertionError(f"{rid} did not finish in {max_steps} steps")


def block_hashes(ids: list[int], n: int) -> list[bytes]:
    out, parent = [], None
    for i in range(n):
        parent = hash_block_tokens(parent, ids[i * BS : (i + 1) * BS])
        out.append(parent)
    return out


CHILD = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {root!r})
    from tests.local_engine.test_disk_tier import make_engine, run, GREEDY
    from pathlib import Path
    args = json.loads(sys.argv[1])
    eng = make_engine(Path(args["folder"]), args["disk"], **args["kw"])
    out = {{"runs": []}}
    for rnd in range(args.get("rounds", 1)):
        for i, p in enumerate(args["prompts"]):
            o = run(eng, f"r{{rnd}}p{{i}}", p)
            out["runs"].append([o.token_ids, o.num_cached_tokens, o.num_gpu_cached_tokens,
                                o.num_cpu_cached_tokens, o.num_disk_cached_tokens])
    eng.disk_tier.flush()
    m = eng.metrics
    out["metrics"] = {{k: getattr(m, k) for k in ("prefix_cache_hits_disk",
        "disk_cache_bad_files", "kv_bytes_to_disk", "kv_bytes_from_disk")}}
    if args.get("close"):
        eng.close()
    print("RESULT " + json.dumps(out))
    """
)


def child(folder, disk, prompts_, **kw):
    """Run prompts in a fresh Python process; its outputs and metrics."""
    args = {
        "folder": str(folder),
        "disk": str(disk),
        "prompts": prompts_,
        "kw": kw.pop("engine", {}),
        **kw,
    }
    return subprocess.Popen(
        [sys.executable, "-c", CHILD.format(root=str(ROOT)), json.dumps(args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def result(proc) -> dict:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    line = [x for x in out.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :])


def test_a_restart_in_a_new_process_reads_the_prefix_from_disk(folder, tmp_path):
    """Process A: six 70-token prompts through a 10-block pool and a 4-block CPU tier. Each
    leaves 4 full cached blocks: 24 through 14 slots, so the first prompt's 4 blocks (the
    least recently used) fall through both tiers to disk. Process B, a fresh engine on the
    folder: the first prompt finds ``(70 - 1) // 16 = 4`` blocks = 64 tokens, all on disk
    (nothing is in its device pool or CPU tier), and its greedy tokens equal a recompute's."""
    disk = tmp_path / "kv"
    ps = prompts(6)
    a = result(child(folder, disk, ps, engine={"cpu_blocks": 4}))
    on_disk = {bytes.fromhex(p.stem) for p in disk.rglob("*.kvb")}
    assert set(block_hashes(ps[0], 4)) <= on_disk
    b = result(child(folder, disk, ps[:1], engine={"cpu_blocks": 4}))
    tokens, cached, gpu, cpu, from_disk = b["runs"][0]
    assert (cached, gpu, cpu, from_disk) == (64, 0, 0, 64)
    recompute = run(make_engine(folder, None, num_blocks=64), "x", ps[0])
    assert recompute.num_cached_tokens == 0
    assert tokens == recompute.token_ids == a["runs"][0][0]
    assert b["metrics"]["prefix_cache_hits_disk"] == 64
    assert b["metrics"]["kv_bytes_from_disk"] == 4 * 2 * 2 * BS * 2 * 16 * 4


def test_a_restart_without_a_cpu_tier_and_close_writes_back_what_is_cached(folder, tmp_path):
    """No CPU tier and no eviction: one prompt in a big pool, then ``close()`` writes its 4
    cached blocks (and the 5th? no: 75 tokens hold 4 full blocks) to disk; the next engine
    reads them back."""
    disk = tmp_path / "kv"
    p = prompts(1, seed=3)[0]
    eng = make_engine(folder, disk, num_blocks=64)
    first = run(eng, "a", p)
    assert not list(disk.rglob("*.kvb"))  # nothing evicted yet
    eng.close()
    assert {bytes.fromhex(f.stem) for f in disk.rglob("*.kvb")} == set(block_hashes(p, 4))
    again = run(make_engine(folder, disk, num_blocks=64), "b", p)
    assert (again.num_cached_tokens, again.num_disk_cached_tokens) == (64, 64)
    assert again.token_ids == first.token_ids


@pytest.mark.parametrize("damage", ["flip", "truncate", "swap"])
def test_damaged_prefix_files_are_recomputed_never_served(folder, tmp_path, caplog, damage):
    """The prefix's 4 block files on disk; block 2's file damaged (a flipped payload byte, a
    truncation, or blocks 1 and 2 exchanging names). A fresh engine's lookup finds all 4
    on disk, the read of the bad one(s) fails: one log line each, the file deleted, the
    request looked up again: the blocks before the first bad one are now on the device
    (read back well), the rest is computed. The greedy tokens equal the recompute's."""
    disk = tmp_path / "kv"
    p = prompts(1, seed=5)[0]
    eng = make_engine(folder, disk, num_blocks=64)
    first = run(eng, "a", p)
    eng.close()
    hs = block_hashes(p, 4)
    eng2 = make_engine(folder, disk, num_blocks=64)
    f1, f2 = eng2.disk_tier.store.path(hs[1]), eng2.disk_tier.store.path(hs[2])
    if damage == "flip":
        raw = bytearray(f2.read_bytes())
        raw[-5] ^= 0x01
        f2.write_bytes(bytes(raw))
        good = 2
    elif damage == "truncate":
        f2.write_bytes(f2.read_bytes()[:-100])
        good = 2
    else:
        tmp = f1.with_suffix(".x")
        os.replace(f1, tmp)
        os.replace(f2, f1)
        os.replace(tmp, f2)
        good = 1
    caplog.set_level(logging.WARNING, logger="local_engine.kv_cache.disk")
    again = run(eng2, "b", p)
    bad = 1 if damage != "swap" else 2
    assert len([r for r in caplog.records if "skipping" in r.getMessage()]) == bad
    assert eng2.metrics.disk_cache_bad_files == bad
    assert (again.num_cached_tokens, again.num_gpu_cached_tokens) == (good * BS, good * BS)
    assert again.num_disk_cached_tokens == 0  # counted as the retry found them
    assert again.token_ids == first.token_ids
    assert not f2.exists() or damage == "swap" and not f1.exists()
    eng2.scheduler.check_invariants()


def test_two_processes_share_one_folder(folder, tmp_path):
    """Two engines in two processes run the same six prompts twice at once, on one folder,
    with 10-block pools (prompts evicted to disk and read back, files of the same blocks
    written by both). Every run's greedy tokens equal the first run's and a recompute's;
    both read blocks back from disk; no bad file is seen; no temporary file is left and
    every file checks out."""
    disk = tmp_path / "kv"
    ps = prompts(6, seed=11)
    procs = [child(folder, disk, ps, rounds=2, close=True) for _ in range(2)]
    outs = [result(pr) for pr in procs]
    ref = [
        run(make_engine(folder, None, num_blocks=64), f"x{i}", p).token_ids
        for i, p in enumerate(ps)
    ]
    for out in outs:
        assert [r[0] for r in out["runs"]] == ref + ref
        assert out["metrics"]["disk_cache_bad_files"] == 0
        assert out["metrics"]["prefix_cache_hits_disk"] > 0
    assert not list(disk.rglob("*.tmp"))
    files = list(disk.rglob("*.kvb"))
    assert files
    for f in files:
        raw = f.read_bytes()
        unpack_block(raw, raw[8:40], bytes.fromhex(f.stem), len(raw) - HEADER_BYTES)


def test_the_engine_keeps_the_cap(folder, tmp_path):
    disk = tmp_path / "kv"
    file_bytes = HEADER_BYTES + 2 * 2 * BS * 2 * 16 * 4
    eng = make_engine(folder, disk, disk_cache_size=6 * file_bytes)
    for i, p in enumerate(prompts(8, seed=2)):
        run(eng, f"p{i}", p)
    eng.close()
    files = list(disk.rglob("*.kvb"))
    assert 0 < len(files) <= 6 and sum(f.stat().st_size for f in files) <= 6 * file_bytes
    assert eng.metrics.disk_cache_evictions >= 8 * 4 - 6


def test_bad_disk_options_are_refused(folder, tmp_path):
    with pytest.raises(EngineError, match="enable_prefix_caching"):
        make_engine(folder, tmp_path, enable_prefix_caching=False)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(EngineError, match="disk_cache_size"):
            make_engine(folder, tmp_path, disk_cache_size=bad)


def test_serve_flags_parse_the_disk_cache(tmp_path, capsys):
    import argparse

    from local_engine.server import cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args(["--disk-cache-dir", str(tmp_path), "--disk-cache-size", "20GiB"])
    assert cli.disk_overrides(args) == {
        "disk_cache_dir": str(tmp_path),
        "disk_cache_size": 20 * 2**30,
    }
    assert cli.disk_overrides(parser.parse_args([])) == {}  # off by default
    args = parser.parse_args(["--disk-cache-dir", str(tmp_path), "--disk-cache-size", "big"])
    args.port = 0
    assert cli.run(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--disk-cache-size" in err[0]


# ---- random interleavings over three tiers -----------------------------------------------


class TierDriver:
    """A scheduler and manager with a CPU tier and a disk store (small fake payloads), driven
    as the engine drives them: restores finish part by part, in any order, some disk reads
    fail (a file deleted under the engine, as another engine's eviction would)."""

    def __init__(self, tmp: Path, num_blocks, cpu_swap, cpu_tier, budget, seed):
        from local_engine.kv_cache import KVCacheManager
        from local_engine.scheduler import Scheduler

        self.store = DiskStore(tmp, FP, 32, capacity=40 * (HEADER_BYTES + 32))
        self.kv = KVCacheManager(num_blocks, BS, True, cpu_swap, cpu_tier, disk=self.store)
        self.sched = Scheduler(self.kv, 4, budget, True)
        self.rng = random.Random(seed)
        self.cpu_parts: list[int] = []
        self.disk_parts: list[tuple[int, list[bytes]]] = []

    def step(self):
        from local_engine.sequence import SequenceStatus

        out = self.sched.schedule()
        host, dev = self.kv.take_disk_writes()
        for _, hh in host + dev:
            self.store.write(hh, memoryview(hh))
        for job in out.tier_restore:
            if job.copies:
                self.cpu_parts.append(job.job_id)
            if job.disk_reads:
                self.disk_parts.append((job.job_id, [x for x, _ in job.disk_reads]))
        for s in out.scheduled:
            seq = s.seq
            seq.num_computed_tokens += s.num_new_tokens
            self.kv.cache_computed_blocks(seq)
            if s.samples:
                seq.all_token_ids.append(self.rng.randrange(1000))
                if seq.num_tokens >= seq.max_total_len:
                    self.sched.finish(seq, SequenceStatus.FINISHED_LENGTH)

    def finish_some(self):
        if self.cpu_parts and self.rng.random() < 0.6:
            self.kv.finish_restores([self.cpu_parts.pop(0)])
        if self.disk_parts and self.rng.random() < 0.6:
            jid, hashes = self.disk_parts.pop(self.rng.randrange(len(self.disk_parts)))
            failed = []
            for x in hashes:
                try:
                    self.store.read(x)
                except (OSError, BadBlockFile):
                    failed.append(x)
            self.kv.finish_restores([jid], {jid: failed})


STEP = st.tuples(st.just("step"))
ops3 = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(16, 80), st.integers(1, 4), st.integers(0, 3)),
        STEP,
        STEP,
        st.tuples(st.just("finish")),
        st.tuples(st.just("abort"), st.integers(0, 30)),
        st.tuples(st.just("unlink"), st.integers(0, 1000)),
    ),
    min_size=20,
    max_size=120,
)


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    ops=ops3,
    num_blocks=st.integers(6, 20),
    budget=st.integers(8, 96),
    cpu=st.sampled_from([(0, 0), (0, 4), (4, 4), (2, 8)]),
    seed=st.integers(0, 100),
)
def test_random_interleavings_over_three_tiers_keep_every_pool_consistent(
    tmp_path_factory, ops, num_blocks, budget, cpu, seed
):
    from local_engine.sampling import SamplingParams as SP
    from local_engine.sequence import Sequence, SequenceStatus

    d = TierDriver(tmp_path_factory.mktemp("h"), num_blocks, cpu[0], cpu[1], budget, seed)
    seqs = []
    prefixes = [list(range(p * 1000, p * 1000 + 64)) for p in range(4)]
    for op in ops:
        if op[0] == "add":
            _, plen, max_new, prefix = op
            if plen + 1 > d.sched.max_sequence_tokens:
                continue
            toks = (prefixes[prefix] + list(range(len(seqs) * 7, len(seqs) * 7 + plen)))[:plen]
            seq = Sequence(f"s{len(seqs)}", f"s{len(seqs)}", 0, toks, SP(max_tokens=max_new))
            seq.max_total_len = min(plen + max_new, d.sched.max_sequence_tokens)
            d.sched.add(seq)
            seqs.append(seq)
        elif op[0] == "step":
            d.step()
        elif op[0] == "finish":
            d.finish_some()
        elif op[0] == "abort" and seqs:
            s = seqs[op[1] % len(seqs)]
            if not s.is_finished:
                d.sched.finish(s, SequenceStatus.FINISHED_ABORTED)
        elif op[0] == "unlink" and d.store.index:
            victim = list(d.store.index)[op[1] % len(d.store.index)]
            d.store.path(victim).unlink(missing_ok=True)  # another engine evicted it
        d.sched.check_invariants()
    for _ in range(3000):  # drain
        if not d.sched.has_unfinished() and not d.kv.num_restores_in_flight:
            break
        d.step()
        while d.cpu_parts or d.disk_parts:
            d.finish_some()
            d.rng.random()
        d.sched.check_invariants()
    assert not d.sched.has_unfinished() and not d.kv.num_restores_in_flight
    d.kv.end_step()
    assert d.kv.num_free_blocks == d.kv.num_blocks
    assert not d.kv.host.pins and d.kv.host.swap_used == 0
    # every file still on disk holds what was written for its hash
    for x in list(d.store.index):
        if d.store.path(x).exists():
            assert bytes(d.store.read(x)) == x
