"""A client wrapper with a rate limiter based on time.monotonic()."""
import threading
import time

from openai import OpenAI

INSTRUCTIONS = "Rewrite the text in British English."


class RateLimitedClient:
    def __init__(self, per_second: float) -> None:
        self.client = OpenAI()
        self.interval = 1.0 / per_second
        self.lock = threading.Lock()
        self.last_call = time.monotonic()

    def rewrite(self, text: str) -> str:
        with self.lock:
            wait = self.interval - (time.monotonic() - self.last_call)
            if wait > 0:
                time.sleep(wait)
            self.last_call = time.monotonic()
        response = self.client.responses.create(model="gpt-4.1-mini", instructions=INSTRUCTIONS,
                                                input=text)
        return response.output_text
