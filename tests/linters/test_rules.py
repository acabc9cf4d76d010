"""Rule behaviour on small sources: what is found, where, and what is left alone.

Each expected (line, code) pair is read off the snippet itself: the line numbers count from
1 at the first line of the dedented source.
"""

from __future__ import annotations

import textwrap

import pytest

from linters.config import LintConfig
from linters.runner import lint_source


def found(src: str, **cfg) -> list[tuple[int, str]]:
    text = textwrap.dedent(src).lstrip("\n")
    return [(f.line, f.code) for f in lint_source(text, "t.py", LintConfig(**cfg))]


def messages(src: str) -> list[str]:
    text = textwrap.dedent(src).lstrip("\n")
    return [f.message for f in lint_source(text, "t.py", LintConfig())]


# -- PC001: volatile sources and data flow ------------------------------------------------


@pytest.mark.parametrize(
    "imports,call",
    [
        ("import datetime", "datetime.datetime.now()"),
        ("from datetime import datetime as dt", "dt.utcnow()"),
        ("from datetime import date", "date.today()"),
        ("import time", "time.time()"),
        ("from time import time_ns", "time_ns()"),
        ("import time", "time.strftime('%H:%M')"),
        ("import uuid", "uuid.uuid4().hex"),
        ("from uuid import uuid1", "uuid1()"),
        ("import random", "random.randint(1, 6)"),
        ("import secrets", "secrets.token_hex(8)"),
        ("import numpy as np", "np.random.rand()"),
        ("from django.utils import timezone", "timezone.now()"),
        ("import pandas as pd", "pd.Timestamp.now()"),
    ],
)
def test_volatile_sources_in_system_prompt(imports, call):
    src = f"""
    {imports}
    import anthropic
    client = anthropic.Anthropic()
    client.messages.create(model="m", system=f"Rules. Stamp: {{{call}}}", messages=[])
    """
    assert found(src) == [(4, "PC001")]


@pytest.mark.parametrize(
    "imports,call",
    [
        ("import os", "os.getpid()"),
        ("import socket", "socket.gethostname()"),
        ("import platform", "platform.node()"),
        ("import getpass", "getpass.getuser()"),
        ("import platform", "platform.platform()"),
    ],
)
def test_per_process_values_are_not_reported(imports, call):
    # issue 28: the same for every request a process serves: one cache write per process
    src = f"""
    {imports}
    import anthropic
    client = anthropic.Anthropic()
    client.messages.create(model="m", system=f"Rules. Host: {{{call}}}", messages=[])
    """
    assert found(src) == []


@pytest.mark.parametrize(
    "imports,call",
    [
        ("import time", "time.strftime('%Y', FIXED)"),  # explicit time tuple
        ("import uuid", "uuid.uuid5(uuid.NAMESPACE_DNS, 'x')"),  # name-based: deterministic
        ("import random", "random.Random(42).choice(XS)"),  # seeded instance
        ("from datetime import datetime", "datetime.fromtimestamp(0)"),
    ],
)
def test_deterministic_lookalikes_are_not_volatile(imports, call):
    src = f"""
    {imports}
    import anthropic
    client = anthropic.Anthropic()
    client.messages.create(model="m", system=f"Rules. {{{call}}}", messages=[])
    """
    assert found(src) == []


def test_name_assigned_from_clock_is_reported_where_interpolated():
    src = """
    from datetime import datetime
    from openai import OpenAI
    client = OpenAI()
    def ask(q):
        now = datetime.now()
        stamp = now.strftime("%H:%M")
        system = f"You are helpful. Time: {stamp}"
        return client.chat.completions.create(model="m", messages=[
            {"role": "system", "content": system}, {"role": "user", "content": q}])
    """
    assert found(src) == [(7, "PC001")]
    assert "`stamp` (set on line" in messages(src)[0]


def test_augmented_assignment_and_list_building_carry_taint():
    src = """
    import time
    import anthropic
    client = anthropic.Anthropic()
    def run(q):
        parts = ["You are a planner."]
        parts.append(f"Epoch {time.time():.0f}")
        system = "\\n".join(parts)
        system += " Be brief."
        return client.messages.create(model="m", system=system, messages=[{"role": "user", "content": q}])
    """
    assert found(src) == [(6, "PC001")]


def test_closure_reads_enclosing_binding():
    src = """
    from datetime import date
    import anthropic
    client = anthropic.Anthropic()
    def outer(q):
        today = date.today()
        def inner():
            return client.messages.create(model="m", system=f"Date {today}", messages=[])
        return inner()
    """
    assert found(src) == [(7, "PC001")]


