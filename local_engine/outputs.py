"""What the engine returns per request and step.

``OutputProcessor.make_output`` (``local_engine/output_processor.py``) builds :class:`CompletionOutput` and :class:`RequestOutput`
positionally (it runs for every request every step): keep the fields' order, or change it there
too."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CompletionOutput:
    """One sample of a request, cumulative so far.

    Attributes:
        index: sample index (0..n-1).
        text: generated text (stop string excluded; while running, a tail that could be the
            start of a stop string is held back).
        token_ids: generated token ids.
        finish_reason: ``"stop"`` (EOS, stop token or stop string), ``"length"`` (max_tokens or
            max_model_len), ``"abort"``, or None while running.
        stop_reason: the stop string or token id that ended it, else None.
        logprobs: per generated token, ``{token_id: logprob}`` (natural log) when asked.
        cumulative_logprob: sum of the sampled tokens' logprobs (when logprobs were asked).
    """

    index: int
    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    stop_reason: object | None = None
    logprobs: list[dict[int, float]] | None = None
    cumulative_logprob: float | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    """Timestamps in seconds (``time.monotonic()``) and derived latencies.

    Attributes:
        arrival_time: when ``add_request`` ran.
        first_scheduled_time: first step that computed any of its tokens.
        first_token_time: when the first output token was sampled.
        last_token_time: when the latest output token was sampled.
        finish_time: when it finished (None while running).
        num_draft_tokens: speculative decoding: tokens drafted for this request (all samples).
        num_accepted_tokens: of those, accepted by verification.
        num_verify_steps: sequence-steps that verified at least one draft.
    """

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    finish_time: float | None = None
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_verify_steps: int = 0

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens (None when nothing was drafted)."""
        if not self.num_draft_tokens:
            return None
        return self.num_accepted_tokens / self.num_draft_tokens

    @property
    def mean_accepted_length(self) -> float | None:
        """Tokens emitted per verification step: ``1 + accepted / steps`` (the accepted drafts
        plus the resampled or bonus token; vLLM's "mean acceptance length"). None when no
        step verified a draft."""
        if not self.num_verify_steps:
            return None
        return 1.0 + self.num_accepted_tokens / self.num_verify_steps

    @property
    def ttft(self) -> float | None:
        """Time to first token, seconds."""
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time


@dataclass
class RequestOutput:
    """A request's state after a step.

    Attributes:
        request_id: as given to ``add_request``.
        prompt: prompt text when known (``LLM.generate`` with text), else None.
        prompt_token_ids: the prompt.
        num_cached_tokens: prompt tokens whose K/V came from the prefix cache (whole blocks),
            from either tier: the device pool ("gpu") or the CPU tier.
        outputs: one :class:`CompletionOutput` per sample.
        finished: all samples finished.
        metrics: :class:`RequestMetrics`.
        num_cpu_cached_tokens: of ``num_cached_tokens``, the tokens copied back from the CPU
            tier (``EngineConfig.cpu_cache_memory``); 0 with the tier off.
        num_disk_cached_tokens: of ``num_cached_tokens``, the tokens read back from the disk
            tier (``EngineConfig.disk_cache_dir``); 0 with the tier off.
    """

    request_id: str
    prompt_token_ids: list[int]
    num_cached_tokens: int
    outputs: list[CompletionOutput]
    finished: bool
    metrics: RequestMetrics
    prompt: str | None = None
    num_cpu_cached_tokens: int = 0
    num_disk_cached_tokens: int = 0

    @property
    def num_gpu_cached_tokens(self) -> int:
        """Of ``num_cached_tokens``, the tokens found in the device pool (named "gpu" as in
        the usage field; on a CPU-only engine the device pool is in host memory too)."""
        return self.num_cached_tokens - self.num_cpu_cached_tokens - self.num_disk_cached_tokens

    @property
    def text(self) -> str:
        return self.outputs[0].text

    @property
    def token_ids(self) -> list[int]:
        return self.outputs[0].token_ids


__all__ = ["CompletionOutput", "RequestOutput", "RequestMetrics"]
