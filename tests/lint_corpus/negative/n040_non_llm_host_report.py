"""Not LLM code at all: a host report with the time and the OS name."""
import platform
import socket
from datetime import datetime


def host_report() -> str:
    system = platform.system()
    return f"{socket.gethostname()} runs {system} {platform.release()} (checked {datetime.now():%c})"


def tool_versions(tools: dict[str, str]) -> str:
    return "\n".join(f"{name}: {version}" for name, version in tools.items())
