"""The official anthropic client against the local engine, with breakpoints placed by
promptcache.build(...).to_anthropic(...).

    promptcache serve --port 8000 &
    python examples/anthropic_client.py --base-url http://127.0.0.1:8000
"""

import argparse

import anthropic

import promptcache

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--base-url", default="http://127.0.0.1:8000")
args = parser.parse_args()

client = anthropic.Anthropic(base_url=args.base_url, api_key="local")
system = "You are a librarian. Recommend one book per answer.\n" + "Be kind. " * 700
for question in ["A book about the sea?", "A book about mountains?"]:
    kwargs = promptcache.build(system=system, dynamic=question).to_anthropic(
        "claude-sonnet-4-6", max_tokens=16
    )
    kwargs["model"] = "local"  # the local engine serves whatever model name it is asked for
    msg = client.messages.create(**kwargs)
    u = msg.usage
    print(
        f"{question!r}: input {u.input_tokens}, cache read {u.cache_read_input_tokens}, "
        f"cache write {u.cache_creation_input_tokens}"
    )
