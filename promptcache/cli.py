"""The ``promptcache`` command line: ``lint``, ``report``, ``serve``, ``demo``, ``simulate``,
``proxy``, ``import``, ``kv-plan``.

Each subcommand lives in its own module that exposes ``add_arguments(parser)`` and
``run(args) -> int``; this module only dispatches, importing the chosen module lazily so
that ``promptcache lint`` never imports torch. Exit codes: 0 success, 1 findings (lint) or
failure, 2 usage error (one line on stderr saying what to fix) -- including a command run
without the optional extra it needs (:mod:`promptcache.extras`): ``serve`` and ``demo`` check
for the ``engine`` extra before anything else (``--help`` too), and any command that meets a
missing module an extra installs (``kv-plan`` reading a .gguf file, ``report --db
postgresql://...``) names that extra.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from promptcache import __version__
from promptcache.extras import extra_for_module, missing_modules, needs_extra_line

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "lint": ("linters.cli", "check Python code for patterns that bust prompt caches"),
    "report": ("promptcache.reports.report", "summarize the ledger: hit rate, cost and saving"),
    "simulate": (
        "promptcache.simulation.simulate",
        "replay a request trace under a provider's cache rules",
    ),
    "serve": (
        "local_engine.server.cli",
        "start the local engine's OpenAI/Anthropic-compatible server",
    ),
    "demo": (
        "promptcache.integrations.demo",
        "run the naive vs promptcache.build workload against the local engine",
    ),
    "proxy": (
        "promptcache.proxy.cli",
        "a local proxy in front of a provider that records every call in the ledger",
    ),
    "import": (
        "promptcache.transcripts.cli",
        "import Claude Code or Codex transcripts into the ledger",
    ),
    "kv-plan": (
        "local_engine.kv_plan",
        "KV-cache capacity planning for a model, context and batch",
    ),
}

#: command -> the extra every use of it needs, checked before its module is imported.
#: (``kv-plan`` plans preset models with the SDK alone; reading a model file needs ``engine``.)
REQUIRES_EXTRA: dict[str, str] = {"serve": "engine", "demo": "engine"}
#: command -> the extra a missing module is first attributed to (see extra_for_module)
COMMAND_EXTRA: dict[str, str] = {**REQUIRES_EXTRA, "kv-plan": "engine"}


class _Parser(argparse.ArgumentParser):
    """argparse that prints one line and exits 2 on a usage error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The top-level parser; only the subcommand named in ``argv`` has its module imported."""
    parser = _Parser(
        prog="promptcache",
        description="Make LLM prompt caches hit: lint, serve a local engine, report cost.",
    )

    parser.add_argument("--version", action="version", version=f"promptcache {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    argv_cmd = _command(argv)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        # Only import the module whose arguments are needed (keeps `lint` free of torch).
        if argv_cmd == name:
            mod = importlib.import_module(module)
            mod.add_arguments(p)
            p.set_defaults(_run=mod.run)
    return parser


def _command(argv: list[str]) -> str | None:
    """The subcommand named in ``argv``: its first word that is not an option."""
    return next((a for a in argv if not a.startswith("-")), None)


def _warning_line(message, category, filename, lineno, file=None, line=None) -> None:  # type: ignore[no-untyped-def]
    """A warning as one line on stderr (``promptcache: warning: ...``), not Python's
    ``file:line: Category: text`` with a source line: the CLI's user did not write that file."""
    text = str(message)
    if text.startswith("promptcache: "):
        text = text[len("promptcache: ") :]
    print(f"promptcache: warning: {text}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``promptcache`` console script; returns the exit code."""
    with warnings.catch_warnings():
        warnings.showwarning = _warning_line
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command(argv)
    extra = REQUIRES_EXTRA.get(command or "")
    missing = missing_modules(extra) if extra else []
    if extra and missing:
        print(needs_extra_line(str(command), extra, missing), file=sys.stderr)
        return 2
    try:
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        if not getattr(args, "_run", None):
            parser.print_help()
            return 2
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        # a module an optional extra installs: say which extra, in one line; anything else
        # (a module of this package missing) is a broken install and keeps its traceback
        needed = extra_for_module(exc.name or "", prefer=COMMAND_EXTRA.get(command or ""))
        if needed is None or command is None:
            raise
        print(needs_extra_line(command, needed, [str(exc.name)]), file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
