"""Gemini with a static system instruction and a timestamped user turn."""
from datetime import datetime

from google import genai
from google.genai import types

client = genai.Client()
SYSTEM_INSTRUCTION = "You are a news summarizer. Keep summaries under 80 words."


def summarize(article: str):
    return client.models.generate_content(
        model="gemini-2.5-flash",
        contents=f"Fetched {datetime.now():%Y-%m-%d %H:%M}\n\n{article}",
        config=types.GenerateContentConfig(system_instruction=SYSTEM_INSTRUCTION),
    )
