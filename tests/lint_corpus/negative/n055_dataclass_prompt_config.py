"""Prompt settings in a dataclass; the created_at field never reaches the prompt."""
from dataclasses import dataclass, field
from datetime import datetime

from openai import OpenAI

client = OpenAI()


@dataclass
class PromptConfig:
    system: str = "You summarize meeting transcripts into decisions and action items."
    created_at: datetime = field(default_factory=datetime.now)


def summarize(cfg: PromptConfig, transcript: str) -> str:
    completion = client.chat.completions.create(model="gpt-4o-mini", messages=[
        {"role": "system", "content": cfg.system}, {"role": "user", "content": transcript}])
    return completion.choices[0].message.content
