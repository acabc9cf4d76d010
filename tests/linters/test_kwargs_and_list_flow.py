"""A request sent as ``client.call(**kwargs)`` with the keyword arguments built in a dict,
and message lists assembled from lists that functions and methods of the project return
(``[system] + self.readonly() + [user]``, ``out += [...]``, ``.extend(...)``, a dataclass's
``all_messages()``): small programs written for these tests (issue 28, the set-ordered file
listing), each asserting the exact finding or its absence. Lines count from 1 at the first
line of the dedented source."""

from __future__ import annotations

import textwrap
from pathlib import Path

from linters import lint_paths
from linters.config import LintConfig
from linters.runner import lint_source


def found(src: str) -> list[tuple[int, str, str]]:
    text = textwrap.dedent(src).lstrip()
    return [(f.line, f.code, f.severity) for f in lint_source(text, "t.py", LintConfig())]


# A class whose listing() iterates a set of file names (the `for` on line 10 once dedented, with the
# import on line 1); every program below appends its own request code to it.
LISTING = """
import litellm


class Coder:
    def __init__(self):
        self.fnames = set()

    def listing(self):
        prompt = ""
        for fname in self.fnames:
            prompt += "\\n" + fname
        return prompt
"""

EARLY_FILES = """
    def ask(self, q):
        msgs = [{"role": "system", "content": "Rules"},
                {"role": "user", "content": "Files:" + self.listing()},
                {"role": "assistant", "content": "Ok."},
                {"role": "user", "content": q}]
"""


def test_kwargs_dict_call_splatted_into_the_request():
    src = (
        LISTING
        + EARLY_FILES
        + """
        kwargs = dict(model="m", messages=msgs, temperature=0)
        return litellm.completion(**kwargs)
"""
    )
    # the set is iterated on line 10 (`for fname in self.fnames`); its order reaches the
    # second message, which is before the last
    assert found(src) == [(10, "PC003", "warning")]


def test_kwargs_filled_key_by_key_then_splatted():
    src = (
        LISTING
        + EARLY_FILES
        + """
        kwargs = {"temperature": 0}
        kwargs["model"] = "m"
        kwargs["messages"] = msgs
        return litellm.completion(**kwargs)
"""
    )
    assert found(src) == [(10, "PC003", "warning")]


def test_kwargs_splat_of_an_unrelated_mapping_is_not_a_sink():
    # the splatted dict carries only settings; the messages go by keyword: the set-ordered
    # listing is in the last message only, so nothing is cached after it
    src = (
        LISTING
        + """
    def ask(self, q):
        settings = dict(temperature=0, max_tokens=10)
        last = [{"role": "user", "content": "Files:" + self.listing() + q}]
        return litellm.completion(model="m", messages=last, **settings)
"""
    )
    assert found(src) == []


def test_kwargs_of_a_call_that_is_no_request_are_not_followed():
    src = (
        LISTING
        + EARLY_FILES
        + """
        kwargs = dict(model="m", messages=msgs)
        return print(**kwargs)
"""
    )
    assert found(src) == []


READONLY = """
    def readonly(self):
        out = []
        text = self.listing()
        if text:
            out += [{"role": "user", "content": "Files:" + text},
                    {"role": "assistant", "content": "Ok."}]
        return out
"""


def test_list_returned_by_a_method_concatenated_into_the_messages():
    src = (
        LISTING
        + READONLY
        + """
    def ask(self, q):
        msgs = [{"role": "system", "content": "Rules"}] + self.readonly() + [
            {"role": "user", "content": q}]
        return litellm.completion(model="m", messages=msgs)
"""
    )
    assert found(src) == [(10, "PC003", "warning")]


def test_list_returned_by_a_method_extended_into_the_messages():
    src = (
        LISTING
        + READONLY
        + """
    def ask(self, q):
        msgs = [{"role": "system", "content": "Rules"}]
        msgs.extend(self.readonly())
        msgs += [{"role": "user", "content": q}]
        return litellm.completion(model="m", messages=msgs)
"""
    )
    assert found(src) == [(10, "PC003", "warning")]


def test_method_list_as_the_last_message_is_not_reported():
    # readonly() returns two messages; here they come last, and the set-ordered text sits
    # in the first of them, which is before the last: still a prefix of the request
    src = (
        LISTING
        + """
    def tail(self, q):
        return [{"role": "user", "content": q + self.listing()}]

    def ask(self, q):
        msgs = [{"role": "system", "content": "Rules"}] + self.tail(q)
        return litellm.completion(model="m", messages=msgs)
"""
    )
    # the listing is in the last message: nothing cached follows it
    assert found(src) == []


