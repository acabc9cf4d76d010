"""Chat completion whose system message starts with today's date."""
from datetime import date

from openai import OpenAI

client = OpenAI()
INSTRUCTIONS = "You are a travel assistant. Suggest at most three itineraries and cite prices in EUR."


def plan_trip(question: str) -> str:
    completion = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[
            {"role": "system", "content": f"Today is {date.today():%B %d, %Y}. {INSTRUCTIONS}"},  # expect: PC001
            {"role": "user", "content": question},
        ],
    )
    return completion.choices[0].message.content
