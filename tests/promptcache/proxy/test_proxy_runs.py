"""One ledger, one proxy per agent-CLI run: ``promptcache proxy -- claude -p --continue`` (and
``codex exec resume``, ``gemini --resume``, ``opencode run --continue``) starts a new proxy for
each turn. Found with OpenCode 1.18.33: its first run's title call got lineage ``proxy:1`` and
its conversation ``proxy:2``; the next run's turn of the same conversation got ``proxy:1``
again (a new process counted from 1), filed under the title call's lineage."""

from __future__ import annotations

import json

import openai

from promptcache import Tracker
from promptcache.proxy.server import ProxyServer
from promptcache.proxy.upstreams import resolve

SYSTEM = "You are a coding agent. Follow the rules below.\n" + "Rule: be terse. " * 400


def _run(upstream, db, calls) -> None:
    """One proxy process's life: start, make ``calls`` (model, messages, usage), stop."""
    server = ProxyServer(resolve(upstream.url), db, port=0).start()
    try:
        oc = openai.OpenAI(base_url=server.url + "/v1", api_key="dummy")
        for model, messages, usage in calls:
            oc.chat.completions.create(
                model=model, messages=messages, extra_headers={"x-test-usage": json.dumps(usage)}
            )
    finally:
        server.stop()


def test_a_conversation_keeps_its_lineage_across_proxy_runs(upstream, tmp_path):
    db = str(tmp_path / "ledger.db")
    turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "fix the bug"}]
    title = [{"role": "user", "content": "Generate a title for: fix the bug"}]
    turn2 = turn1 + [
        {"role": "assistant", "content": "Done: the bug is fixed."},
        {"role": "user", "content": "now add a test"},
    ]
    other = [
        {"role": "system", "content": "Another tool. " * 300},
        {"role": "user", "content": "hi"},
    ]
    _run(
        upstream,
        db,
        [
            ("gpt-4o-mini", title, {"prompt": 20, "cached": 0}),
            ("gpt-4o", turn1, {"prompt": 1800, "cached": 0}),
        ],
    )
    _run(
        upstream,
        db,
        [
            ("gpt-4o", turn2, {"prompt": 1830, "cached": 1792}),
            ("gpt-4o", other, {"prompt": 1000, "cached": 0}),
        ],
    )
    recs = Tracker(db).records()
    assert [r.model for r in recs] == ["gpt-4o-mini", "gpt-4o", "gpt-4o", "gpt-4o"]
    k_title, k_turn1, k_turn2, k_other = (r.lineage for r in recs)
    assert k_turn2 == k_turn1  # the conversation continues in the second run
    assert len({k_title, k_turn1, k_other}) == 3  # no key reused across runs
    assert k_title.startswith("proxy:") and k_other.startswith("proxy:")
    assert k_title.rsplit(":", 1)[0] != k_other.rsplit(":", 1)[0]  # each run its own keys
    # turn 2 read the 1,792 cached tokens of its own conversation's previous request
    assert recs[2].miss_cause == "hit"


def test_an_edited_first_message_is_the_same_conversation_with_its_prefix_changed(
    upstream, tmp_path
):
    """Claude Code 2.1.197 puts CLAUDE.md into the first user message (a system-reminder
    block). Written before the third ``claude -p --continue`` turn, it changed
    ``$.messages[0]`` and nothing after it; the proxy filed that turn as a new lineage and
    called it a ``hit`` (it read the tools and system prompt), hiding the ~1,700 cached tokens
    the edit cost. The turn continues its conversation: the later messages reappear (the
    last one without its cache_control marker)."""
    db = str(tmp_path / "ledger.db")
    reminder = "<system-reminder>Project context.</system-reminder>\n"
    u0 = {"role": "user", "content": reminder + "fix the bug " * 150}
    u0_edited = {
        "role": "user",
        "content": reminder + "# CLAUDE.md: be terse\n" + "fix the bug " * 150,
    }
    sys_msg = {"role": "system", "content": SYSTEM}
    a0 = {"role": "assistant", "content": "Fixed."}
    # Claude Code marks the newest message with cache_control, and drops the marker from it
    # when it is no longer the newest: that message comes back changed too
    text = {"type": "text", "text": "now add a test"}
    u1_marked = {"role": "user", "content": [{**text, "cache_control": {"type": "ephemeral"}}]}
    u1 = {"role": "user", "content": [text]}
    a1 = {"role": "assistant", "content": "Added."}
    u2 = {"role": "user", "content": "and thanks"}
    _run(upstream, db, [("gpt-4o", [sys_msg, u0], {"prompt": 2300, "cached": 0})])
    _run(upstream, db, [("gpt-4o", [sys_msg, u0, a0, u1_marked], {"prompt": 2320, "cached": 2176})])
    # the edit is in messages[1] of the chat API (messages[0] is the system message here):
    # only the system prompt (~1,800 tokens) can still be read
    _run(
        upstream,
        db,
        [("gpt-4o", [sys_msg, u0_edited, a0, u1, a1, u2], {"prompt": 2350, "cached": 1792})],
    )
    recs = Tracker(db).records()
    assert len({r.lineage for r in recs}) == 1
    assert [r.miss_cause for r in recs] == ["cold", "hit", "prefix_changed"]
    assert recs[2].miss_path is not None and recs[2].miss_path.startswith("$.messages[1]")


def test_another_conversation_with_the_same_head_stays_another(upstream, tmp_path):
    """The edited-message rule needs the earlier conversation's later messages back: a
    second conversation under the same system prompt, with its own first message and its
    own replies, is a lineage of its own (and not a prefix change of the first)."""
    db = str(tmp_path / "ledger.db")
    sys_msg = {"role": "system", "content": SYSTEM}
    a = [sys_msg, {"role": "user", "content": "rename the variable x " * 40}]
    a2 = a + [
        {"role": "assistant", "content": "Renamed x to count."},
        {"role": "user", "content": "and the tests"},
    ]
    b = [
        sys_msg,
        {"role": "user", "content": "explain this stack trace " * 40},
        {"role": "assistant", "content": "It is a None dereference."},
        {"role": "user", "content": "where?"},
        {"role": "assistant", "content": "In parse(), line 12."},
        {"role": "user", "content": "fix it"},
    ]
    _run(
        upstream,
        db,
        [
            ("gpt-4o", a, {"prompt": 2100, "cached": 0}),
            ("gpt-4o", a2, {"prompt": 2130, "cached": 2048}),
        ],
    )
    _run(upstream, db, [("gpt-4o", b, {"prompt": 2200, "cached": 1792})])
    recs = Tracker(db).records()
    assert recs[0].lineage == recs[1].lineage != recs[2].lineage
    assert recs[2].miss_cause != "prefix_changed"
