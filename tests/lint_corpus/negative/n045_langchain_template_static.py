"""A LangChain prompt template: the system part is static, variables are in the human turn."""
from langchain_core.prompts import ChatPromptTemplate
from langchain_openai import ChatOpenAI

prompt = ChatPromptTemplate.from_messages([
    ("system", "You are an expert copy editor. Fix grammar and keep the author's voice."),
    ("human", "{text}"),
])
chain = prompt | ChatOpenAI(model="gpt-4o-mini")


def edit(text: str) -> str:
    return chain.invoke({"text": text}).content
