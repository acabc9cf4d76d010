"""Real agent CLIs through ``promptcache proxy -- <cli>``, three turns each, against the local
engine; what the CLI sent, what the ledger holds, what its own transcript says.

    PYTHONPATH=. python bench/agent_clis.py [--clis claude,codex,gemini,opencode]
        [--prefix /tmp/clis] [--work /tmp/agent_clis] [--layers 2] [--eos-every 12]

Chain per CLI: CLI -> ``promptcache proxy --upstream RELAY -- CLI ...`` (one proxy per turn,
as a user runs it) -> ``bench/proxy_capture.py`` (logs each call the proxy forwarded: path,
status, body hash; no header values) -> ``promptcache serve`` (SmolLM2's tokenizer and shape
with ``--layers`` layers of random weights, answers ending after about ``--eos-every`` tokens:
``bench/proxy_engine_model.py``; agent CLIs send 6-30k-token prompts, which the real model
prefills in minutes on 2 CPU cores, and the text does not matter, the traffic does).

The CLIs (npm packages, installed into ``--prefix`` when missing; versions printed) get a
dummy API key, telemetry off, and ``HOME`` (``CODEX_HOME``) in ``--work`` so that their
transcripts land there. Claude Code and Codex transcripts are then imported with
``promptcache import`` and compared with the proxy's ledger call by call (same usage, same
count). Each CLI's base-URL setting, and why, is in docs/proxy.md. Prints one table per CLI.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
KEY = "dummy-key-not-a-secret"
TURNS = ("Say hello in one word.", "Now say goodbye.", "And thanks.")
#: The project memory file each CLI reads into its prompt; it is written before the third turn,
#: as a user adding project rules mid-session would: the proxy should name where the cached
#: prefix broke (documented: Claude Code's "Manage Claude's memory", Codex's and OpenCode's
#: AGENTS.md, Gemini CLI's GEMINI.md context files).
MEMORY_FILE = {
    "claude": "CLAUDE.md",
    "codex": "AGENTS.md",
    "gemini": "GEMINI.md",
    "opencode": "AGENTS.md",
}
MEMORY_TEXT = "# Project rules\n\nAnswer in one short sentence. Never use tools.\n"
PACKAGES = {
    "claude": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "gemini": "@google/gemini-cli",
    "opencode": "opencode-ai",
}


def free_port() -> int:
    """A TCP port on 127.0.0.1 free at the time of the call."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 300.0) -> None:
    """Wait until ``url`` answers below HTTP 500; RuntimeError after ``timeout`` seconds."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status < 500:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer in {timeout:.0f} s")


def start(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``cmd`` in the background, stdout and stderr into the file ``log``."""
    return subprocess.Popen(
        cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env or os.environ.copy()
    )


