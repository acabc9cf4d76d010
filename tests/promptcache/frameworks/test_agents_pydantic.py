"""The OpenAI Agents SDK (openai-agents 0.24, through
``promptcache.integrations.openai_agents.track_agents``) and pydantic-ai (pydantic-ai-slim
2.68, through ``promptcache.integrations.pydantic_ai.tracked_provider``) against the local
engine: every call the engine served is one record, and the four turns get the four causes
(conftest). The engine's model makes no tool calls, so the tool calls and results of turns
2-4 are given as history (the SDKs' own item/message types)."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("agents", reason="the [frameworks] extra")
pytest.importorskip("pydantic_ai", reason="the [frameworks] extra")

from promptcache import Tracker  # noqa: E402

from .conftest import (  # noqa: E402
    EXPECTED_CHAT,
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


def description(turn: int) -> str:
    return TOOL_DESCRIPTION if turn < 3 else TOOL_DESCRIPTION_CHANGED


# ---- OpenAI Agents SDK -------------------------------------------------------------------


def agent_items(turn: int) -> list[dict]:
    """The Agents SDK input items of a turn (conftest's conversation)."""
    items: list[dict] = [{"role": "user", "content": QUESTIONS[0]}]
    for i in range(min(turn, 2)):
        args = json.dumps({"order_id": "ABC"[i] + str(i + 1)})
        items += [
            {
                "type": "function_call",
                "call_id": f"c{i}",
                "name": "order_status",
                "arguments": args,
            },
            {"type": "function_call_output", "call_id": f"c{i}", "output": tool_result(i)},
        ]
    if turn == 3:
        items.append({"role": "user", "content": QUESTIONS[3]})
    return items


@pytest.mark.parametrize("stream", [False, True], ids=["run", "run_streamed"])
def test_openai_agents(engine, model_id, tmp_path, stream) -> None:
    from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled

    from promptcache.integrations.openai_agents import track_agents

    set_tracing_disabled(True)  # no trace export from the test machine
    tracker = Tracker(tmp_path / "l.db")
    track_agents(tracker, base_url=engine.openai_base_url, api_key="local", rules=OPENAI_RULES)
    system = system_prompt()

    async def main() -> None:
        for turn in range(4):
            agent = Agent(
                name="shop",
                instructions=system,
                model=model_id,
                tools=[function_tool(order_status, description_override=description(turn))],
                # streams against a non-OpenAI base URL report usage only when asked
                model_settings=ModelSettings(max_tokens=2, include_usage=True),
            )
            if stream:
                run = Runner.run_streamed(agent, agent_items(turn))
                async for _ in run.stream_events():
                    pass
            else:
                await Runner.run(agent, agent_items(turn))

    with Counted(engine) as served:
        asyncio.run(main())
    assert tracker.count() == served.calls == 4
    assert causes(tracker) == EXPECTED_CHAT
    assert [r.stream for r in tracker.records()] == [stream] * 4


# ---- pydantic-ai ---------------------------------------------------------------------------


def pydantic_history(system: str, turn: int) -> list:
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    history: list = [ModelRequest(parts=[SystemPromptPart(system), UserPromptPart(QUESTIONS[0])])]
    for i in range(min(turn, 2)):
        history += [
            ModelResponse(
                parts=[ToolCallPart("order_status", {"order_id": "ABC"[i] + str(i + 1)}, f"c{i}")]
            ),
            ModelRequest(parts=[ToolReturnPart("order_status", tool_result(i), f"c{i}")]),
        ]
    return history


@pytest.mark.parametrize("stream", [False, True], ids=["run", "run_stream"])
def test_pydantic_ai(engine, model_id, tmp_path, stream) -> None:
    from pydantic_ai import Agent, Tool
    from pydantic_ai.models.openai import OpenAIChatModel

    from promptcache.integrations.pydantic_ai import tracked_provider

    tracker = Tracker(tmp_path / "l.db")
    provider = tracked_provider(
        "openai", tracker, base_url=engine.openai_base_url, api_key="local", rules=OPENAI_RULES
    )
    model = OpenAIChatModel(model_id, provider=provider)
    system = system_prompt()

    async def main() -> None:
        for turn in range(4):
            agent = Agent(
                model,
                system_prompt=system,
                tools=[Tool(order_status, description=description(turn))],
                model_settings={"max_tokens": 2},
            )
            if turn == 0:
                prompt, history = QUESTIONS[0], None
            else:  # turns 2-3 end with a tool result; turn 4 asks one more question
                prompt = QUESTIONS[3] if turn == 3 else None
                history = pydantic_history(system, turn)
            if stream:
                async with agent.run_stream(prompt, message_history=history) as run:
                    async for _ in run.stream_text():
                        pass
            else:
                await agent.run(prompt, message_history=history)

    with Counted(engine) as served:
        asyncio.run(main())
    assert tracker.count() == served.calls == 4
    assert causes(tracker) == EXPECTED_CHAT
    assert [r.stream for r in tracker.records()] == [stream] * 4
