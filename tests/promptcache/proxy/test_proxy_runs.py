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
