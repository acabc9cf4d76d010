"""promptcache.build with the per-request values in the dynamic layer."""
from datetime import datetime
import uuid

import promptcache

RULES = "You are a contracts reviewer. Flag indemnity and liability clauses."


def review(contract_text: str, history: list[dict], question: str):
    return promptcache.build(
        system=RULES,
        documents=[contract_text],
        messages=history,
        dynamic=f"Request {uuid.uuid4()} at {datetime.now():%Y-%m-%d %H:%M}: {question}",
    )
