"""Run the local engine in-process (no server): two prompts sharing a long prefix, the
second one reusing the first one's KV blocks.

    python examples/offline_engine.py
"""

from local_engine import LLM, SamplingParams

llm = LLM()  # the embedded SmolLM2-135M-Instruct
shared = [{"role": "system", "content": "You answer in one short sentence. " * 20}]
params = SamplingParams(temperature=0.0, max_tokens=12)
for question in ["What is the capital of France?", "What is 2 + 2?"]:
    out = llm.chat(shared + [{"role": "user", "content": question}], params)[0]
    print(
        f"{question!r} -> {out.text!r} "
        f"(prompt {len(out.prompt_token_ids)} tokens, {out.num_cached_tokens} from the prefix cache)"
    )
