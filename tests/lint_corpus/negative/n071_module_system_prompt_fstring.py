"""A module-level prompt with the time baked in at import: per process, not reported
(issue 28)."""
import datetime

system_prompt = f"""
    [System Instructions]
    Current datetime: {datetime.datetime.now().strftime("%Y-%m-%d %H:%M")}

    General rules:
    - Always check the current date before answering time-sensitive questions.
"""
