"""LangChain (langchain-openai 1.8, langchain-anthropic 1.7) recorded through
``promptcache.integrations.langchain.PromptCacheHandler`` against the local engine: every
call the engine served is one record, and the four turns get the four causes (conftest)."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_openai", reason="the [frameworks] extra")

from langchain_anthropic import ChatAnthropic  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.tools import StructuredTool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

from promptcache import Tracker  # noqa: E402
from promptcache.integrations.langchain import PromptCacheHandler  # noqa: E402

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
    order_status,
    system_prompt,
    tool_result,
)

pytestmark = pytest.mark.slow


def tool(description: str) -> StructuredTool:
    return StructuredTool.from_function(order_status, description=description)


def turns(system: SystemMessage, cache_last: bool = False) -> list[list]:
    """The messages of the four turns (conftest's conversation)."""
    out, history = [], [system, HumanMessage(QUESTIONS[0])]
    for i in range(3):
        out.append(list(history))
        call = {"name": "order_status", "args": {"order_id": "ABC"[i] + str(i + 1)}, "id": f"c{i}"}
        history += [
            AIMessage("", tool_calls=[call]),
            ToolMessage(tool_result(i), tool_call_id=f"c{i}"),
        ]
    out.append(out[-1] + [HumanMessage(QUESTIONS[3])])
    if cache_last:
        # Anthropic caches up to its markers: every content as blocks (so a turn's prefix
        # is the previous turn's, markers aside), one marker on the newest message
        out = [[_blocks(m, last=j == len(msgs) - 1) for j, m in enumerate(msgs)] for msgs in out]
    return out


def _blocks(msg, last: bool):
    if isinstance(msg, SystemMessage) or not isinstance(msg.content, str) or not msg.content:
        return msg
    block = {"type": "text", "text": msg.content}
    if last:
        block["cache_control"] = {"type": "ephemeral"}
    if isinstance(msg, ToolMessage):
        return ToolMessage([block], tool_call_id=msg.tool_call_id)
    return type(msg)([block])


def drive(llm, all_turns: list[list], stream: bool) -> None:
    for k, msgs in enumerate(all_turns):
        bound = llm.bind_tools([tool(TOOL_DESCRIPTION if k < 3 else TOOL_DESCRIPTION_CHANGED)])
        if stream:
            for _ in bound.stream(msgs):
                pass
        else:
            bound.invoke(msgs)


@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
def test_chat_openai(engine, model_id, tmp_path, stream) -> None:
    tracker = Tracker(tmp_path / "l.db")
    handler = PromptCacheHandler(tracker, rules=OPENAI_RULES)
    llm = ChatOpenAI(
        model=model_id,
        base_url=engine.openai_base_url,
        api_key="local",
        max_tokens=2,
        stream_usage=True,  # streams report usage only when asked (custom base URL)
        callbacks=[handler],
    )
    with Counted(engine) as served:
        drive(llm, turns(SystemMessage(system_prompt())), stream)
    assert tracker.count() == served.calls == 4
    assert causes(tracker) == EXPECTED_CHAT
    recs = tracker.records()
    assert all(r.provider == "local" and r.api == "chat.completions" for r in recs)
    assert [r.stream for r in recs] == [stream] * 4


@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
def test_chat_anthropic(engine, model_id, tmp_path, stream) -> None:
    tracker = Tracker(tmp_path / "l.db")
    handler = PromptCacheHandler(tracker)  # Messages API: Anthropic's rules by API shape
    llm = ChatAnthropic(
        model=model_id,
        base_url=engine.base_url,
        api_key="local",
        max_tokens=2,
        default_headers=ANTHROPIC_MODE,  # the engine applies Anthropic's rules to this call
        callbacks=[handler],
    )
    text = system_prompt()
    system = SystemMessage([{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}])
    with Counted(engine, "/v1/messages") as served:
        drive(llm, turns(system, cache_last=True), stream)
    assert tracker.count() == served.calls == 4
    assert causes(tracker) == EXPECTED_MESSAGES
    assert all(r.api == "messages" for r in tracker.records())


def test_stream_without_usage_is_recorded_with_usage_unknown(engine, model_id, tmp_path) -> None:
    tracker = Tracker(tmp_path / "l.db")
    handler = PromptCacheHandler(tracker, rules=OPENAI_RULES)
    llm = ChatOpenAI(
        model=model_id,
        base_url=engine.openai_base_url,
        api_key="local",
        max_tokens=2,
        callbacks=[handler],
    )  # no stream_usage: LangChain sends no include_usage to a custom base URL
    msgs = turns(SystemMessage(system_prompt()))
    with Counted(engine) as served, pytest.warns(Warning, match="include_usage") as seen:
        for m in msgs[:2]:
            for _ in llm.stream(m):
                pass
    assert served.calls == 2 and tracker.count() == 2
    assert len([w for w in seen if "include_usage" in str(w.message)]) == 1  # once per handler
    recs = tracker.records()
    assert all("usage_unknown" in r.usage.flags and r.cost is None for r in recs)
    assert all(r.miss_cause is None for r in recs)