def ensure_clis(prefix: Path, names: list[str]) -> dict[str, str]:
    """Install missing CLIs into ``prefix``; returns name -> ``--version`` output."""
    missing = [PACKAGES[n] for n in names if not (prefix / "node_modules/.bin" / n).exists()]
    if missing:
        subprocess.run(["npm", "install", "--prefix", str(prefix), *missing], check=True)
    out = {}
    for n in names:
        r = subprocess.run(
            [str(prefix / "node_modules/.bin" / n), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        out[n] = (r.stdout or r.stderr).strip().splitlines()[-1] if r.stdout or r.stderr else "?"
    return out


def cli_turns(name: str, home: Path, port: int) -> tuple[list[list[str]], dict[str, str]]:
    """The three turns' commands and the environment of CLI ``name`` (proxy on ``port``)."""
    env = {"HOME": str(home), "NO_COLOR": "1"}
    if name == "claude":
        env |= {
            "ANTHROPIC_API_KEY": KEY,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
        }
        m = ["--model", "claude-sonnet-4-5-20250929"]
        return [["claude", "-p", *m, TURNS[0]]] + [
            ["claude", "-p", "--continue", *m, q] for q in TURNS[1:]
        ], env
    if name == "codex":
        env |= {"CODEX_HOME": str(home / ".codex"), "OPENAI_API_KEY": KEY}
        (home / ".codex").mkdir(parents=True, exist_ok=True)
        provider = (
            'model_providers.pc={name="promptcache proxy",'
            f'base_url="http://127.0.0.1:{port}/v1",env_key="OPENAI_API_KEY",wire_api="responses"}}'
        )
        opts = ["--skip-git-repo-check", "-m", "gpt-5.4", "--disable", "multi_agent"]
        opts += ["-c", 'web_search="disabled"', "-c", provider, "-c", "model_provider=pc"]
        return [["codex", "exec", *opts, TURNS[0]]] + [
            ["codex", "exec", *opts, "resume", "--last", q] for q in TURNS[1:]
        ], env
    if name == "gemini":
        env |= {"GEMINI_API_KEY": KEY, "GEMINI_CLI_TRUST_WORKSPACE": "true"}
        (home / ".gemini").mkdir(parents=True, exist_ok=True)
        settings = {
            "privacy": {"usageStatisticsEnabled": False},
            "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True},
            "security": {"auth": {"selectedType": "gemini-api-key"}},
        }
        (home / ".gemini/settings.json").write_text(json.dumps(settings))
        return [["gemini", "-p", TURNS[0]]] + [
            ["gemini", "--resume", "latest", "-p", q] for q in TURNS[1:]
        ], env
    if name == "opencode":
        env |= {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1"}
        return [["opencode", "run", TURNS[0]]] + [
            ["opencode", "run", "--continue", q] for q in TURNS[1:]
        ], env
    raise ValueError(name)


def opencode_config(work: Path, port: int) -> None:
    """Write OpenCode's config into ``work``: the anthropic provider's base URL is the proxy on
    ``port``."""
    cfg = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": "anthropic/claude-sonnet-4-5-20250929",
        "provider": {
            "anthropic": {"options": {"baseURL": f"http://127.0.0.1:{port}/v1", "apiKey": KEY}}
        },
    }
    (work / "opencode.json").write_text(json.dumps(cfg, indent=1))


def ledger_rows(db: Path) -> list[dict[str, Any]]:
    """The proxy's ledger records in ``db``, oldest first, as dicts (none when the file is absent)."""
    from promptcache import Tracker

    if not db.exists():
        return []
    t = Tracker(str(db))
    try:
        return [
            {
                "model": r.model,
                "lineage": r.lineage,
                "cause": r.miss_cause,
                "path": r.miss_path,
                "uncached": r.usage.uncached_input_tokens,
                "read": r.usage.cache_read_tokens,
                "written": r.usage.cache_write_tokens,
                "output": r.usage.output_tokens,
            }
            for r in t.records()
        ]
    finally:
        t.close()


def import_rows(kind: str, path: Path, db: Path) -> tuple[list[dict[str, Any]], str]:
    """``promptcache import KIND PATH`` into ``db``: the records it wrote and the command's output
    line."""
    if not path.exists():
        return [], f"{path}: no transcript"
    r = subprocess.run(
        [PY, "-m", "promptcache", "import", kind, str(path), "--db", str(db)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    return ledger_rows(db), (r.stdout + r.stderr).strip()


def run_cli(name: str, work: Path, engine: str, prefix: Path) -> dict[str, Any]:
    """Three turns of CLI ``name`` through ``promptcache proxy`` and a byte-counting relay to
    ``engine``; the turns, the calls sent and the ledger."""
    d = work / name
    shutil.rmtree(d, ignore_errors=True)
    (d / "home").mkdir(parents=True)
    (d / "cwd").mkdir()
    relay_port, proxy_port = free_port(), free_port()
    relay = start(
        [
            PY,
            str(ROOT / "bench/proxy_capture.py"),
            "--port",
            str(relay_port),
            "--upstream",
            engine,
            "--out",
            str(d / "sent"),
        ],
        d / "relay.log",
    )
    turns, cli_env = cli_turns(name, d / "home", proxy_port)
    if name == "opencode":
        opencode_config(d / "cwd", proxy_port)
    env = {
        **os.environ,
        **cli_env,
        "PATH": f"{prefix / 'node_modules/.bin'}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "PWD": str(d / "cwd"),  # OpenCode finds opencode.json from $PWD, not the real cwd
    }
    results = []
    try:
        wait_http(f"http://127.0.0.1:{relay_port}/health", 30)
        for i, cmd in enumerate(turns):
            if i == 2:
                (d / "cwd" / MEMORY_FILE[name]).write_text(MEMORY_TEXT)
            t0 = time.time()
            proxy = [PY, "-m", "promptcache", "proxy", "--port", str(proxy_port)]
            proxy += ["--upstream", f"http://127.0.0.1:{relay_port}", "--db", str(d / "ledger.db")]
            r = subprocess.run(
                [*proxy, "--", *cmd],
                cwd=d / "cwd",
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            lines = [x for x in (r.stdout + r.stderr).splitlines() if x.strip()]
            results.append(
                {
                    "cmd": " ".join(cmd[:4]),
                    "rc": r.returncode,
                    "s": round(time.time() - t0, 1),
                    "answer": (r.stdout.strip().splitlines() or [""])[-1][:60],
                    "proxy_line": next(
                        (x for x in lines if x.startswith("promptcache proxy:")), ""
                    ),
                }
            )
            (d / f"turn{len(results)}.log").write_text(r.stdout + "\n--- stderr\n" + r.stderr)
    finally:
        relay.terminate()
        relay.wait(10)
    sent = []
    if (d / "sent/calls.jsonl").exists():
        sent = [json.loads(x) for x in (d / "sent/calls.jsonl").read_text().splitlines()]
    out = {"turns": results, "sent": sent, "ledger": ledger_rows(d / "ledger.db")}
    if name == "claude":
        out["import"] = import_rows("claude-code", d / "home/.claude/projects", d / "import.db")
    elif name == "codex":
        out["import"] = import_rows("codex", d / "home/.codex/sessions", d / "import.db")
    return out


def print_cli(name: str, version: str, res: dict[str, Any]) -> None:
    """Print one CLI's tables (turns; calls and the ledger's causes) from :func:`run_cli`'s result."""
    print(f"\n### {name} ({version}); {MEMORY_FILE[name]} written before turn 3\n")
    print("| turn | command | exit | s | proxy's exit line |")
    print("|---|---|---|---|---|")
    for i, t in enumerate(res["turns"], 1):
        print(f"| {i} | `{t['cmd']} ...` | {t['rc']} | {t['s']} | {t['proxy_line']} |")
    by: dict[tuple[str, str, int], int] = {}
    for c in res["sent"]:
        key = (c["method"], c["path"].split("?")[0], c["status"])
        by[key] = by.get(key, 0) + 1
    sent = ", ".join(f"{n} x {m} {p} -> {s}" for (m, p, s), n in sorted(by.items()))
    print(f"\nforwarded upstream: {sent or 'nothing'}")
    print(f"ledger: {len(res['ledger'])} record(s)")
    print("\n| # | model | lineage | cause | path | uncached | read | written | output |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(res["ledger"], 1):
        print(
            f"| {i} | {r['model']} | {r['lineage']} | {r['cause']} | {r['path'] or '-'} | "
            f"{r['uncached']} | {r['read']} | {r['written']} | {r['output']} |"
        )
    if "import" in res:
        rows, msg = res["import"]
        print(f"\ntranscript import: {msg.splitlines()[0] if msg else ''}")
        key = ("model", "uncached", "read", "written", "output")
        same = [tuple(r[k] for k in key) for r in rows] == [
            tuple(r[k] for k in key) for r in res["ledger"]
        ]
        print(
            f"transcript vs proxy ledger, call by call (model and usage): {'same' if same else 'DIFFERENT'}"
        )
        if not same:
            for r in rows:
                print("  import:", {k: r[k] for k in (*key, "cause")})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clis", default="claude,codex,gemini,opencode")
    ap.add_argument("--prefix", type=Path, default=Path("/tmp/clis"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/agent_clis"))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--eos-every", type=int, default=12)
    ap.add_argument("--engine-url", help="use this running engine instead of starting one")
    a = ap.parse_args()
    names = [n.strip() for n in a.clis.split(",") if n.strip()]
    a.work.mkdir(parents=True, exist_ok=True)
    versions = ensure_clis(a.prefix, names)
    engine_proc = None
    engine = a.engine_url
    if engine is None:
        model = a.work / "model"
        bench = ROOT / "bench/proxy_engine_model.py"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run(
            [PY, str(bench), "prepare", "--dir", str(model), "--layers", str(a.layers)],
            check=True,
            env=env,
        )
        subprocess.run(
            [PY, str(bench), "weights", "--dir", str(model), "--eos-every", str(a.eos_every)],
            check=True,
            env=env,
        )
        port = free_port()
        engine_proc = start(
            [PY, "-m", "promptcache", "serve", "--model", str(model), "--port", str(port)]
            + ["--max-model-len", "65536"],
            a.work / "engine.log",
            env,
        )
        engine = f"http://127.0.0.1:{port}"
        wait_http(engine + "/health", 600)
    print(
        f"# agent CLIs through promptcache proxy ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})"
    )
    print(
        f"upstream: {engine}; node {subprocess.run(['node', '--version'], capture_output=True, text=True).stdout.strip()}"
    )
    try:
        for n in names:
            print_cli(n, versions[n], run_cli(n, a.work, engine, a.prefix))
            sys.stdout.flush()
    finally:
        if engine_proc is not None:
            engine_proc.terminate()
            engine_proc.wait(60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
