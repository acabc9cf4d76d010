"""Per-decode-step host (Python) overhead of the local engine, on the CPU.

The model is tiny (2 layers, hidden 64, random weights) so that the forward pass costs little
and what is left is the engine's own work per step; the vocabulary is SmolLM2's real 49,152
ids with its real tokenizer so that sampling (argmax over the vocabulary, the device->host copy
of the tokens) and detokenizing are realistic.

For B = 1, 16, 64 and 256 requests (512-token random prompts, 128 new tokens, greedy,
``ignore_eos``) it runs the prefill, then times N decode steps and splits each into:

- ``schedule``: ``Scheduler.schedule``;
- ``prepare``: ``ModelRunner.prepare`` (batch tensors: ids, positions, slot mapping, block
  tables, ...);
- ``forward``: ``ModelRunner.forward_logits`` (the model; on the GPU this is the graph replay);
- ``sample``: ``ModelRunner.sample`` (argmax, the copy of the tokens to Python ints);
- ``post``: everything else in ``LLMEngine.step`` (block tables fetched for the runner,
  ``cache_computed_blocks``, appending tokens, detokenizing, stop checks, ``OutputProcessor.make_output``).

``host`` = step - forward, the part a faster model does not shrink; ``host/seq`` divides it by
the batch. Each column is the median over the timed steps of that quantity. The methods are
timed by wrapping them on the engine's own instances with ``time.perf_counter`` (the wrapper's cost, ~0.3 us a call, is in the numbers). Then it runs
cProfile over 20 decode steps at B=64 and prints the 15 functions with the most cumulative time
(and the 15 with the most own time).

Usage: ``.venv/bin/python bench/step_overhead.py [--batches 1,16,64,256] [--steps N]
[--no-profile] [--dir DIR] [--device cuda]`` (on CUDA: bf16, the engine's CUDA graphs, the
forward synchronised so that ``host`` is the CPU's own time). Not a test: it prints, it does not assert. The "before" numbers (the engine
before the per-step work was cut) are kept in ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from local_engine.engine import LLMEngine  # noqa: E402
from local_engine.sampling import SamplingParams  # noqa: E402

PROMPT_LEN = 512
MAX_TOKENS = 128
PHASES = ("schedule", "prepare", "forward", "sample")


def write_model_folder(folder: Path) -> Path:
    """A Hugging Face Llama folder: a 2-layer, hidden-64 config with SmolLM2's vocabulary
    (49,152 ids) and the embedded GGUF's tokenizer (``tokenizer.json`` +
    ``tokenizer_config.json``). Weights are drawn at random by ``LLMEngine.from_config``."""
    from gguf import GGUFReader

    from local_engine.loader import default_model_path
    from local_engine.loader.gguf_loader import read_gguf_tokenizer
    from local_engine.tokenizer import Tokenizer

    spec = read_gguf_tokenizer(GGUFReader(str(default_model_path())))
    tok = Tokenizer(spec)
    cfg = dict(
        architectures=["LlamaForCausalLM"],
        model_type="llama",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=tok.vocab_size,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        initializer_range=0.02,
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    (folder / "tokenizer.json").write_text(tok._tok.to_str())
    tcfg = {
        "bos_token": tok.bos_token,
        "eos_token": tok.eos_token,
        "chat_template": spec.chat_template,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps({k: v for k, v in tcfg.items() if v}))
    return folder


class PhaseTimer:
    """Wraps the engine's phase methods on its instances and accumulates seconds per phase."""

    def __init__(self, engine: LLMEngine):
        self.acc = dict.fromkeys(PHASES, 0.0)
        self.on = False
        self._wrap(engine.scheduler, "schedule", "schedule")
        self._wrap(engine.runner, "prepare", "prepare")
        self._wrap(engine.runner, "forward_logits", "forward")
        self._wrap(engine.runner, "sample", "sample")

    def _wrap(self, obj, name: str, phase: str) -> None:
        fn = getattr(obj, name)
        acc = self.acc
        clock = time.perf_counter

        sync = torch.cuda.synchronize if (phase == "forward" and DEVICE != "cpu") else None

        def timed(*args, **kwargs):
            t0 = clock()
            try:
                out = fn(*args, **kwargs)
                if sync is not None:  # on CUDA the forward ends when the GPU is done with it
                    sync()
                return out
            finally:
                acc[phase] += clock() - t0

        setattr(obj, name, timed)

    def reset(self) -> None:
        for k in self.acc:
            self.acc[k] = 0.0


DEVICE = "cpu"


def build_engine(folder: Path, batch: int) -> LLMEngine:
    """An engine over ``folder`` sized for ``batch`` requests of PROMPT_LEN + MAX_TOKENS tokens
    (float32 and one torch thread on the CPU; bf16 with CUDA graphs on CUDA)."""
    blocks = batch * -(-(PROMPT_LEN + MAX_TOKENS) // 16) + 16
    if DEVICE == "cpu":
        return LLMEngine.from_config(
            folder,
            device="cpu",
            dtype="float32",
            num_threads=1,
            num_kv_blocks=blocks,
            max_num_seqs=max(batch, 1),
            max_num_batched_tokens=8192,
            seed=0,
        )
    return LLMEngine.from_config(
        folder,
        device=DEVICE,
        dtype="bfloat16",
        num_kv_blocks=blocks,
        max_num_seqs=max(batch, 1),
        max_num_batched_tokens=8192,
        seed=0,
    )


def add_requests(engine: LLMEngine, batch: int, seed: int) -> None:
    """``batch`` greedy requests of PROMPT_LEN random ids (seeded), MAX_TOKENS new tokens, EOS ignored."""
    rng = random.Random(seed)
    vocab = engine.model_config.vocab_size
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS, ignore_eos=True)
    for i in range(batch):
        ids = [rng.randrange(vocab) for _ in range(PROMPT_LEN)]
        engine.add_request(f"r{i}", ids, params)


