"""What the analysis recognises: volatile sources, prompt sinks, name hints, LLM libraries.

Every table is data, so a rule never hard-codes a name; the user extends the volatile
table with ``extra-volatile-calls`` in ``[tool.promptcache.lint]``.
"""

from __future__ import annotations

import ast
import re

# How often a volatile value changes: it sets what a finding costs. Per request: every
# request writes the cache anew (a warning). Per hour: 24 writes a day (a warning). Per day:
# one cache write a day (info). Per process (pid, host, user, platform, a value computed at
# import): the same for every request a process serves, not reported.
RATE_REQUEST = "request"
# Per conversation write: stored data that a tool the model calls rewrites during the
# conversation (an agent's memory / notes store, ``linters.flow.stores``): every turn after
# a write writes the cache anew (a warning).
RATE_WRITE = "write"
RATE_HOUR = "hour"
# Per conversation: a value computed once when a conversation starts and replayed from its
# history afterwards (a non-dynamic pydantic-ai ``@agent.system_prompt``): each new
# conversation writes its own system prefix once (info). Slower than the hour: a clock read
# there changes the prefix at most once per conversation, whatever it prints.
RATE_CONVERSATION = "conversation"
RATE_DAY = "day"
RATE_PROCESS = "process"
RATE_ORDER = (  # fastest first
    RATE_REQUEST,
    RATE_WRITE,
    RATE_HOUR,
    RATE_CONVERSATION,
    RATE_DAY,
    RATE_PROCESS,
)

# Fully qualified calls whose result differs from one request (or one day, or process) to
# the next: name -> (what it reads, rate). Matched against the call's qualified name after
# import aliases are resolved (``from datetime import datetime as dt; dt.now()`` ->
# ``datetime.datetime.now``).
VOLATILE_CALLS: dict[str, tuple[str, str]] = {
    "datetime.datetime.now": ("the clock", RATE_REQUEST),
    "datetime.datetime.utcnow": ("the clock", RATE_REQUEST),
    "datetime.datetime.today": ("the clock", RATE_REQUEST),
    "datetime.date.today": ("today's date", RATE_DAY),
    "time.time": ("the clock", RATE_REQUEST),
    "time.time_ns": ("the clock", RATE_REQUEST),
    "time.monotonic": ("the clock", RATE_REQUEST),
    "time.monotonic_ns": ("the clock", RATE_REQUEST),
    "time.perf_counter": ("the clock", RATE_REQUEST),
    "time.perf_counter_ns": ("the clock", RATE_REQUEST),
    "time.process_time": ("the clock", RATE_REQUEST),
    "time.thread_time": ("the clock", RATE_REQUEST),
    "uuid.uuid1": ("a random UUID", RATE_REQUEST),
    "uuid.uuid4": ("a random UUID", RATE_REQUEST),
    "uuid.uuid6": ("a random UUID", RATE_REQUEST),
    "uuid.uuid7": ("a random UUID", RATE_REQUEST),
    "os.urandom": ("random bytes", RATE_REQUEST),
    "subprocess.check_output": ("shell output read at request time", RATE_REQUEST),
    "subprocess.getoutput": ("shell output read at request time", RATE_REQUEST),
    "subprocess.getstatusoutput": ("shell output read at request time", RATE_REQUEST),
    "subprocess.run": ("shell output read at request time", RATE_REQUEST),
    "os.popen": ("shell output read at request time", RATE_REQUEST),
    "django.utils.timezone.now": ("the clock", RATE_REQUEST),
    "django.utils.timezone.localtime": ("the clock", RATE_REQUEST),
    "pendulum.now": ("the clock", RATE_REQUEST),
    "pendulum.today": ("today's date", RATE_DAY),
    "arrow.now": ("the clock", RATE_REQUEST),
    "arrow.utcnow": ("the clock", RATE_REQUEST),
    "pandas.Timestamp.now": ("the clock", RATE_REQUEST),
    "pandas.Timestamp.utcnow": ("the clock", RATE_REQUEST),
    "pandas.Timestamp.today": ("the clock", RATE_REQUEST),
    "os.getpid": ("the process id", RATE_PROCESS),
    "os.getppid": ("the process id", RATE_PROCESS),
    "os.getcwd": ("the working folder", RATE_PROCESS),
    "threading.get_ident": ("the thread id", RATE_PROCESS),
    "threading.get_native_id": ("the thread id", RATE_PROCESS),
    "socket.gethostname": ("the host name", RATE_PROCESS),
    "socket.getfqdn": ("the host name", RATE_PROCESS),
    "platform.node": ("the host name", RATE_PROCESS),
    "platform.platform": ("the platform", RATE_PROCESS),
    "platform.system": ("the platform", RATE_PROCESS),
    "platform.release": ("the platform", RATE_PROCESS),
    "platform.python_version": ("the platform", RATE_PROCESS),
    "getpass.getuser": ("the user running the process", RATE_PROCESS),
}
# ``id(x)`` is an object address: volatile only when rendered into text (an f-string,
# ``str()``, ``format``), never as a bookkeeping dict key.
ID_CALL = "builtins.id"
# Methods that keep part of a clock reading: ``.date()`` keeps the day.
DATE_METHODS: dict[str, str] = {"date": RATE_DAY}
# Attributes of a clock reading and how often they change (``now.year``: per process).
CLOCK_ATTRS: dict[str, str] = {
    "year": RATE_PROCESS,
    "month": RATE_PROCESS,
    "day": RATE_DAY,
    "hour": RATE_HOUR,
    "minute": RATE_REQUEST,
    "second": RATE_REQUEST,
    "microsecond": RATE_REQUEST,
    # the zone of a clock reading (``now.astimezone().tzinfo``): the machine's zone, the
    # same for the whole process (its name and offset change only at a DST switch)
    "tzinfo": RATE_PROCESS,
}
# Methods of a time zone (or a zone-aware reading) whose result is the zone's name or
# offset: per process like ``tzinfo``, whatever clock reading they are asked about.
ZONE_METHODS = frozenset({"tzname", "utcoffset", "dst"})
# strftime directives by the rate at which the text they print changes.
STRFTIME_REQUEST = frozenset("SMfXcTsrRGz")  # %z is with %H usually; a clock either way
STRFTIME_HOUR = frozenset("HIpk")
STRFTIME_DAY = frozenset("djaAxDFeuwUWVgl")


