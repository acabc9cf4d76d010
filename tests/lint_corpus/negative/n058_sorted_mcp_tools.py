"""MCP client: tools from all servers, sorted by name before every request."""
from anthropic import Anthropic

client = Anthropic()


class MultiServerClient:
    def __init__(self):
        self.sessions = {}

    async def connect(self, name: str, session) -> None:
        self.sessions[name] = session

    async def available_tools(self) -> list[dict]:
        tools = []
        for session in self.sessions.values():
            listed = await session.list_tools()
            tools.extend({"name": t.name, "description": t.description, "input_schema": t.inputSchema}
                         for t in listed.tools)
        return sorted(tools, key=lambda t: t["name"])

    async def ask(self, query: str):
        return client.messages.create(model="claude-sonnet-4-5", max_tokens=1000,
                                      tools=await self.available_tools(),
                                      messages=[{"role": "user", "content": query}])
