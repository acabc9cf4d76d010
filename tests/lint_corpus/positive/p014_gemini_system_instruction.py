"""Gemini system instruction with today's date."""
from datetime import datetime

from google import genai
from google.genai import types

client = genai.Client()


def ask(question: str):
    return client.models.generate_content(
        model="gemini-2.5-flash",
        contents=question,
        config=types.GenerateContentConfig(
            system_instruction=f"You are a news summarizer. Today is {datetime.today():%Y-%m-%d}.",  # expect: PC001
        ),
    )