def strftime_rate(fmt: str) -> str:
    """The rate of change of ``strftime(fmt)`` on a clock reading: the fastest field it
    prints (``"%Y-%m-%d"``: per day; ``"%H:%M"``: per request; ``"%Y"``: per process)."""
    fields = {fmt[i + 1] for i in range(len(fmt) - 1) if fmt[i] == "%"}
    if fields & STRFTIME_REQUEST:
        return RATE_REQUEST
    if fields & STRFTIME_HOUR:
        return RATE_HOUR
    if fields & STRFTIME_DAY:
        return RATE_DAY
    return RATE_PROCESS


def slower(a: str, b: str) -> str:
    """The slower of two rates (a day-only view of a per-request clock changes per day)."""
    return a if RATE_ORDER.index(a) >= RATE_ORDER.index(b) else b


# Calls that read the clock only when the time argument is left out: name -> how many
# positional arguments make the result a pure function of them.
CLOCK_DEFAULT_CALLS: dict[str, int] = {
    "time.strftime": 2,
    "time.ctime": 1,
    "time.asctime": 1,
    "time.localtime": 1,
    "time.gmtime": 1,
}

# Every function of these modules is random unless listed in the exceptions.
RANDOM_MODULES: dict[str, frozenset[str]] = {
    "random": frozenset({"seed", "Random", "SystemRandom", "getstate", "setstate"}),
    "secrets": frozenset({"SystemRandom", "compare_digest"}),
    "numpy.random": frozenset(
        {
            "seed",
            "default_rng",
            "RandomState",
            "Generator",
            "SeedSequence",
            "PCG64",
            "MT19937",
            "Philox",
            "SFC64",
            "BitGenerator",
            "get_state",
            "set_state",
        }
    ),
}

# ``random.shuffle(x)`` reorders ``x`` in place.
SHUFFLE_CALLS = frozenset({"random.shuffle", "numpy.random.shuffle"})

# Names, attributes and header keys that hold a per-request identifier.
REQUEST_ID_RE = re.compile(
    r"(?i)^(x[-_])?(request|req|trace|span|correlation|transaction|idempotency)[-_]?(id|key)$|^nonce$"
)

