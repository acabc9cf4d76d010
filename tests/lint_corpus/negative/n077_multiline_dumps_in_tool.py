"""Issue 28: not reported -- json.dumps of a dict whose key order the code that builds it fixes
(a parameter, a literal, a schema) gives the same text for equal data. A tool description that embeds a JSON example built from live config."""
import json

from openai import OpenAI

from .config import current_filters

client = OpenAI()


def search(query: str):
    filters = current_filters()
    tools = [{
        "type": "function",
        "function": {
            "name": "search_catalog",
            "description": "Search the catalog. Example filters: " + json.dumps(
                filters,
                indent=None,
            ),
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }]
    return client.chat.completions.create(
        model="gpt-4o", tools=tools, messages=[{"role": "user", "content": query}])
