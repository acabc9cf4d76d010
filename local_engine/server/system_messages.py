"""Anthropic's mid-conversation system messages: which models take them and where they
may stand.

A ``{"role": "system", "content": ..., "cache_control"?: ...}`` entry of ``messages`` adds
a system instruction at that point of the conversation; the prefix before it stays
byte-identical, so the next request reads it from the cache. The engine renders it as the
chat template's system turn at its position (:func:`.protocol_anthropic.messages_to_turns`)
and counts it in the prefix like any message. The rules below are Anthropic's, as
documented (both read 2026-12-03):

- https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages
- https://docs.aws.amazon.com/bedrock/latest/userguide/claude-messages-mid-conversation-system.html

Models: "available on Claude Opus 4.8 only. No beta header is required. Requests that
include ``role: "system"`` in ``messages[]`` on unsupported models return a 400
invalid_request_error" (both pages). Later models whose support the pages' newer versions
name are listed in :data:`MODEL_FAMILIES` with their source.

Placement: not the first entry; immediately after a user message or an assistant message
that ends in a server tool use; the last entry or followed by an assistant turn; never
next to another system message. Content: a string or text blocks (images, documents,
tool blocks and citations are not supported). Each violation is a 400
``invalid_request_error``; the messages below are this server's (the pages do not quote
the API's wording).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .errors import APIError

if TYPE_CHECKING:
    from .protocol_anthropic import CountTokensRequest, Message

#: Model families (Claude API ids) that take mid-conversation system messages.
#: claude-opus-4-8: both pages above (2026-12-03). The others: the Japanese version of
#: Anthropic's page (https://platform.claude.com/docs/ja/build-with-claude/mid-conversation-system-messages.md,
#: read 2026-12-03: "Claude Fable 5.1, Claude Mythos 5.1, Claude Fable 5, Claude Mythos 5,
#: Claude Opus 5.5, Claude Opus 4.8, Claude Opus 5, ..."; the rest of its list was not
#: readable here, so other models stay unsupported until a source names them).
MODEL_FAMILIES = (
    "claude-opus-4-8",
    "claude-opus-5",
    "claude-opus-5-5",
    "claude-fable-5",
    "claude-fable-5-1",
    "claude-mythos-5",
    "claude-mythos-5-1",
)

#: what may follow a family name: a date snapshot or ``-latest``, and Bedrock's ``-v1:0``
_SUFFIX = re.compile(r"^(?:[-@](?:\d{8}|latest))?(?:-v\d+(?::\d+)?)?$")


def supports_system_messages(model: str) -> bool:
    """Whether ``model`` (a Claude API id, a dated snapshot, or a Bedrock id such as
    ``us.anthropic.claude-opus-4-8-v1:0``) takes mid-conversation system messages."""
    name = model.lower()
    if "anthropic." in name:
        name = name.split("anthropic.", 1)[1]
    return any(
        name.startswith(family) and _SUFFIX.match(name[len(family) :]) is not None
        for family in MODEL_FAMILIES
    )


def _ends_in_server_tool_use(msg: Message) -> bool:
    return (
        msg.role == "assistant"
        and isinstance(msg.content, list)
        and bool(msg.content)
        and msg.content[-1].type == "server_tool_use"
    )


def _check_content(msg: Message, i: int) -> None:
    if isinstance(msg.content, str):
        return
    if not msg.content:
        raise APIError(400, f"messages.{i}.content: a system message needs text")
    for j, block in enumerate(msg.content):
        if block.type != "text":
            raise APIError(
                400,
                f"messages.{i}.content.{j}.type: a system message holds text blocks only; "
                f"got {block.type!r} (images, documents, tool blocks are not supported there)",
            )
        if block.text is None:
            raise APIError(400, f"messages.{i}.content.{j}.text: Field required")
        if (block.model_extra or {}).get("citations"):
            raise APIError(
                400, f"messages.{i}.content.{j}.citations: not supported in a system message"
            )


def check_system_messages(req: CountTokensRequest) -> None:
    """Anthropic's model, placement and content rules for ``role: "system"`` entries of
    ``messages`` (see the module docstring).

    Raises:
        APIError: 400 naming the message path and the rule.
    """
    msgs = req.messages
    where = [i for i, m in enumerate(msgs) if m.role == "system"]
    if not where:
        return
    first = where[0]
    if not supports_system_messages(req.model):
        raise APIError(
            400,
            f"messages.{first}.role: 'system' is not supported on model {req.model!r}; "
            "mid-conversation system messages are available on "
            f"{', '.join(MODEL_FAMILIES)}. Put the instructions in the top-level system field.",
        )
    for i in where:
        if i == 0:
            raise APIError(
                400,
                "messages.0.role: a system message cannot be the first entry of messages; "
                "use the top-level system field for instructions that apply from the start",
            )
        prev = msgs[i - 1]
        if prev.role == "system" or (i + 1 < len(msgs) and msgs[i + 1].role == "system"):
            j = i if prev.role == "system" else i + 1
            raise APIError(
                400,
                f"messages.{j}: consecutive system messages are not allowed "
                f"(messages.{j - 1} and messages.{j}); merge them into one",
            )
        if prev.role == "assistant" and not _ends_in_server_tool_use(prev):
            raise APIError(
                400,
                f"messages.{i}: a system message must immediately follow a user message or "
                f"an assistant message that ends in a server tool use; messages.{i - 1} is an "
                "assistant message that does not",
            )
        if i + 1 < len(msgs) and msgs[i + 1].role != "assistant":
            raise APIError(
                400,
                f"messages.{i}: a system message must be the last entry of messages or be "
                f"followed by an assistant turn; messages.{i + 1} is a {msgs[i + 1].role} message",
            )
        _check_content(msg=msgs[i], i=i)