# JSON serialisers: qualified name -> how key order is made deterministic.
JSON_DUMPS: dict[str, str] = {
    "json.dumps": "sort_keys",
    "simplejson.dumps": "sort_keys",
    "ujson.dumps": "sort_keys",
    "orjson.dumps": "option",  # option=orjson.OPT_SORT_KEYS
}

# Calls whose result carries no ordering or volatility of its arguments.
SANITIZING_CALLS = frozenset(
    {
        "builtins.len",
        "builtins.bool",
        "builtins.isinstance",
        "builtins.issubclass",
        "builtins.hasattr",
        "builtins.callable",
        "builtins.type",
        "builtins.any",
        "builtins.all",
    }
)
ORDERING_CALLS = frozenset({"builtins.sorted"})  # removes iteration-order hazards
# Calls whose result is the same whatever the order of the items they are given (Python 3
# docs, read 2026-12-03: min/max return an extreme item; os.path.commonpath/commonprefix the
# longest common sub-path/prefix of all of them): the items' other hazards stay.
ORDER_FREE_CALLS = frozenset(
    {
        "builtins.min",
        "builtins.max",
        "os.path.commonpath",
        "os.path.commonprefix",
        "posixpath.commonpath",
        "posixpath.commonprefix",
    }
)
ITERATING_CALLS = frozenset(
    {
        "builtins.list",
        "builtins.tuple",
        "builtins.enumerate",
        "builtins.str",
        "builtins.repr",
        "builtins.iter",
        "builtins.zip",
        "builtins.dict",
        "builtins.reversed",
    }
)
SET_CONSTRUCTORS = frozenset({"builtins.set", "builtins.frozenset"})
SET_METHODS = frozenset({"union", "intersection", "difference", "symmetric_difference", "copy"})
DICT_CONSTRUCTORS = frozenset(
    {"builtins.dict", "collections.OrderedDict", "collections.defaultdict"}
)
TEXT_PASSTHROUGH_METHODS = frozenset(
    {
        "strip",
        "lstrip",
        "rstrip",
        "upper",
        "lower",
        "title",
        "capitalize",
        "casefold",
        "replace",
        "expandtabs",
        "removeprefix",
        "removesuffix",
        "encode",
        "decode",
    }
)
# Methods whose keyword arguments become text of their result (templates, formatting,
# prompt templates being filled).
TEXT_BUILDING_METHODS = frozenset(
    {
        "format",
        "format_map",
        "render",
        "render_async",
        "substitute",
        "safe_substitute",
        "partial",
        "invoke",
        "ainvoke",
        "format_messages",
        "format_prompt",
        "from_template",
        "join",
        "replace",
    }
)
TEXT_PASSTHROUGH_CALLS = frozenset({"builtins.str", "textwrap.dedent", "inspect.cleandoc"})
# Calls that give a type's JSON schema (Pydantic's ``Model.model_json_schema()`` and
# ``schema_json()``, ``TypeAdapter(T).json_schema()``, a project's ``..._json_schema(T)``
# helper): the text is fixed by the type, the same for every request with that type, not
# per-request even when the type is a parameter (issue 28: a dataset type's or an output
# type's schema in a system prompt was called "per-request").
TYPE_SCHEMA_CALL_RE = re.compile(r"(?i)(^|_)json_?schema($|_)|^model_json_schema|^schema_json$")
# Attributes fixed by the class or function defined in the code (``response_model.__name__``,
# its docstring): per type, like its schema, never per-request text.
TYPE_TEXT_ATTRS = frozenset({"__name__", "__qualname__", "__doc__", "__module__"})
FILE_READ_METHODS = frozenset({"read_text", "read", "read_bytes"})

