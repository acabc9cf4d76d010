"""An agent class stores its start time and puts it in every system prompt."""
from datetime import datetime

from anthropic import Anthropic


class ResearchAgent:
    def __init__(self, base_prompt: str):
        self.client = Anthropic()
        self.base_prompt = base_prompt
        self.started = datetime.now().isoformat()

    def step(self, history: list[dict]):
        return self.client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=2048,
            system=f"{self.base_prompt}\nSession started at {self.started}.",  # expect: PC001
            messages=history,
        )
