"""random and time for retry back-off, nothing in the prompt."""
import random
import time

import openai
from openai import OpenAI

client = OpenAI()
SYSTEM = "Translate the user's text into German."


def translate(text: str, attempts: int = 5) -> str:
    for attempt in range(attempts):
        try:
            completion = client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
            )
            return completion.choices[0].message.content
        except openai.RateLimitError:
            time.sleep(2 ** attempt + random.uniform(0, 1))
    raise RuntimeError("gave up after retries")
