"""LangChain: the date is a variable of the human template; the system template is static."""
from datetime import datetime

from langchain_core.prompts import ChatPromptTemplate
from langchain_openai import ChatOpenAI

prompt = ChatPromptTemplate.from_messages([
    ("system", "You are a travel agent for Acme Tours. Quote prices in EUR."),
    ("human", "Today is {today}. {question}"),
])
chain = prompt | ChatOpenAI(model="gpt-4o-mini")


def answer(question: str) -> str:
    return chain.invoke({"today": datetime.now().strftime("%A %d %B"), "question": question}).content