def test_messages_passed_through_methods_and_splatted():
    # format() -> ask() -> send(messages) -> completion(**kwargs): the listing reaches
    # the request through two calls and a kwargs dict
    src = (
        LISTING
        + READONLY
        + """
    def format(self, q):
        system = [{"role": "system", "content": "Rules"}]
        return system + self.readonly() + [{"role": "user", "content": q}]

    def send(self, messages):
        kwargs = dict(model="m", messages=messages)
        return litellm.completion(**kwargs)

    def ask(self, q):
        messages = self.format(q)
        return self.send(messages)
"""
    )
    assert found(src) == [(10, "PC003", "warning")]


def test_dataclass_fields_summed_by_a_method():
    src = """
    from dataclasses import dataclass, field

    import litellm


    @dataclass
    class Chunks:
        system: list = field(default_factory=list)
        files: list = field(default_factory=list)
        cur: list = field(default_factory=list)

        def all_messages(self):
            return self.system + self.files + self.cur


    class Coder:
        def __init__(self):
            self.fnames = set()

        def ask(self, q):
            chunks = Chunks()
            chunks.system = [{"role": "system", "content": "Rules"}]
            chunks.files = [{"role": "user", "content": "Files: " + ", ".join(self.fnames)}]
            chunks.cur = [{"role": "user", "content": q}]
            return litellm.completion(model="m", messages=chunks.all_messages())
    """
    # `", ".join(self.fnames)` on line 23 joins a set into the second of three messages
    assert found(src) == [(23, "PC003", "warning")]


def test_a_loop_variable_reused_after_its_loop_does_not_carry_the_loop_order():
    # a helper returning the history reordered: `key` walks the dict in the first loop, is
    # rebound from each message in the second; the messages come in the history's order
    src = """
    import litellm


    def pair(messages):
        by_key = {}
        for i, m in enumerate(messages):
            by_key[m.get("id")] = i
        paired = set()
        for key in by_key:
            paired.add(by_key[key])
        out = []
        for m in messages:
            key = m.get("id")
            if key in by_key:
                out.append(messages[by_key[key]])
        return out


    def ask(history, q):
        msgs = [{"role": "system", "content": "Rules"}] + pair(history) + [
            {"role": "user", "content": q}]
        return litellm.completion(model="m", messages=msgs)
    """
    assert found(src) == []


def test_a_comprehension_target_read_on_its_own_line_is_the_comprehension_binding():
    # `agent_id` in the one-line comprehension is its own target (sorted: a stable order),
    # not the loop over `index.items()` further down, nor the first loop's target
    src = """
    import litellm


    def ask(agent_ids, q):
        index = {}
        for agent_id in agent_ids:
            index[agent_id] = 0
        options = [agent_id for agent_id in sorted(agent_ids)]
        msgs = [{"role": "system", "content": "Pick one of: " + ", ".join(options)},
                {"role": "user", "content": q}]
        for agent_id, n in index.items():
            print(agent_id, n)
        return litellm.completion(model="m", messages=msgs)
    """
    assert found(src) == []


MODEL = """
import litellm


class Model:
    def __init__(self, name):
        self.name = name

    def send_completion(self, messages, temperature=None):
        kwargs = dict(model=self.name)
        if temperature is not None:
            kwargs["temperature"] = temperature
        kwargs["messages"] = messages
        return litellm.completion(**kwargs)
"""

CODER = """
class Coder:
    def __init__(self, main_model):
        self.main_model = main_model
        self.fnames = set()

    def listing(self):
        return "\\n".join(self.fnames)

    def format_messages(self, q):
        return [{"role": "system", "content": "Rules"},
                {"role": "user", "content": "Files:\\n" + self.listing()},
                {"role": "assistant", "content": "Ok."},
                {"role": "user", "content": q}]

    def send(self, messages, model=None):
        if not model:
            model = self.main_model
        return model.send_completion(messages, 0)

    def ask(self, q):
        messages = self.format_messages(q)
        return self.send(messages)
"""


