"""The AWS event-stream binary framing (``application/vnd.amazon.eventstream``), encode side.

One message (https://docs.aws.amazon.com/AmazonS3/latest/API/RESTSelectObjectAppendix.html
and https://docs.aws.amazon.com/transcribe/latest/dg/streaming-setting-up.html, "event
stream encoding", read 2026-12-03)::

    total length (uint32 BE) | headers length (uint32 BE) | prelude CRC32 (uint32 BE)
    | headers | payload | message CRC32 (uint32 BE, over everything before it)

each header ``name length (uint8) | name | value type (uint8; 7 = string) | value length
(uint16 BE) | value``. botocore has the decoder only (``botocore.eventstream``: the tests
check every frame with it); awscrt, which has an encoder, is not a dependency of this
project, and the format is this small.
"""

from __future__ import annotations

import json
import struct
import zlib

_STRING = 7


def _header(name: str, value: str) -> bytes:
    n = name.encode("utf-8")
    v = value.encode("utf-8")
    return struct.pack(">B", len(n)) + n + struct.pack(">BH", _STRING, len(v)) + v


def encode_message(headers: dict[str, str], payload: bytes) -> bytes:
    """One event-stream message with string ``headers`` and ``payload`` bytes."""
    hdr = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(hdr) + len(payload) + 4
    prelude = struct.pack(">II", total, len(hdr))
    prelude += struct.pack(">I", zlib.crc32(prelude) & 0xFFFFFFFF)
    body = prelude + hdr + payload
    return body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def encode_event(event_type: str, data: dict) -> bytes:
    """A Bedrock stream event: ``:event-type``, ``:content-type: application/json``,
    ``:message-type: event`` and the JSON of the event's members."""
    return encode_message(
        {
            ":event-type": event_type,
            ":content-type": "application/json",
            ":message-type": "event",
        },
        json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8"),
    )


def encode_exception(exception_type: str, message: str) -> bytes:
    """A stream error (``:message-type: exception``), as botocore raises it."""
    return encode_message(
        {
            ":exception-type": exception_type,
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        json.dumps({"message": message}).encode("utf-8"),
    )
