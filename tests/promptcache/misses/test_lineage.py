"""Lineage by shared prefix (promptcache.misses.lineage): interleaved conversations on one
client get the causes they get alone.

Each conversation is a tenant's chat (its own system prompt and question, the same tool
and tool calls as every other tenant) of four turns under OpenAI's rules (gpt-4o: 1,024-token
minimum, 128-token steps; promptcache.limits): the usage of each turn is worked out by hand
from those rules -- turn 1 reads nothing, turns 2 and 3 read the whole previous prompt
(1,152 and 1,280 tokens, both on the 128-token grid), turn 4 changes the tool's description,
which comes first in the cached prefix, so it reads nothing.
"""

from __future__ import annotations

import pytest

from promptcache import Tracker, Usage
from promptcache.limits import cache_limits
from promptcache.misses.lineage import match

RULES = cache_limits("gpt-4o")
PROMPTS = (1152, 1280, 1408, 1536)  # prompt tokens per turn
READS = (0, 1152, 1280, 0)
ALONE = [
    ("cold", None),
    ("hit", None),
    ("hit", None),
    ("prefix_changed", "$.tools[0].function.description"),
]


def body(tenant: int, turn: int) -> dict:
    desc = "Look up an order." if turn < 3 else "Look up an order and its carrier."
    msgs: list[dict] = [
        {"role": "system", "content": f"Tenant {tenant}: you answer for shop {tenant}. " * 40},
        {"role": "user", "content": f"Where is my order {tenant}?"},
    ]
    for i in range(min(turn, 2)):
        call = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "status", "arguments": "{}"},
        }
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": f"step {i}: shipped"},
        ]
    if turn == 3:
        msgs.append({"role": "user", "content": "Which carrier?"})
    tool = {"type": "function", "function": {"name": "status", "description": desc}}
    return {"model": "gpt-4o", "tools": [tool], "messages": msgs}


def usage(turn: int) -> Usage:
    return Usage(
        uncached_input_tokens=PROMPTS[turn] - READS[turn],
        cache_read_tokens=READS[turn],
        output_tokens=5,
        provider="openai",
        model="gpt-4o",
    )


def send(t: Tracker, tenant: int, turn: int, ts: float) -> None:
    t.record(usage(turn), request=body(tenant, turn), api="chat.completions", ts=ts, rules=RULES)


def by_tenant(t: Tracker, order: list[int]) -> dict[int, list]:
    out: dict[int, list] = {}
    for tenant, r in zip(order, t.records()):
        out.setdefault(tenant, []).append(r)
    return out


@pytest.mark.parametrize("n", [2, 5, 50])
def test_interleaved_conversations_get_the_causes_they_get_alone(tmp_path, n) -> None:
    alone = Tracker(tmp_path / "alone.db")
    for turn in range(4):
        send(alone, 0, turn, 1000.0 + turn)
    assert [(r.miss_cause, r.miss_path) for r in alone.records()] == ALONE

    mixed = Tracker(tmp_path / "mixed.db")
    order = []
    ts = 2000.0
    for turn in range(4):  # round robin: every tenant's turn 1, then every turn 2, ...
        for tenant in range(n):
            send(mixed, tenant, turn, ts)
            order.append(tenant)
            ts += 0.5
    per = by_tenant(mixed, order)
    for tenant in range(n):
        assert [(r.miss_cause, r.miss_path) for r in per[tenant]] == ALONE, tenant
    # one lineage key per conversation, distinct across conversations
    keys = {tenant: {r.lineage for r in recs} for tenant, recs in per.items()}
    assert all(len(k) == 1 for k in keys.values())
    assert len({next(iter(k)) for k in keys.values()}) == n


