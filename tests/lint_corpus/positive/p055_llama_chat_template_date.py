"""A raw Llama chat template whose system header carries the current date."""
from datetime import datetime

import requests

SYS_PROMPT = """<|begin_of_text|><|start_header_id|>system<|end_header_id|>

Cutoff Knowledge Date: December 2023
Current Date: {datetime}

You are a helpful assistant. Answer clearly and concisely.<|eot_id|>"""


def complete(question: str) -> str:
    prompt = SYS_PROMPT.format(datetime=datetime.now().strftime("%d %b %Y"))  # expect: PC001
    prompt += f"<|start_header_id|>user<|end_header_id|>\n\n{question}<|eot_id|>"
    resp = requests.post("http://localhost:8000/v1/completions", json={"prompt": prompt, "max_tokens": 256})
    return resp.json()["choices"][0]["text"]
