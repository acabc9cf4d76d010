"""Canonical forms for prompt content, so that equal content gives equal bytes.

A provider's prompt cache matches on the exact bytes (or tokens) of the request prefix, so a
frozen layer must serialize identically on every request whatever the order in which a
program happened to build its dicts. This module provides:

- :func:`canonical_json` -- RFC 8785 (JSON Canonicalization Scheme) bytes through the
  maintained ``rfc8785`` package; used for hashing.
- :func:`sort_keys_deep` -- the same value with every dict's keys in sorted order (the
  insertion order that ``json.dumps`` and the official clients serialize in), for payloads a
  provider receives as plain JSON.
- :func:`dumps_sorted` -- keys sorted recursively with fixed separators ``(",", ":")``: the
  string form used for tool-call arguments inside history.
- :func:`normalize_text` -- ``\\r\\n``/``\\r`` to ``\\n`` and trailing whitespace removed from
  every line and from the end, for frozen text.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import rfc8785

__all__ = [
    "canonical_json",
    "sort_keys_deep",
    "dumps_sorted",
    "normalize_text",
    "normalize_newlines",
    "sha256_hex",
]


def _plain(value: Any, path: str = "$") -> Any:
    """Convert tuples to lists and reject what JSON cannot carry, naming the path."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(
                    f"{path}: JSON object keys must be str, got {type(k).__name__} {k!r}"
                )
            out[k] = _plain(v, f"{path}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise TypeError(f"{path}: {type(value).__name__} is not JSON-serializable")


def canonical_json(value: Any) -> bytes:
    """RFC 8785 canonical JSON of ``value`` as UTF-8 bytes.

    Keys are sorted by UTF-16 code units, numbers use the ECMAScript shortest form, no
    whitespace. Tuples are treated as arrays.

    Raises:
        TypeError: a value is not JSON (the message gives its JSON path).
        ValueError: a number outside RFC 8785's domain (NaN, infinity, an integer beyond
            2**53 in magnitude).
    """
    try:
        return rfc8785.dumps(_plain(value))
    except rfc8785.CanonicalizationError as exc:  # IntegerDomainError, FloatDomainError
        raise ValueError(f"cannot canonicalize per RFC 8785: {exc}") from exc


def sort_keys_deep(value: Any) -> Any:
    """A copy of ``value`` whose dicts (at every depth) have their keys in sorted order.

    Lists keep their order (it is meaningful); tuples become lists. Strings are unchanged.
    """
    if isinstance(value, dict):
        return {k: sort_keys_deep(value[k]) for k in sorted(value)}
    if isinstance(value, (list, tuple)):
        return [sort_keys_deep(v) for v in value]
    return value


def dumps_sorted(value: Any) -> str:
    """``json.dumps`` with keys sorted recursively, separators ``(",", ":")`` and non-ASCII
    kept as is: the plain-JSON canonical form (for tool-call ``arguments`` strings)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def normalize_newlines(text: str) -> str:
    """``\\r\\n`` and lone ``\\r`` become ``\\n``."""
    if "\r" not in text:
        return text
    return text.replace("\r\n", "\n").replace("\r", "\n")


def normalize_text(text: str) -> str:
    """Frozen-text normal form: newlines normalized, trailing spaces/tabs removed from each
    line, trailing blank lines removed. Leading indentation is kept (it can be meaningful)."""
    text = normalize_newlines(text)
    lines = text.split("\n")
    text = "\n".join(line.rstrip() for line in lines)
    return text.rstrip()


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of ``data`` (64 lowercase hex characters)."""
    return hashlib.sha256(data).hexdigest()
