"""``LLM``: the offline, batch-in batch-out front of the engine (vLLM's ``LLM`` shape)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from .engine import LLMEngine
from .errors import EngineError
from .outputs import RequestOutput
from .sampling import SamplingParams

PromptType = str | list[int]


class LLM:
    """Load a model and run batches of prompts to completion.

    Args:
        model: None (embedded SmolLM2-135M-Instruct), a ``.gguf`` path or an HF folder.
        **config: any :class:`~local_engine.config.EngineConfig` field.

    Example::

        llm = LLM()
        out = llm.generate("The capital of France is", SamplingParams(temperature=0, max_tokens=8))
        print(out[0].text)
    """

    def __init__(self, model: str | None = None, **config):
        self.engine = LLMEngine.from_model(model, **config)
        self._ids = itertools.count()

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    def generate(
        self,
        prompts: PromptType | Sequence[PromptType],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        cache_salt: str | None = None,
    ) -> list[RequestOutput]:
        """Generate for each prompt (text, or a list of token ids; one or a list of them).
        All prompts are queued at once and run with continuous batching.

        Returns: one finished :class:`RequestOutput` per prompt, in input order.

        Raises:
            EngineError / RequestTooLongError: a bad prompt or parameters (nothing is queued
            after the first bad prompt; earlier ones are aborted).
        """
        if isinstance(prompts, str) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]
        prompts = list(prompts)
        if params is None:
            params = SamplingParams()
        plist: list[SamplingParams] = (
            list(params) if isinstance(params, (list, tuple)) else [params] * len(prompts)  # type: ignore[list-item]
        )
        if len(plist) != len(prompts):
            raise EngineError(f"{len(plist)} sampling params for {len(prompts)} prompts")
        ids = []
        try:
            for p, sp in zip(prompts, plist):
                rid = f"llm-{next(self._ids)}"
                if isinstance(p, str):
                    toks = self.engine.tokenizer.encode(p, add_special_tokens=True)
                    self.engine.add_request(rid, toks, sp, cache_salt=cache_salt, prompt=p)
                else:
                    self.engine.add_request(rid, list(p), sp, cache_salt=cache_salt)
                ids.append(rid)
        except Exception:
            for rid in ids:
                self.engine.abort_request(rid)
            raise
        return self._run(ids)

    def chat(
        self,
        messages,
        params: SamplingParams | None = None,
        tools: list | None = None,
        add_generation_prompt: bool = True,
        cache_salt: str | None = None,
    ) -> list[RequestOutput]:
        """Render one conversation (a list of ``{"role", "content"}`` dicts) or a list of them
        with the model's chat template and generate a reply for each."""
        if messages and isinstance(messages[0], dict):
            messages = [messages]
        texts = [
            self.engine.tokenizer.apply_chat_template(
                m, add_generation_prompt=add_generation_prompt, tools=tools
            )
            for m in messages
        ]
        return self.generate(texts, params, cache_salt=cache_salt)

    def _run(self, ids: list[str]) -> list[RequestOutput]:
        final: dict[str, RequestOutput] = {}
        wanted = set(ids)
        while wanted - set(final):
            if not self.engine.has_unfinished_requests():
                raise EngineError("engine stopped with requests unfinished")  # pragma: no cover
            for out in self.engine.step():
                if out.finished and out.request_id in wanted:
                    final[out.request_id] = out
        return [final[i] for i in ids]
