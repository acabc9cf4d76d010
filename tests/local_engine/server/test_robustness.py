"""Isolation and safety: tenant salts, API keys, the body limit, client disconnects (the
request is aborted and its KV blocks freed: the KV metrics return to their idle values),
/metrics, the per-request log line, and the CLI's one-line errors."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid

import anthropic
import httpx
import openai
import pytest

KEY = "sk-local-" + "x" * 16


@pytest.fixture(scope="module")
def server(server_factory):
    return server_factory()


@pytest.fixture(scope="module")
def locked(server_factory):
    return server_factory(
        "automatic", api_key=KEY, extra_args=["--max-body-bytes", "4096", "--log-prompts"]
    )


def kv(server) -> tuple[float, float, float]:
    m = server.metrics()
    return (
        m["promptcache_kv_cache_blocks_used"],
        m["promptcache_num_requests_running"],
        m["promptcache_num_requests_waiting"],
    )


def wait_idle(server, idle, timeout=30.0):
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        seen = kv(server)
        if seen == idle:
            return seen
        time.sleep(0.2)
    raise AssertionError(f"KV usage did not return to idle {idle}: {seen}")


# ---------------------------------------------------------------------------- tenants


def test_cache_salt_isolates_tenants(server):
    c = server.openai_client(max_retries=0, timeout=120)
    msgs = [
        {"role": "system", "content": f"[{uuid.uuid4().hex}] You are a shop assistant."},
        {"role": "user", "content": "Tell me about the shop's return policy for kettles."},
    ]

    def cached(**kw):
        r = c.chat.completions.create(model="local", messages=msgs, max_tokens=1, **kw)
        return r.usage.prompt_tokens_details.cached_tokens

    assert cached() == 0
    assert cached() > 0  # the same tenant hits
    assert cached(extra_headers={"X-Cache-Salt": "tenant-b"}) == 0  # another tenant never does
    assert cached(extra_headers={"X-Cache-Salt": "tenant-b"}) > 0
    assert cached(extra_body={"cache_salt": "tenant-c"}) == 0  # the body field works too


# ---------------------------------------------------------------------------- disconnects


COUNTING = "Counting: " + ", ".join(str(i) for i in range(1, 21)) + ","


def test_stream_disconnect_aborts_and_frees_blocks(server):
    idle = wait_idle(server, kv(server))
    assert idle[1:] == (0.0, 0.0)
    # greedy continuation of a count: hundreds of tokens, no early end of text
    body = {
        "model": "local",
        "max_tokens": 400,
        "stream": True,
        "temperature": 0,
        "prompt": f"[{uuid.uuid4().hex}] {COUNTING}",
    }
    with httpx.stream("POST", server.openai_base_url + "/completions", json=body, timeout=120) as r:
        lines = 0
        busy = None
        for line in r.iter_lines():  # (leaving this loop closes the stream: measure inside it)
            if line.startswith("data: "):
                assert '"finish_reason":null' in line, line
                lines += 1
            if lines >= 3:
                busy = kv(server)
                break
        assert busy[0] > idle[0] and busy[1] == 1.0  # the request holds blocks while running
    # the connection is closed here; the server aborts the request
    wait_idle(server, idle)
    assert "finish=client_disconnected" in server.log_text()


def test_non_streaming_disconnect_aborts_and_frees_blocks(server):
    idle = wait_idle(server, kv(server))
    body = {
        "model": "local",
        "max_tokens": 400,
        "temperature": 0,
        "prompt": f"[{uuid.uuid4().hex}] {COUNTING}",
    }
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            server.openai_base_url + "/completions", json=body, timeout=httpx.Timeout(120, read=1.5)
        )
    wait_idle(server, idle)


def test_anthropic_stream_disconnect_frees_blocks(server):
    idle = wait_idle(server, kv(server))
    body = {
        "model": "m",
        "max_tokens": 400,
        "stream": True,
        "temperature": 0,
        "messages": [
            {"role": "user", "content": f"[{uuid.uuid4().hex}] Count to 300."},
            {"role": "assistant", "content": COUNTING},
        ],
    }
    with httpx.stream("POST", server.base_url + "/v1/messages", json=body, timeout=120) as r:
        running = None
        for line in r.iter_lines():
            if "content_block_delta" in line:
                running = kv(server)[1]
                break
        assert running == 1.0
    wait_idle(server, idle)


# ---------------------------------------------------------------------------- metrics and logs


def test_metrics_exposition(server):
    c = server.openai_client(max_retries=0, timeout=120)
    c.chat.completions.create(
        model="local", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
    )
    m = server.metrics()
    assert m['promptcache_requests_total{endpoint="/v1/chat/completions",status="200"}'] >= 1
    assert m["promptcache_time_to_first_token_seconds_count"] >= 1
    assert m["promptcache_inter_token_latency_seconds_count"] >= 1
    assert 0.0 <= m["promptcache_prefix_cache_hit_rate"] <= 1.0
    assert (
        m["promptcache_prefix_cache_hits_tokens_total"]
        <= m["promptcache_prefix_cache_queries_tokens_total"]
    )
    assert m["promptcache_kv_cache_blocks_total"] == 512
    assert 0.0 <= m["promptcache_kv_cache_usage_ratio"] <= 1.0
    text = httpx.get(server.base_url + "/metrics").text
    assert "# TYPE promptcache_time_to_first_token_seconds histogram" in text
    # the KV format: kv_cache_dtype auto on the CPU is the float32 model dtype
    assert 'promptcache_kv_cache_info{block_size="16",dtype="float32"} 1.0' in text, [
        line for line in text.splitlines() if "kv_cache" in line
    ]


def test_one_log_line_per_request_without_prompt_text(server):
    secret = "zebra-" + uuid.uuid4().hex
    c = server.openai_client(max_retries=0, timeout=120)
    r = c.chat.completions.create(
        model="local", messages=[{"role": "user", "content": f"Remember {secret}"}], max_tokens=1
    )
    time.sleep(0.3)
    log = server.log_text()
    assert secret not in log
    lines = [ln for ln in log.splitlines() if r.id in ln]
    assert len(lines) == 1
    assert "POST /v1/chat/completions 200" in lines[0] and "prompt_tokens=" in lines[0]


# ---------------------------------------------------------------------------- auth and limits


def test_api_key_required(locked):
    bad = openai.OpenAI(base_url=locked.openai_base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.models.list()
    assert e.value.status_code == 401 and "API key" in e.value.body["message"]
    good = locked.openai_client(max_retries=0, timeout=120)
    assert (
        good.chat.completions.create(
            model="local", messages=[{"role": "user", "content": "Hi there, owl"}], max_tokens=1
        ).usage.completion_tokens
        == 1
    )
    time.sleep(0.3)
    assert "Hi there, owl" in locked.log_text()  # --log-prompts puts the prompt in the log line
    ab = anthropic.Anthropic(base_url=locked.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        ab.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "Hi"}])
    assert e.value.body["error"]["type"] == "authentication_error"
    r = httpx.post(
        locked.base_url + "/v1/messages",
        headers={"x-api-key": KEY},
        json={"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]},
        timeout=60,
    )
    assert r.status_code == 200
    assert httpx.get(locked.base_url + "/health").status_code == 200  # health needs no key
    assert httpx.get(locked.base_url + "/metrics").status_code == 401


def test_body_limit(locked):
    big = {"model": "local", "messages": [{"role": "user", "content": "x" * 5000}]}
    r = httpx.post(
        locked.openai_base_url + "/chat/completions",
        json=big,
        headers={"authorization": f"Bearer {KEY}"},
    )
    assert r.status_code == 413 and "4096" in r.json()["error"]["message"]
    r = httpx.post(
        locked.base_url + "/v1/messages", json={**big, "max_tokens": 1}, headers={"x-api-key": KEY}
    )
    assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"

    def chunks():  # no Content-Length: the limit is enforced while reading
        data = json.dumps(big).encode()
        for i in range(0, len(data), 1000):
            yield data[i : i + 1000]

    r = httpx.post(
        locked.openai_base_url + "/chat/completions",
        content=chunks(),
        headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"},
    )
    assert r.status_code == 413


# ---------------------------------------------------------------------------- CLI


def _serve(*args, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "promptcache", "serve", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_cli_port_in_use_is_one_line_exit_2():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        p = _serve("--port", str(port))
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"promptcache serve: error: port {port} on 127.0.0.1 is already in use; pick another with --port"
    ]
    assert "Traceback" not in p.stderr


def test_cli_missing_model_is_one_line_exit_2(tmp_path):
    p = _serve("--model", str(tmp_path / "nope.gguf"), "--port", "0")
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "nope.gguf" in lines[0] and "does not exist" in lines[0]


def test_cli_bad_option_is_exit_2():
    p = _serve("--cache-mode", "sometimes")
    assert p.returncode == 2 and "Traceback" not in p.stderr


# ---------------------------------------------------------------------------- SIGTERM (last: stops `locked`)


def test_sigterm_drains_in_flight_requests_then_exits(locked):
    import signal

    body = {
        "model": "local",
        "max_tokens": 30,
        "stream": True,
        "temperature": 0,
        "prompt": f"[{uuid.uuid4().hex}] {COUNTING}",
    }
    lines = []
    refused = False
    with httpx.stream(
        "POST",
        locked.openai_base_url + "/completions",
        json=body,
        headers={"authorization": f"Bearer {KEY}"},
        timeout=120,
    ) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                lines.append(line)
                if len(lines) == 2:
                    locked.proc.send_signal(signal.SIGTERM)
                    deadline = time.monotonic() + 5
                    while time.monotonic() < deadline and not refused:  # no new connections
                        try:
                            httpx.get(locked.base_url + "/health", timeout=1)
                        except httpx.TransportError:
                            refused = True
                        time.sleep(0.1)
    assert refused
    assert lines[-1] == "data: [DONE]"
    finish = json.loads(lines[-2][6:])["choices"][0]["finish_reason"]
    assert finish == "length"  # the in-flight request ran to its end
    text = "".join(json.loads(x[6:])["choices"][0]["text"] for x in lines[:-1])
    assert len(text) > 10
    assert locked.proc.wait(60) == 0
