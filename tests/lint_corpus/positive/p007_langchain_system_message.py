"""LangChain chat with a SystemMessage that carries the session start time."""
import time

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI

llm = ChatOpenAI(model="gpt-4o-mini")


def reply(user_text: str) -> str:
    messages = [
        SystemMessage(content=f"You are a friendly tutor. Session started at {time.strftime('%H:%M:%S')}."),  # expect: PC001
        HumanMessage(content=user_text),
    ]
    return llm.invoke(messages).content
