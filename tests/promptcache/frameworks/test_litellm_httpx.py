"""LiteLLM (1.110, ``promptcache.litellm_callback``), a shared httpx client, interleaved
conversations and the engine's cache-mode note, against the local engine.

- LiteLLM over Chat Completions: records == calls, the four causes (conftest).
- LiteLLM scores what it sent: the same Anthropic conversation sent through LiteLLM
  (``anthropic/`` model, OpenAI-shaped messages with ``cache_control``, which LiteLLM
  translates) and through the wrapped official ``anthropic`` client gets the same causes.
- ``promptcache.wrap(httpx.Client())`` handed to two SDKs records both; wrapping
  LangChain's shared client for a second tracker raises.
- 2 and 5 conversations interleaved on one wrapped client get the causes each gets alone.
- A Chat Completions call to the engine in Anthropic's mode (no ``cache_control``) is
  ``no_breakpoint`` with the engine's note, not ``provider_unknown``.
"""

from __future__ import annotations

import itertools
import json
import re

import httpx
import pytest

pytest.importorskip("litellm", reason="the [frameworks] extra")

import litellm  # noqa: E402

from promptcache import Tracker, litellm_callback, wrap  # noqa: E402
from promptcache.integrations.httpx_hooks import WrapConflictError  # noqa: E402

from .conftest import (  # noqa: E402
    ANTHROPIC_MODE,
    EXPECTED_CHAT,
    EXPECTED_MESSAGES,
    OPENAI_RULES,
    QUESTIONS,
    TOOL_DESCRIPTION,
    TOOL_DESCRIPTION_CHANGED,
    Counted,
    causes,
    settled,
    system_prompt,
    tool_result,
)

pytestmark = pytest.mark.slow


def chat_tool(description: str) -> dict:
    params = {"type": "object", "properties": {"order_id": {"type": "string"}}}
    return {
        "type": "function",
        "function": {"name": "order_status", "description": description, "parameters": params},
    }


def chat_turns(system: str, marks: bool = False, tool_calls: bool = True) -> list[list[dict]]:
    """Chat Completions messages of the four turns; ``marks``: content as blocks with a
    ``cache_control`` marker on the system prompt and the newest message (for Anthropic);
    ``tool_calls=False``: turns 2-3 add an assistant answer and a question instead of a tool
    call and its result."""

    def text(t: str, mark: bool = False) -> object:
        if not marks:
            return t
        block: dict = {"type": "text", "text": t}
        if mark:
            block["cache_control"] = {"type": "ephemeral"}
        return [block]

    history: list[dict] = [{"role": "user", "content": QUESTIONS[0]}]
    out = []
    for i in range(4):
        if i == 3:
            history = history + [{"role": "user", "content": QUESTIONS[3]}]
        msgs = [{"role": "system", "content": text(system, True)}]
        for j, m in enumerate(history):
            m = dict(m)
            if isinstance(m.get("content"), str):
                m["content"] = text(m["content"], j == len(history) - 1)
            msgs.append(m)
        out.append(msgs)
        if i < 2 and not tool_calls:
            history = history + [
                {"role": "assistant", "content": tool_result(i)},
                {"role": "user", "content": f"Thanks. {QUESTIONS[i + 1]}"},
            ]
        elif i < 2:
            args = json.dumps({"order_id": f"{'ABC'[i]}{i + 1}"})
            call = {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "order_status", "arguments": args},
            }
            history = history + [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": tool_result(i)},
            ]
    return out


@pytest.fixture
def callback():
    saved = litellm.callbacks
    yield lambda cb: setattr(litellm, "callbacks", [cb])
    litellm.callbacks = saved


@pytest.mark.parametrize("stream", [False, True], ids=["completion", "stream"])
def test_litellm_chat(engine, model_id, tmp_path, stream, callback) -> None:
    tracker = Tracker(tmp_path / "l.db")
    callback(litellm_callback(tracker, rules=OPENAI_RULES))
    extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    with Counted(engine) as served:
        for k, msgs in enumerate(chat_turns(system_prompt())):
            tools = [chat_tool(TOOL_DESCRIPTION if k < 3 else TOOL_DESCRIPTION_CHANGED)]
            resp = litellm.completion(
                model=f"openai/{model_id}",
                api_base=engine.openai_base_url,
                api_key="local",
                messages=msgs,
                tools=tools,
                max_tokens=2,
                **extra,
            )
            if stream:
                for _ in resp:
                    pass
    assert settled(tracker, 4) == served.calls == 4
    assert causes(tracker) == EXPECTED_CHAT
    assert all(r.provider == "local" and r.api == "chat.completions" for r in tracker.records())