def test_parameter_carried_back_to_caller_transitively():
    src = """
    import uuid
    import anthropic
    client = anthropic.Anthropic()
    def send(system_text, q):
        return client.messages.create(model="m", system=system_text, messages=[{"role": "user", "content": q}])
    def wrapper(prefix, q):
        return send(prefix + " Be concise.", q)
    def handler(q):
        return wrapper(f"Request {uuid.uuid4()}", q)
    """
    out = found(src)
    assert out == [(9, "PC001")]
    assert "passed to `wrapper()` as `prefix`" in messages(src)[0]


def test_local_function_return_value_substitutes_arguments():
    src = """
    from datetime import datetime
    from openai import OpenAI
    client = OpenAI()
    def header(when):
        return f"Generated {when}."
    def ask(q):
        return client.responses.create(model="m", instructions=header(datetime.now()), input=q)
    def ask_static(q):
        return client.responses.create(model="m", instructions=header("2024-01-01"), input=q)
    """
    assert found(src) == [(7, "PC001")]


def test_method_and_self_attribute_flow():
    src = """
    import uuid
    from anthropic import Anthropic
    class Bot:
        def __init__(self):
            self.host = uuid.uuid4()
        def system(self):
            return f"Served by {self.host}."
        def ask(self, q):
            return Anthropic().messages.create(model="m", system=self.system(), messages=[])
    """
    assert found(src) == [(7, "PC001")]


def test_request_id_parameter_and_header():
    src = """
    from openai import OpenAI
    client = OpenAI()
    def handle(request, request_id, q):
        a = f"Trace {request_id}."
        b = f"Header {request.headers['X-Request-ID']}."
        return client.chat.completions.create(model="m", messages=[
            {"role": "system", "content": a + b}, {"role": "user", "content": q}])
    """
    assert found(src) == [(4, "PC001"), (5, "PC001")]


def test_whole_prompt_strings_only_vary_at_the_end():
    src = """
    from datetime import datetime
    import requests
    HEADER = "You are a helpful assistant. Answer clearly, cite sources, and keep it short."
    def complete(q):
        a = requests.post(URL, json={"model": "m", "prompt": f"{HEADER}\\nQ: {q}\\nTime: {datetime.now()}"})
        b = requests.post(URL, json={"model": "m", "prompt": f"Time: {datetime.now()}\\n{HEADER}\\nQ: {q}"})
        c = requests.post(URL, json={"model": "m", "prompt": f"User {q}: {HEADER}"})
    """
    assert found(src) == [(6, "PC001"), (7, "PC004")]


def test_only_the_last_message_and_dynamic_layer_may_vary():
    src = """
    from datetime import datetime
    import promptcache
    from openai import OpenAI
    client = OpenAI()
    def ask(history, q):
        client.chat.completions.create(model="m", messages=[
            {"role": "system", "content": "static"},
            *history,
            {"role": "user", "content": f"{datetime.now()} {q}"},
        ])
        promptcache.build(system="static", dynamic=f"{datetime.now()} {q}")
    """
    assert found(src) == []


def test_message_before_last_and_loop_appends_are_prefix():
    src = """
    import time
    from openai import OpenAI
    client = OpenAI()
    def ask(turns, q):
        messages = [{"role": "system", "content": "static"}]
        for t in turns:
            messages.append({"role": "user", "content": f"[{time.time()}] {t}"})
        return client.chat.completions.create(model="m", messages=messages)
    """
    assert found(src) == [(7, "PC001")]


def test_system_role_message_found_without_a_visible_call():
    src = """
    from datetime import date
    import anthropic
    def build_messages(q):
        return [{"role": "developer", "content": f"Date: {date.today()}"}, {"role": "user", "content": q}]
    """
    assert found(src) == [(4, "PC001")]


def test_names_alone_are_not_sinks():
    # issue 28: a sink the linter cannot resolve is not a sink; a name that sounds like a
    # system prompt (a tracing attribute, an env var for a subprocess) proves nothing
    src = """
    import openai
    import subprocess
    import uuid
    from datetime import datetime
    SYSTEM_PROMPT = f"You are a bot. Now {datetime.now()}."
    def build_system_prompt():
        return f"Now {datetime.now()}"
    def tracing_system_instructions(span):
        span.set_attribute("llm.system_instructions", f"run {uuid.uuid4()}")
    def run_tool():
        env = {"SYSTEM_PROMPT": f"started {datetime.now()}"}
        return subprocess.run(["tool"], env=env)
    """
    assert found(src) == []


