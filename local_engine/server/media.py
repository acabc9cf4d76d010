"""Image and document content on every API: accepted in each provider's shape, rendered as
text for a model that reads text only.

A user's application sends screenshots and PDFs; refusing them (as the server did) made such
a request impossible to replay offline. Each route now accepts the image and document blocks
its provider accepts, checked as that provider checks them (a media type it does not take,
missing or malformed data, an unknown source type: one 400 in the provider's error shape,
naming the field), and renders each block as text:

- a **text document** (Anthropic ``document`` with ``source.type`` ``text`` or ``content``;
  Bedrock ``document`` with ``source.text``/``content`` or a ``txt``/``md``/``csv``/``html``
  format; any ``text/*`` media type sent as bytes) becomes its text, after one line naming
  the document: the model reads it, and it counts as that text's tokens;
- an **image** or a **binary document** (PDF, Office files) becomes one placeholder line,
  ``[image image/png, 1234 bytes, sha256 0123456789abcdef: not readable by this text-only
  model]``, keyed on the bytes' SHA-256, or on the URL / file id / S3 URI the request names
  (nothing is fetched: the server reaches no network).

What this emulates: the prefix cache sees the same image as the same prompt text (a repeat
hits) and another image as different text (a miss from its block on), and under Anthropic's
rules adding or removing images invalidates the message blocks while tools and system still
read (``promptcache.limits.INVALIDATION_RULES``, change ``images``). What it does not: the
providers' token counts for images and PDFs, which depend on pixel sizes and pages; usage
counts the placeholder line's tokens, as every count here is the local tokenizer's. The
model's reply never describes the image. Audio stays a 400.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re

#: image media types each provider documents (read 2026-12-03): Anthropic "JPEG, PNG, GIF,
#: and WebP" (https://docs.claude.com/en/docs/build-with-claude/vision); OpenAI "PNG, JPEG,
#: WEBP, non-animated GIF" (https://platform.openai.com/docs/guides/images-vision); Bedrock
#: ``ImageBlock.format`` png | jpeg | gif | webp
#: (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_ImageBlock.html)
IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
#: Bedrock ``DocumentBlock.format`` values
#: (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_DocumentBlock.html,
#: read 2026-12-03), and which of them are text
BEDROCK_DOCUMENT_FORMATS = ("pdf", "csv", "doc", "docx", "xls", "xlsx", "html", "txt", "md")
BEDROCK_TEXT_FORMATS = {
    "csv": "text/csv",
    "html": "text/html",
    "txt": "text/plain",
    "md": "text/markdown",
}

_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?(;[^,]*)?,(.*)$", re.S)


class MediaError(ValueError):
    """A malformed image or document block; the message starts with the field's path."""


def decode_base64(data: object, where: str, *, proto3: bool = False) -> bytes:
    """The bytes of base64 ``data`` (standard alphabet, padding checked). With ``proto3``
    (Gemini, a protobuf JSON API) also the URL-safe alphabet and missing padding, as the
    proto3 JSON mapping accepts for ``bytes``
    (https://protobuf.dev/programming-guides/json/, read 2026-12-03; the ``google-genai``
    client sends URL-safe base64). Raises :class:`MediaError` naming ``where`` when it is
    not a base64 string."""
    if not isinstance(data, str) or not data:
        raise MediaError(f"{where}: Field required (base64-encoded bytes)")
    try:
        if proto3:
            padded = data + "=" * (-len(data) % 4)
            return base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError(f"{where}: invalid base64 data") from None


def parse_data_url(url: str, where: str) -> tuple[str, bytes] | None:
    """``(media type, bytes)`` of a ``data:<type>;base64,<data>`` URL, or None for another
    URL. Raises :class:`MediaError` for a data URL without a media type or base64 data."""
    m = _DATA_URL.match(url)
    if m is None:
        return None
    media_type, params, payload = m.group(1), m.group(2) or "", m.group(3)
    if not media_type or ";base64" not in params:
        raise MediaError(f"{where}: a data URL needs a media type and base64 data")
    return media_type.lower(), decode_base64(payload, where)


def placeholder(
    kind: str,
    media_type: str | None,
    *,
    data: bytes | None = None,
    ref: str | None = None,
    name: str | None = None,
) -> str:
    """The line an image or binary document becomes: ``kind`` (``"image"``,
    ``"document"``), its media type, and the SHA-256 of ``data`` (its first 16 hex digits)
    or the ``ref`` (URL, file id, S3 URI) the request names; ``name`` when given."""
    parts = [kind, media_type or "unknown type"]
    if name:
        parts.append(repr(name))
    desc = " ".join(parts)
    if data is not None:
        digest = hashlib.sha256(data).hexdigest()[:16]
        desc += f", {len(data)} bytes, sha256 {digest}"
    elif ref is not None:
        desc += f", {ref}"
    return f"[{desc}: not readable by this text-only model]"


def text_document(text: str, *, name: str | None = None, media_type: str | None = None) -> str:
    """The text a text document becomes: a line naming it, then its text."""
    head = " ".join(p for p in ("document", repr(name) if name else None, media_type) if p)
    return f"[{head}]\n{text}"


def bytes_document(data: bytes, media_type: str, *, name: str | None = None) -> str:
    """A document given as bytes: its text for a ``text/*`` media type (UTF-8), else a
    placeholder (:func:`placeholder`)."""
    if media_type.startswith("text/"):
        try:
            return text_document(data.decode("utf-8"), name=name, media_type=media_type)
        except UnicodeDecodeError:
            pass
    return placeholder("document", media_type, data=data, name=name)
