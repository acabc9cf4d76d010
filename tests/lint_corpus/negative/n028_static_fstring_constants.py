"""An f-string system prompt made only of module constants."""
from openai import OpenAI

BOT_NAME = "Penny"
COMPANY = "Acme Bank"
SYSTEM_PROMPT = f"You are {BOT_NAME}, the virtual assistant of {COMPANY}. Never ask for PINs."

client = OpenAI()


def chat(history: list[dict]):
    return client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "system", "content": SYSTEM_PROMPT}, *history])
