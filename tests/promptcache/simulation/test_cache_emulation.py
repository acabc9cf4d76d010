"""promptcache.simulation.emulation against the providers' documented numbers.

Every expected value is worked out by hand in the comment next to it from the rules
quoted in the module docstring (Anthropic and OpenAI prompt-caching pages, 2026-11-29).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from promptcache.limits import ANTHROPIC_LOOKBACK_BLOCKS
from promptcache.simulation.emulation import (
    BlockPrefix,
    Breakpoint,
    CacheRuleError,
    CacheState,
    ManualClock,
    PromptLayout,
    TokenPrefix,
    anthropic_min_cacheable_tokens,
    anthropic_usage,
    check_anthropic_breakpoints,
    openai_breakpoint_usage,
    openai_round_cached,
    openai_usage,
    openai_uses_breakpoints,
)


def toks(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


# ---------------------------------------------------------------- fingerprints


def test_token_prefix_digests_equal_exactly_on_shared_prefixes():
    a = TokenPrefix([1, 2, 3, 4, 5])
    b = TokenPrefix([1, 2, 3, 9, 5])
    da, db = a.digests([1, 2, 3, 4, 5]), b.digests([1, 2, 3, 4, 5])
    assert [da[i] == db[i] for i in range(1, 6)] == [True, True, True, False, False]
    assert 6 not in a.digests([6])  # beyond the prompt


def test_block_prefix_matches_within_identical_blocks_only():
    a = BlockPrefix([(100, "sys"), (50, "q1")])
    b = BlockPrefix([(100, "sys"), (50, "q2")])
    da, db = a.digests([60, 100, 120, 150]), b.digests([60, 100, 120, 150])
    assert da[60] == db[60] and da[100] == db[100]
    assert da[120] != db[120] and da[150] != db[150]
    assert a.block_ends == [100, 150]


# ---------------------------------------------------------------- Anthropic validation


def test_anthropic_fifth_breakpoint_is_rejected_with_anthropics_message():
    check_anthropic_breakpoints([Breakpoint(i * 10) for i in range(1, 5)])  # 4 is fine
    with pytest.raises(CacheRuleError) as e:
        check_anthropic_breakpoints([Breakpoint(i * 10) for i in range(1, 6)])
    assert e.value.message == "A maximum of 4 blocks with cache_control may be provided. Found 5."


def test_anthropic_1h_after_5m_is_rejected_and_1h_before_5m_is_fine():
    check_anthropic_breakpoints([Breakpoint(10, "1h"), Breakpoint(20, "5m")])
    with pytest.raises(CacheRuleError) as e:
        check_anthropic_breakpoints(
            [
                Breakpoint(10, "5m", "system.0.cache_control.ttl"),
                Breakpoint(20, "1h", "messages.0.content.1.cache_control.ttl"),
            ]
        )
    assert e.value.message.startswith(
        "messages.0.content.1.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m'"
    )
    assert "`tools`, `system`, `messages`" in e.value.message
    with pytest.raises(CacheRuleError):
        check_anthropic_breakpoints([Breakpoint(10, "10m")])


def test_anthropic_minimum_lengths_by_model():
    assert anthropic_min_cacheable_tokens("claude-sonnet-4-5-20250929") == 1024
    assert anthropic_min_cacheable_tokens("claude-haiku-4-5") == 4096
    assert anthropic_min_cacheable_tokens("claude-opus-4-6") == 4096
    assert anthropic_min_cacheable_tokens("claude-opus-4-1-20250805") == 1024
    assert anthropic_min_cacheable_tokens("claude-3-5-haiku-20241022") == 2048
    assert anthropic_min_cacheable_tokens("SmolLM2-135M-Instruct") == 1024
    assert anthropic_min_cacheable_tokens("SmolLM2-135M-Instruct", default=256) == 256


# ---------------------------------------------------------------- Anthropic accounting


def test_anthropic_write_then_read_then_ttl_expiry():
    clock = ManualClock()
    st = CacheState(clock)
    # 1,500-token system block with a 5m breakpoint, then a 40-token question.
    p1 = toks(1500) + toks(40, 10_000)
    lay1 = PromptLayout(p1, [1500, 1540], [Breakpoint(1500, "5m")])
    u = anthropic_usage(st, lay1)
    # first request: nothing cached; 1,500 written at 5m; 40 after the breakpoint
    assert (u.cache_read_tokens, u.cache_write_tokens, u.uncached_tokens) == (0, {"5m": 1500}, 40)

    clock.advance(299)  # inside 5 minutes
    p2 = toks(1500) + toks(55, 20_000)
    u = anthropic_usage(st, PromptLayout(p2, [1500, 1555], [Breakpoint(1500, "5m")]))
    assert (u.cache_read_tokens, u.cache_write_tokens, u.uncached_tokens) == (1500, {}, 55)

    clock.advance(299)  # 598 s after the write, 299 s after the hit: the hit refreshed it
    u = anthropic_usage(st, PromptLayout(p2, [1500, 1555], [Breakpoint(1500, "5m")]))
    assert u.cache_read_tokens == 1500

    clock.advance(300)  # exactly 5 minutes idle: expired, written again
    u = anthropic_usage(st, PromptLayout(p2, [1500, 1555], [Breakpoint(1500, "5m")]))
    assert (u.cache_read_tokens, u.cache_write_tokens) == (0, {"5m": 1500})


def test_anthropic_1h_entry_survives_past_5m():
    clock = ManualClock()
    st = CacheState(clock)
    p = toks(2000) + [7, 7, 7]
    lay = PromptLayout(p, [2000, 2003], [Breakpoint(2000, "1h")])
    assert anthropic_usage(st, lay).cache_write_tokens == {"1h": 2000}
    clock.advance(3599)
    assert anthropic_usage(st, lay).cache_read_tokens == 2000
    clock.advance(3600)
    assert anthropic_usage(st, lay).cache_read_tokens == 0


def test_anthropic_below_minimum_is_silently_not_cached():
    st = CacheState(ManualClock())
    p = toks(1023) + [5]
    lay = PromptLayout(p, [1023, 1024], [Breakpoint(1023)])
    u = anthropic_usage(st, lay)  # 1,023 < 1,024: no write, all input uncached
    assert (u.cache_read_tokens, u.cache_write_total, u.uncached_tokens) == (0, 0, 1024)
    u = anthropic_usage(st, lay)
    assert u.cache_read_tokens == 0
    # the same prefix is cached under a model whose minimum is 512
    u = anthropic_usage(st, lay, min_cacheable_tokens=512)
    assert u.cache_write_tokens == {"5m": 1023}


def test_anthropic_split_writes_by_ttl_and_partial_hit():
    st = CacheState(ManualClock())
    # tools (1,200 tokens, 1h) | system (800, 5m) | question (30)
    p = toks(2030)
    lay = PromptLayout(p, [1200, 2000, 2030], [Breakpoint(1200, "1h"), Breakpoint(2000, "5m")])
    u = anthropic_usage(st, lay)
    # 0..1200 written at 1h; 1200..2000 written at 5m; 30 uncached
    assert (u.cache_read_tokens, u.cache_write_tokens, u.uncached_tokens) == (
        0,
        {"1h": 1200, "5m": 800},
        30,
    )
    # change the system block: tools prefix (1,200) read, 800 re-written at 5m
    p2 = toks(1200) + toks(830, 50_000)
    u = anthropic_usage(st, PromptLayout(p2, [1200, 2000, 2030], lay.breakpoints))
    assert (u.cache_read_tokens, u.cache_write_tokens, u.uncached_tokens) == (1200, {"5m": 800}, 30)


def test_anthropic_lookback_is_20_blocks():
    assert ANTHROPIC_LOOKBACK_BLOCKS == 20
    # 30 blocks of 100 tokens; one breakpoint on block 30 (end 3000).
    ends = [100 * i for i in range(1, 31)]

    def prompt(changed_block: int | None) -> list[int]:
        t = toks(3000)
        if changed_block is not None:  # blocks numbered from 1
            i = (changed_block - 1) * 100
            t[i] = -1 - t[i]
        return t

    def grow(changed_block: int | None, first_breakpoint_end: int):
        st = CacheState(ManualClock())
        # an earlier request wrote an entry at the end of block N (its own breakpoint)
        anthropic_usage(st, PromptLayout(toks(3000), ends, [Breakpoint(first_breakpoint_end)]))
        return anthropic_usage(st, PromptLayout(prompt(changed_block), ends, [Breakpoint(3000)]))

    # entry at block 30, nothing changed: hit 3000
    assert grow(None, 3000).cache_read_tokens == 3000
    # entry at block 11 (1100): block 11 is the 20th boundary counted back from block 30
    # (30, 29, ..., 11) -> hit 1100, and 1900 written
    u = grow(None, 1100)
    assert (u.cache_read_tokens, u.cache_write_tokens) == (1100, {"5m": 1900})
    # entry at block 10 (1000): 21 blocks back, outside the window -> miss
    assert grow(None, 1000).cache_read_tokens == 0
    # block 25 changed, entry at block 24 (2400): inside the window -> hit 2400
    assert grow(25, 2400).cache_read_tokens == 2400


def test_anthropic_reads_from_an_earlier_breakpoints_window():
    st = CacheState(ManualClock())
    ends = [100 * i for i in range(1, 41)]
    anthropic_usage(st, PromptLayout(toks(4000), ends, [Breakpoint(1200)]))
    # breakpoints at block 40 (window 21..40) and block 15 (window 1..15): entry 1200 found
    # through the second breakpoint's window although it is 28 blocks before block 40
    u = anthropic_usage(st, PromptLayout(toks(4000), ends, [Breakpoint(1500), Breakpoint(4000)]))
    assert (u.cache_read_tokens, u.cache_write_tokens, u.uncached_tokens) == (1200, {"5m": 2800}, 0)


def test_anthropic_partitions_do_not_share():
    st = CacheState(ManualClock())
    lay = PromptLayout(toks(1100), [1100], [Breakpoint(1100)])
    anthropic_usage(st, lay, partition=("m", "tenant-a"))
    assert anthropic_usage(st, lay, partition=("m", "tenant-b")).cache_read_tokens == 0
    assert anthropic_usage(st, lay, partition=("m", "tenant-a")).cache_read_tokens == 1100


# ---------------------------------------------------------------- OpenAI before GPT-5.6


def test_openai_rounding_numbers():
    # 0 below 1,024; then 1024 + 128*k rounded down
    assert [openai_round_cached(n) for n in (0, 1023, 1024, 1151, 1152, 1279, 1280, 2000)] == [
        0,
        0,
        1024,
        1024,
        1152,
        1152,
        1280,
        1920,
    ]


def test_openai_legacy_shared_prefix_in_128_steps():
    st = CacheState(ManualClock())
    shared = toks(1500)
    u = openai_usage(st, PromptLayout(shared + toks(20, 90_000)))
    assert (u.cache_read_tokens, u.uncached_tokens, u.writes_reported) == (0, 1520, False)
    # second request shares 1,500 tokens -> cached 1024 + 3*128 = 1408 (1536 > 1500)
    u = openai_usage(st, PromptLayout(shared + toks(30, 80_000)))
    assert (u.cache_read_tokens, u.uncached_tokens, u.cache_write_tokens) == (1408, 122, {})


def test_openai_legacy_short_prompt_never_hits():
    st = CacheState(ManualClock())
    p = toks(1000)
    openai_usage(st, PromptLayout(p))
    assert openai_usage(st, PromptLayout(p)).cache_read_tokens == 0


def test_openai_prompt_cache_key_separates_and_retention_expires():
    clock = ManualClock()
    st = CacheState(clock)
    p = PromptLayout(toks(1300))
    openai_usage(st, p, partition="key-a")
    assert openai_usage(st, p, partition="key-b").cache_read_tokens == 0
    assert openai_usage(st, p, partition="key-a").cache_read_tokens == 1280  # 1024 + 2*128
    clock.advance(300)  # 5 minutes idle -> in-memory entry gone
    assert openai_usage(st, p, partition="key-a").cache_read_tokens == 0
    # 24h retention keeps it through an hour of idleness
    openai_usage(st, p, partition="k24", retention="24h")
    clock.advance(3600)
    assert openai_usage(st, p, partition="k24", retention="24h").cache_read_tokens == 1280


def test_openai_in_memory_entry_lives_at_most_one_hour():
    clock = ManualClock()
    st = CacheState(clock)
    p = PromptLayout(toks(1100))
    openai_usage(st, p)
    for _ in range(14):  # hit every 4 minutes: 56 minutes, still alive
        clock.advance(240)
        assert openai_usage(st, p).cache_read_tokens == 1024
    clock.advance(240)  # 60 minutes after the first write
    assert openai_usage(st, p).cache_read_tokens == 0


# ---------------------------------------------------------------- OpenAI GPT-5.6+


def test_openai_model_families():
    assert openai_uses_breakpoints("gpt-5.6") is True
    assert openai_uses_breakpoints("gpt-5.6-mini") is True
    assert openai_uses_breakpoints("gpt-6") is True
    assert openai_uses_breakpoints("gpt-5.5") is False
    assert openai_uses_breakpoints("gpt-4o-mini") is False
    assert openai_uses_breakpoints("o3-mini") is False
    assert openai_uses_breakpoints("SmolLM2-135M-Instruct") is None


def test_openai_explicit_breakpoint_exact_boundary_and_writes():
    st = CacheState(ManualClock())
    stable = toks(1300)
    p1 = stable + toks(50, 70_000)
    lay1 = PromptLayout(p1, breakpoints=[Breakpoint(1300, "30m")])
    u = openai_breakpoint_usage(st, lay1, implicit_end=1350)
    # implicit (1350) + explicit (1300) written: 1,350 tokens written, none read
    assert (u.cache_read_tokens, u.cache_write_tokens, u.uncached_tokens) == (0, {"30m": 1350}, 0)
    p2 = stable + toks(70, 60_000)
    u = openai_breakpoint_usage(
        st, PromptLayout(p2, breakpoints=[Breakpoint(1300, "30m")]), implicit_end=1370
    )
    # exact read at the explicit boundary (1300, not rounded to 128), 70 written again
    assert (u.cache_read_tokens, u.cache_write_tokens) == (1300, {"30m": 70})


def test_openai_explicit_mode_without_breakpoints_caches_nothing():
    st = CacheState(ManualClock())
    lay = PromptLayout(toks(2000))
    u = openai_breakpoint_usage(st, lay, implicit_end=2000, mode="explicit")
    assert (u.cache_read_tokens, u.cache_write_total, u.uncached_tokens) == (0, 0, 2000)
    assert (
        openai_breakpoint_usage(st, lay, implicit_end=2000, mode="explicit").cache_read_tokens == 0
    )


def test_openai_writes_at_most_latest_four_breakpoints():
    st = CacheState(ManualClock())
    bps = [Breakpoint(e, "30m") for e in (1100, 1200, 1300, 1400, 1500)]
    u = openai_breakpoint_usage(st, PromptLayout(toks(1600), breakpoints=bps), mode="explicit")
    assert u.cache_write_tokens == {"30m": 1500}  # furthest written breakpoint
    # only the latest 4 (1200..1500) were written: a prompt diverging at 1150 finds none
    p = toks(1150) + toks(450, 40_000)
    u = openai_breakpoint_usage(st, PromptLayout(p), mode="explicit")
    assert u.cache_read_tokens == 0
    p = toks(1250) + toks(350, 40_000)
    assert openai_breakpoint_usage(st, PromptLayout(p), mode="explicit").cache_read_tokens == 1200


def test_openai_breakpoint_ttl_12h():
    clock = ManualClock()
    st = CacheState(clock)
    lay = PromptLayout(toks(1200), breakpoints=[Breakpoint(1100, "12h")])
    openai_breakpoint_usage(st, lay, mode="explicit")
    clock.advance(11 * 3600)
    assert openai_breakpoint_usage(st, lay, mode="explicit").cache_read_tokens == 1100
    with pytest.raises(CacheRuleError):
        openai_breakpoint_usage(st, PromptLayout(toks(10), breakpoints=[Breakpoint(5, "5m")]))


def test_module_imports_without_torch_or_local_engine():
    code = (
        "import sys, promptcache.simulation.emulation; "
        "bad = [m for m in ('torch', 'local_engine') if m in sys.modules]; "
        "sys.exit(1 if bad else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