def _project(tmp_path: Path, coder: str) -> list[tuple[str, int, str, str]]:
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "models.py").write_text(MODEL.lstrip())
    (pkg / "coder.py").write_text(coder.lstrip())
    report = lint_paths([tmp_path], LintConfig(root=tmp_path))
    return [(Path(f.path).name, f.line, f.code, f.severity) for f in report.findings]


def test_messages_sent_by_a_method_of_another_module_through_an_untyped_receiver(tmp_path):
    # Coder.send() calls model.send_completion(messages, 0) on a model it was handed
    # (no type); Model.send_completion in models.py is the project's only method of that
    # name and puts its `messages` parameter into the request (kwargs["messages"]): the
    # set joined on line 7 of coder.py reaches the second of four messages
    assert _project(tmp_path, CODER) == [("coder.py", 7, "PC003", "warning")]


def test_an_untyped_receiver_made_by_a_library_call_is_not_followed(tmp_path):
    # the same call on an object that a library makes (`websocket.connect()`): not the
    # project's method, even though the name matches
    coder = CODER.replace(
        "        if not model:\n            model = self.main_model\n",
        "        model = websocket.connect('ws://x')\n",
    )
    coder = "import websocket\n" + coder
    assert _project(tmp_path, coder) == []


LAZY = """
import importlib


class LazyModule:
    def __getattr__(self, name):
        return getattr(importlib.import_module("litellm"), name)


litellm = LazyModule()
"""


def test_the_sdk_module_re_exported_by_a_lazy_import_proxy(tmp_path):
    # `from .llm import litellm` (a proxy that imports litellm on first use) is litellm:
    # `litellm.completion(**kwargs)` is still the request
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "llm.py").write_text(LAZY.lstrip())
    model = MODEL.replace("import litellm", "from .llm import litellm")
    assert model != MODEL
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "models.py").write_text(model.lstrip())
    (tmp_path / "app" / "coder.py").write_text(CODER.lstrip())
    report = lint_paths([tmp_path], LintConfig(root=tmp_path))
    got = [(Path(f.path).name, f.line, f.code, f.severity) for f in report.findings]
    assert got == [("coder.py", 7, "PC003", "warning")]


CHUNKS = """
from dataclasses import dataclass, field


@dataclass
class Chunks:
    system: list = field(default_factory=list)
    files: list = field(default_factory=list)
    cur: list = field(default_factory=list)

    def all_messages(self):
        return self.system + self.files + self.cur
"""

CHUNK_CODER = """
import litellm

from .chunks import Chunks


class Coder:
    def __init__(self):
        self.fnames = set()

    def files_messages(self):
        out = []
        for fname in self.fnames:
            out.append({"role": "user", "content": "File: " + fname})
        return out

    def format(self, q):
        chunks = Chunks()
        chunks.system = [{"role": "system", "content": "Rules"}]
        chunks.files = self.files_messages()
        chunks.cur = [{"role": "user", "content": q}]
        chunks.cur[-1]["content"] = q.strip()
        return chunks

    def ask(self, q):
        chunks = self.format(q)
        messages = chunks.all_messages()
        return litellm.completion(model="m", messages=messages)
"""


def test_dataclass_of_another_module_filled_by_a_function_that_returns_it(tmp_path):
    # Chunks (chunks.py, imported relatively) sums its fields; format() fills them and
    # returns the object; the file messages come from a loop over a set (coder.py line 12)
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "chunks.py").write_text(CHUNKS.lstrip())
    (pkg / "coder.py").write_text(CHUNK_CODER.lstrip())
    report = lint_paths([tmp_path], LintConfig(root=tmp_path))
    got = [(Path(f.path).name, f.line, f.code, f.severity) for f in report.findings]
    assert got == [("coder.py", 12, "PC003", "warning")]


def test_a_caller_argument_that_reaches_the_prefix_only_through_sorted_set():
    # the question's words come in set order (line 19), but the system message reads
    # them only as sorted(set(...)) of the stored messages: their order never reaches it
    src = """
    import litellm


    class Bot:
        def __init__(self):
            self.cur = []

        def known_words(self):
            text = " ".join(m["content"] for m in self.cur)
            return sorted(set(text.split()))

        def ask(self, q):
            self.cur += [{"role": "user", "content": q}]
            msgs = [{"role": "system", "content": "Known: " + ", ".join(self.known_words())},
                    {"role": "user", "content": q}]
            return litellm.completion(model="m", messages=msgs)

        def run(self, words):
            q = " ".join(list(set(words)))
            return self.ask(q)
    """
    assert found(src) == []


