"""A request reduced to a chain of digests: enough to find where two requests stop sharing
a prefix, without keeping the prompt text.

A request body (the JSON an official client sends) is cut into *segments* in the provider's
cache order -- routing settings first, then each tool, each system block, each message --
and each segment is serialized exactly as a JSON encoder writes it (insertion order, ``,``
and ``:`` separators, no ASCII escaping; key order matters because the provider sees the
bytes in that order). Cache markers (``cache_control``, ``cachePoint``,
``prompt_cache_breakpoint``) are left out of the digests: moving a marker is a
*breakpoint* change, not a content change, and they are recorded as :class:`Breakpoint`
positions instead.

Per segment the chain keeps:

- a 64-bit digest of its serialization (the first 16 hex digits of its SHA-1: change
  detection, not security) and its length in characters;
- its *atoms*: every scalar (and empty container) in serialization order with its JSON path
  relative to the segment, its start offset and length in the serialization and a 64-bit
  digest, so that the first differing value *and* structural changes (a key added, removed
  or reordered) are located down to a path such as ``$.tools[2].input_schema.properties``;
- for strings longer than :data:`BLOCK_CHARS`, one 32-bit digest per block of
  :data:`BLOCK_CHARS` characters of the serialized string, so a change inside a long text is
  located to within one block (about 32 tokens) from digests alone.

Nothing else of the text is kept. A chain in memory also holds references to the parsed
segment values (``values``, never persisted) so that the next request of the same lineage
reuses the digests of unchanged segments (compared with ``==``, no re-serialization) and the
locator can give exact character offsets in-process.

APIs (``api`` argument): ``"messages"`` (Anthropic Messages, also the Anthropic body of
Bedrock ``invoke_model``), ``"chat.completions"``, ``"completions"``, ``"responses"``
(OpenAI and compatible servers), ``"gemini"`` (``generateContent`` bodies, camelCase or
snake_case), ``"converse"`` (Bedrock Converse / ConverseStream).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from hashlib import sha1
from typing import Any

__all__ = [
    "BLOCK_CHARS",
    "APIS",
    "Atom",
    "Segment",
    "Breakpoint",
    "DigestChain",
    "build_chain",
    "serialize",
    "parse_path",
    "format_path",
]

#: Characters per block digest of a long string (~32 tokens at ~4 characters a token).
BLOCK_CHARS = 128

APIS = ("messages", "chat.completions", "completions", "responses", "gemini", "converse")

_ENCODE = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), check_circular=False, default=str
).encode
_MARKERS = ("cache_control", "prompt_cache_breakpoint")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COMPONENT = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[('(?:[^'\\]|\\.)*')\]")


def serialize(value: Any) -> str:
    """The JSON text a segment is digested from (insertion order, compact, UTF-8 text)."""
    return _ENCODE(value)


def _digest(text: str, size: int = 8) -> str:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates (JSON allows them): keep them digestible
        data = text.encode("utf-8", "surrogatepass")
    return sha1(data).hexdigest()[: 2 * size]


def _key(name: str) -> str:
    """One path component for a dict key: ``.name`` or ``['odd key']``."""
    if _IDENT.match(name):
        return "." + name
    return "[" + repr(name) + "]"


def format_path(components: Sequence[str | int]) -> str:
    """``["tools", 2, "input_schema"]`` -> ``"$.tools[2].input_schema"``."""
    out = ["$"]
    for c in components:
        out.append(f"[{c}]" if isinstance(c, int) else _key(c))
    return "".join(out)


def parse_path(path: str) -> list[str | int]:
    """Inverse of :func:`format_path` (``"$.a[2]['b c']"`` -> ``["a", 2, "b c"]``).

    Raises ``ValueError`` for a string that is not such a path."""
    if not path.startswith("$"):
        raise ValueError(f"not a JSON path: {path!r}")
    out: list[str | int] = []
    pos = 1
    for m in _COMPONENT.finditer(path, 1):
        if m.start() != pos:
            raise ValueError(f"not a JSON path: {path!r}")
        name, index, quoted = m.groups()
        if name is not None:
            out.append(name)
        elif index is not None:
            out.append(int(index))
        else:
            import ast

            out.append(str(ast.literal_eval(quoted)))
        pos = m.end()
    if pos != len(path):
        raise ValueError(f"not a JSON path: {path!r}")
    return out


@dataclass(frozen=True, slots=True)
class Atom:
    """One scalar (or empty container) of a segment, in serialization order.

    Attributes:
        path: JSON path relative to the segment root (``""`` for a scalar segment,
            ``".input_schema.properties.city.type"``, ``"[0].text"``).
        start: offset of the value in the segment's serialization (characters).
        chars: length of the value's serialization (characters; strings include quotes).
        digest: 16 hex digits (SHA-1, truncated) of the serialization.
        blocks: for a serialization longer than :data:`BLOCK_CHARS`, 8 hex digits
            (SHA-1, truncated) per block of :data:`BLOCK_CHARS` characters; else empty.
    """

    path: str
    start: int
    chars: int
    digest: str
    blocks: tuple[str, ...] = ()

    def to_list(self) -> list[Any]:
        """Compact JSON form ``[path, start, chars, digest, "b1 b2 ..."]``."""
        return [self.path, self.start, self.chars, self.digest, " ".join(self.blocks)]

    @classmethod
    def from_list(cls, item: Sequence[Any]) -> Atom:
        """Inverse of :meth:`to_list`."""
        path, start, chars, digest, blocks = item
        return cls(str(path), int(start), int(chars), str(digest), tuple(str(blocks).split()))


@dataclass(frozen=True, slots=True)
class Breakpoint:
    """A cache marker: the prefix up to ``end`` characters of the chain is to be cached.

    Attributes:
        end: characters of the chain up to the end of the marked block.
        block: index of the marked content block in cache order (0-based; Anthropic's
            lookback counts content blocks).
        ttl: the marker's lifetime label (``"5m"``, ``"1h"``; Bedrock/OpenAI labels as sent).
        path: JSON path of the marker.
    """

    end: int
    block: int
    ttl: str
    path: str


@dataclass(frozen=True, slots=True)
class Segment:
    """One top-level piece of a request in cache order.

    Attributes:
        path: absolute JSON path (``"$.tools[2]"``, ``"$.system[0]"``, ``"$.messages[5]"``).
        digest: 16 hex digits (SHA-1, truncated) of the serialization without markers.
        start: offset of the segment in the chain (characters).
        chars: length of its serialization (characters).
        blocks: content blocks it holds (a message's content parts; 1 otherwise; 0 for
            routing settings such as ``$.tool_choice``).
        kind: ``"setting"``, ``"tools"``, ``"system"`` or ``"messages"``.
    """

    path: str
    digest: str
    start: int
    chars: int
    blocks: int = 1
    kind: str = "messages"

    @property
    def end(self) -> int:
        """Offset just past the segment in the chain."""
        return self.start + self.chars


@dataclass(frozen=True)
class DigestChain:
    """A request as digests (see the module docstring).

    ``atoms`` maps a segment digest to its atoms (shared by equal segments). ``values`` are
    the parsed segment values of a chain built in this process (not persisted, not
    compared); empty for a chain read back from the ledger.
    """

    api: str
    segments: tuple[Segment, ...]
    breakpoints: tuple[Breakpoint, ...] = ()
    atoms: Mapping[str, tuple[Atom, ...]] = field(default_factory=dict, compare=False)
    values: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    automatic: bool = False
    #: in memory only: each segment's value as sent (markers included) and its markers
    #: ``(block, ttl, path, end offset in the segment)``, for reuse by the next request
    raws: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    marks: tuple[tuple[tuple[int, str, str, int], ...], ...] = field(
        default=(), compare=False, repr=False
    )

    @property
    def keys(self) -> tuple[tuple[str, str], ...]:
        """``(path, digest)`` per segment (cached)."""
        k = self.__dict__.get("_keys")
        if k is None:
            k = tuple((s.path, s.digest) for s in self.segments)
            object.__setattr__(self, "_keys", k)
        return k

    @property
    def chars(self) -> int:
        """Total characters of the chain's segments."""
        return self.segments[-1].end if self.segments else 0

    @property
    def content_blocks(self) -> int:
        """Content blocks in the chain (Anthropic counts these for its lookback)."""
        return sum(s.blocks for s in self.segments)

    def digests(self) -> list[str]:
        """The segment digests in order."""
        return [s.digest for s in self.segments]

    def to_json(self) -> dict[str, Any]:
        """Plain JSON for storage: segments, breakpoints and atoms (no values)."""
        return {
            "api": self.api,
            "automatic": self.automatic,
            "segments": [[s.path, s.digest, s.chars, s.blocks, s.kind] for s in self.segments],
            "breakpoints": [[b.end, b.block, b.ttl, b.path] for b in self.breakpoints],
        }

    def atoms_json(self) -> dict[str, list[list[Any]]]:
        """The atoms of each distinct segment digest, compact (see :meth:`Atom.to_list`)."""
        return {d: [a.to_list() for a in atoms] for d, atoms in self.atoms.items()}

    @classmethod
    def from_json(
        cls, data: Mapping[str, Any], atoms: Mapping[str, Sequence[Sequence[Any]]] | None = None
    ) -> DigestChain:
        """Inverse of :meth:`to_json` (plus :meth:`atoms_json` when given).

        Raises ``ValueError`` for data that is not such a chain."""
        try:
            segs = []
            pos = 0
            for path, digest, chars, blocks, kind in data["segments"]:
                segs.append(Segment(str(path), str(digest), pos, int(chars), int(blocks), kind))
                pos += int(chars)
            bps = tuple(
                Breakpoint(int(e), int(b), str(t), str(p)) for e, b, t, p in data["breakpoints"]
            )
            loaded = {
                str(d): tuple(Atom.from_list(a) for a in items)
                for d, items in (atoms or {}).items()
            }
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"not a digest chain: {e}") from None
        return cls(str(data["api"]), tuple(segs), bps, loaded, (), bool(data.get("automatic")))


