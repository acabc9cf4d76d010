"""Integrations: where promptcache meets the code and tools people already run.

Owns ``promptcache.wrap(client)`` for the official OpenAI, Anthropic, Gemini and Bedrock clients
and for bare ``httpx`` clients handed to frameworks as ``http_client=`` (:mod:`~.clients`, the
hooks in :mod:`~.httpx_hooks`, Bedrock's boto3 client in :mod:`~.bedrock`, the no-usage warning
text in :mod:`~.usage_advice`), the agent frameworks -- LangChain's callback handler
(:mod:`~.langchain`), the OpenAI Agents SDK's client setting (:mod:`~.openai_agents`),
pydantic-ai's provider (:mod:`~.pydantic_ai`) and the LiteLLM callback (:mod:`~.litellm`), the pytest plugin that starts the local engine for a test session
(:mod:`~.pytest_plugin`, registered as the ``pytest11`` entry point) and ``promptcache demo``
(:mod:`~.demo`, its workload in :mod:`~.demo_workload`). The top floor below the CLI: may import
every other SDK package; nothing in the SDK imports it back. Like the rest of the SDK it never
imports torch or ``local_engine`` (the demo and the plugin start the engine as a process).
"""
