"""Normalize a provider's usage and price it: the same traffic at a hosted model's prices.

promptcache serve --port 8000 &
python examples/usage_and_cost.py --base-url http://127.0.0.1:8000/v1 --price-model gpt-5.4
"""

import argparse

import openai

import promptcache

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
parser.add_argument("--price-model", default="gpt-5.4")
args = parser.parse_args()

client = openai.OpenAI(base_url=args.base_url, api_key="local")
model = client.models.list().data[0].id
messages = [
    {"role": "system", "content": "You are terse. " * 150},
    {"role": "user", "content": "Say hi."},
]
for attempt in ("cold", "warm"):
    reply = client.chat.completions.create(model=model, messages=messages, max_tokens=4)
    usage = promptcache.normalize_usage("openai", reply)  # the response object itself
    bill = promptcache.cost(usage, model=args.price_model)
    print(
        f"{attempt}: uncached {usage.uncached_input_tokens}, cache read {usage.cache_read_tokens}, "
        f"output {usage.output_tokens}, hit rate {usage.hit_rate:.2f}, "
        f"cost ${bill.total:.6f} (no cache ${bill.baseline:.6f}, saving ${bill.saving:.6f})"
    )