# ---- atoms ---------------------------------------------------------------------------------


def _atoms(value: Any) -> tuple[Atom, ...]:
    """The atoms of one segment value, with offsets matching :func:`serialize` exactly."""
    out: list[Atom] = []

    def scalar(v: Any, path: str, pos: int) -> int:
        text = _ENCODE(v)
        n = len(text)
        blocks: tuple[str, ...] = ()
        if n > BLOCK_CHARS:
            blocks = tuple(_digest(text[i : i + BLOCK_CHARS], 4) for i in range(0, n, BLOCK_CHARS))
        out.append(Atom(path, pos, n, _digest(text), blocks))
        return pos + n

    def walk(v: Any, path: str, pos: int) -> int:
        if isinstance(v, dict) and v:
            pos += 1  # {
            first = True
            for k, item in v.items():
                if not first:
                    pos += 1  # ,
                first = False
                pos += len(_ENCODE(str(k))) + 1  # "key":
                pos = walk(item, path + _key(str(k)), pos)
            return pos + 1  # }
        if isinstance(v, (list, tuple)) and v:
            pos += 1
            for i, item in enumerate(v):
                if i:
                    pos += 1
                pos = walk(item, f"{path}[{i}]", pos)
            return pos + 1
        return scalar(v, path, pos)

    walk(value, "", 0)
    return tuple(out)


