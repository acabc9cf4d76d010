"""Lines per second of ``promptcache lint`` on one core, against parsing alone and pcdlint.

Usage::

    .venv/bin/python bench/lint_speed.py [--packages openai anthropic ...] [--repeat 3]

The tree is a copy of real packages from this virtual environment's site-packages (default:
openai, anthropic, networkx, pygments, huggingface_hub, rich, jinja2, fastapi -- about
0.9 million lines, two of them LLM SDKs full of ``messages``/``system``/``tools``, the worst
case for the linter's word gate) in a temporary folder, so that no tool skips it as
``site-packages`` and no ``.gitignore`` applies. Three commands run on that tree, each
pinned to one core with ``taskset -c 0`` (when available), best of ``--repeat`` runs,
whole process wall time (interpreter start-up included):

- ``python -m py_compile -`` (file names on stdin, ``PYTHONPYCACHEPREFIX`` in a temporary
  folder): the floor of parsing and compiling alone;
- ``python -m linters --isolated --format json TREE``;
- ``pcdlint --format json TREE`` (https://pypi.org/project/pcdlint/), the nearest
  published peer.

Targets (issue 8): >= 50,000 lines/s, at most 3x the time of py_compile, at least 1.5x the
speed of pcdlint. Timings are not asserted anywhere; this script prints a table.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PACKAGES = [
    "openai",
    "anthropic",
    "networkx",
    "pygments",
    "huggingface_hub",
    "rich",
    "jinja2",
    "fastapi",
]


def build_tree(dest: Path, packages: list[str], source: Path | None = None) -> tuple[int, int]:
    site = source or Path(sysconfig.get_paths()["purelib"])
    files = lines = 0
    for name in packages:
        src = site / name
        if not src.is_dir():
            raise SystemExit(f"lint_speed: package {name!r} is not installed in {site}")
        for path in src.rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            target = dest / path.relative_to(site)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = path.read_bytes()
            target.write_bytes(data)
            files += 1
            lines += data.count(b"\n")
    return files, lines


def timed(
    cmd: list[str], *, stdin: bytes | None = None, env: dict | None = None, ok=(0, 1)
) -> tuple[float, int]:
    t0 = time.perf_counter()
    res = subprocess.run(
        cmd, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    dt = time.perf_counter() - t0
    if res.returncode not in ok:
        raise SystemExit(
            f"lint_speed: {' '.join(cmd[:4])} ... exited {res.returncode}: "
            f"{res.stderr.decode(errors='replace')[-400:]}"
        )
    return dt, res.returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--packages", nargs="+", default=DEFAULT_PACKAGES)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--source",
        type=Path,
        default=None,
        help="folder holding the packages (default: this interpreter's site-packages)",
    )
    ap.add_argument(
        "--pcdlint",
        default=None,
        help="command that runs pcdlint (default: the pcdlint script next to python)",
    )
    args = ap.parse_args(argv)

    py = sys.executable
    if args.pcdlint:
        pcd_cmd = args.pcdlint.split()
    else:
        exe = shutil.which("pcdlint") or str(Path(py).with_name("pcdlint"))
        pcd_cmd = [exe] if Path(exe).exists() else None
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    with tempfile.TemporaryDirectory(prefix="lint_speed_") as tmp:
        tree = Path(tmp) / "tree"
        files, lines = build_tree(tree, args.packages, args.source)
        names = "\n".join(str(p) for p in sorted(tree.rglob("*.py"))).encode() + b"\n"
        pycache = Path(tmp) / "pycache"
        env = dict(os.environ, PYTHONPYCACHEPREFIX=str(pycache), PYTHONDONTWRITEBYTECODE="")
        lint_env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        lint_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
        )
        runs = {
            "py_compile": lambda: timed(pin + [py, "-m", "py_compile", "-"], stdin=names, env=env),
            "promptcache lint": lambda: timed(
                pin + [py, "-m", "linters", "--isolated", "--format", "json", str(tree)],
                env=lint_env,
            ),
        }
        if pcd_cmd:
            runs["pcdlint"] = lambda: timed(
                pin + pcd_cmd + ["--format", "json", str(tree)], ok=(0, 1, 2)
            )
        best: dict[str, float] = {}
        for _ in range(args.repeat):
            for name, run in runs.items():  # interleaved, so load changes hit all tools alike
                if name == "py_compile":
                    shutil.rmtree(pycache, ignore_errors=True)
                dt, _rc = run()
                best[name] = min(best.get(name, dt), dt)

    print(
        f"lint speed, {_dt.date.today()}, {platform.python_implementation()} "
        f"{platform.python_version()}, {'one core (taskset -c 0)' if pin else 'no taskset'}, "
        f"best of {args.repeat}"
    )
    print(f"tree: {files} files, {lines} lines ({', '.join(args.packages)})")
    print(f"{'tool':18} {'seconds':>8} {'lines/s':>10} {'vs py_compile':>14} {'vs pcdlint':>11}")
    for name, dt in best.items():
        vs_parse = f"{dt / best['py_compile']:.2f}x time"
        vs_pcd = f"{best['pcdlint'] / dt:.2f}x speed" if "pcdlint" in best else "n/a"
        print(f"{name:18} {dt:8.2f} {lines / dt:10,.0f} {vs_parse:>14} {vs_pcd:>11}")
    ours = best["promptcache lint"]
    checks = [
        ("lines/s >= 50,000", lines / ours >= 50_000),
        ("time <= 3x py_compile", ours <= 3 * best["py_compile"]),
    ]
    if "pcdlint" in best:
        checks.append(("speed >= 1.5x pcdlint", best["pcdlint"] / ours >= 1.5))
    print("targets: " + "; ".join(f"{label}: {'met' if ok else 'NOT met'}" for label, ok in checks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
