"""Bedrock Converse: static system text, a cache point, the question last."""
from pathlib import Path

import boto3

bedrock = boto3.client("bedrock-runtime")
GUIDE = Path("guide.md").read_text()


def ask(question: str):
    return bedrock.converse(
        modelId="anthropic.claude-3-5-sonnet-20240620-v1:0",
        system=[{"text": GUIDE}, {"cachePoint": {"type": "default"}}],
        messages=[{"role": "user", "content": [{"text": question}]}],
    )
