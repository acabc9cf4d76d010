"""An agent loop: tool results are serialized into the newest message."""
import json

from openai import OpenAI

from .tools import TOOLS, call_tool

client = OpenAI()


def run(messages: list[dict]):
    while True:
        completion = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
        message = completion.choices[0].message
        if not message.tool_calls:
            return message.content
        messages.append(message.model_dump())
        for call in message.tool_calls:
            result = call_tool(call.function.name, json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
