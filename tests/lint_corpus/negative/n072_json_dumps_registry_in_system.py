"""Issue 28: not reported -- json.dumps of a dict whose key order the code that builds it fixes
(a parameter, a literal, a schema) gives the same text for equal data. Tool specs loaded at run time are serialized into the system prompt."""
import json

from openai import OpenAI

from myapp.tools import load_tool_specs

client = OpenAI()


def run(question: str):
    specs = load_tool_specs()
    system = "You can call these tools by replying with JSON:\n" + json.dumps(specs, indent=2)
    return client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": question}],
    )
