"""A %-formatted prompt with the question first and the knowledge base after it."""
from pathlib import Path

import litellm

KNOWLEDGE_BASE = Path("kb/all_articles.txt").read_text()


def ask(question: str) -> str:
    prompt = "Question: %s\n\nKnowledge base:\n%s" % (question, KNOWLEDGE_BASE)  # expect: PC007
    response = litellm.completion(model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}])
    return response.choices[0].message.content
