"""Fixtures for the server tests: ``promptcache serve`` subprocesses on free loopback ports
(one per configuration per test worker, reused across modules: the default one, automatic
mode with the test clock, serves the emulation tests too through the
``X-Promptcache-Cache-Mode`` header), and the model's tokenizer in the test process for
working out expected token counts independently of the server."""

from __future__ import annotations

import pytest

from promptcache.integrations.pytest_plugin import LocalEngineServer

#: a small KV pool keeps each test server's memory near 0.7 GiB
TEST_SERVER_ARGS = ["--num-kv-blocks", "512"]


@pytest.fixture(scope="session")
def server_factory():
    servers: dict[tuple, LocalEngineServer] = {}

    def make(
        cache_mode: str = "automatic", *, test_clock: bool = True, api_key=None, extra_args=()
    ):
        key = (cache_mode, test_clock, api_key, tuple(extra_args))
        if key not in servers:
            servers[key] = LocalEngineServer(
                cache_mode,
                test_clock=test_clock,
                api_key=api_key,
                extra_args=[*TEST_SERVER_ARGS, *extra_args],
            ).start()
        return servers[key]

    yield make
    for s in servers.values():
        s.stop()


@pytest.fixture(scope="session")
def tokenizer():
    """The engine's tokenizer built from the GGUF file (what the server uses)."""
    from gguf import GGUFReader

    from local_engine.loader import default_model_path
    from local_engine.loader.gguf_loader import read_gguf_tokenizer
    from local_engine.tokenizer import Tokenizer

    return Tokenizer(read_gguf_tokenizer(GGUFReader(str(default_model_path()))))


def _common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@pytest.fixture(scope="session")
def common_prefix():
    """``common_prefix(a, b)``: length of the longest shared prefix of two id lists."""
    return _common_prefix


@pytest.fixture(scope="session")
def chat_ids(tokenizer):
    """``chat_ids(messages)``: token ids of a conversation rendered with the model's template
    and tokenized as one text (the plain way, independent of the server's block-wise
    rendering)."""

    def ids(messages):
        return tokenizer.encode(tokenizer.apply_chat_template(messages, add_generation_prompt=True))

    return ids


ITEMS = [
    "kettle",
    "toaster",
    "blender",
    "grinder",
    "mixer",
    "juicer",
    "oven",
    "fryer",
    "steamer",
    "scale",
]


def policy_text(tag: str, n: int = 55) -> str:
    """A deterministic policy document, about 21 tokens per clause (55 clauses: ~1,170
    tokens), starting with ``tag`` so that different tags share no cached block."""
    clauses = " ".join(
        f"Policy {i}: a {ITEMS[i % 10]} bought in store {i % 7} may be returned within {10 + i % 20} days."
        for i in range(n)
    )
    return f"[{tag}] {clauses}"


@pytest.fixture(scope="session")
def shared_doc():
    """One policy document for the emulation modules, so its prefill happens once."""
    import uuid

    return policy_text("shared-" + uuid.uuid4().hex[:8])


@pytest.fixture(scope="session")
def policy():
    """``policy(tag, n=55)``: see :func:`policy_text`."""
    return policy_text
