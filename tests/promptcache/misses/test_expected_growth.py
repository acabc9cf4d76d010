"""Expected growth is not a miss (issue 29, part 4): a difference confined to the newest turn
is a hit with new content; a difference in an older turn stays ``prefix_changed``.

The shapes are the demo's (one system prompt, a new question each request; OpenAI-style
automatic caching: the whole previous prompt is cached in 128-token steps above 1,024,
promptcache.limits) and an agent loop's (a tool result appended after the assistant's call)."""

from __future__ import annotations

from promptcache.misses.cause import Observation, attribute, newest_turn_start
from promptcache.misses.digest_chain import build_chain
from promptcache.providers.usage import Usage

SYSTEM = "You answer questions about the attached handbook. " * 200  # ~10 k chars
MODEL = "gpt-4o"


def chat(*turns: str) -> dict:
    msgs: list[dict] = [{"role": "system", "content": SYSTEM}]
    for i, t in enumerate(turns):
        msgs.append({"role": "assistant" if i % 2 else "user", "content": t})
    return {"model": MODEL, "messages": msgs}


def obs(body: dict, prompt: int, read: int, ts: float) -> Observation:
    u = Usage(
        uncached_input_tokens=prompt - read,
        cache_read_tokens=read,
        cache_write_tokens=0,
        provider="openai",
        model=MODEL,
    )
    return Observation(build_chain(body, "chat.completions"), u, ts)


def test_newest_turn_is_after_the_last_assistant_message() -> None:
    chain = build_chain(chat("q1", "a1", "q2"), "chat.completions")
    start = newest_turn_start(chain)
    assert start is not None and chain.segments[start].path == "$.messages[3]"
    one = build_chain(chat("q1"), "chat.completions")
    assert one.segments[newest_turn_start(one)].path == "$.messages[1]"


def test_a_new_question_is_a_hit_with_new_content() -> None:
    # the demo's shape: same system prompt, a new question; the previous 2,600-token prompt
    # is cached; this one reads the 2,560 tokens of the shared system prompt (the question is
    # a few tokens): before part 4 this was prefix_changed at $.messages[1].content
    prev = obs(chat("What is the leave policy?"), 2600, 0, 1000.0)
    cur = obs(chat("How many sick days are there?"), 2602, 2560, 1010.0)
    a = attribute(cur, prev)
    assert a.cause == "hit" and a.path is None
    assert "new content of the newest turn (from $.messages[1].content)" in a.detail


def test_a_short_read_of_the_shared_part_is_still_a_miss_but_not_prefix_changed() -> None:
    prev = obs(chat("What is the leave policy?"), 2600, 0, 1000.0)
    cur = obs(chat("How many sick days are there?"), 2602, 1024, 1010.0)
    a = attribute(cur, prev)
    assert a.cause == "partial"  # read 1,024 of the ~2,560 shared tokens within the TTL


def test_a_change_in_an_older_turn_is_prefix_changed() -> None:
    prev = obs(chat("q1", "a1", "q2"), 2700, 2560, 1000.0)
    cur = obs(chat("q1 (edited)", "a1", "q2", "a2", "q3"), 2720, 2560, 1010.0)
    a = attribute(cur, prev)
    assert (a.cause, a.path) == ("prefix_changed", "$.messages[1].content")


def test_an_agent_loop_step_is_a_hit() -> None:
    # the previous request ended with a tool result; this one appends the assistant's next
    # call and its result: the previous request is a prefix (nothing differs), read all of it
    prev = obs(chat("fix the bug", "calling grep", "grep output"), 2700, 2560, 1000.0)
    cur = obs(
        chat("fix the bug", "calling grep", "grep output", "calling sed", "sed ok"),
        2740,
        2688,
        1005.0,
    )
    assert attribute(cur, prev).cause == "hit"