# ---- segmentation per API ------------------------------------------------------------------


@dataclass(slots=True)
class _Piece:
    path: str
    value: Any
    kind: str
    blocks: int
    # (index of the content block inside the piece, ttl, marker path) per marker
    markers: list[tuple[int, str, str]]
    # the value as sent, markers included (None: ``value`` is as sent)
    raw: Any = None


def _strip(value: Any, keys: tuple[str, ...] = _MARKERS) -> tuple[Any, Any]:
    """``value`` without marker keys (a shallow copy only when one is present), and the
    first marker found (or None)."""
    if isinstance(value, dict):
        found = None
        for k in keys:
            if k in value:
                found = value[k]
                break
        if found is not None:
            return {k: v for k, v in value.items() if k not in keys}, found
    return value, None


def _ttl(marker: Any, default: str) -> str:
    if isinstance(marker, dict) and marker.get("ttl"):
        return str(marker["ttl"])
    return default


def _message_piece(msg: Any, path: str, default_ttl: str, content_key: str = "content") -> _Piece:
    """A message as one piece; markers on its content parts are stripped and recorded."""
    if not isinstance(msg, dict):
        return _Piece(path, msg, "messages", 1, [])
    content = msg.get(content_key)
    if not isinstance(content, list):
        clean, mk = _strip(msg)
        markers = [(0, _ttl(mk, default_ttl), f"{path}.cache_control")] if mk is not None else []
        return _Piece(path, clean, "messages", 1, markers)
    parts: list[Any] = []
    markers = []
    # a message-level marker: Anthropic's mid-conversation system messages carry one
    # (closing the message's last block); recorded after the parts' own
    own, own_mk = _strip(msg)
    changed = own_mk is not None
    for i, part in enumerate(content):
        if isinstance(part, dict) and "cachePoint" in part and len(part) == 1:
            # Bedrock: a cache point is its own list item after the block it closes
            markers.append(
                (len(parts) - 1, _ttl(part["cachePoint"], default_ttl), f"{path}.content[{i}]")
            )
            changed = True
            continue
        clean, mk = _strip(part)
        if mk is not None:
            changed = True
            key = next(k for k in _MARKERS if k in part)
            markers.append((len(parts), _ttl(mk, default_ttl), f"{path}.{content_key}[{i}].{key}"))
        parts.append(clean)
    if own_mk is not None:
        markers.append((max(0, len(parts) - 1), _ttl(own_mk, default_ttl), f"{path}.cache_control"))
    value = {**own, content_key: parts} if changed else msg
    return _Piece(path, value, "messages", max(1, len(parts)), markers)


