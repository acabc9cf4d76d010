"""The draft-model proposer: its greedy drafts equal transformers' greedy continuation with the
same draft weights (a separate checkpoint, and the target's own first n layers), over the
paged cache shared with the target, for several sequences of different K in one call and again
after tokens were committed (the catch-up pass)."""

from __future__ import annotations

import json

import pytest
import torch

from local_engine.engine import LLMEngine
from local_engine.errors import EngineError
from local_engine.sampling import SamplingParams
from local_engine.sequence import Sequence
from local_engine.spec_decode.config import SpeculativeConfig
from local_engine.spec_decode.draft import DraftModelProposer

transformers = pytest.importorskip("transformers")


def hf_greedy(folder, prompt, k, num_layers=None):
    cfg = transformers.AutoConfig.from_pretrained(str(folder))
    if num_layers is not None:
        cfg.num_hidden_layers = num_layers  # the first n layers' weights; the rest unused
    model = transformers.LlamaForCausalLM.from_pretrained(str(folder), config=cfg).eval()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt]),
            max_new_tokens=k,
            do_sample=False,
            pad_token_id=0,
            eos_token_id=None,
        )
    return out[0, len(prompt) :].tolist()


def decode_ready(engine, seq_id, prompt, k):
    """A sequence in decode state: the target computed all but its newest token, slots
    allocated for ``k`` more tokens (as the scheduler would for a speculative step)."""
    seq = Sequence(seq_id, seq_id, 0, list(prompt), SamplingParams(temperature=0))
    kv = engine.kv_cache_manager
    assert kv.allocate_slots(seq, len(prompt) - 1) is not None
    from local_engine.scheduler import ScheduledSequence, SchedulerOutput

    batch = engine.runner.prepare(
        SchedulerOutput([ScheduledSequence(seq, 0, len(prompt) - 1)]), [kv.block_ids(seq_id)]
    )
    engine.runner.forward_logits(batch)
    seq.num_computed_tokens = len(prompt) - 1
    assert kv.allocate_slots(seq, 1 + k) is not None
    return seq


PROMPTS = [
    [5, 17, 400, 9000, 12, 77, 3001, 45],
    [1200, 33, 8, 8, 8, 41000, 2],
    list(range(100, 140)),
]
KS = [3, 1, 5]


@pytest.mark.parametrize("mode", ["model", "layers"])
def test_greedy_drafts_equal_transformers(mode, tiny_target_dir, tiny_draft_dir):
    engine = LLMEngine.from_config(tiny_target_dir, num_kv_blocks=64, seed=0)
    # from_config draws random weights; load the checkpoint's instead (same as transformers')
    from safetensors.torch import load_file

    engine.runner.model.load_weights(load_file(str(tiny_target_dir / "model.safetensors")))
    spec = (
        SpeculativeConfig("draft", 5, model=str(tiny_draft_dir))
        if mode == "model"
        else SpeculativeConfig("draft", 5, layers=2)
    )
    proposer = DraftModelProposer(
        spec, engine.config, engine.runner, engine.tokenizer, engine.max_model_len
    )
    proposer.allocate_kv_cache(engine.kv_cache_manager.num_blocks)
    kv = engine.kv_cache_manager
    seqs = [decode_ready(engine, f"s{i}", p, k) for i, (p, k) in enumerate(zip(PROMPTS, KS))]
    tables = kv.block_table_array([s.seq_id for s in seqs])
    drafts, qs = proposer.propose(seqs, KS, tables)
    folder, n = (tiny_draft_dir, None) if mode == "model" else (tiny_target_dir, 2)
    for p, k, d in zip(PROMPTS, KS, drafts):
        assert d == hf_greedy(folder, p, k, n)
    assert qs == [None, None, None]  # greedy requests need no q
    # commit two tokens to sequence 0 and draft again: the draft catches up over them
    s0 = seqs[0]
    s0.all_token_ids.extend(drafts[0][:2])
    from local_engine.scheduler import ScheduledSequence, SchedulerOutput

    batch = engine.runner.prepare(
        SchedulerOutput([ScheduledSequence(s0, s0.num_computed_tokens, 2)]),
        [kv.block_ids(s0.seq_id)],
    )
    engine.runner.forward_logits(batch)  # the target computes the committed tokens
    s0.num_computed_tokens = s0.num_tokens - 1
    assert kv.allocate_slots(s0, 1 + 4) is not None
    (d2,), _ = proposer.propose([s0], [4], kv.block_table_array([s0.seq_id]))
    assert d2 == hf_greedy(folder, s0.all_token_ids, 4, n)
    for s in seqs:
        kv.free(s)


def test_sampled_drafts_come_with_their_q(tiny_target_dir, tiny_draft_dir):
    engine = LLMEngine.from_config(tiny_target_dir, num_kv_blocks=64, seed=0)
    proposer = DraftModelProposer(
        SpeculativeConfig("draft", 3, model=str(tiny_draft_dir)),
        engine.config,
        engine.runner,
        engine.tokenizer,
        1024,
    )
    proposer.allocate_kv_cache(64)
    seq = decode_ready(engine, "x", PROMPTS[0], 3)
    seq.params = SamplingParams(temperature=0.8, top_k=5)
    seq.generator = torch.Generator().manual_seed(3)
    (d,), (q,) = proposer.propose([seq], [3], engine.kv_cache_manager.block_table_array(["x"]))
    assert q.shape == (3, engine.model_config.vocab_size)
    assert torch.allclose(q.sum(dim=-1), torch.ones(3))
    assert all(int((row > 0).sum()) <= 5 for row in q)  # top-k applied to q
    assert all(float(q[j, t]) > 0 for j, t in enumerate(d))  # drafts drawn from q's support


def test_draft_with_another_vocabulary_is_refused(tiny_target_dir, tiny_draft_dir, tmp_path):
    import shutil

    other = tmp_path / "other"
    shutil.copytree(tiny_draft_dir, other)
    tok = json.loads((other / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = [k for k, v in vocab.items() if v in (300, 301)]
    vocab[a], vocab[b] = vocab[b], vocab[a]  # same size, two ids swapped
    (other / "tokenizer.json").write_text(json.dumps(tok))
    engine = LLMEngine.from_config(tiny_target_dir, num_kv_blocks=16)
    with pytest.raises(EngineError, match="token 300 .* shares the target's tokenizer"):
        DraftModelProposer(
            SpeculativeConfig("draft", 3, model=str(other)),
            engine.config,
            engine.runner,
            engine.tokenizer,
            1024,
        )
    with pytest.raises(EngineError, match="fewer than the target's 4 decoder layers"):
        DraftModelProposer(
            SpeculativeConfig("draft", 3, layers=4),
            engine.config,
            engine.runner,
            engine.tokenizer,
            1024,
        )
