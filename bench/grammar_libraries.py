"""Grammar libraries on this model's vocabulary: compile time and per-token mask time of
llguidance and xgrammar for one JSON schema (the comparison behind
``local_engine/structured.py``'s choice; ``bench/RESULTS.md`` "## engine-api").

    XGRAMMAR_PATH=/tmp/xg PYTHONPATH=. python bench/grammar_libraries.py

xgrammar is not a project dependency: install it elsewhere (``pip install --target
/tmp/xg xgrammar``) and point ``XGRAMMAR_PATH`` there.
"""

from __future__ import annotations

import json
import os
import sys
import time

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}},
        "kind": {"anyOf": [{"type": "string"}, {"type": "number"}]},
    },
    "required": ["name", "age", "tags", "kind"],
    "additionalProperties": False,
}
TARGET = {"name": "Alice Smith", "age": 42, "tags": ["a", "c", "b"], "kind": 3.5}


def main() -> None:
    import llguidance
    import llguidance.torch as lt
    from gguf import GGUFReader

    from local_engine.loader import default_model_path
    from local_engine.loader.gguf_loader import read_gguf_tokenizer
    from local_engine.tokenizer import Tokenizer

    tok = Tokenizer(read_gguf_tokenizer(GGUFReader(str(default_model_path()))))
    ids = tok.encode(json.dumps(TARGET))
    print(f"# vocabulary {tok.vocab_size}, target {len(ids)} tokens")
    print("| library | compile ms | mask us/token fresh (mean / max) | mask us/token warm |")
    print("|---|---|---|---|")
    lltok = llguidance.LLTokenizer(tok._tok.to_str(), eos_token=sorted(tok.stop_token_ids))
    t0 = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_json_schema(SCHEMA)
    llguidance.LLMatcher(lltok, grammar)
    compile_ms = 1000 * (time.perf_counter() - t0)
    bitmask = lt.allocate_token_bitmask(1, lltok.vocab_size)

    def llg_pass() -> list[float]:
        m = llguidance.LLMatcher(lltok, grammar)
        out = []
        for i in ids:
            t = time.perf_counter()
            lt.fill_next_token_bitmask(m, bitmask, 0)
            out.append(time.perf_counter() - t)
            assert m.consume_token(i), m.get_error()
        return out

    fresh, warm = llg_pass(), llg_pass()
    print(
        f"| llguidance | {compile_ms:.1f} | {1e6 * sum(fresh) / len(fresh):.1f} / "
        f"{1e6 * max(fresh):.1f} | {1e6 * sum(warm) / len(warm):.1f} |"
    )
    if os.environ.get("XGRAMMAR_PATH"):
        sys.path.insert(0, os.environ["XGRAMMAR_PATH"])
    try:
        import xgrammar as xgr
    except ImportError:
        print("| xgrammar | not importable | | |")
        return
    vocab = [tok._tok.id_to_token(i) for i in range(tok.vocab_size)]
    info = xgr.TokenizerInfo(
        vocab, xgr.VocabType.BYTE_LEVEL, stop_token_ids=sorted(tok.stop_token_ids)
    )
    compiler = xgr.GrammarCompiler(info)
    t0 = time.perf_counter()
    compiled = compiler.compile_json_schema(json.dumps(SCHEMA), strict_mode=True)
    xgr.GrammarMatcher(compiled)
    compile_ms = 1000 * (time.perf_counter() - t0)
    xbitmask = xgr.allocate_token_bitmask(1, info.vocab_size)

    def xgr_pass() -> list[float]:
        m = xgr.GrammarMatcher(compiled)
        out = []
        for i in ids:
            t = time.perf_counter()
            m.fill_next_token_bitmask(xbitmask)
            out.append(time.perf_counter() - t)
            assert m.accept_token(i)
        return out

    fresh, warm = xgr_pass(), xgr_pass()
    print(
        f"| xgrammar | {compile_ms:.1f} | {1e6 * sum(fresh) / len(fresh):.1f} / "
        f"{1e6 * max(fresh):.1f} | {1e6 * sum(warm) / len(warm):.1f} |"
    )


if __name__ == "__main__":
    main()
