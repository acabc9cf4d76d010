"""Assemble requests with promptcache.build, send them with a wrapped OpenAI client, and
read hit rate and cost back from the ledger.

    promptcache serve --port 8000 &            # or any OpenAI-compatible endpoint
    python examples/build_and_wrap.py --base-url http://127.0.0.1:8000/v1 --db /tmp/ledger.db
"""

import argparse
import datetime

import openai

import promptcache

POLICY = "You are a support assistant for a bicycle shop.\n" + "\n".join(
    f"Rule {i}: answer questions about topic {i} politely and briefly, citing rule {i}."
    for i in range(1, 80)
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Find an order by id.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    }
]

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
parser.add_argument("--db", default=None, help="ledger path (default: your data directory)")
args = parser.parse_args()

tracker = promptcache.Tracker(args.db)
client = promptcache.wrap(openai.OpenAI(base_url=args.base_url, api_key="local"), tracker)
model = client.models.list().data[0].id
for question in ["Where is order 1234?", "Do you fix e-bikes?", "Are you open Sunday?"]:
    prompt = promptcache.build(
        system=POLICY, tools=TOOLS, dynamic=f"Now: {datetime.datetime.now():%H:%M}\n{question}"
    )
    reply = client.chat.completions.create(**prompt.to_openai(model), max_tokens=8)
    print(
        f"{question!r}: prompt {reply.usage.prompt_tokens} tokens, "
        f"cached {reply.usage.prompt_tokens_details.cached_tokens}"
    )
for row in tracker.summary(by="model"):
    print(f"ledger: {row.requests} requests, hit rate {row.hit_rate:.2f}")