def test_a_named_prompt_reaching_a_request_is_reported_where_it_is_built():
    src = """
    import anthropic
    from datetime import datetime
    def system_prompt():
        return f"You are a bot. Now {datetime.now()}."
    def ask(q):
        return anthropic.Anthropic().messages.create(
            model="m", system=system_prompt(), messages=[{"role": "user", "content": q}])
    """
    assert found(src) == [(4, "PC001")]
    # the same text computed once at import is per process: not reported (issue 28)
    at_import = src.replace("def system_prompt():\n        return f", "SYSTEM = f").replace(
        "system=system_prompt()", "system=SYSTEM"
    )
    assert "SYSTEM = f" in at_import and found(at_import) == []


def test_extra_volatile_calls_from_config():
    src = """
    import anthropic
    from myapp import clock
    anthropic.Anthropic().messages.create(model="m", system=f"{clock.now()}", messages=[])
    """
    assert found(src) == []
    assert found(src, extra_volatile_calls=frozenset({"myapp.clock.now"})) == [(3, "PC001")]


# -- PC002 --------------------------------------------------------------------------------


def test_json_dumps_reported_only_when_key_order_can_differ():
    # issue 28: equal data in a dict whose order the code fixes renders equal text
    src = """
    import json
    from json import dumps
    import anthropic
    client = anthropic.Anthropic()
    def ask(profile, q, opts, tags, **extra):
        a = json.dumps({t: 1 for t in set(tags)})
        b = dumps(extra, indent=2)
        c = json.dumps(extra, sort_keys=True)
        d = json.dumps({"k": 1, "z": [1, 2]})
        e = json.dumps(extra, **opts)
        f = json.dumps(profile)
        client.messages.create(model="m", system=a + b + c + d + e + f, messages=[
            {"role": "user", "content": json.dumps(extra)}])
    """
    assert found(src) == [(6, "PC002"), (7, "PC002")]


def test_json_dumps_of_schema_file_and_literal_is_not_reported():
    # issue 28 false positives: a Pydantic schema, a JSON file loaded from disk, a literal
    src = """
    import json
    import anthropic
    from pydantic import BaseModel
    class Answer(BaseModel):
        text: str
    def ask(q):
        schema = json.dumps(Answer.model_json_schema())
        with open("catalog.json") as fh:
            catalog = json.dumps(json.load(fh))
        lit = json.dumps({"mode": "strict", "langs": ["en", "fr"]})
        anthropic.Anthropic().messages.create(
            model="m", system=schema + catalog + lit, messages=[{"role": "user", "content": q}])
    """
    assert found(src) == []


def test_json_dumps_of_kwargs_merge_and_network_payload():
    src = """
    import json
    import httpx
    import anthropic
    def ask(q, base: dict, **overrides):
        settings = {**base, **overrides}
        profile = httpx.get("https://x/profile").json()
        anthropic.Anthropic().messages.create(
            model="m", system=json.dumps(settings) + json.dumps(profile), messages=[])
    """
    assert found(src) == [(8, "PC002"), (8, "PC002")]
    assert [m.split(" feeds")[0] for m in messages(src)] == [
        "`json.dumps(...)` without sorted keys, of `**overrides` (ordered as each caller passes "
        "them),",
        "`json.dumps(...)` without sorted keys, of a network payload (`httpx.get('https://x/pro"
        "file').json()`),",
    ]


# -- PC003 / PC006 ------------------------------------------------------------------------


def test_set_iteration_forms():
    src = """
    import anthropic
    client = anthropic.Anthropic()
    def ask(tags: set[str], names, q):
        s1 = ", ".join(tags)
        s2 = ", ".join(sorted(tags))
        s3 = str({n for n in names})
        s4 = ", ".join(t for t in set(names) if t)
        s5 = ", ".join(sorted({n.lower() for n in names}))
        client.messages.create(model="m", system=s1 + s2 + s3 + s4 + s5, messages=[])
    """
    assert found(src) == [(4, "PC003"), (6, "PC003"), (7, "PC003")]


def test_sets_for_membership_are_fine():
    src = """
    import anthropic
    ALLOWED = {"a", "b"}
    def ask(q, items):
        keep = [i for i in items if i in ALLOWED]
        n = len(set(items))
        anthropic.Anthropic().messages.create(model="m", system=f"{keep} {n}", messages=[])
    """
    assert found(src) == []


def test_dict_views_by_origin():
    src = """
    from openai import OpenAI
    client = OpenAI()
    STATIC = {"a": {"name": "a"}, "b": {"name": "b"}}
    def ask(req, q, registry: dict):
        chosen = {n: STATIC[n] for n in req.tools}
        client.chat.completions.create(model="m", tools=list(STATIC.values()), messages=[])
        client.chat.completions.create(model="m", tools=list(chosen.values()), messages=[])
        client.chat.completions.create(model="m", tools=[v for k, v in registry.items()], messages=[])
        client.chat.completions.create(model="m", tools=sorted(chosen.values(), key=len), messages=[])
    """
    # issue 28: a dict passed in keeps the order its owner gave it (line 8 not reported)
    assert found(src) == [(7, "PC006")]


