"""pydantic-ai: a decorated system-prompt function that returns the date."""
from datetime import date

from pydantic_ai import Agent

agent = Agent("openai:gpt-4o", system_prompt="You are a concise financial assistant.")


@agent.system_prompt
def add_the_date() -> str:
    return f"The date is {date.today()}."  # expect: PC001


def run(question: str):
    return agent.run_sync(question)
