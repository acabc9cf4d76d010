"""A function named like a prompt builder that no request in the file uses: not a sink
(issue 28: sinks are resolved, not guessed from names)."""
from datetime import datetime


def generate_system_prompt() -> str:
    current_dt = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    return f"""
You are "Frankie", a concise, helpful AI assistant.
Current date/time: {current_dt}
- Ask only one clear question at a time.
- Use the tools only when truly needed.
"""
