"""Issue 28: not reported -- json.dumps of a dict whose key order the code that builds it fixes
(a parameter, a literal, a schema) gives the same text for equal data. The catalog is serialized once per request and interpolated into the system message."""
import json

from openai import OpenAI

client = OpenAI()


def recommend(catalog: dict, wish: str):
    catalog_json = json.dumps(catalog, ensure_ascii=False)
    messages = [
        {"role": "system", "content": f"Recommend products from this catalog only:\n{catalog_json}"},
        {"role": "user", "content": wish},
    ]
    return client.chat.completions.create(model="gpt-4o-mini", messages=messages)
