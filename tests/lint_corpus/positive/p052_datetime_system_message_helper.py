"""A helper that returns a system message to prepend to a conversation."""
import datetime
from typing import Dict


def current_datetime_system_message() -> Dict[str, str]:
    current_time = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    retval = {
        "role": "system",
        "content": f"The current date and time is {current_time}.",  # expect: PC001
    }
    return retval
