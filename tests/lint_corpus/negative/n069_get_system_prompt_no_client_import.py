"""A prompts module with no client import: a function name alone is not a sink (issue 28)."""
from datetime import datetime

from utils.constants import SYSTEM_MESSAGE


def get_system_prompt() -> str:
    """Give the system prompt."""
    today = datetime.now().date()
    return SYSTEM_MESSAGE.format(date=today)
