"""A breakpoint on two tiny tools: the cached prefix is a few hundred tokens."""
import anthropic

client = anthropic.Anthropic()


def ask(question: str):
    return client.beta.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=500,
        tools=[
            {"name": "add", "description": "Add two numbers.",
             "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}},
            {"name": "mul", "description": "Multiply two numbers.",
             "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
             "cache_control": {"type": "ephemeral"}},  # expect: PC008
        ],
        messages=[{"role": "user", "content": question}],
    )