# -- PC004 / PC007 ------------------------------------------------------------------------


def test_dynamic_before_static_threshold():
    src = """
    import anthropic
    client = anthropic.Anthropic()
    RULES = "Follow the house rules about tone, length, sources and refusals at all times."
    def ask(name, q):
        client.messages.create(model="m", system=f"Hi {name}. " + RULES, messages=[])
        client.messages.create(model="m", system=RULES + f" The user is {name}.", messages=[])
        client.messages.create(model="m", system=f"Hi {name}!", messages=[])
    """
    assert found(src) == [(5, "PC004")]
    assert found(src, min_static_chars=1000) == []


def test_parameter_with_only_static_callers_is_not_per_request():
    src = """
    import anthropic
    RULES = "Follow the house rules about tone, length, sources and refusals at all times."
    def make_system(persona):
        return f"You are {persona}. " + RULES
    def ask(q):
        anthropic.Anthropic().messages.create(model="m", system=make_system("Ava"), messages=[])
    """
    assert found(src) == []
    assert found(src.replace('make_system("Ava")', "make_system(q)")) == [(4, "PC004")]


def test_long_constant_after_per_request_value():
    body = "x" * 1200
    src = f"""
    import openai
    MANUAL = "{body}"
    def ask(q):
        return openai.OpenAI().responses.create(model="m", input=q + MANUAL)
    def ask2(q):
        return openai.OpenAI().responses.create(model="m", input=MANUAL + q)
    """
    assert found(src) == [(4, "PC007")]
    assert found(src, long_constant_chars=5000) == []


# -- PC005 / PC008 ------------------------------------------------------------------------


def _request(blocks: str, model: str = "claude-sonnet-4-5") -> str:
    return f"""
    from pathlib import Path
    import anthropic
    LONG = Path("x.md").read_text()
    anthropic.Anthropic().messages.create(model="{model}", max_tokens=10, system=[
    {blocks}
    ], messages=[{{"role": "user", "content": "hi"}}])
    """


def test_breakpoint_count_and_ttl_order():
    five = "\n".join(
        ['    {"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}},'] * 5
    )
    assert found(_request(five)) == [(9, "PC005")]
    four = "\n".join(
        ['    {"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}},'] * 4
    )
    assert found(_request(four)) == []
    order = (
        '    {"type": "text", "text": LONG, "cache_control": {"type": "ephemeral", "ttl": "5m"}},\n'
        '    {"type": "text", "text": LONG, "cache_control": {"type": "ephemeral", "ttl": "1h"}},'
    )
    assert found(_request(order)) == [(6, "PC005")]
    bad = '    {"type": "text", "text": LONG, "cache_control": {"type": "persistent"}},'
    assert found(_request(bad)) == [(5, "PC005")]


def test_breakpoint_below_minimum_depends_on_model_and_length():
    # 1,000 ASCII bytes -> at most 400 tokens at 2.5 bytes/token: below 1,024.
    short = (
        '    {"type": "text", "text": "'
        + "a" * 1000
        + '", "cache_control": {"type": "ephemeral"}},'
    )
    assert found(_request(short)) == [(5, "PC008")]
    # 3,000 bytes -> up to 1,200 tokens: may reach 1,024 on Sonnet 4.5, not 2,048 on Haiku 3.5.
    mid = (
        '    {"type": "text", "text": "'
        + "a" * 3000
        + '", "cache_control": {"type": "ephemeral"}},'
    )
    assert found(_request(mid)) == []
    assert found(_request(mid, "claude-3-5-haiku-20241022")) == [(5, "PC008")]
    unknown = '    {"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}},'
    assert found(_request(unknown)) == []


# -- parse errors, noqa -------------------------------------------------------------------


def test_parse_error_is_one_finding():
    out = lint_source("def f(:\n    pass\n", "bad.py")
    assert [(f.code, f.line, f.severity) for f in out] == [("PC900", 1, "info")]
    assert out[0].message.startswith("not checked: the file does not parse (syntax error: ")
    assert [f.code for f in lint_source(b"x = 1\x00\n", "nul.py")] == ["PC900"]


