"""``promptcache kv-plan`` as a new user types it (issue 17): units in ``--context`` and
``--memory``, the ``--kv-dtype`` choices in ``--help``, weights that alone do not fit said
so, and the headroom kept for activations stated."""

from __future__ import annotations

import json
import re

import pytest

from promptcache.cli import main


def _json(capsys, *args: str) -> dict:
    assert main(["kv-plan", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "text, tokens",
    [("128k", 131_072), ("128K", 131_072), ("4096", 4096), ("1.5k", 1536), ("1M", 1_048_576)],
)
def test_context_accepts_units(capsys, text, tokens):
    assert _json(capsys, "--model", "llama3-8b", "--context", text)["context"] == tokens


def test_bad_context_and_memory_are_one_line_exit_2(capsys):
    for args in (["--context", "lots"], ["--context", "4k", "--memory", "eighty"]):
        assert main(["kv-plan", "--model", "mistral", *args]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.startswith("promptcache kv-plan")


def test_memory_accepts_units_as_context_does(capsys):
    a = _json(capsys, "--model", "llama3-8b", "--context", "4k", "--memory", "80GiB")
    b = _json(capsys, "--model", "llama3-8b", "--context", "4096", "--memory", str(80 * 2**30))
    assert a["memory"] == b["memory"] == 80 * 2**30


def test_kv_dtype_choices_are_in_help(capsys):
    with pytest.raises(SystemExit):
        main(["kv-plan", "--help"])
    out = capsys.readouterr().out
    for dtype in ("bf16", "fp16", "fp8", "int8", "fp32"):
        assert dtype in out
    assert "128k" in out and "headroom" in out


def test_headroom_for_activations_is_kept_and_stated(capsys):
    # llama-3-8b, 4,096 tokens x 32, 80 GiB: 10% headroom -> 77,309,411,328 B usable;
    # weights 8,030,261,248 params x 2 B = 16,060,522,496 B -> 61,248,888,832 B for KV;
    # a block is 16 tokens x 131,072 B = 2,097,152 B -> 29,205 blocks; a request is 256
    # blocks -> 114 requests (without headroom it would be 130)
    d = _json(
        capsys, "--model", "llama3-8b", "--context", "4096", "--batch", "32", "--memory", "80GiB"
    )
    assert d["headroom_bytes"] == 8 * 2**30  # 10% of 80 GiB
    assert d["kv_blocks"] == 29_205 and d["max_requests"] == 114
    assert main(["kv-plan", "--model", "llama3-8b", "--context", "4k", "--memory", "80GiB"]) == 0
    text = capsys.readouterr().out
    line = next(x for x in text.splitlines() if x.startswith("headroom"))
    assert "10%" in line and "activations" in line
    d0 = _json(
        capsys,
        *("--model", "llama3-8b", "--context", "4096", "--batch", "32"),
        *("--memory", "80GiB", "--headroom", "0"),
    )
    assert d0["max_requests"] == 130


def test_weights_that_alone_do_not_fit_say_so(capsys):
    # llama-3-70b in bf16: 70,553,706,496 params x 2 B = 141 GB > 72 GiB usable of 80 GiB
    assert main(["kv-plan", "--model", "llama-3-70b", "--context", "4k", "--memory", "80GiB"]) == 0
    text = capsys.readouterr().out
    assert "weights alone" in text and "do not fit" in text
    line = next(x for x in text.splitlines() if x.startswith("left after weights"))
    assert not re.search(r"-\d", line), line  # no negative remainder
    d = _json(capsys, "--model", "llama-3-70b", "--context", "4k", "--memory", "80GiB")
    assert d["weights_fit"] is False and d["max_requests"] == 0


@pytest.mark.parametrize("batch, label", [("1", "(1 request)"), ("4", "(4 requests)")])
def test_batch_label_is_singular_for_one_request(capsys, batch, label):
    assert main(["kv-plan", "--model", "llama3-8b", "--context", "4k", "--batch", batch]) == 0
    assert f"KV for the batch {label}" in capsys.readouterr().out
