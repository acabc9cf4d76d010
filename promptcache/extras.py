"""Optional extras: which extra provides a module, whether an extra is installed, and the one
line a command prints when it needs one that is not (exit code 2).

The extras are declared in ``pyproject.toml`` (``[project.optional-dependencies]``); the tables
below name the *import* names of their distributions (``prometheus-client`` imports as
``prometheus_client``) and are checked against ``pyproject.toml`` by
``tests/promptcache/test_extras.py``. Looking a module up uses :func:`importlib.util.find_spec`,
which imports nothing (``promptcache --help`` stays light).
"""

from __future__ import annotations

import importlib.util

#: extra -> import names of the distributions it installs (pyproject.toml, same order)
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "engine": (
        "torch",
        "numpy",
        "fastapi",
        "uvicorn",
        "gguf",
        "tokenizers",
        "jinja2",
        "safetensors",
        "prometheus_client",
        "openai",
        "anthropic",
        "httpx",
        "llguidance",
        "ninja",
    ),
    "gpu": ("triton",),
    "frameworks": ("langchain_openai", "langchain_anthropic", "agents", "pydantic_ai", "litellm"),
    "proxy": ("httpx", "starlette", "uvicorn", "aiohttp", "httptools", "uvloop"),
    "prometheus": ("prometheus_client",),
    "otel": ("opentelemetry",),
    "postgres": ("psycopg",),
}

#: Modules an extra brings in as dependencies of its own packages (fastapi needs pydantic and
#: starlette), so that a missing one names the extra that installs it.
_INDIRECT: dict[str, str] = {"pydantic": "engine", "starlette": "engine"}


def _smallest_extra_by_module() -> dict[str, str]:
    """Module -> the smallest extra that installs it (``prometheus_client`` -> ``prometheus``,
    not ``engine``), plus :data:`_INDIRECT`."""
    out = dict(_INDIRECT)
    for extra, modules in sorted(EXTRA_MODULES.items(), key=lambda kv: -len(kv[1])):
        out.update(dict.fromkeys(modules, extra))
    return out


_MODULE_EXTRA = _smallest_extra_by_module()


def extra_for_module(name: str, prefer: str | None = None) -> str | None:
    """The extra whose install provides the module ``name`` (dotted; its top-level package is
    looked up): ``prefer`` (a command's own extra) when it installs the module, else the
    smallest extra that does, or None for a module no extra installs."""
    top = name.partition(".")[0]
    if prefer is not None and (top in EXTRA_MODULES[prefer] or _INDIRECT.get(top) == prefer):
        return prefer
    return _MODULE_EXTRA.get(top)


def missing_modules(extra: str) -> list[str]:
    """The import names of ``extra``'s packages that cannot be found (empty: installed).

    Raises KeyError for an extra not in :data:`EXTRA_MODULES`."""
    return [m for m in EXTRA_MODULES[extra] if importlib.util.find_spec(m) is None]


def needs_extra_line(command: str, extra: str, missing: list[str]) -> str:
    """The one line (no newline) ``promptcache COMMAND`` prints when ``extra`` is missing."""
    what = ", ".join(missing)
    return (
        f"promptcache {command}: error: needs the {extra} extra ({what} not installed): "
        f"pip install 'promptcache[{extra}]'"
    )
