"""The neutral message model: a request's layers as :func:`promptcache.build` leaves them,
before any provider's form. A leaf module: the renderers (:mod:`promptcache.providers`),
``explain`` and the breakpoint planner read these shapes and import nothing above them.

Shapes (plain dicts, typed here as ``TypedDict`` s, the way httpx's ``_types.py`` names its
input types):

==============  ==============================================================================
name            shape
==============  ==============================================================================
TextBlock       ``{"type": "text", "text": str}``
ImageBlock      ``{"type": "image", "url": str}`` or ``{"type": "image", "media_type": str,
                "data": base64 str}``
ToolCallBlock   ``{"type": "tool_call", "id": str, "name": str, "arguments": dict}`` (or
                ``"arguments_raw": str`` when the history holds arguments that are not JSON)
ToolResultBlock ``{"type": "tool_result", "id": str, "content": [text/image blocks],
                "is_error": bool}``
NativeBlock     ``{"type": "native", "provider": "anthropic"|"openai", "block": dict}``
                (thinking blocks, documents, audio: passed back to the same provider only)
Message         ``{"role": "user"|"assistant", "content": [blocks]}`` (+ ``"name"``)
ToolSchema      ``{"name", "description"?, "input_schema", "strict"?}`` (keys sorted)
NativeTool      ``{"native": dict}`` (a provider's own tool type, passed through)
==============  ==============================================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypedDict

from promptcache.prompt.canonical import dumps_sorted

__all__ = [
    "TextBlock",
    "ImageBlock",
    "ToolCallBlock",
    "ToolResultBlock",
    "NativeBlock",
    "ContentBlock",
    "Message",
    "ToolSchema",
    "NativeTool",
    "Tool",
    "Document",
    "VolatileFinding",
    "PromptLayers",
]


class TextBlock(TypedDict):
    type: Literal["text"]
    text: str


class _ImageType(TypedDict):
    type: Literal["image"]


class ImageBlock(_ImageType, total=False):
    """By ``url``, or inline as ``media_type`` + base64 ``data``."""

    url: str
    media_type: str
    data: str


class _ToolCallHead(TypedDict):
    type: Literal["tool_call"]
    id: str
    name: str


class ToolCallBlock(_ToolCallHead, total=False):
    """``arguments`` (keys sorted) or, for arguments that are not JSON, ``arguments_raw``."""

    arguments: Any
    arguments_raw: str


class ToolResultBlock(TypedDict):
    type: Literal["tool_result"]
    id: str
    content: list[ContentBlock]
    is_error: bool


class NativeBlock(TypedDict):
    type: Literal["native"]
    provider: str
    block: dict[str, Any]


ContentBlock: TypeAlias = TextBlock | ImageBlock | ToolCallBlock | ToolResultBlock | NativeBlock


class _MessageHead(TypedDict):
    role: Literal["user", "assistant"]
    content: list[ContentBlock]


class Message(_MessageHead, total=False):
    name: str


class _ToolHead(TypedDict):
    name: str
    input_schema: dict[str, Any]


class ToolSchema(_ToolHead, total=False):
    description: str
    strict: bool


class NativeTool(TypedDict):
    native: dict[str, Any]


Tool: TypeAlias = ToolSchema | NativeTool


@dataclass(frozen=True)
class Document:
    """A reference document of the ``documents`` layer: ``text`` and an optional ``title``."""

    text: str
    title: str | None = None

    def render(self, index: int) -> str:
        """The document as prompt text (``index`` is 1-based), wrapped in ``<document>`` tags."""
        title = f' title="{self.title}"' if self.title else ""
        return f'<document index="{index}"{title}>\n{self.text}\n</document>'


@dataclass(frozen=True)
class VolatileFinding:
    """A volatile value found in a layer: ``layer`` name, JSON-style ``path`` of the string
    inside the layer (``system[0]``, ``tools[1].description``), character ``offset`` in that
    string, ``kind`` (see :mod:`promptcache.prompt.volatile`) and the matched ``text``."""

    layer: str
    path: str
    offset: int
    kind: str
    text: str

    def message(self) -> str:
        return (
            f"volatile value in layer {self.layer!r} at {self.path} offset {self.offset}: "
            f"{self.kind} {self.text!r} -- move it to `dynamic` (it changes the cached "
            f"prefix on every request)"
        )


class PromptLayers:
    """A request's layers in the neutral form; immutable. :class:`promptcache.Prompt` (made
    by :func:`promptcache.build`) adds the renderers.

    Attributes:
        system: frozen system texts (normalized), ``tuple[str, ...]``.
        tools: frozen tool schemas (:data:`Tool`: ``ToolSchema`` with keys sorted, or
            ``NativeTool``).
        documents: frozen :class:`Document` s.
        session: semi-stable texts, ``tuple[str, ...]``.
        messages: the history as :class:`Message` s.
        dynamic: this request's :data:`ContentBlock` s, rendered last.
        prefix_hash: 64-hex SHA-256 of the RFC 8785 canonical JSON of the frozen layers.
        session_hash: 64-hex SHA-256 of the session layer's canonical JSON.
        findings: the :class:`VolatileFinding` s of the frozen and session layers.
        warnings: human-readable warnings (one per finding, plus structural notes).
        strict: whether volatile values raised instead of warning.
    """

    __slots__ = (
        "system",
        "tools",
        "documents",
        "session",
        "messages",
        "dynamic",
        "prefix_hash",
        "session_hash",
        "findings",
        "warnings",
        "strict",
        "_canonical",
    )

    def __init__(
        self,
        *,
        system: tuple[str, ...],
        tools: tuple[Tool, ...],
        documents: tuple[Document, ...],
        session: tuple[str, ...],
        messages: tuple[Message, ...],
        dynamic: tuple[ContentBlock, ...],
        prefix_hash: str,
        session_hash: str,
        canonical: bytes,
        findings: tuple[VolatileFinding, ...],
        strict: bool,
        notes: Sequence[str] = (),
    ) -> None:
        self.system = system
        self.tools = tools
        self.documents = documents
        self.session = session
        self.messages = messages
        self.dynamic = dynamic
        self.prefix_hash = prefix_hash
        self.session_hash = session_hash
        self.findings = findings
        self.warnings = tuple(f.message() for f in findings) + tuple(notes)
        self.strict = strict
        self._canonical = canonical

    # ---- views used by renderers, explain, monitors ---------------------------------------

    def frozen_texts(self) -> tuple[str, ...]:
        """System texts followed by rendered documents: the frozen text blocks, in order."""
        return self.system + tuple(d.render(i + 1) for i, d in enumerate(self.documents))

    def canonical_prefix(self) -> bytes:
        """The RFC 8785 bytes that :attr:`prefix_hash` digests."""
        return self._canonical

    def layer_texts(self) -> dict[str, str]:
        """Each layer as one canonical string (for drift reports: the first differing
        character of a layer is an offset into this string)."""
        return {
            "system": "\n\n".join(self.system),
            "tools": dumps_sorted(list(self.tools)),
            "documents": "\n\n".join(d.render(i + 1) for i, d in enumerate(self.documents)),
            "session": "\n\n".join(self.session),
            "messages": dumps_sorted(list(self.messages)),
            "dynamic": dumps_sorted(list(self.dynamic)),
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(prefix_hash={self.prefix_hash[:12]}..., "
            f"system={len(self.system)}, tools={len(self.tools)}, "
            f"documents={len(self.documents)}, session={len(self.session)}, "
            f"messages={len(self.messages)}, dynamic={len(self.dynamic)})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PromptLayers):
            return NotImplemented
        return self.layer_texts() == other.layer_texts()

    __hash__ = None  # type: ignore[assignment]
