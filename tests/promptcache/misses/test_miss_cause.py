"""The cause classifier: each cause from a pair of requests whose usage is worked out by
hand from the providers' documented rules (minimums and TTLs from promptcache.limits)."""

from __future__ import annotations

import copy

import pytest

from promptcache.limits import cache_limits
from promptcache.misses.cause import (
    CAUSES,
    Attribution,
    Observation,
    attribute,
    rules_for,
    ttl_seconds,
)
from promptcache.misses.digest_chain import build_chain
from promptcache.providers.usage import Usage

SONNET = "claude-sonnet-4-5"  # minimum 1,024 tokens (limits.py row)
SYSTEM = "You are a meticulous travel planner; always answer in metric units. " * 90


def usage(uncached: int, read: int, write: int, *, provider: str = "anthropic", model=SONNET):
    return Usage(
        uncached_input_tokens=uncached,
        cache_read_tokens=read,
        cache_write_tokens=write,
        cache_write_by_ttl={"5m": write} if write else {},
        provider=provider,
        model=model,
    )


def anthropic(turns: int = 1, *, mark_system: bool = True, mark_last: bool = True, ttl="5m"):
    system: dict = {"type": "text", "text": SYSTEM}
    if mark_system:
        system["cache_control"] = {"type": "ephemeral", "ttl": ttl}
    msgs: list[dict] = []
    for i in range(turns):
        msgs.append({"role": "user", "content": [{"type": "text", "text": f"question {i}"}]})
        msgs.append({"role": "assistant", "content": [{"type": "text", "text": f"answer {i}"}]})
    msgs.append({"role": "user", "content": [{"type": "text", "text": "next question"}]})
    if mark_last:
        msgs[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    return {"model": SONNET, "max_tokens": 64, "system": [system], "messages": msgs}


def obs(body: dict, u: Usage, ts: float, api: str = "messages", **kw) -> Observation:
    return Observation(build_chain(body, api), u, ts, **kw)


P_BODY = anthropic(1)
# P: nothing cached before; the whole prefix up to the last breakpoint is written
P = obs(P_BODY, usage(0, 0, 1500), 1000.0)


def nxt(body: dict) -> dict:
    """The next turn: previous marker dropped, a new question marked."""
    b = copy.deepcopy(body)
    del b["messages"][-1]["content"][0]["cache_control"]
    b["messages"].append({"role": "assistant", "content": [{"type": "text", "text": "ok"}]})
    b["messages"].append(
        {"role": "user", "content": [{"type": "text", "text": "more", "cache_control": {}}]}
    )
    b["messages"][-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    return b


def test_ttl_labels_in_seconds() -> None:
    assert ttl_seconds("5m") == 300 and ttl_seconds("1h") == 3600 and ttl_seconds("24h") == 86400
    assert ttl_seconds("in_memory") == 300  # lower bound of OpenAI's documented 5-10 minutes
    assert ttl_seconds(None) is None and ttl_seconds("forever") is None


def test_rules_come_from_limits() -> None:
    assert rules_for("local", "messages", SONNET) == cache_limits(SONNET, "anthropic")
    assert rules_for("bedrock", "converse", "anthropic.claude-sonnet-4-5").provider == "bedrock"
    assert rules_for("openai", "chat.completions", "gpt-4o").min_tokens == 1024
    assert rules_for("vllm", "chat.completions", "Qwen/Qwen3-8B").provider == "local"


def test_cold_then_hit_on_a_clean_continuation() -> None:
    first = attribute(P, None)
    assert (first.cause, first.path, first.matched_prefix_tokens) == ("cold", None, 0)
    cur = obs(nxt(P_BODY), usage(3, 1500, 20), 1010.0)
    got = attribute(cur, P)
    assert got.cause == "hit"
    assert got.path is None


def test_prefix_changed_names_path_offset_and_matched_length() -> None:
    b = nxt(P_BODY)
    b["system"][0]["text"] = SYSTEM[:3000] + "Now: 2026-12-01T09:14:03Z. " + SYSTEM[3000:]
    # the change lies inside the written prefix: nothing is read, all is written again
    cur = obs(b, usage(3, 0, 1530), 1010.0)
    got = attribute(cur, P)
    assert got.cause == "prefix_changed"
    assert got.path == "$.system[0].text"
    # '{"type":"text","text":"' (23 characters) then 3,000 characters of unchanged text
    assert got.offset_chars == 23 + 3000 and got.exact
    total_tokens, chars = 1533, cur.chain.chars
    assert got.offset_tokens == round(3023 * total_tokens / chars)
    assert got.matched_prefix_tokens == got.offset_tokens
    assert got.before is not None and "Now: 2026" in (got.after or "")


def test_ttl_expired_by_breakpoint_ttl() -> None:
    cur_body = nxt(P_BODY)
    assert attribute(obs(cur_body, usage(3, 0, 1520), 1000.0 + 301), P).cause == "ttl_expired"
    assert attribute(obs(cur_body, usage(3, 0, 1520), 1000.0 + 299), P).cause == (
        "provider_unknown"
    )
    # a 1h breakpoint on the system prompt: 301 s is within its TTL, 3,601 s is not
    b1h = anthropic(1, ttl="1h")
    p1h = obs(b1h, usage(0, 0, 1500), 1000.0)
    c1h = nxt(b1h)
    assert attribute(obs(c1h, usage(3, 0, 1520), 1301.0), p1h).cause == "provider_unknown"
    assert attribute(obs(c1h, usage(3, 0, 1520), 4601.0), p1h).cause == "ttl_expired"


def test_ttl_expired_when_only_the_longer_lived_entry_survived() -> None:
    b = anthropic(1, ttl="1h")
    prev = obs(b, usage(0, 0, 1500), 1000.0)  # system (1h) + history (5m) written
    got = attribute(obs(nxt(b), usage(3, 1400, 120), 1000.0 + 600), prev)
    assert got.cause == "ttl_expired"


def test_below_minimum() -> None:
    short = {
        "model": SONNET,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hi"}],
    }
    got = attribute(obs(short, usage(40, 0, 0), 1000.0), None)
    assert got.cause == "below_minimum"
    assert "1024" in got.detail and "2026-11-29" in got.detail  # the row's source date


def test_no_breakpoint() -> None:
    b = anthropic(1, mark_system=False, mark_last=False)
    assert attribute(obs(b, usage(1500, 0, 0), 1000.0), None).cause == "no_breakpoint"
    # automatic caching (top-level cache_control) needs no block marker
    b["cache_control"] = {"type": "ephemeral"}
    assert attribute(obs(b, usage(3, 0, 1500), 1000.0), None).cause == "cold"


def test_breakpoint_moved_beyond_the_lookback_and_partial() -> None:
    # P writes the history at block 3 (system 0, messages 1..3); the next request adds 30
    # blocks and marks only its last one: 30 > 20 blocks of lookback, the entry is missed
    prev_body = anthropic(1, mark_system=False)
    prev = obs(prev_body, usage(0, 0, 1500), 1000.0)
    b = copy.deepcopy(prev_body)
    del b["messages"][-1]["content"][0]["cache_control"]
    for i in range(15):
        b["messages"].append({"role": "assistant", "content": [{"type": "text", "text": "a"}]})
        b["messages"].append({"role": "user", "content": [{"type": "text", "text": f"q{i}"}]})
    b["messages"][-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    got = attribute(obs(b, usage(3, 0, 1700), 1010.0), prev)
    assert got.cause == "breakpoint_moved"
    # with the system marked too, the system entry is still read: a partial read
    prev2 = obs(anthropic(1), usage(0, 0, 1500), 1000.0)
    b2 = copy.deepcopy(b)
    b2["system"][0]["cache_control"] = {"type": "ephemeral"}
    assert attribute(obs(b2, usage(3, 1400, 300), 1010.0), prev2).cause == "partial"


def test_partial_within_ttl_and_lookback_and_provider_unknown() -> None:
    cur = nxt(P_BODY)
    assert attribute(obs(cur, usage(3, 1000, 520), 1010.0), P).cause == "partial"
    assert attribute(obs(cur, usage(3, 0, 1520), 1010.0), P).cause == "provider_unknown"


def test_unreported_caching_has_no_cause() -> None:
    u = Usage(uncached_input_tokens=1500, cache_reported=False, provider="local", model="m")
    got = attribute(obs(P_BODY, u, 1000.0), None)
    assert got == Attribution(None, detail=got.detail)


def chat(system: str, turns: int, **extra) -> dict:
    """A chat request after ``turns`` turns: each one appends an answer and a question."""
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "q0"}]
    for i in range(turns):
        msgs += [{"role": "assistant", "content": "a"}, {"role": "user", "content": f"q{i + 1}"}]
    return {"model": "gpt-4o", "messages": msgs, **extra}


def ou(prompt: int, cached: int) -> Usage:
    return Usage(
        uncached_input_tokens=prompt - cached,
        cache_read_tokens=cached,
        provider="openai",
        model="gpt-4o",
    )


@pytest.mark.parametrize(
    ("read", "cause"),
    # P had 1,500 prompt tokens: 1024 + 3*128 = 1,408 are readable; one 128-token step
    # less is within the rounding, 1,024 is a partial read
    [(1408, "hit"), (1280, "hit"), (1024, "partial"), (0, "provider_unknown")],
)
def test_openai_expected_read_follows_the_128_token_steps(read: int, cause: str) -> None:
    prev = obs(chat(SYSTEM, 1), ou(1500, 0), 1000.0, api="chat.completions")
    cur = obs(chat(SYSTEM, 2), ou(1520, read), 1010.0, api="chat.completions")
    assert attribute(cur, prev).cause == cause


def test_openai_retention_and_routing_key() -> None:
    prev = obs(chat(SYSTEM, 1), ou(1500, 0), 1000.0, api="chat.completions")
    cur = obs(chat(SYSTEM, 2), ou(1520, 0), 1301.0, api="chat.completions")
    assert attribute(cur, prev).cause == "ttl_expired"  # in-memory: 5 minutes
    prev24 = obs(chat(SYSTEM, 1), ou(1500, 0), 1000.0, api="chat.completions", retention="24h")
    assert attribute(cur, prev24).cause == "provider_unknown"
    keyed = obs(chat(SYSTEM, 1, prompt_cache_key="a"), ou(1500, 0), 1000.0, api="chat.completions")
    rekeyed = obs(
        chat(SYSTEM, 2, prompt_cache_key="b"), ou(1520, 0), 1010.0, api="chat.completions"
    )
    got = attribute(rekeyed, keyed)
    assert (got.cause, got.path, got.offset_chars) == ("prefix_changed", "$.prompt_cache_key", 1)
    small = obs(chat("short", 0), ou(900, 0), 1000.0, api="chat.completions")
    assert attribute(small, None).cause == "below_minimum"


def test_self_hosted_servers_have_no_ttl() -> None:
    def lu(prompt: int, cached: int) -> Usage:
        return ou(prompt, cached).replace(provider="vllm", model="Qwen/Qwen3-8B")

    prev = obs(chat(SYSTEM, 1), lu(1500, 0), 1000.0, api="chat.completions")
    cur = obs(chat(SYSTEM, 2), lu(1520, 0), 1000.0 + 86400, api="chat.completions")
    assert attribute(cur, prev).cause == "provider_unknown"
    # 16-token blocks: 1,500 -> 1,488 readable
    assert (
        attribute(obs(chat(SYSTEM, 2), lu(1520, 1488), 1001.0, api="chat.completions"), prev).cause
        == "hit"
    )


def test_every_cause_is_reachable() -> None:
    # the cause list is what the module docstring's table names
    assert set(CAUSES) == {
        "hit",
        "cold",
        "prefix_changed",
        "ttl_expired",
        "below_minimum",
        "no_breakpoint",
        "breakpoint_moved",
        "partial",
        "provider_unknown",
        "unknown",  # transcripts without their requests (promptcache.transcripts.causes)
    }
