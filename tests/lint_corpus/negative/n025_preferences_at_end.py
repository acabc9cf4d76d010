"""Base prompt first, per-user preferences appended at the end."""
from openai import OpenAI

client = OpenAI()
BASE_PROMPT = ("You are a recipe assistant. Suggest recipes with ingredient lists and steps, metric "
               "units, and total time.")


def suggest(prefs: dict, request_text: str):
    system = f"{BASE_PROMPT}\n\nUser preferences: diet={prefs['diet']}, allergies={prefs['allergies']}"
    return client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": request_text}],
    )