def anthropic_tool(description: str) -> dict:
    schema = {"type": "object", "properties": {"order_id": {"type": "string"}}}
    return {"name": "order_status", "description": description, "input_schema": schema}


def anthropic_turns(system: str, tool_calls: bool = True) -> list[dict]:
    """The same conversation as Messages API bodies (what LiteLLM translates to)."""
    out = []
    for k, msgs in enumerate(chat_turns(system, marks=True, tool_calls=tool_calls)):
        body_msgs: list[dict] = []
        for m in msgs[1:]:
            if m["role"] == "assistant" and not m.get("tool_calls"):
                body_msgs.append({"role": "assistant", "content": m["content"]})
            elif m["role"] == "assistant":
                call = m["tool_calls"][0]
                use = {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": "order_status",
                    "input": json.loads(call["function"]["arguments"]),
                }
                body_msgs.append({"role": "assistant", "content": [use]})
            elif m["role"] == "tool":
                content = (
                    m["content"]
                    if isinstance(m["content"], list)
                    else [{"type": "text", "text": m["content"]}]
                )
                res = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": content}
                body_msgs.append({"role": "user", "content": [res]})
            else:
                body_msgs.append({"role": "user", "content": m["content"]})
        out.append(
            {
                "system": msgs[0]["content"],
                "messages": body_msgs,
                "tools": [anthropic_tool(TOOL_DESCRIPTION if k < 3 else TOOL_DESCRIPTION_CHANGED)],
            }
        )
    return out


def test_litellm_scores_what_it_sent_like_the_wrapped_client(
    engine, model_id, tmp_path, callback
) -> None:
    """The same conversation both ways. Its history is plain text: the engine renders
    tool_use/tool_result blocks by a fallback (local_engine/server/rendering.py: the
    template transforms them, so every block boundary is put at the prompt's end), which
    makes its Anthropic-mode reads fall a few tokens short of what the previous turn wrote
    -- the same ``partial`` both ways, an artefact of the engine, not of either path."""
    # through LiteLLM: OpenAI-shaped messages, model anthropic/..., to /v1/messages
    via_litellm = Tracker(tmp_path / "litellm.db")
    callback(litellm_callback(via_litellm))
    with Counted(engine, "/v1/messages") as served:
        for k, msgs in enumerate(chat_turns(system_prompt(), marks=True, tool_calls=False)):
            tools = [chat_tool(TOOL_DESCRIPTION if k < 3 else TOOL_DESCRIPTION_CHANGED)]
            litellm.completion(
                model=f"anthropic/{model_id}",
                api_base=engine.base_url,
                api_key="local",
                messages=msgs,
                tools=tools,
                max_tokens=2,
                extra_headers=ANTHROPIC_MODE,
            )
    assert settled(via_litellm, 4) == served.calls == 4
    # through the wrapped official client: the Messages bodies themselves
    via_client = Tracker(tmp_path / "client.db")
    client = wrap(engine.anthropic_client(default_headers=ANTHROPIC_MODE), via_client)
    for body in anthropic_turns(system_prompt(), tool_calls=False):
        client.messages.create(model=model_id, max_tokens=2, **body)
    assert causes(via_litellm) == causes(via_client) == EXPECTED_MESSAGES
    recs = via_litellm.records()
    assert all(r.api == "messages" and r.provider == "local" for r in recs)
    # LiteLLM's breakpoints reached the engine: it read what the previous turn wrote
    assert recs[1].usage.cache_read_tokens > 1000


def test_shared_httpx_client(engine, model_id, tmp_path) -> None:
    import openai
    from langchain_openai import ChatOpenAI

    tracker = Tracker(tmp_path / "l.db")
    http = wrap(httpx.Client(), tracker)
    assert wrap(http, tracker) is http  # hooks installed once
    assert len(http.event_hooks["request"]) == 1
    sdk = openai.OpenAI(base_url=engine.openai_base_url, api_key="local", http_client=http)
    llm = ChatOpenAI(
        model=model_id,
        base_url=engine.openai_base_url,
        api_key="local",
        max_tokens=2,
        http_client=http,
    )
    msgs = [{"role": "system", "content": system_prompt()}, {"role": "user", "content": "hi"}]
    with Counted(engine) as served:
        sdk.chat.completions.create(model=model_id, messages=msgs, max_tokens=2)
        llm.invoke(msgs)
    assert tracker.count() == served.calls == 2
    assert {r.provider for r in tracker.records()} == {"local"}
    with pytest.raises(WrapConflictError, match="already tracked"):
        wrap(http, Tracker(tmp_path / "other.db"))