def test_a_comprehension_target_shadows_the_function_name_it_reuses():
    # `spec` is first a per-call id, then the comprehension's own target over a sorted
    # constant: the tools never see the id
    src = """
    import uuid

    import anthropic

    NAMES = {"search": "Search the web.", "fetch": "Fetch a page."}


    def ask(q):
        spec = str(uuid.uuid4())
        print(spec)
        tools = [
            {"name": spec, "description": NAMES[spec], "input_schema": {"type": "object"}}
            for spec in sorted(NAMES)
        ]
        return anthropic.Anthropic().messages.create(
            model="m", max_tokens=10, tools=tools, messages=[{"role": "user", "content": q}])
    """
    assert found(src) == []


def test_set_order_through_a_generator_that_yields_the_items():
    src = """
    import litellm


    class Coder:
        def __init__(self):
            self.fnames = set()

        def named(self):
            for fname in list(self.fnames):
                yield fname, fname.upper()

        def ask(self, q):
            text = ""
            for fname, upper in self.named():
                text += fname + " (" + upper + ")\\n"
            msgs = [{"role": "system", "content": "Rules"},
                    {"role": "user", "content": "Files:\\n" + text},
                    {"role": "assistant", "content": "Ok."},
                    {"role": "user", "content": q}]
            return litellm.completion(model="m", messages=msgs)
    """
    # `list(self.fnames)` (line 9) is the set's order; named() yields in it
    assert found(src) == [(9, "PC003", "warning")]


def test_system_prompt_put_into_params_then_splatted_into_messages_create():
    src = """
    import anthropic

    TOOLS = {"search", "fetch"}


    def ask(q):
        params = dict(model="m", max_tokens=100)
        params["system"] = "You may call: " + ", ".join(TOOLS)
        client = anthropic.Anthropic()
        return client.messages.create(**params, messages=[{"role": "user", "content": q}])
    """
    # `", ".join(TOOLS)` on line 8 joins a set into the system prompt
    assert found(src) == [(8, "PC003", "warning")]


def test_a_class_attribute_named_like_the_module_it_calls(tmp_path):
    # `actions = actions.Column(...)` in a class body reads the module `actions` while
    # binding the class attribute `actions`: resolving it must not chase itself
    pkg = tmp_path / "app"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "actions.py").write_text(
        "class Column:\n    pass\n\n\ndef edit(name):\n    return name\n"
    )
    (pkg / "tables.py").write_text(
        "from app import actions\n\n\n"
        "class Table:\n"
        "    actions = actions.Column(\n"
        "        items=[actions.edit('x')],\n"
        "    )\n\n\n"
        "def make():\n"
        "    return Table()\n"
    )
    (pkg / "ask.py").write_text(
        "import litellm\n\nfrom .tables import make\n\n\n"
        "def ask(q):\n"
        "    make()\n"
        "    return litellm.completion(model='m', messages=[{'role': 'user', 'content': q}])\n"
    )
    report = lint_paths([tmp_path], LintConfig(root=tmp_path))
    assert [(f.code, f.line) for f in report.findings] == []


def test_an_order_free_result_of_a_set_is_not_set_order():
    # the common root of the chat's files is the same in any order: the prompt that names
    # it carries no set order
    src = """
    import os

    import litellm


    class Coder:
        def __init__(self):
            self.fnames = set()

        def root(self):
            return os.path.commonpath(list(self.fnames))

        def ask(self, q):
            msgs = [{"role": "system", "content": "Repository root: " + self.root()},
                    {"role": "user", "content": q}]
            return litellm.completion(model="m", messages=msgs)
    """
    assert found(src) == []


def test_a_returned_pair_unpacked_gives_each_name_its_own_item():
    # build() returns (system text, messages); only the messages carry a request id: the
    # system prompt unpacked from the pair is constant (the messages' own items are not
    # followed through the unpacking)
    src = """
    import uuid

    import litellm


    def build(q):
        system = "Rules for the assistant."
        msgs = [{"role": "user", "content": f"[{uuid.uuid4()}] {q}"}]
        return system, msgs


    def ask(q):
        system, msgs = build(q)
        system_msg = {"role": "system", "content": system}
        return litellm.completion(
            model="m", messages=[system_msg] + msgs + [{"role": "user", "content": "Go on."}])
    """
    assert found(src) == []
