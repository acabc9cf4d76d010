"""An agent prompt template filled with today's date and the tool list."""
from datetime import datetime

from openai import OpenAI

from .tools import TOOLS, describe

SYSTEM_PROMPT = """You are a helpful AI assistant specialized in travel planning.

**Today's Date**: {current_date}

**Your Capabilities**:
{tool_descriptions}
"""

client = OpenAI()


def run(history: list[dict]):
    system = SYSTEM_PROMPT.format(
        current_date=datetime.now().strftime("%A, %B %d, %Y"),  # expect: PC001
        tool_descriptions="\n".join(describe(t) for t in TOOLS),
    )
    return client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "system", "content": system}, *history])
