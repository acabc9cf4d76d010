"""perf_counter for latency metrics around a static request."""
import time

from openai import OpenAI
from prometheus_client import Histogram

LATENCY = Histogram("llm_latency_seconds", "LLM call latency")
client = OpenAI()
SYSTEM = "You classify support emails into billing, technical or other."


def classify(email: str) -> str:
    start = time.perf_counter()
    completion = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": email}],
    )
    LATENCY.observe(time.perf_counter() - start)
    return completion.choices[0].message.content
