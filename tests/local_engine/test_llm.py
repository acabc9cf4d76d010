"""The offline ``LLM`` front: generate over text / token-id prompts, chat, errors."""

from __future__ import annotations

import pytest

from local_engine import LLM, EngineError, RequestTooLongError, SamplingParams


@pytest.fixture(scope="module")
def llm(engine_factory):  # engine_factory: the model file is read once per worker
    return LLM(num_kv_blocks=128, max_model_len=512)


def test_generate_text_and_token_prompts_in_order(llm, engine):
    p = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    texts = ["The capital of France is", "1, 2, 3, 4,"]
    outs = llm.generate(texts, p)
    assert [o.prompt for o in outs] == texts
    assert [o.prompt_token_ids for o in outs] == [engine.tokenizer.encode(t) for t in texts]
    assert all(
        o.finished and len(o.token_ids) == 8 and o.outputs[0].finish_reason == "length"
        for o in outs
    )
    assert outs[0].text == engine.tokenizer.decode(outs[0].token_ids)
    again = llm.generate(engine.tokenizer.encode(texts[1]), p)  # one token-id prompt
    assert len(again) == 1 and again[0].token_ids == outs[1].token_ids
    assert again[0].num_cached_tokens == (len(outs[1].prompt_token_ids) - 1) // 16 * 16


def test_chat_one_conversation_or_several(llm):
    p = SamplingParams(temperature=0, max_tokens=12)
    conv = [{"role": "user", "content": "What is the capital of France? One word."}]
    one = llm.chat(conv, p)
    two = llm.chat([conv, [{"role": "user", "content": "Say hi."}]], p)
    assert len(one) == 1 and len(two) == 2
    assert one[0].token_ids == two[0].token_ids
    assert "Paris" in one[0].text


def test_errors_leave_nothing_queued(llm):
    with pytest.raises(RequestTooLongError, match="512"):
        llm.generate(["ok", "word " * 600], SamplingParams(max_tokens=2))
    assert not llm.engine.has_unfinished_requests()
    with pytest.raises(EngineError, match="2 sampling params for 1 prompts"):
        llm.generate(["x"], [SamplingParams(), SamplingParams()])
    assert llm.engine.kv_cache_manager.num_free_blocks == llm.engine.kv_cache_manager.num_blocks
