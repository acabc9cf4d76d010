"""``promptcache serve --speculative ... --num-speculative-tokens K``: bad values exit 2 with one
line naming the fix, before anything is loaded or bound."""

from __future__ import annotations

import argparse

import pytest

from local_engine.server import cli
from local_engine.spec_decode.config import SpeculativeConfig


def parse(*argv):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--speculative", "medusa"), "--speculative must be 'ngram', 'draft:PATH' or 'layers:N'"),
        (("--num-speculative-tokens", "3"), "--num-speculative-tokens needs --speculative"),
        (("--speculative", "ngram", "--num-speculative-tokens", "0"), r"1\.\.32"),
    ],
)
def test_bad_speculative_options_exit_2(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(cli, "bind_socket", lambda *a: pytest.fail("bound a socket"))
    assert cli.run(parse(*argv)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("promptcache serve: error: ")
    assert pytest.importorskip("re").search(message, err)


def test_good_options_reach_the_engine_config(monkeypatch):
    seen = {}

    class Stop(Exception):
        pass

    def fake_serve(args, sock):
        seen["spec"] = args.speculative_config
        raise Stop

    monkeypatch.setattr(cli, "_serve", fake_serve)
    monkeypatch.setattr(cli, "bind_socket", lambda *a: type("S", (), {"close": lambda s: None})())
    with pytest.raises(Stop):
        cli.run(parse("--speculative", "ngram", "--num-speculative-tokens", "6"))
    assert seen["spec"] == SpeculativeConfig("ngram", 6)
    with pytest.raises(Stop):
        cli.run(parse("--speculative", "draft:/models/small"))
    assert seen["spec"] == SpeculativeConfig("draft", 4, model="/models/small")