@dataclass(slots=True)
class _Lazy:
    """A message not yet cut into a piece: build_chain first tries to reuse the previous
    request's segment for an equal value."""

    path: str
    raw: Any
    ttl: str
    content_key: str = "content"
    kind: str = "messages"

    def piece(self) -> _Piece:
        p = _message_piece(self.raw, self.path, self.ttl, self.content_key)
        p.kind = self.kind
        return p


@dataclass(slots=True)
class _Tail:
    """The message list, last in every cache order: build_chain walks it in one tight
    loop, reusing the previous request's segments for equal messages."""

    items: list[Any]
    base: str
    ttl: str
    content_key: str = "content"
    system_roles: bool = False

    def lazy(self, j: int) -> _Lazy:
        msg = self.items[j]
        system = (
            self.system_roles
            and isinstance(msg, dict)
            and msg.get("role") in ("system", "developer")
        )
        kind = "system" if system else "messages"
        return _Lazy(f"{self.base}[{j}]", msg, self.ttl, self.content_key, kind)


def _list_pieces(items: Any, base: str, kind: str, default_ttl: str) -> Iterator[_Piece]:
    """Each item of a list as a piece (tools, system blocks); Bedrock ``cachePoint`` items
    mark the piece before them."""
    if not isinstance(items, list):
        return
    pending: _Piece | None = None
    for i, item in enumerate(items):
        if isinstance(item, dict) and "cachePoint" in item and len(item) == 1:
            if pending is not None:
                pending.markers.append((0, _ttl(item["cachePoint"], default_ttl), f"{base}[{i}]"))
                pending.raw = [pending.raw, item]
            continue
        if pending is not None:
            yield pending
        clean, mk = _strip(item)
        markers = []
        if mk is not None:
            key = next(k for k in _MARKERS if k in item)
            markers.append((0, _ttl(mk, default_ttl), f"{base}[{i}].{key}"))
        pending = _Piece(f"{base}[{i}]", clean, kind, 1, markers, item)
    if pending is not None:
        yield pending