# Keyword arguments whose value is a cached prefix.
PREFIX_KEYWORDS: dict[str, str] = {
    "system": "the system prompt",
    "instructions": "the instructions",
    "system_instruction": "the system instruction",
    "system_prompt": "the system prompt",
    "system_message": "the system message",
    "preamble": "the preamble",
}
TOOLS_KEYWORDS: dict[str, str] = {
    "tools": "the tool definitions",
    "functions": "the function definitions",
    "toolConfig": "the tool configuration",
    "tool_config": "the tool configuration",
    # request fields other than the prompt whose order is part of the cached request
    "tool_choice": "the tool choice",
    "allowed_function_names": "the allowed function names",
    "allowed_tools": "the allowed tools",
}
# Keyword arguments (and request-body keys) holding a whole prompt string (completions
# APIs, local engines): what comes first is the cached prefix, only the end may vary.
PROMPT_KEYWORDS: dict[str, str] = {"prompt": "the prompt"}
BODY_HINT_KEYS = frozenset({"model", "max_tokens", "temperature", "stream", "n_predict"})
MESSAGES_KEYWORDS: dict[str, str] = {
    "messages": "the message list",
    "contents": "the contents list",
}
# Resolved request calls (issue 28: a sink the linter cannot resolve is not a sink).
# ``<client>.messages.create(...)``, ``<client>.chat.completions.create(...)``,
# ``<client>.responses.create(...)``, ``.stream``/``.parse`` and async variants;
# ``litellm.completion(...)``; google-genai / google-generativeai; boto3 ``converse``; agent
# frameworks' constructors (pydantic-ai, OpenAI Agents SDK, agno, crewAI).
REQUEST_METHODS = frozenset({"create", "acreate", "stream", "parse", "count_tokens"})
REQUEST_RECEIVERS = frozenset({"messages", "completions", "responses"})
REQUEST_FUNCTIONS = frozenset(
    {
        "litellm.completion",
        "litellm.acompletion",
        "litellm.responses",
        "litellm.aresponses",
        "litellm.text_completion",
        "litellm.atext_completion",
    }
)
# Calls known to return a model's reply that are not (yet) prefix sinks: any-llm
# (mozilla-ai/any-llm, PyPI any-llm-sdk): its top-level completion and Responses functions
# (README, read 2026-12-03) and the Anthropic-shaped `messages`/`amessages`
# (`from any_llm import amessages`, as mozilla-ai/clawbolt calls it). As sinks they would
# report `system, rest = to_api(messages)` pairs as one value (the tuple unpack is not split).
REPLY_FUNCTIONS = frozenset(
    {
        "any_llm.completion",
        "any_llm.acompletion",
        "any_llm.responses",
        "any_llm.aresponses",
        "any_llm.messages",
        "any_llm.amessages",
    }
)
# google-genai's request types come in two forms, pydantic classes and TypedDicts with the
# same fields (``google.genai.types.GenerateContentConfig`` / ``GenerateContentConfigDict``,
# ``ToolConfig``/``ToolConfigDict``, ``FunctionCallingConfig``/``FunctionCallingConfigDict``;
# googleapis/python-genai google/genai/types.py, read 2026-12-03).
GENAI_CONFIG_NAMES = frozenset(
    {
        "GenerateContentConfig",
        "GenerateContentConfigDict",
        "FunctionCallingConfig",
        "FunctionCallingConfigDict",
        "ToolConfig",
        "ToolConfigDict",
    }
)
# Google's SDKs: a constructor of the names above (or ``GenerativeModel``) is a request only
# when imported from one of them; ``ToolConfig`` is a common name (strands-agents has its own
# TypedDict of that name).
GOOGLE_MODULES = ("google.genai.", "google.generativeai.", "vertexai.")
GOOGLE_CONSTRUCTORS = GENAI_CONFIG_NAMES | {"GenerativeModel"}
REQUEST_CALL_NAMES = frozenset(
    {
        "generate_content",
        "generate_content_async",
        "generate_content_stream",
        "converse",
        "converse_stream",
    }
)
AGENT_MODULES = ("pydantic_ai", "agents", "agno", "crewai", "promptcache")
# crewAI's Agent(role=, goal=, backstory=) become its system prompt.
CREWAI_PREFIX_KEYWORDS = {
    "role": "the agent role",
    "goal": "the agent goal",
    "backstory": "the agent backstory",
}


# Request-shaped constructors: they return a configuration or an agent that carries its
# arguments on (not a model reply).
REQUEST_CONFIG_NAMES = GENAI_CONFIG_NAMES | frozenset({"GenerativeModel", "Agent"})


def is_model_reply_call(func: object, qual: str) -> bool:
    """True when a call sends a request and returns the model's reply (not a
    configuration object): its result is generated text, not its arguments."""
    if qual in REPLY_FUNCTIONS:
        return True
    if not is_request_call(func, qual):
        return False
    name = getattr(func, "attr", None) or getattr(func, "id", "")
    return name not in REQUEST_CONFIG_NAMES