def prefill(engine: LLMEngine, batch: int) -> None:
    """Step until every request has its first token (all are then decoding)."""
    while True:
        outs = engine.step()
        got = {o.request_id for o in outs if o.outputs[0].token_ids}
        # a step that advanced every request and gave each a token: all are in decode now
        if (
            len(got) == batch
            and engine.scheduler.num_waiting == 0
            and all(not s.in_prefill for s in engine.scheduler.running)
        ):
            return


def measure(folder: Path, batch: int, steps: int) -> dict:
    """Median milliseconds per decode step of each phase (schedule, prepare, forward, sample,
    post, step, host = step - forward) over ``steps`` decode steps at ``batch`` sequences."""
    engine = build_engine(folder, batch)
    timer = PhaseTimer(engine)
    add_requests(engine, batch, seed=batch)
    prefill(engine, batch)
    # two warm-up decode steps, then the timed ones
    for _ in range(2):
        engine.step()
    cols = {k: [] for k in PHASES + ("post", "step", "host")}
    clock = time.perf_counter
    for _ in range(steps):
        timer.reset()
        t0 = clock()
        outs = engine.step()
        dt = clock() - t0
        assert len(outs) == batch, (len(outs), batch)
        for k in PHASES:
            cols[k].append(timer.acc[k])
        cols["post"].append(dt - sum(timer.acc.values()))
        cols["step"].append(dt)
        cols["host"].append(dt - timer.acc["forward"])
    # medians: the box is shared, and a median per phase shrugs off the odd preempted step
    row = {k: 1e3 * statistics.median(v) for k, v in cols.items()}
    row["host_per_seq"] = row["host"] / batch
    row["batch"] = batch
    row["steps"] = steps
    return row


def profile(folder: Path, batch: int, steps: int, top: int = 15) -> str:
    """cProfile of ``steps`` decode steps at ``batch``: the ``top`` functions by cumulative time,
    then by own time, as text."""
    engine = build_engine(folder, batch)
    add_requests(engine, batch, seed=batch)
    prefill(engine, batch)
    engine.step()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        engine.step()
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("cumulative").print_stats(top)
    buf.write(f"# the same run, top {top} by own time\n")
    stats.sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def main(argv=None) -> int:
    """Command line: the phase table for each batch size, then the profile; returns 0."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", default="1,16,64,256", help="comma-separated batch sizes")
    ap.add_argument(
        "--steps",
        type=int,
        default=0,
        help="decode steps timed per batch (default: 100 / 100 / 60 / 30 by batch)",
    )
    ap.add_argument("--no-profile", action="store_true", help="skip the cProfile run at B=64")
    ap.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="model folder: used when it holds config.json, else written there "
        "(default: a temp dir)",
    )
    ap.add_argument(
        "--device",
        default="cpu",
        help="cpu (float32, 1 thread) or cuda (bf16, the forward synchronised)",
    )
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",") if b]
    default_steps = {1: 100, 16: 100, 64: 60, 256: 30}
    t_start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        global DEVICE
        DEVICE = args.device
        folder = args.dir or Path(tmp) / "tiny-smollm2-vocab"
        if not (folder / "config.json").is_file():
            write_model_folder(folder)
        where = (
            "1 thread"
            if DEVICE == "cpu"
            else f"{DEVICE} {torch.cuda.get_device_name()}, forward synchronised"
        )
        print(
            f"# step overhead, tiny model (2 layers, hidden 64, vocab 49152), torch "
            f"{torch.__version__}, {where}, {time.strftime('%Y-%m-%d %H:%M')}"
        )
        import local_engine

        print(f"# engine code: {Path(local_engine.__file__).parent}")
        print(
            f"# {PROMPT_LEN}-token prompts, {MAX_TOKENS} new tokens, greedy, ignore_eos; "
            "ms per decode step, median over the timed steps (each column on its own)"
        )
        rows = []
        for b in batches:
            n = args.steps or default_steps.get(b, 50)
            n = min(n, MAX_TOKENS - 4)
            rows.append(measure(folder, b, n))
        hdr = (
            "| B | steps | schedule | prepare | forward | sample | post | step "
            "| host = step - forward | host us / seq |"
        )
        print(hdr)
        print("|" + "---|" * (hdr.count("|") - 1))
        for r in rows:
            print(
                f"| {r['batch']} | {r['steps']} | {r['schedule']:.3f} | {r['prepare']:.3f} | "
                f"{r['forward']:.3f} | {r['sample']:.3f} | {r['post']:.3f} | "
                f"{r['step']:.3f} | {r['host']:.3f} | "
                f"{1e3 * r['host_per_seq']:.1f} |"
            )
        if not args.no_profile:
            print(
                "\n# cProfile, 20 decode steps at B=64, top 15 by cumulative time, then by own time"
            )
            print(profile(folder, 64, 20))
    print(f"# total {time.time() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