def _settings(body: Mapping[str, Any], keys: Sequence[str]) -> Iterator[_Piece]:
    for k in keys:
        if body.get(k) is not None:
            yield _Piece("$" + _key(k), body[k], "setting", 0, [])


def _pieces_messages(body: Mapping[str, Any]) -> Iterator[_Piece | _Tail]:
    # Anthropic: tools -> system -> messages. Changing tool_choice or thinking invalidates
    # the message cache (prompt-caching page, "What invalidates the cache"): they sit
    # between system and messages in the chain.
    yield from _list_pieces(body.get("tools"), "$.tools", "tools", "5m")
    system = body.get("system")
    if isinstance(system, list):
        yield from _list_pieces(system, "$.system", "system", "5m")
    elif system is not None:
        yield _Piece("$.system", system, "system", 1, [])
    yield from _settings(body, ("tool_choice", "thinking"))
    yield _Tail(body.get("messages") or [], "$.messages", "5m")


def _pieces_chat(body: Mapping[str, Any]) -> Iterator[_Piece | _Tail]:
    # OpenAI routes by a hash of the prompt's first tokens combined with prompt_cache_key;
    # tools and the structured-output schema are part of the cached prefix.
    yield from _settings(body, ("prompt_cache_key",))
    yield from _list_pieces(body.get("tools"), "$.tools", "tools", "30m")
    yield from _settings(body, ("response_format", "tool_choice"))
    key = "messages" if "messages" in body else "prompt"
    items = body.get(key)
    if isinstance(items, list) and key == "messages":
        yield _Tail(items, "$.messages", "30m", system_roles=True)
    elif items is not None:
        yield _Piece("$" + _key(key), items, "messages", 1, [])


def _pieces_responses(body: Mapping[str, Any]) -> Iterator[_Piece | _Tail]:
    yield from _settings(body, ("prompt_cache_key",))
    if body.get("instructions") is not None:
        yield _Piece("$.instructions", body["instructions"], "system", 1, [])
    yield from _list_pieces(body.get("tools"), "$.tools", "tools", "30m")
    yield from _settings(body, ("text", "tool_choice"))
    items = body.get("input")
    if isinstance(items, list):
        yield _Tail(items, "$.input", "30m")
    elif items is not None:
        yield _Piece("$.input", items, "messages", 1, [])


def _pieces_gemini(body: Mapping[str, Any]) -> Iterator[_Piece | _Tail]:
    cfg = body.get("config") or body.get("generationConfig") or {}
    yield from _settings(body, ("cachedContent", "cached_content"))
    for base, holder in (("$", body), ("$.config", cfg if isinstance(cfg, dict) else {})):
        for k in ("systemInstruction", "system_instruction"):
            if holder.get(k) is not None:
                yield _Piece(f"{base}.{k}", holder[k], "system", 1, [])
        prefix = f"{base}.tools"
        yield from _list_pieces(holder.get("tools"), prefix, "tools", "1h")
        for k in ("toolConfig", "tool_config"):
            if holder.get(k) is not None:
                yield _Piece(f"{base}.{k}", holder[k], "setting", 0, [])
    contents = body.get("contents")
    if isinstance(contents, list):
        yield _Tail(contents, "$.contents", "1h", content_key="parts")
    elif contents is not None:
        yield _Piece("$.contents", contents, "messages", 1, [])


