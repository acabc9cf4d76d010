"""LangChain: the system template's {today} is filled with the clock via .partial()."""
from datetime import datetime

from langchain_core.prompts import ChatPromptTemplate
from langchain_openai import ChatOpenAI

prompt = ChatPromptTemplate.from_messages([
    ("system", "You are a travel agent for Acme Tours. Today is {today}. Quote prices in EUR."),
    ("human", "{question}"),
])
llm = ChatOpenAI(model="gpt-4o-mini")


def answer(question: str) -> str:
    chain = prompt.partial(today=datetime.now().strftime("%A %d %B")) | llm  # expect: PC001
    return chain.invoke({"question": question}).content
