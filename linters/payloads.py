"""Request payloads (``.json``: one request or a list of them; ``.jsonl``: one per line)
checked with :func:`promptcache.check`, its findings mapped to lint codes.

The provider comes from ``--provider`` / ``provider =`` in the config, else from the
payload's shape (``anthropic_version``, ``cache_control`` or a top-level ``system`` ->
Anthropic; ``modelId``/``toolConfig`` -> Bedrock; ``contents`` -> Gemini; otherwise OpenAI).
``promptcache.check`` is imported only when a payload is linted.
"""

from __future__ import annotations

import json
import re

from linters.config import LintConfig
from linters.model import Finding

# promptcache.check codes -> lint codes (None: informational, not reported)
CODE_MAP = {
    "volatile-in-prefix": "PC001",
    "non-canonical-json": "PC002",
    "too-many-breakpoints": "PC005",
    "ttl-order": "PC005",
    "below-minimum": "PC008",
    "segment-below-minimum": "PC008",
    "no-breakpoints": None,
    "prefix-drift": None,
}


_PATH_TOKEN = re.compile(r"\.([A-Za-z_][\w-]*)|\[(\d+)\]")
_DECODER = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")


def _skip_ws(text: str, pos: int) -> int:
    """The offset of the first non-whitespace character at or after ``pos``."""
    m = _WS.match(text, pos)
    return pos if m is None else m.end()


def value_offset(text: str, jpath: str, start: int = 0) -> int | None:
    """Character offset in ``text`` (JSON) of the value at ``jpath`` (``$.a[2].b``), found
    by scanning with the standard decoder; None when the path is not there."""
    pos = _skip_ws(text, start)
    for m in _PATH_TOKEN.finditer(jpath, 1):
        key, index = m.group(1), m.group(2)
        if key is not None:
            if text[pos : pos + 1] != "{":
                return None
            pos = _skip_ws(text, pos + 1)
            while text[pos : pos + 1] == '"':
                name, pos = json.decoder.scanstring(text, pos + 1)  # type: ignore[attr-defined]
                pos = _skip_ws(text, pos) + 1  # the colon
                pos = _skip_ws(text, pos)
                if name == key:
                    break
                _, pos = _DECODER.raw_decode(text, pos)
                pos = _skip_ws(text, pos)
                if text[pos : pos + 1] == ",":
                    pos = _skip_ws(text, pos + 1)
            else:
                return None
        else:
            if text[pos : pos + 1] != "[":
                return None
            pos = _skip_ws(text, pos + 1)
            for _ in range(int(index)):
                if text[pos : pos + 1] == "]":
                    return None
                _, pos = _DECODER.raw_decode(text, pos)
                pos = _skip_ws(text, pos)
                if text[pos : pos + 1] == ",":
                    pos = _skip_ws(text, pos + 1)
            if text[pos : pos + 1] == "]":
                return None
    return pos


def _finding(code: str, message: str, line: int, path: str) -> Finding:
    return Finding(code, message, line, 1, line, 1, path)


def lint_payload(data: bytes, path: str, config: LintConfig) -> list[Finding]:
    """Findings for one payload file; never raises for bad input (PC900 for text that is
    not JSON, PC901 when the payload cannot be checked)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return [_finding("PC900", f"not UTF-8 text: {exc.reason} at byte {exc.start}", 1, path)]
    docs: list[tuple[int, str, object]] = []
    if path.endswith(".jsonl"):
        for ln, raw_line in enumerate(text.splitlines(), 1):
            if not raw_line.strip():
                continue
            try:
                docs.append((ln, "", json.loads(raw_line)))
            except ValueError as exc:
                return [_finding("PC900", f"line is not JSON: {exc}", ln, path)]
    else:
        try:
            doc = json.loads(text)
        except ValueError as exc:
            line: int = getattr(exc, "lineno", 1)
            return [_finding("PC900", f"not JSON: {exc}", line, path)]
        if isinstance(doc, list):
            docs.extend((1, f"[{i}]", d) for i, d in enumerate(doc))
        else:
            docs.append((1, "", doc))
    try:
        # lazy, optional: promptcache.check (the SDK half of this distribution) may be left
        # out of a vendored linter; payloads then get one PC901 finding instead of a crash
        from promptcache.compose.check import check, infer_provider
    except ImportError as exc:
        return [
            _finding(
                "PC901",
                f"cannot check request payloads: promptcache.check is not available ({exc})",
                1,
                path,
            )
        ]
    out: list[Finding] = []
    single = not path.endswith(".jsonl")
    for line, where, payload in docs:
        if not isinstance(payload, dict):
            out.append(
                _finding(
                    "PC901",
                    f"payload{where} is a JSON {type(payload).__name__}, "
                    "expected an object (one request body)",
                    line,
                    path,
                )
            )
            continue
        try:
            provider = config.provider or infer_provider(payload)
        except ValueError as exc:
            out.append(_finding("PC901", f"payload{where}: {exc}", line, path))
            continue
        try:
            found = check(payload, provider)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            out.append(
                _finding(
                    "PC901",
                    f"payload{where} could not be checked as a {provider} request: {exc}",
                    line,
                    path,
                )
            )
            continue
        for f in found:
            code = CODE_MAP.get(f.code, "PC901")
            if code is None:
                continue
            jpath = f.path if not where else "$" + where + f.path[1:]
            extra = f" [{f.code}]" if code == "PC901" else ""
            at = line
            if single:
                try:
                    off = value_offset(text.lstrip("\ufeff"), jpath)
                except (ValueError, IndexError):
                    off = None
                if off is not None:
                    at = text.count("\n", 0, off) + 1
            out.append(_finding(code, f"{jpath}: {f.message}{extra} ({provider})", at, path))
    return out
