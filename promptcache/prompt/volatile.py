"""Detect volatile values -- timestamps, dates, epoch times, UUIDs, request ids, long hex or
base64 ids -- in text that should be identical on every request.

A single such value near the top of a prompt changes the prefix on every request and so
makes every request a cache miss. :func:`find_volatile` scans a string and returns each match
with its kind and character offsets; ``promptcache.build`` runs it over the frozen and
semi-stable layers, ``promptcache.check`` over everything ahead of the last breakpoint.

What is flagged (kinds):

- ``uuid``: 8-4-4-4-12 hex (any version).
- ``iso_datetime``: ``2024-05-01T12:34:56Z``, ``2024-05-01 12:34``, with fractions and
  offsets; also the compact ``20240501T123456Z`` (ISO 8601 basic format),
  ``20240501 12:34`` and ``%Y%m%d%H%M[%S]`` digits (``202405011234``, ``20240501123456``).
- ``http_date``: RFC 2822 / RFC 7231 dates (``Wed, 01 May 2024 12:34:56 GMT``) and C
  ``ctime`` output (``Wed May  1 12:34:56 2024``).
- ``date``: ``2024-05-01``, ``2024/05/01``, ``05/01/2024``, ``1.5.2024``, ``May 1, 2024``,
  ``1 May 2024`` (month and day validated; years 1900-2199), and the compact ``20240501``
  standing alone (a real calendar day; years 2000-2099 only, since a bare 8-digit number is
  more often a count or an id than a date).
- ``clock_time``: ``HH:MM:SS`` with optional fraction (``HH:MM`` alone is not flagged: it is
  how static opening hours are written).
- ``epoch_seconds`` / ``epoch_millis`` / ``epoch_micros``: 10/13/16-digit integers that fall
  between 2000-01-01 and 2040-01-01 as Unix times.
- ``request_id``: provider-style ids such as ``req_...``, ``msg_01...``, ``chatcmpl-...``,
  ``toolu_...`` (a known prefix followed by 8+ id characters with a digit).
- ``hex_id``: 16 or more hex digits with at least one digit and one letter (content hashes,
  trace ids, API-key-like tokens).
- ``base64_id``: a run of 20+ base64/base64url characters with a segment (split on ``-``
  and ``_``) of 12+ characters mixing at least two digits, two upper- and two lower-case
  letters -- random ids, not words or model names such as ``SmolLM2-135M-Instruct``.

Not flagged, on purpose: version numbers (``1.2.3``, ``v10.4.1``), years alone (``2024``),
short hex (``deadbeef``, ``a1b2c3``, git short SHAs), ``HH:MM`` times, prices, counts, and
the release date of a dated model identifier: a ``date`` attached by a hyphen to a name that
has a model-family segment (see ``MODEL_FAMILY``), as in ``gpt-4o-2024-08-06``,
``o1-2024-12-17``, ``claude-3-5-sonnet-20241022``, ``anthropic.claude-3-5-sonnet-20241022-v2:0``
or ``ft:gpt-4o-mini-2024-07-18:org::id``. Such a snapshot name is the same on every request;
``Today is 2024-08-06`` or ``logs-2024-08-06`` still are dates.

A candidate of the ``base64_id`` pattern that turns out not to be random (a long hyphenated
name such as ``snapshot-taken-2024-08-06``) is scanned again for the other kinds, so it does
not hide a date, UUID or epoch time inside it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date as _date

__all__ = ["VolatileMatch", "find_volatile", "iter_volatile", "MODEL_FAMILY"]

_MONTHS_FULL = (
    "January|February|March|April|May|June|July|August|September|October|November|December"
)
_MONTHS_ABBR = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
_MONTH = rf"(?:{_MONTHS_FULL}|(?:{_MONTHS_ABBR})\.?)"
_DOW = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_ID_PREFIXES = (
    "req|request|msg|chatcmpl|cmpl|run|sess|session|trace|span|call|toolu|resp|thread|asst|"
    "file|batch|evt|ch|cus|pi|sk|pk"
)

_ALTERNATIVES = (
    r"(?P<uuid>(?<![0-9A-Za-z])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}"
    r"-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![0-9A-Za-z]))",
    r"(?P<iso_datetime>(?<![0-9])(?P<dt_y>\d{4})-(?P<dt_m>\d{2})-(?P<dt_d>\d{2})[T ]"
    r"(?P<dt_H>\d{2}):(?P<dt_M>\d{2})(?::\d{2}(?:[.,]\d+)?)?"
    r"(?:Z|[+-]\d{2}:?\d{2})?(?![0-9A-Za-z]))",
    rf"(?P<http_date>\b{_DOW},?\s+\d{{1,2}}\s+(?:{_MONTHS_ABBR})\s+\d{{4}}"
    r"(?:\s+\d{2}:\d{2}(?::\d{2})?(?:\s*(?:GMT|UTC|[+-]\d{4}))?)?\b"
    rf"|\b{_DOW}\s+(?:{_MONTHS_ABBR})\s+\d{{1,2}}\s+\d{{2}}:\d{{2}}:\d{{2}}\s+\d{{4}}\b)",
    r"(?P<date_ymd>(?<![0-9.])(?P<y1>\d{4})(?P<sep1>[-/])(?P<m1>\d{1,2})(?P=sep1)"
    r"(?P<d1>\d{1,2})(?![0-9]))",
    r"(?P<date_dmy>(?<![0-9.])(?P<a2>\d{1,2})(?P<sep2>[/.])(?P<b2>\d{1,2})(?P=sep2)"
    r"(?P<y2>\d{4})(?![0-9]))",
    rf"(?P<date_mdy_text>\b{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+(?P<y3>\d{{4}})\b)",
    rf"(?P<date_dmy_text>\b\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTH},?\s+(?P<y4>\d{{4}})\b)",
    r"(?P<clock_time>(?<![0-9:])(?P<t_H>\d{1,2}):(?P<t_M>\d{2}):(?P<t_S>\d{2})"
    r"(?:[.,]\d+)?(?![0-9:]))",
    rf"(?P<request_id>\b(?:{_ID_PREFIXES})[_-](?=[A-Za-z0-9]*[0-9])[A-Za-z0-9]{{8,}}\b)",
    r"(?P<hex_id>(?<![0-9A-Za-z_-])(?=[0-9a-fA-F]*[a-fA-F])(?=[0-9a-fA-F]*[0-9])"
    r"[0-9a-fA-F]{16,}(?![0-9A-Za-z_-]))",
    r"(?P<compact>(?<![0-9A-Za-z.,])(?P<c_y>\d{4})(?P<c_m>\d{2})(?P<c_d>\d{2})"
    r"(?P<c_time>T(?P<c_H1>\d{2})(?::?(?P<c_M1>\d{2}))(?::?\d{2}(?:[.,]\d+)?)?"
    r"(?:Z|[+-]\d{2}:?\d{2})?| (?P<c_H2>\d{1,2}):(?P<c_M2>\d{2})(?::\d{2}(?:[.,]\d+)?)?"
    r"|(?P<c_H3>\d{2})(?P<c_M3>\d{2})(?:\d{2})?)?"
    r"(?![0-9A-Za-z]|[.,][0-9]))",
    r"(?P<epoch>(?<![0-9.,])(?:\d{16}|\d{13}|\d{10})(?![0-9]|[.,][0-9]))",
    r"(?P<base64_id>(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+_-]{20,}={0,2}(?![A-Za-z0-9+/=_-]))",
)
_PATTERN = re.compile("|".join(_ALTERNATIVES))
# the same without ``base64_id``: rescans a rejected base64 candidate for what it may hide
_INNER = re.compile("|".join(a for a in _ALTERNATIVES if "?P<base64_id>" not in a))

#: A segment of a model identifier (split on ``-``, ``.``, ``_``, ``:``, ``/``) that names a
#: model family; a ``date`` attached by a hyphen to a name holding one is a snapshot date.
MODEL_FAMILY = re.compile(
    r"o\d+|(?:chatgpt|gpt|claude|gemini|gemma|palm|bison|mistral|mixtral|codestral|ministral|"
    r"pixtral|magistral|devstral|voxtral|llama|codellama|qwen|qwq|deepseek|grok|phi|command|"
    r"jamba|sonar|nova|titan|embedding|davinci|babbage|whisper|tts|dall|moderation|sonnet|"
    r"opus|haiku|turbo|codex)\d*",
    re.IGNORECASE,
)
_NAME_CHARS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-"
)  # no "/": a path is not a model id
_NAME_SPLIT = re.compile(r"[-._:/]")
_DIGIT = re.compile(r"\d")  # the other kinds hold digits: a digitless candidate hides none
_NAME_MAX = 120  # how far back a model name is looked for
_INNER_REACH = 40  # past a base64 candidate's end: longer than any match's tail there (~35)

# Unix-time window accepted as an epoch value: 2000-01-01 .. 2040-01-01 (seconds).
_EPOCH_LO = 946_684_800
_EPOCH_HI = 2_208_988_800


@dataclass(frozen=True)
class VolatileMatch:
    """One volatile value: ``kind`` (see the module docstring), character offsets
    ``start``/``end`` into the scanned string (``end`` exclusive), and the matched ``text``."""

    kind: str
    start: int
    end: int
    text: str


def _valid_md(month: int, day: int) -> bool:
    return 1 <= month <= 12 and 1 <= day <= 31


def _valid_year(year: int) -> bool:
    return 1900 <= year <= 2199


def _real_day(year: int, month: int, day: int) -> bool:
    try:
        _date(year, month, day)
    except ValueError:
        return False
    return True


def _model_snapshot(text: str, start: int) -> bool:
    """True when the date at ``text[start:]`` is the release date of a dated model identifier:
    attached by a hyphen to a name (a ``[A-Za-z0-9._:-]`` run, so never across a ``/`` of a
    path or URL) with a :data:`MODEL_FAMILY` segment and a digit, as ``gpt-4o-`` before
    ``2024-08-06``."""
    if start < 2 or text[start - 1] != "-":
        return False
    j = start - 1
    stop = max(0, j - _NAME_MAX)
    while j > stop and text[j - 1] in _NAME_CHARS:
        j -= 1
    name = text[j : start - 1]
    # a model id names its family and a version (gpt-4o, claude-3-5-sonnet, o1); a word such as
    # "embedding" or "titan" alone before a date is not one (``embedding-cache-2026-11-29``)
    return any(MODEL_FAMILY.fullmatch(seg) for seg in _NAME_SPLIT.split(name)) and any(
        c.isdigit() for c in name
    )


def _random_segment(token: str) -> bool:
    for seg in re.split(r"[-_+]", token.rstrip("=")):
        if len(seg) < 12:
            continue
        digits = sum(c.isdigit() for c in seg)
        upper = sum(c.isupper() for c in seg)
        lower = sum(c.islower() for c in seg)
        if digits >= 2 and upper >= 2 and lower >= 2:
            return True
    return False


def _classify(m: re.Match[str]) -> str | None:
    kind = m.lastgroup
    g = m.group
    if kind == "uuid":
        return "uuid"
    if kind == "iso_datetime":
        y, mo, d = int(g("dt_y")), int(g("dt_m")), int(g("dt_d"))
        if _valid_year(y) and _valid_md(mo, d) and int(g("dt_H")) < 24 and int(g("dt_M")) < 60:
            return "iso_datetime"
        return None
    if kind == "http_date":
        return "http_date"
    if kind == "date_ymd":
        if _valid_year(int(g("y1"))) and _valid_md(int(g("m1")), int(g("d1"))):
            return "date"
        return None
    if kind == "date_dmy":
        a, b, y = int(g("a2")), int(g("b2")), int(g("y2"))
        if _valid_year(y) and (_valid_md(a, b) or _valid_md(b, a)):
            return "date"
        return None
    if kind == "date_mdy_text":
        return "date" if _valid_year(int(g("y3"))) else None
    if kind == "date_dmy_text":
        return "date" if _valid_year(int(g("y4"))) else None
    if kind == "clock_time":
        if int(g("t_H")) < 24 and int(g("t_M")) < 60 and int(g("t_S")) <= 60:
            return "clock_time"
        return None
    if kind == "request_id":
        return "request_id"
    if kind == "hex_id":
        return "hex_id"
    if kind == "compact":
        y, mo, d = int(g("c_y")), int(g("c_m")), int(g("c_d"))
        if g("c_time") is None:  # a bare 8-digit number: only a real day of 2000-2099
            return "date" if 2000 <= y <= 2099 and _real_day(y, mo, d) else None
        hour, minute = next(
            (g(f"c_H{i}"), g(f"c_M{i}")) for i in (1, 2, 3) if g(f"c_H{i}") is not None
        )
        if _valid_year(y) and _real_day(y, mo, d) and int(hour) < 24 and int(minute) < 60:
            return "iso_datetime"
        return None
    if kind == "epoch":
        text = m.group(0)
        scale = {10: 1, 13: 1_000, 16: 1_000_000}[len(text)]
        seconds = int(text) // scale
        if _EPOCH_LO <= seconds < _EPOCH_HI:
            return {1: "epoch_seconds", 1_000: "epoch_millis", 1_000_000: "epoch_micros"}[scale]
        return None
    if kind == "base64_id":
        return "base64_id" if _random_segment(m.group(0)) else None
    return None  # pragma: no cover - every named alternative is handled above


def _accept(text: str, m: re.Match[str]) -> str | None:
    """The kind of match ``m`` of ``text``, or None when it is not volatile (an invalid
    date, a non-random base64 candidate, a dated model identifier's release date)."""
    kind = _classify(m)
    if (
        kind == "date"
        and (m.lastgroup == "compact" or m.group("sep1") == "-")
        and _model_snapshot(text, m.start())
    ):
        return None
    return kind


def iter_volatile(text: str) -> Iterator[VolatileMatch]:
    """Yield the volatile values in ``text`` in order of position (non-overlapping).

    A rejected ``base64_id`` candidate (a long hyphenated name, not a random id) holding a
    digit is scanned again with the other patterns, so ``snapshot-taken-2024-08-06`` still
    yields its date; the scan then resumes after the candidate or after the last match found
    inside it, whichever ends later.
    """
    pos, n = 0, len(text)
    while pos < n:
        m = _PATTERN.search(text, pos)
        if m is None:
            return
        pos = m.end()
        kind = _accept(text, m)
        if kind is not None:
            yield VolatileMatch(kind, m.start(), m.end(), m.group(0))
        elif m.lastgroup == "base64_id" and _DIGIT.search(text, m.start(), m.end()):
            # a match may start inside the candidate and run past it (a date and its time
            # after ``T``): look up to _INNER_REACH characters beyond its end
            for inner in _INNER.finditer(text, m.start(), min(n, m.end() + _INNER_REACH)):
                if inner.start() >= m.end():
                    break
                kind = _accept(text, inner)
                if kind is not None:
                    yield VolatileMatch(kind, inner.start(), inner.end(), inner.group(0))
                    pos = max(pos, inner.end())


def find_volatile(text: str) -> list[VolatileMatch]:
    """All volatile values in ``text`` (see the module docstring for the kinds), in order.

    Args:
        text: any string; offsets in the result are indices into it.

    Returns:
        A list of :class:`VolatileMatch`; empty when nothing volatile was found.
    """
    if not isinstance(text, str):
        raise TypeError(f"find_volatile expects str, got {type(text).__name__}")
    return list(iter_volatile(text))
