"""Bedrock Converse call with the time in the system blocks."""
from datetime import datetime

import boto3

bedrock = boto3.client("bedrock-runtime")


def ask(question: str):
    return bedrock.converse(
        modelId="anthropic.claude-3-5-sonnet-20240620-v1:0",
        system=[{"text": "You are an insurance claims assistant."},
                {"text": f"Local time: {datetime.now():%H:%M}"}],  # expect: PC001
        messages=[{"role": "user", "content": [{"text": question}]}],
    )
