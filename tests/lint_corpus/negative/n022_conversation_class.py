"""An append-only conversation with a static system prompt."""
from anthropic import Anthropic

SYSTEM_PROMPT = "You are a patient math tutor. Ask one guiding question at a time."


class Tutor:
    def __init__(self) -> None:
        self.client = Anthropic()
        self.history: list[dict] = []

    def ask(self, text: str) -> str:
        self.history.append({"role": "user", "content": text})
        response = self.client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=800,
            system=SYSTEM_PROMPT,
            messages=self.history,
        )
        reply = response.content[0].text
        self.history.append({"role": "assistant", "content": reply})
        return reply
