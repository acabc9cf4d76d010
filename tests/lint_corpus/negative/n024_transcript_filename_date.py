"""The date names the transcript file; the prompt does not contain it."""
import json
from datetime import datetime
from pathlib import Path

from anthropic import Anthropic

client = Anthropic()
SYSTEM = "You are an interview coach. Give feedback on the candidate's answer."


def coach(answer: str) -> str:
    response = client.messages.create(model="claude-sonnet-4-5", max_tokens=600, system=SYSTEM,
                                      messages=[{"role": "user", "content": answer}])
    text = response.content[0].text
    log_file = Path("transcripts") / f"{datetime.now():%Y%m%d}.jsonl"
    with log_file.open("a") as fh:
        fh.write(json.dumps({"answer": answer, "feedback": text, "at": datetime.now().isoformat()}) + "\n")
    return text
