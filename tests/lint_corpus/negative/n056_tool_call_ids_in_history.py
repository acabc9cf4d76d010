"""Tool call ids come from the model and are stored verbatim in the history."""
import json

from openai import OpenAI

client = OpenAI()
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def continue_turn(history: list[dict], call, result: dict):
    history.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    return client.chat.completions.create(model="gpt-4o", tools=TOOLS, messages=history)
