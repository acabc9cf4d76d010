"""promptcache.build with the date in the frozen system layer."""
from datetime import datetime

import promptcache

RULES = "You are a contracts reviewer. Flag indemnity and liability clauses."


def review(contract_text: str, question: str):
    return promptcache.build(
        system=f"{RULES}\nReview date: {datetime.now():%Y-%m-%d}",  # expect: PC001
        documents=[contract_text],
        dynamic=question,
    )
