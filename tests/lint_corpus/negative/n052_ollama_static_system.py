"""Local model through ollama: the system prompt is a constant."""
import ollama

SYSTEM = "You are a Linux shell expert. Answer with one command and a one-line explanation."


def ask(question: str) -> str:
    response = ollama.chat(model="llama3.1", messages=[
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": question},
    ])
    return response["message"]["content"]
