"""``# noqa`` and ``# noqa: CODE[,CODE...]`` comments.

Comments are read with Python's tokenizer, so ``# noqa`` inside a string is text, not a
directive. A finding inside a multi-line string may be silenced on the line where that
string ends (a comment cannot sit inside the string), as ruff does.
"""

from __future__ import annotations

import io
import re
import tokenize

NOQA_RE = re.compile(
    r"#\s*noqa(?![\w-])(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.IGNORECASE
)


class NoqaMap:
    """Directives of one file: ``lines`` maps a line to the codes it silences (``None`` =
    all); ``string_end`` maps each line inside a multi-line string to the string's last line."""

    __slots__ = ("lines", "string_end")

    def __init__(self, text: str):
        self.lines: dict[int, frozenset[str] | None] = {}
        self.string_end: dict[int, int] = {}
        try:
            for tok in tokenize.generate_tokens(io.StringIO(text).readline):
                if tok.type == tokenize.COMMENT:
                    self._comment(tok.start[0], tok.string)
                elif tok.type == tokenize.STRING and tok.end[0] > tok.start[0]:
                    for ln in range(tok.start[0], tok.end[0]):
                        self.string_end[ln] = tok.end[0]
        except (tokenize.TokenError, SyntaxError, IndentationError):
            # The parser accepted the file, so this is rare; fall back to plain text.
            for ln, line in enumerate(text.splitlines(), 1):
                if "#" in line:
                    self._comment(ln, line[line.index("#") :])

    def _comment(self, line: int, comment: str) -> None:
        m = NOQA_RE.search(comment)
        if m is None:
            return
        codes = m.group("codes")
        if codes is None:
            self.lines[line] = None
        else:
            new = frozenset(c.upper() for c in re.split(r"[\s,]+", codes) if c)
            old = self.lines.get(line, frozenset())
            self.lines[line] = None if old is None else old | new

    def silences(self, code: str, line: int) -> bool:
        """True when a directive on ``line`` (or where its multi-line string ends) covers
        ``code``."""
        for ln in (line, self.string_end.get(line)):
            if ln is not None and ln in self.lines:
                codes = self.lines[ln]
                if codes is None or code in codes:
                    return True
        return False