def _pieces_converse(body: Mapping[str, Any]) -> Iterator[_Piece | _Tail]:
    tc = body.get("toolConfig")
    if isinstance(tc, dict):
        yield from _list_pieces(tc.get("tools"), "$.toolConfig.tools", "tools", "5m")
        if tc.get("toolChoice") is not None:
            yield _Piece("$.toolConfig.toolChoice", tc["toolChoice"], "setting", 0, [])
    yield from _list_pieces(body.get("system"), "$.system", "system", "5m")
    yield _Tail(body.get("messages") or [], "$.messages", "5m")


_SEGMENTERS = {
    "messages": _pieces_messages,
    "chat.completions": _pieces_chat,
    "completions": _pieces_chat,
    "responses": _pieces_responses,
    "gemini": _pieces_gemini,
    "converse": _pieces_converse,
}


def _block_end(text: str, value: Any, content_key: str, block: int) -> int:
    """Offset just past content part ``block`` inside a message's serialization."""
    parts = value.get(content_key) if isinstance(value, dict) else None
    if not isinstance(parts, list) or not parts:
        return len(text)
    key_at = text.find(_ENCODE(content_key) + ":[")
    pos = key_at + len(content_key) + 4 if key_at >= 0 else 0
    for i, part in enumerate(parts[: block + 1]):
        ser = _ENCODE(part)
        at = text.find(ser, pos)
        if at < 0:
            return len(text)
        pos = at + len(ser)
        if i == block:
            return pos
    return len(text)


def build_chain(
    body: Mapping[str, Any], api: str, *, previous: DigestChain | None = None
) -> DigestChain:
    """The digest chain of one request body.

    Args:
        body: the request JSON as sent (a dict; ``model`` and generation settings such as
            ``max_tokens`` or ``temperature`` are not part of the prefix and are ignored).
        api: one of :data:`APIS`.
        previous: a chain built in this process for the previous request of the lineage;
            segments equal to its values (``==``) at the same path reuse its digests and
            atoms instead of being serialized again -- except tool definitions, which are
            always serialized (``==`` ignores key order; a schema's key order reaches the
            prompt). Message envelopes compared with ``==`` ignore key order too, which the
            providers' message rendering does as well.

    Returns:
        A :class:`DigestChain` holding references to the segment values.

    Raises:
        ValueError: an unknown ``api``.
    """
    segmenter = _SEGMENTERS.get(api)
    if segmenter is None:
        raise ValueError(f"unknown api {api!r}; expected one of {', '.join(APIS)}")
    b = _ChainBuilder(api, previous)
    for item in segmenter(body):
        if isinstance(item, _Tail):
            b.add_messages(item)
        else:
            b.add(item, item.value if item.raw is None else item.raw, len(b.segments))
    return b.finish(body.get("cache_control") if api == "messages" else None)


_Marks = tuple[tuple[int, str, str, int], ...]