def test_noqa_forms():
    base = """
    from datetime import datetime
    import anthropic
    anthropic.Anthropic().messages.create(model="m", system=f"{datetime.now()}", messages=[])TAIL
    """

    def with_tail(tail):
        return found(base.replace("TAIL", tail))

    assert with_tail("") == [(3, "PC001")]
    assert with_tail("  # noqa") == []
    assert with_tail("  # noqa: PC001") == []
    assert with_tail("  # NOQA:PC002,PC001") == []
    assert with_tail("  # noqa: E501") == [(3, "PC001")]
    assert with_tail("  # noqa: PC002") == [(3, "PC001")]
    assert with_tail('; x = "# noqa"') == [(3, "PC001")]


def test_noqa_at_the_end_of_a_multiline_string():
    src = '''
    from datetime import datetime
    import anthropic
    SYSTEM = f"""You are a bot.
    Time: {datetime.now()}
    """  # noqa: PC001
    anthropic.Anthropic().messages.create(model="m", system=SYSTEM, messages=[])
    '''
    assert found(src) == []
    assert found(src.replace("  # noqa: PC001", "")) == [(4, "PC001")]


def test_columns_are_characters_not_bytes():
    src = 'from datetime import datetime\nimport anthropic\nanthropic.Anthropic().messages.create(model="m", system=f"Zürich — {datetime.now()}", messages=[])\n'
    (f,) = lint_source(src, "t.py")
    line = src.splitlines()[2]
    assert line[f.col - 1 :].startswith("datetime.now()")


def test_linter_never_imports_torch_or_engine():
    import subprocess
    import sys

    code = (
        "import sys, linters.cli, linters.runner, linters.fix, linters.payloads;"
        "from linters.runner import lint_source;"
        "lint_source(b'import anthropic\\nx = 1\\n', 'x.py');"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'local_engine', 'triton')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_random_seeded_in_the_same_function_is_deterministic():
    src = """
    import random
    import anthropic
    POOL = ["a", "b", "c", "d"]
    random.seed(7)  # a module-level seed: the sequence still advances per request
    def shots():
        random.seed(42)
        picked = random.sample(POOL, 2)
        random.shuffle(picked)
        return picked
    def ask(q):
        c = anthropic.Anthropic()
        c.messages.create(model="m", system="\\n".join(shots()), messages=[])
        c.messages.create(model="m", system="\\n".join(random.sample(POOL, 2)), messages=[])
    """
    assert found(src) == [(13, "PC001")]


def test_long_constant_must_be_prose_for_pc007():
    css = "body { margin: 0; padding: 0; color: #222; } " * 40
    prose = "Refunds are accepted within thirty days of delivery when unused. " * 20
    src = f"""
    from pathlib import Path
    import openai
    CSS = "{css}"
    POLICY = "{prose}"
    STYLE = Path("static/report.css").read_text()
    MANUAL = Path("docs/manual.md").read_text()
    def page(title):
        return f"<title>{{title}}</title>" + CSS + STYLE
    def ask(q):
        return openai.OpenAI().responses.create(model="m", input=q + POLICY)
    def ask2(q):
        return openai.OpenAI().responses.create(model="m", input=q + MANUAL)
    """
    assert found(src) == [(10, "PC007"), (12, "PC007")]


def test_langchain_template_variables_filled_with_volatile_values():
    src = """
    from datetime import datetime
    from langchain_core.prompts import ChatPromptTemplate, SystemMessagePromptTemplate
    prompt = ChatPromptTemplate.from_messages([
        ("system", "You are a travel agent. Today is {today}."),
        ("human", "{question} (asked {asked_at})"),
    ])
    sys_tpl = SystemMessagePromptTemplate.from_template("Shift started {shift}")
    def run(chain, q):
        p = prompt.partial(today=datetime.now().strftime("%A"))
        chain.invoke({"question": q, "asked_at": datetime.now()})
        chain.invoke({"question": q, "today": datetime.now()})
        sys_tpl.format_messages(shift=datetime.now())
    """
    assert found(src) == [(9, "PC001"), (11, "PC001"), (12, "PC001")]


def test_element_assignment_and_insert_positions():
    src = """
    import time
    from openai import OpenAI
    client = OpenAI()
    def ask(history, q):
        messages = [{"role": "system", "content": "static"}, *history]
        messages[0]["content"] += f" ({time.time()})"
        messages.append({"role": "user", "content": q})
        messages[-1]["content"] += f" ({time.time()})"
        client.chat.completions.create(model="m", messages=messages)
    def ask2(q):
        messages = [{"role": "user", "content": f"{time.time()} {q}"}]
        messages.insert(0, {"role": "system", "content": "static"})
        client.chat.completions.create(model="m", messages=messages)
    """
    assert found(src) == [(6, "PC001")]
