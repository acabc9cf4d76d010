"""``promptcache import claude-code|codex [PATH] [--db PATH]``: transcripts into the ledger.

``PATH`` defaults to ``~/.claude/projects`` (Claude Code) or ``$CODEX_HOME/sessions``
(``~/.codex/sessions``; Codex). Prints one line: calls read, new records, lines skipped; each
skipped line is one warning on stderr (file:line and why; ``--quiet`` prints only the count).
Exit 0 on success (also when lines were skipped), 2 with one line when the path does not
exist or the ledger cannot be opened or written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from promptcache.ledger.tracker import LedgerError, Tracker
from promptcache.transcripts.claude_code import DEFAULT_DIR as CLAUDE_DIR
from promptcache.transcripts.claude_code import read_claude_code
from promptcache.transcripts.codex import read_codex
from promptcache.transcripts.importer import import_calls
from promptcache.transcripts.jsonl import Skipped

__all__ = ["add_arguments", "run", "default_path"]

_READERS = {"claude-code": read_claude_code, "codex": read_codex}


def default_path(source: str) -> Path:
    """The folder ``source`` (``claude-code`` or ``codex``) writes its transcripts to."""
    if source == "codex":
        home = os.environ.get("CODEX_HOME") or "~/.codex"
        return Path(home).expanduser() / "sessions"
    return Path(CLAUDE_DIR).expanduser()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``promptcache import``."""
    parser.add_argument("source", choices=sorted(_READERS), help="whose transcripts")
    parser.add_argument(
        "path",
        nargs="?",
        default=None,
        help="a transcript file or folder (default: ~/.claude/projects or ~/.codex/sessions)",
    )
    parser.add_argument(
        "--db",
        metavar="PATH",
        help="ledger file or postgresql:// URL (default: $PROMPTCACHE_LEDGER or the user "
        "data directory)",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="do not print a warning per skipped line"
    )


def run(args: argparse.Namespace) -> int:
    """Run ``promptcache import``; returns the exit code."""
    path = Path(args.path).expanduser() if args.path else default_path(args.source)
    if not path.exists():
        print(f"promptcache import: {path} does not exist", file=sys.stderr)
        return 2
    skipped = Skipped()
    try:
        with Tracker(args.db) as tracker:
            result = import_calls(tracker, _READERS[args.source](path, skipped), args.source)
    except LedgerError as e:
        print(f"promptcache import: {e}", file=sys.stderr)
        return 2
    if not args.quiet:
        for w in skipped.warnings:
            print(f"warning: {w}", file=sys.stderr)
    print(
        f"{args.source}: {result.calls} call(s) read, {result.new} new in the ledger, "
        f"{len(skipped.warnings)} line(s) skipped"
        + (f", {result.duplicates} duplicate(s)" if result.duplicates else "")
    )
    return 0