def is_request_call(func: object, qual: str) -> bool:
    """True when a call is a real client or framework request (see the tables above)."""

    if qual in REQUEST_FUNCTIONS:
        return True
    if ".".join(qual.split(".")[-2:]) in REQUEST_FUNCTIONS:
        # the SDK module re-exported by the project or held by an object:
        # ``from pkg.llm import litellm`` (a lazy-import proxy), ``self.litellm.completion``
        return True
    if isinstance(func, ast.Attribute):
        if func.attr in REQUEST_METHODS:
            recv = func.value
            return isinstance(recv, ast.Attribute) and recv.attr in REQUEST_RECEIVERS
        name = func.attr
    elif isinstance(func, ast.Name):
        name = func.id
    else:
        return False
    if name in REQUEST_CALL_NAMES:
        return True
    if name in GOOGLE_CONSTRUCTORS:
        return qual.startswith(GOOGLE_MODULES)
    return name == "Agent" and qual.startswith(AGENT_MODULES)


# promptcache.build(...) layers: frozen and semi-stable ones are prefixes.
BUILD_PREFIX_LAYERS: dict[str, str] = {
    "system": "the frozen `system` layer",
    "tools": "the frozen `tools` layer",
    "documents": "the frozen `documents` layer",
    "session": "the semi-stable `session` layer",
}
BUILD_CALLS = frozenset(
    {"promptcache.build", "promptcache.build.build", "promptcache.compose.build.build"}
)
# Calls whose first positional argument (or ``content=``) is a system message.
SYSTEM_MESSAGE_CALLS = frozenset(
    {
        "SystemMessage",
        "SystemMessagePromptTemplate.from_template",
        "ChatMessage.system",
        "SystemPromptPart",
    }
)
# Methods whose first positional argument is a tool list.
TOOLS_METHODS = frozenset({"bind_tools", "bind_functions"})
# ``<client>.responses.create(input=[...])``: ``input`` is the message list.
RESPONSES_METHODS = frozenset({"create", "parse", "stream"})

SYSTEM_ROLES = frozenset({"system", "developer"})
# Configuration fields whose value is the role of the system message
# (``Message(role=agent.system_message_role, ...)``).
SYSTEM_ROLE_FIELDS = frozenset({"system_message_role", "system_role"})

# Secondary hints: variables and functions named like a system prompt or a tool list.
# Strong names count anywhere; weak ones only in modules that talk to an LLM.
STRONG_PREFIX_NAME_RE = re.compile(
    r"(?i)sys(tem)?_?prompt|system_?(message|msg|instructions?|preamble)"
)
PREFIX_NAME_RE = re.compile(
    r"(?i)^(system|sys_prompt)$|system_?(prompt|message|msg|instructions?|template|preamble)"
    r"|^(base_|agent_|default_)?(instructions|preamble)$|_instructions$"
)
TOOLS_NAME_RE = re.compile(
    r"(?i)^(tools|[a-z0-9_]*_tools|tool_(definitions|defs|schemas|specs|list))$"
)
PREFIX_DECORATOR_ATTRS = frozenset({"system_prompt", "instructions"})
# pydantic-ai: a plain ``@agent.system_prompt`` function runs only when the message history
# is empty, its part is then replayed from the history; ``@agent.system_prompt(dynamic=True)``
# is re-evaluated on every run, and ``@agent.instructions`` on every request. Source:
# pydantic-ai ``Agent.system_prompt`` docstring ("dynamic: If True, the system prompt will be
# reevaluated even when `messages_history` is provided") and ``_agent_graph.py``
# ``UserPromptNode`` (``if not messages: parts.extend(await self._sys_parts(run_context))``),
# commit 4fda38988f29, read 2026-12-03; https://ai.pydantic.dev/agents/#system-prompts.
ONCE_PER_CONVERSATION_DECORATORS = frozenset({"system_prompt"})
# ``Agent(system_prompt=...)``: its strings join the same parts (``_sys_parts`` resolves
# ``self.system_prompts`` with the functions), so they are replayed from the history too.
ONCE_PER_CONVERSATION_KEYWORDS = frozenset({"system_prompt"})

