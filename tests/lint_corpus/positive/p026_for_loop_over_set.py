"""Rules deduplicated with set() and appended to the system prompt in a loop."""
from openai import OpenAI

client = OpenAI()


def build_system(rules: list[str]) -> str:
    system = "You are a code reviewer. Enforce these rules:\n"
    for rule in set(rules):  # expect: PC003
        system += f"- {rule}\n"
    return system


def review(rules: list[str], diff: str):
    return client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "system", "content": build_system(rules)}, {"role": "user", "content": diff}],
    )