class _ChainBuilder:
    """The state of one :func:`build_chain` pass: segments so far, their values, raws,
    markers and atoms, the running character offset ``pos`` and content-block count
    ``block``, and the previous chain whose equal segments are reused."""

    def __init__(self, api: str, previous: DigestChain | None) -> None:
        self.api = api
        self.content_key = "parts" if api == "gemini" else "content"
        self.prev_segs = previous.segments if previous is not None else ()
        self.prev_raws = previous.raws if previous is not None else ()
        self.prev_vals = previous.values if previous is not None else ()
        self.prev_marks = previous.marks if previous is not None else ()
        self.prev_atoms = previous.atoms if previous is not None else {}
        self.n_prev = len(self.prev_raws)
        self.segments: list[Segment] = []
        self.values: list[Any] = []
        self.raws: list[Any] = []
        self.marks: list[_Marks] = []
        self.atoms: dict[str, tuple[Atom, ...]] = {}
        self.bps: list[Breakpoint] = []
        self.pos = 0
        self.block = 0

    def add(self, item: _Piece | _Lazy, raw: Any, i: int) -> None:
        """Append segment ``i``: reused from the previous chain when equal there, else
        serialized and hashed."""
        # equal values reuse the previous request's digests. Dict equality ignores key
        # order, and a tool schema's key order reaches the prompt: tools are compared by
        # their repr (insertion order, C speed) instead
        if isinstance(item, _Piece) and item.kind == "tools":
            raw = repr(raw)
        if i < self.n_prev and self.prev_segs[i].path == item.path and self.prev_raws[i] == raw:
            self.reuse(i, raw)
            return
        piece = item.piece() if isinstance(item, _Lazy) else item
        value = piece.value
        text = _ENCODE(value)
        digest, chars = _digest(text), len(text)
        if digest not in self.atoms:
            self.atoms[digest] = self.prev_atoms.get(digest) or _atoms(value)
        found = []
        for b, ttl, mpath in piece.markers:
            b = max(0, b)
            if piece.blocks > 1 and b < piece.blocks - 1:
                rel = _block_end(text, value, self.content_key, b)
            else:
                rel = chars
            found.append((b, ttl, mpath, rel))
        self.push(
            Segment(piece.path, digest, self.pos, chars, piece.blocks, piece.kind),
            value,
            raw,
            tuple(found),
        )

    def reuse(self, i: int, raw: Any) -> None:
        """Append the previous chain's segment ``i`` (moved to the current offset)."""
        seg = self.prev_segs[i]
        if seg.start != self.pos:
            seg = Segment(seg.path, seg.digest, self.pos, seg.chars, seg.blocks, seg.kind)
        if seg.digest in self.prev_atoms:
            self.atoms[seg.digest] = self.prev_atoms[seg.digest]
        self.push(seg, self.prev_vals[i], raw, self.prev_marks[i])

    def push(self, seg: Segment, value: Any, raw: Any, mk: _Marks) -> None:
        for b, ttl, mpath, rel in mk:
            self.bps.append(Breakpoint(self.pos + rel, self.block + b, ttl, mpath))
        self.segments.append(seg)
        self.values.append(value)
        self.raws.append(raw)
        self.marks.append(mk)
        self.pos += seg.chars
        self.block += seg.blocks

    def add_messages(self, item: _Tail) -> None:
        """Append the message history; when it starts where the previous chain's did,
        message j is compared with the previous message j (the common case inlined)."""
        first = len(self.segments)
        prev_segs, prev_raws, prev_atoms = self.prev_segs, self.prev_raws, self.prev_atoms
        aligned = first < self.n_prev and prev_segs[first].path == f"{item.base}[0]"
        for j, msg in enumerate(item.items):
            i = first + j
            if aligned and i < self.n_prev and prev_raws[i] == msg:
                seg = prev_segs[i]
                mk = self.prev_marks[i]
                if seg.start == self.pos and not mk:  # the common case, inlined
                    self.segments.append(seg)
                    self.values.append(self.prev_vals[i])
                    self.raws.append(msg)
                    self.marks.append(mk)
                    d = seg.digest
                    if d in prev_atoms:
                        self.atoms[d] = prev_atoms[d]
                    self.pos += seg.chars
                    self.block += seg.blocks
                else:
                    self.reuse(i, msg)
            else:
                self.add(item.lazy(j), msg, i)

    def finish(self, top: Any) -> DigestChain:
        """The chain; ``top``: a Messages body's top-level ``cache_control`` (Anthropic
        automatic caching: one breakpoint on the last cacheable block), or None."""
        automatic = False
        if top is not None:
            automatic = True
            cacheable = [s for s in self.segments if s.kind != "setting"]
            if cacheable:
                last = cacheable[-1]
                self.bps.append(
                    Breakpoint(last.end, self.block - 1, _ttl(top, "5m"), "$.cache_control")
                )
        self.bps.sort(key=lambda b: (b.end, b.block))
        return DigestChain(
            self.api,
            tuple(self.segments),
            tuple(self.bps),
            self.atoms,
            tuple(self.values),
            automatic,
            tuple(self.raws),
            tuple(self.marks),
        )