def test_parallel_branches_each_continue_their_parent(tmp_path) -> None:
    """Two calls branching from the same turn (parallel tool calls, sub-agents) both
    continue it: each contains the parent whole, so each is a hit on it."""
    t = Tracker(tmp_path / "l.db")
    send(t, 0, 0, 1000.0)
    send(t, 0, 1, 1001.0)  # the parent
    base = body(0, 1)
    for k, ts in ((0, 1002.0), (1, 1003.0)):
        branch = {**base, "messages": base["messages"] + [{"role": "user", "content": f"sub {k}"}]}
        t.record(
            Usage(
                uncached_input_tokens=128,
                cache_read_tokens=1280,
                output_tokens=3,
                provider="openai",
                model="gpt-4o",
            ),
            request=branch,
            api="chat.completions",
            ts=ts,
            rules=RULES,
        )
    recs = t.records()
    assert [r.miss_cause for r in recs] == ["cold", "hit", "hit", "hit"]
    assert len({r.lineage for r in recs}) == 1


def test_the_session_key_still_comes_first(tmp_path) -> None:
    """A named lineage is compared with its own latest request, even when another
    conversation shares a longer prefix."""
    t = Tracker(tmp_path / "l.db")
    t.record(
        usage(0),
        request=body(1, 0),
        api="chat.completions",
        ts=1000.0,
        rules=RULES,
        lineage="session:x",
    )
    t.record(usage(0), request=body(2, 0), api="chat.completions", ts=1001.0, rules=RULES)
    # tenant 2's next turn, but filed under session x (tenant 1's): compared with it
    t.record(
        Usage(uncached_input_tokens=1280, output_tokens=5, provider="openai", model="gpt-4o"),
        request=body(2, 1),
        api="chat.completions",
        ts=1002.0,
        rules=RULES,
        lineage="session:x",
    )
    last = t.records()[-1]
    assert last.lineage == "session:x"
    assert (last.miss_cause, last.miss_path) == ("prefix_changed", "$.messages[0].content")


def test_match_rules() -> None:
    # contained whole: the next turn of the same conversation
    assert match(["t", "s", "u"], ["t", "s"]).related
    # an edit with the rest kept (two or more segments after it)
    assert match(["t2", "s", "u", "a"], ["t", "s", "u"]).related
    # a new conversation sharing the head and a one-message tail ("hi") is not related
    m = match(["t", "sB", "hi"], ["t", "sA", "hi"])
    assert not m.related and m.useful
    # nothing shared at all
    assert not match(["x"], ["y"]).useful


def test_an_edited_head_continues_the_conversation(tmp_path) -> None:
    """The textbook bust through wrap()'s path: a system prompt led by the current time,
    sent twice within the same second, then a minute later. The third request shares no
    leading segment with anything, but its system prompt (1,262 characters: 10 blocks of
    128) differs only in its first block, 9 of 10 blocks equal >= SIMILAR: it is the same
    conversation with its prefix changed at $.messages[0].content, not a cold start. A
    different shop's prompt (no block in common) stays a new conversation."""
    t = Tracker(tmp_path / "edit.db")
    rules = "".join(
        f"Rule {i}: answer for shop 7 about order {i * 37} in at most {i + 2} lines. "
        for i in range(20)
    )

    def req(system: str) -> dict:
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": "Hi"}]
        return {"model": "gpt-4o", "messages": msgs}

    def u(read: int) -> Usage:
        return Usage(
            uncached_input_tokens=1300 - read,
            cache_read_tokens=read,
            output_tokens=3,
            provider="openai",
            model="gpt-4o",
        )

    sent = [
        ("Now: 2026-12-03 13:40:07\n" + rules, 0),
        ("Now: 2026-12-03 13:40:07\n" + rules, 1280),
        ("Now: 2026-12-03 13:41:52\n" + rules, 0),
        ("".join(f"Tenant 9, item {i}: quote its price in euros. " for i in range(30)), 0),
    ]
    for i, (system, read) in enumerate(sent):
        t.record(u(read), request=req(system), api="chat.completions", ts=100.0 + i, rules=RULES)
    recs = t.records()
    assert [(r.miss_cause, r.miss_path) for r in recs] == [
        ("cold", None),
        ("hit", None),
        ("prefix_changed", "$.messages[0].content"),
        ("cold", None),
    ]
    assert recs[2].lineage == recs[1].lineage != recs[3].lineage
