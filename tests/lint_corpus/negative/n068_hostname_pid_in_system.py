"""Debug info about the serving process in the system prompt: the same for every request
that process serves (issue 28: per-process values are not reported)."""
import os
import socket

from openai import OpenAI

client = OpenAI()
BASE = "You are an internal SRE assistant. Answer with runbook steps."


def ask(question: str):
    system = f"{BASE}\nServed by {socket.gethostname()} (pid {os.getpid()})."
    return client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
    )
