"""Structured outputs and forced tool calls of every API, as one engine grammar.

What each API asks for, and the grammar it becomes (:class:`~local_engine.structured.
StructuredOutput`, compiled by llguidance in the engine):

- OpenAI Chat ``response_format`` ``{"type": "json_schema", "json_schema": {"name",
  "schema", "strict"}}`` / ``{"type": "json_object"}``; Responses ``text.format`` (same
  fields, flattened); Gemini ``generationConfig.responseSchema`` / ``responseJsonSchema``
  with ``responseMimeType: "application/json"``: the schema itself.
- A forced tool call (OpenAI ``tool_choice: "required"`` or named, Anthropic ``{"type":
  "any"}`` / ``{"type": "tool", "name"}``, Gemini ``functionCallingConfig.mode: "ANY"``
  (with ``allowedFunctionNames``), Bedrock ``toolChoice: {"any": {}}`` / ``{"tool":
  {"name"}}``): the object ``{"name": <one allowed tool>, "arguments": <its parameters
  schema>}`` (:func:`tool_call_schema`); the route turns it into the API's tool-call shape.

OpenAI's strict mode accepts a subset of JSON Schema: "all fields must be required" and
"additionalProperties: false must always be set in objects"
(https://platform.openai.com/docs/guides/structured-outputs#supported-schemas, read
2026-12-03 through the project's search tool, as quoted in
https://dev.to/dev_in_the_fog/why-llm-structured-output-strict-mode-rejects-valid-json-schema-additionalproperties-required-o54);
:func:`check_openai_strict` gives the 400 the hosted API gives. A keyword the grammar engine
does not implement (``not``, ``if``/``then``, ``dependentRequired``, ...) is a 400 on every
API (the hosted APIs refuse unsupported keywords too; the message names them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .errors import APIError

#: "any JSON object" (OpenAI ``json_object`` mode)
JSON_OBJECT_SCHEMA: dict = {"type": "object"}


@dataclass(frozen=True)
class ToolSpec:
    """One declared tool: its ``name`` and the JSON schema of its arguments."""

    name: str
    parameters: dict


def structured(schema: dict, *, param: str) -> Any:
    """The engine's ``StructuredOutput`` for ``schema``, checked now so a bad schema is a 400
    (``param``: the request field that carried it) before anything runs."""
    from local_engine.structured import GrammarError, StructuredOutput, check

    if not isinstance(schema, dict):
        raise APIError(400, f"{param}: a JSON schema must be an object", param=param)
    spec = StructuredOutput(json_schema=schema)
    try:
        check(spec)
    except GrammarError as exc:
        raise APIError(
            400, f"Invalid schema for {param}: {exc}", param=param, code="invalid_json_schema"
        ) from None
    return spec


def check_openai_strict(schema: Any, path: str) -> None:
    """OpenAI strict mode's rules for every object in ``schema`` (see the module
    docstring). Raises :class:`APIError` 400 naming the object's path in the schema."""

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" or "properties" in node:
                props = node.get("properties") or {}
                if node.get("additionalProperties") is not False:
                    raise APIError(
                        400,
                        f"Invalid schema for response_format {path!r}: In context={where}, "
                        "'additionalProperties' is required to be supplied and to be false.",
                        param="response_format",
                        code="invalid_json_schema",
                    )
                missing = [k for k in props if k not in (node.get("required") or [])]
                if missing:
                    raise APIError(
                        400,
                        f"Invalid schema for response_format {path!r}: In context={where}, "
                        f"'required' is required to be supplied and to be an array including "
                        f"every key in properties. Missing {missing[0]!r}.",
                        param="response_format",
                        code="invalid_json_schema",
                    )
            for k, v in node.items():
                if k != "enum" and k != "const":
                    walk(v, f"{where}.{k}" if where != "()" else k)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{where}.{i}")

    walk(schema, "()")


def tool_call_schema(tools: Sequence[ToolSpec]) -> dict:
    """The schema of one call of any of ``tools``: ``{"name": <const>, "arguments": <the
    tool's parameters>}`` (``anyOf`` over the tools when there are several)."""
    options = []
    for t in tools:
        params = t.parameters if t.parameters else {"type": "object"}
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": t.name}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    return options[0] if len(options) == 1 else {"anyOf": options}


def forced_tool_call(tools: Sequence[ToolSpec], *, param: str) -> Any:
    """The engine's ``StructuredOutput`` making the output one call of one of ``tools``."""
    if not tools:
        raise APIError(400, f"{param}: no tool to call", param=param)
    return structured(tool_call_schema(tools), param=param)


