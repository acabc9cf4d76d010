"""Assistants-style thread: the timestamp is message metadata, not text."""
import time

from openai import OpenAI

client = OpenAI()
INSTRUCTIONS = "You are a math tutor. Show each step."


def ask(thread_id: str, text: str):
    client.beta.threads.messages.create(thread_id=thread_id, role="user", content=text,
                                        metadata={"sent_at": str(int(time.time()))})
    return client.beta.threads.runs.create(thread_id=thread_id, assistant_id="asst_123",
                                           instructions=INSTRUCTIONS)
