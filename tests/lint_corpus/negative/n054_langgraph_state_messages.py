"""A LangGraph node: the system message is a constant, state messages follow."""
from langchain_core.messages import SystemMessage
from langchain_openai import ChatOpenAI

llm = ChatOpenAI(model="gpt-4o-mini")
SYSTEM = SystemMessage(content="You are a research assistant. Cite sources as [n].")


def call_model(state: dict) -> dict:
    response = llm.invoke([SYSTEM, *state["messages"]])
    return {"messages": [response]}
