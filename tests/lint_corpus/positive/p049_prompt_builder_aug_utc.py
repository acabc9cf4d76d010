"""System prompt utilities: a global prompt gets the UTC time appended, then a user part."""
import datetime
from typing import Dict, List, Optional

DEFAULT_SYSTEM_PROMPT = "You are a knowledgeable assistant for the Orbit note-taking app."


def build_system_messages(user_system_prompt: str, preferred_name: Optional[str] = None) -> List[Dict]:
    global_prompt = DEFAULT_SYSTEM_PROMPT
    global_prompt += f"\n\nCurrent time: {datetime.datetime.utcnow().isoformat()}"  # expect: PC001
    user_part = user_system_prompt
    if preferred_name:
        user_part += f"\n\nThe user prefers to be called: {preferred_name}"
    return [
        {"role": "system", "content": global_prompt},
        {"role": "system", "content": user_part},
    ]