def parse_tool_call(text: str) -> tuple[str, dict] | None:
    """``(name, arguments)`` of a forced call's output, or None when the output was cut
    short (``max_tokens``) before the call was complete."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    args = value.get("arguments")
    return value["name"], args if isinstance(args, dict) else {}


def pick_tools(tools: Sequence[ToolSpec], names: Sequence[str] | None, *, param: str) -> list:
    """The tools named by ``names`` (all of them when None). Raises :class:`APIError` 400 for
    a name ``tools`` does not declare."""
    if names is None:
        return list(tools)
    by_name = {t.name: t for t in tools}
    out = []
    for n in names:
        if n not in by_name:
            declared = ", ".join(repr(t.name) for t in tools) or "none"
            raise APIError(
                400,
                f"{param}: tool {n!r} is not declared in tools (declared: {declared}).",
                param=param,
            )
        out.append(by_name[n])
    return out


def openai_format(fmt: dict | None, *, param: str, flat: bool = False) -> Any:
    """The ``StructuredOutput`` of an OpenAI output format, or None for plain text.

    ``fmt``: Chat's ``response_format`` (``{"type": "json_schema", "json_schema": {"name",
    "schema", "strict"}}``) or, with ``flat``, Responses' ``text.format`` (``{"type":
    "json_schema", "name", "schema", "strict"}``); ``{"type": "json_object"}``; ``{"type":
    "text"}``. Raises :class:`APIError` 400 for another type, a missing schema, a strict
    schema outside OpenAI's subset, or a schema the grammar engine cannot compile."""
    if fmt is None:
        return None
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return structured(JSON_OBJECT_SCHEMA, param=param)
    if kind != "json_schema":
        raise APIError(
            400,
            f"Invalid value for {param}.type: {kind!r}; expected 'text', 'json_object' or "
            "'json_schema'.",
            param=f"{param}.type",
        )
    body = fmt if flat else fmt.get("json_schema")
    where = param if flat else f"{param}.json_schema"
    if not isinstance(body, dict) or not isinstance(body.get("schema"), dict):
        raise APIError(
            400, f"Missing required parameter: '{where}.schema'.", param=f"{where}.schema"
        )
    if body.get("strict"):
        check_openai_strict(body["schema"], str(body.get("name") or "schema"))
    return structured(body["schema"], param=f"{where}.schema")


#: how every forced call's output starts: the grammar's first key, compact (no whitespace)
_NAME_KEY = '{"name":'
_ARGUMENTS_KEY = ',"arguments":'


@dataclass
class ToolCallText:
    """A forced call's output text ``{"name":"<tool>","arguments":<JSON>}`` (compact, keys in
    :func:`tool_call_schema`'s order) split as it grows, for streaming the call the way each
    provider does: the name once its string is closed, then the arguments' JSON text in
    pieces (OpenAI ``function.arguments`` chunks, Responses
    ``response.function_call_arguments.delta``, Anthropic ``input_json_delta``).

    Feed the whole text so far to :meth:`feed`; the outer ``}`` is never part of the
    arguments (a trailing ``}`` is held back until the next piece or the end shows whose it
    is). Attributes: ``name`` (None until known), ``arguments`` (the text sent so far),
    ``complete`` (the whole call parsed: set by the last :meth:`feed`)."""

    name: str | None = None
    arguments: str = ""
    complete: bool = False
    _args_start: int | None = None

    def feed(self, text: str, finished: bool) -> tuple[str | None, str]:
        """``(name, delta)``: the tool's name the first time it is known (else None) and the
        arguments text new since the last call (``""`` when none)."""
        new_name = None
        if self._args_start is None:
            found = _split_name(text)
            if found is None:
                return None, ""
            self.name, self._args_start = found
            new_name = self.name
        args = text[self._args_start :]
        if finished:
            self.complete = parse_tool_call(text) is not None
            if self.complete:
                args = args[:-1]  # the outer object's "}"
        elif args.endswith("}"):
            args = args[:-1]  # the arguments' close or the outer one: the next piece tells
        delta = args[len(self.arguments) :] if args.startswith(self.arguments) else ""
        self.arguments += delta
        return new_name, delta


def _split_name(text: str) -> tuple[str, int] | None:
    """``(name, index where the arguments' JSON starts)`` once ``text`` holds the name and
    the ``"arguments"`` key; None before (or when the text has another shape)."""
    if not text.startswith(_NAME_KEY):
        return None
    try:
        name, end = json.JSONDecoder().raw_decode(text, len(_NAME_KEY))
    except ValueError:
        return None
    if not isinstance(name, str) or not text.startswith(_ARGUMENTS_KEY, end):
        return None
    return name, end + len(_ARGUMENTS_KEY)


def split_tool_call(text: str) -> ToolCallText:
    """A finished forced call's output split: ``name`` None when the output stopped before
    the name was complete (then the route returns the text), ``complete`` False when it was
    cut short inside the arguments (``arguments`` holds what was generated, as the hosted
    APIs return a call cut by the token limit)."""
    call = ToolCallText()
    call.feed(text, finished=True)
    return call