def test_langchain_shared_client_for_another_tracker_raises(tmp_path) -> None:
    from langchain_openai import ChatOpenAI

    a = ChatOpenAI(model="m", base_url="http://127.0.0.1:9/v1", api_key="k")
    b = ChatOpenAI(model="n", base_url="http://127.0.0.1:9/v1", api_key="k")
    assert a.root_client._client is b.root_client._client  # LangChain shares it
    wrap(a.root_client, Tracker(tmp_path / "a.db"))
    with pytest.raises(WrapConflictError, match="LangChain"):
        wrap(b.root_client, Tracker(tmp_path / "b.db"))


@pytest.mark.parametrize("n", [2, 5])
def test_interleaved_conversations_on_one_client(engine, model_id, tmp_path, n) -> None:
    """n conversations (each its own system prompt and question) interleaved turn by turn
    on one wrapped client; turn 4 edits the end of the system prompt (today's date): each
    gets cold, hit, hit, prefix_changed at the system message -- what it gets alone."""
    tracker = Tracker(tmp_path / "l.db")
    client = wrap(engine.openai_client(max_retries=0), tracker, rules=OPENAI_RULES)
    systems = [system_prompt() for _ in range(n)]
    convs = []
    for c in range(n):
        turns = chat_turns(systems[c])
        for msgs in turns:
            msgs[1]["content"] = f"{QUESTIONS[0]} (customer {c})"
        turns[3][0]["content"] = systems[c] + " Today is Tuesday."
        for msgs in turns[:3]:
            msgs[0]["content"] = systems[c] + " Today is Monday."
        convs.append(turns)
    order = []
    with Counted(engine) as served:
        for turn, c in itertools.product(range(4), range(n)):
            client.chat.completions.create(
                model=model_id,
                messages=convs[c][turn],
                tools=[chat_tool(TOOL_DESCRIPTION)],
                max_tokens=2,
            )
            order.append(c)
    assert tracker.count() == served.calls == 4 * n
    per: dict[int, list] = {}
    for c, r in zip(order, tracker.records()):
        per.setdefault(c, []).append((r.miss_cause, r.miss_path))
    expected = EXPECTED_CHAT[:3] + [("prefix_changed", "$.messages[0].content")]
    assert all(per[c] == expected for c in range(n)), per


def test_engine_cache_mode_note_is_no_breakpoint(engine, model_id, tmp_path) -> None:
    tracker = Tracker(tmp_path / "l.db")
    client = wrap(engine.openai_client(default_headers=ANTHROPIC_MODE), tracker)
    msgs = [{"role": "system", "content": system_prompt()}, {"role": "user", "content": "hi"}]
    for _ in range(2):
        client.chat.completions.create(model=model_id, messages=msgs, max_tokens=2)
    recs = tracker.records()
    assert [r.miss_cause for r in recs] == ["no_breakpoint", "no_breakpoint"]
    assert "cache-mode anthropic" in recs[1].miss_detail


def readme_blocks() -> list[str]:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = readme.split("## Frameworks", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_readme_has_one_block_per_framework() -> None:
    blocks = readme_blocks()
    assert len(blocks) == 5
    for name in ("httpx", "PromptCacheHandler", "track_agents", "tracked_provider", "litellm"):
        assert sum(name in b for b in blocks) >= 1, name


@pytest.mark.parametrize(
    "index", range(5), ids=["httpx", "langchain", "agents", "pydantic_ai", "litellm"]
)
def test_readme_block_runs_against_the_engine(engine, model_id, tmp_path, index) -> None:
    from agents import set_tracing_disabled

    set_tracing_disabled(True)  # no trace export from the test machine
    saved = litellm.callbacks
    tracker = Tracker(tmp_path / "l.db")
    with Counted(engine) as served:
        exec(
            readme_blocks()[index],
            {"tracker": tracker, "base_url": engine.openai_base_url, "model": model_id},
        )
    assert settled(tracker, 1) == served.calls == 1
    litellm.callbacks = saved
    assert tracker.records()[0].usage.prompt_tokens > 0
