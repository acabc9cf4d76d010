"""Plugin tools gathered in a loop over the installed plugins of this request."""
from anthropic import Anthropic

client = Anthropic()


def answer(plugins, question: str):
    by_name = {}
    for plugin in plugins:
        by_name[plugin.name] = plugin.tool_schema()
    tool_defs = [by_name[n] for n in by_name]  # expect: PC006
    return client.messages.create(model="claude-sonnet-4-5", max_tokens=800, tools=tool_defs,
                                  messages=[{"role": "user", "content": question}])
