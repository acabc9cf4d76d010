"""A prompts module: static templates, the date filled into the user turn only."""
from datetime import date

SYSTEM_PROMPT = """You are an expense-report assistant. Check receipts against the travel policy
and list every violation with the policy section number."""

USER_TEMPLATE = "Report submitted on {today}:\n{report}"


def user_message(report: str) -> dict:
    return {"role": "user", "content": USER_TEMPLATE.format(today=date.today(), report=report)}
