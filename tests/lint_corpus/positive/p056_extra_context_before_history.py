"""Structured chat: a per-request system note sits between the system prompt and the history."""
from openai import OpenAI

client = OpenAI()
STYLE = "Always answer in formal English and cite the clause numbers you rely on in every answer."


async def chat_structured(system: str, messages: list, extra_context=None):
    msgs = [{"role": "system", "content": system}]
    if extra_context:
        msgs.append({"role": "system", "content": f"Additional material: {extra_context}"})  # expect: PC004
    msgs.append({"role": "system", "content": STYLE})
    msgs.extend(messages)
    return client.chat.completions.create(model="gpt-4o", messages=msgs)