# Top-level packages whose import marks a module as talking to an LLM.
LLM_MODULES = frozenset(
    {
        "openai",
        "anthropic",
        "google.generativeai",
        "google.genai",
        "vertexai",
        "cohere",
        "mistralai",
        "litellm",
        "langchain",
        "langchain_core",
        "langchain_openai",
        "langchain_anthropic",
        "langchain_community",
        "llama_index",
        "promptcache",
        "groq",
        "together",
        "ollama",
        "instructor",
        "pydantic_ai",
        "dspy",
        "agents",
        "boto3",
        "fireworks",
        "replicate",
        "huggingface_hub",
        "vllm",
        "transformers",
        "llm",
    }
)

# Byte strings: a file holding none of them cannot produce a finding, so it is only parsed
# (for PC900), never walked. (Plain ``in`` scans are faster than one alternation regex.)
GATE_WORDS = (
    b"system",
    b"System",
    b"SYSTEM",
    b"instruction",
    b"INSTRUCTION",
    b"preamble",
    b"PREAMBLE",
    b"tool",
    b"TOOL",
    b"Tool",
    b"messages",
    b"contents",
    b"responses",
    b"role",
    b"cache_control",
    b"prompt",
    b"PROMPT",
    b"Prompt",
)


def gate(source: bytes) -> bool:
    """True when ``source`` may hold something a rule looks at."""
    for word in GATE_WORDS:
        if word in source:
            return True
    return False


# Stored data (``linters.flow.stores``). SQLAlchemy statement builders: ``select(Model)``
# reads rows, ``update(Model)`` writes them (SQLAlchemy 2.0 docs, "ORM Querying Guide" and
# "ORM-Enabled INSERT, UPDATE, and DELETE statements", read 2026-12-03; SQLModel re-exports
# ``select``, sqlmodel.tiangolo.com, read 2026-12-03).
SQL_SELECTS = frozenset(
    {
        "sqlalchemy.select",
        "sqlalchemy.future.select",
        "sqlalchemy.sql.select",
        "sqlalchemy.sql.expression.select",
        "sqlmodel.select",
    }
)
SQL_UPDATES = frozenset(
    {
        "sqlalchemy.update",
        "sqlalchemy.sql.update",
        "sqlalchemy.sql.expression.update",
        "sqlmodel.update",
    }
)
# Decorators that expose a function to a model as a tool (each library's documented import
# path, read 2026-12-03: python.langchain.com "How to create tools"; docs.agno.com "Writing
# your own tools"; huggingface.co/docs/smolagents "Tools"; strandsagents.com "Python tools";
# docs.llamaindex.ai "Tools"; the OpenAI Agents SDK "Tools" page).
TOOL_DECORATORS = frozenset(
    {
        "langchain_core.tools.tool",
        "langchain.tools.tool",
        "langchain.agents.tool",
        "agno.tools.tool",
        "agno.tools.decorator.tool",
        "smolagents.tool",
        "smolagents.tools.tool",
        "strands.tool",
        "agents.function_tool",
    }
)
# Calls that make a tool of the function given first or as ``func=``/``fn=``.
TOOL_FACTORIES = frozenset(
    {
        "langchain_core.tools.StructuredTool.from_function",
        "langchain_core.tools.Tool.from_function",
        "langchain.tools.StructuredTool.from_function",
        "llama_index.core.tools.FunctionTool.from_defaults",
    }
)
# Keywords that hand a tool its function, in a call that also gives ``description=``
# (a tool definition: ``Tool(name=..., description=..., function=save_note)``).
TOOL_FUNCTION_KEYWORDS = frozenset({"function", "func", "fn", "coroutine", "callable"})

# Keys that mark a cache breakpoint in a content block: Anthropic Messages API
# ``"cache_control": {"type": "ephemeral"}`` on a block (docs.anthropic.com "Prompt caching",
# read 2026-12-03); Amazon Bedrock Converse API ``{"cachePoint": {"type": "default"}}`` as a
# block of ``system``/``messages``/``tools`` (AWS Bedrock API reference "CachePointBlock",
# read 2026-12-03). A block type declaring one of them can carry a breakpoint.
# The Anthropic-format key itself (also what litellm reads and converts for other providers).
CACHE_CONTROL = "cache_control"
CACHE_MARKER_KEYS = frozenset({CACHE_CONTROL, "cachePoint"})
# Methods of ``str`` whose result is text made from the receiver (``s.replace(a, b)``).
STR_REWRITE_METHODS = frozenset(
    {
        "replace",
        "strip",
        "lstrip",
        "rstrip",
        "removeprefix",
        "removesuffix",
        "format",
        "format_map",
        "expandtabs",
    }
)
