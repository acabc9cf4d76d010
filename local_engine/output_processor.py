"""Output processing: sampled tokens in, :class:`~local_engine.outputs.RequestOutput` out.

The engine's step schedules, runs the model and samples; everything that turns one sampled
token into what a caller sees happens here (as in vLLM v1's ``OutputProcessor``): append the
token and its log-probs, stop tokens, incremental detokenizing, stop strings (the text is cut
at the earliest one), the length limit, the held-back tail of a running sample that could
still become a stop string, and per-request TTFT / TPOT metrics. The processor decides *that*
a sample finished and with which :class:`~local_engine.sequence.SequenceStatus`; the engine
tells the scheduler (which frees the blocks).

Nothing here knows about the scheduler's queues, the KV cache or tensors.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

from .detokenizer import StreamDetokenizer
from .metrics import MetricsRecorder
from .outputs import CompletionOutput, RequestMetrics, RequestOutput
from .sampling import SamplingParams
from .sequence import Sequence, SequenceStatus
from .tokenizer import Tokenizer


@dataclass
class SampleState:
    """Output-side state of one sample: its sequence, its detokenizer, the text so far (cut at
    a stop string once one matched), and ``finish_reason`` (``"stop"``, ``"length"``,
    ``"abort"``; None while running) with ``stop_reason`` (the stop token id or stop string)."""

    seq: Sequence
    detok: StreamDetokenizer
    text: str = ""
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestState:
    """Output-side state of one request: its samples (``params.n`` of them, index order),
    metrics, the prompt text when given, and the token ids that stop it (``stop_token_ids``
    plus, unless ``ignore_eos``, the tokenizer's end-of-sequence tokens)."""

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    samples: list[SampleState]
    metrics: RequestMetrics
    prompt: str | None = None
    stop_ids: frozenset[int] = frozenset()

    @property
    def finished(self) -> bool:
        for s in self.samples:
            if s.finish_reason is None:
                return False
        return True


def find_stop_string(text: str, stops: list[str], delta_len: int) -> tuple[int, str] | None:
    """``(index, stop)`` of the earliest occurrence in ``text`` of any of ``stops`` (earliest in
    the text, not in the list), looking only where the last ``delta_len`` characters could
    have completed one; None when there is none."""
    best_idx, best = -1, None
    for stop in stops:
        start = max(0, len(text) - delta_len - len(stop) + 1)
        idx = text.find(stop, start)
        if idx != -1 and (best is None or idx < best_idx):
            best_idx, best = idx, stop
    return None if best is None else (best_idx, best)


def visible_text(text: str, stops: list[str]) -> str:
    """``text`` of a running sample less the longest tail that is a proper prefix of one of
    ``stops`` (it could still become a stop string, which is never shown)."""
    hold = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), hold, -1):
            if text.endswith(stop[:k]):
                hold = k
                break
    return text[: len(text) - hold] if hold else text


class OutputProcessor:
    """Per-request output state, keyed by request id and by sequence id.

    Args:
        tokenizer: detokenizes samples and supplies the end-of-sequence token ids.
        metrics: where TTFT, TPOT and ``requests_finished`` are recorded.

    Attributes:
        requests: unfinished requests by request id.
        seq_to_req: the same states by sequence id (one entry per sample).
    """

    def __init__(self, tokenizer: Tokenizer, metrics: MetricsRecorder):
        self.tokenizer = tokenizer
        self.metrics = metrics
        self.requests: dict[str, RequestState] = {}
        self.seq_to_req: dict[str, RequestState] = {}

    def __contains__(self, request_id: str) -> bool:
        return request_id in self.requests

    def __len__(self) -> int:
        return len(self.requests)

    def add_request(
        self,
        seqs: list[Sequence],
        params: SamplingParams,
        arrival_time: float,
        prompt: str | None = None,
    ) -> RequestState:
        """Track a new request whose samples are ``seqs`` (index order, one prompt)."""
        first = seqs[0]
        ids = first.prompt_token_ids
        stop_ids = set(params.stop_token_ids or ())
        if not params.ignore_eos:
            stop_ids |= self.tokenizer.stop_token_ids
        state = RequestState(
            request_id=first.request_id,
            prompt_token_ids=ids,
            params=params,
            samples=[
                SampleState(s, StreamDetokenizer(self.tokenizer, ids, params.skip_special_tokens))
                for s in seqs
            ],
            metrics=RequestMetrics(arrival_time=arrival_time),
            prompt=prompt,
            stop_ids=frozenset(stop_ids),
        )
        self.requests[state.request_id] = state
        for s in seqs:
            self.seq_to_req[s.seq_id] = state
        return state

    def abort_request(self, request_id: str) -> list[Sequence]:
        """Forget ``request_id``, marking its running samples ``"abort"``; returns its sequences
        that the scheduler has not finished yet (empty for an unknown id)."""
        state = self.requests.pop(request_id, None)
        if state is None:
            return []
        live = []
        for s in state.samples:
            if not s.seq.is_finished:
                live.append(s.seq)
            if s.finish_reason is None:
                s.finish_reason = "abort"
            self.seq_to_req.pop(s.seq.seq_id, None)
        return live

    def append_token(
        self,
        seq: Sequence,
        token: int,
        logprobs: dict[int, float] | None,
        sampled_logprob: float,
        now: float,
    ) -> SequenceStatus | None:
        """Record one sampled token of ``seq`` at time ``now`` (``time.monotonic()``): metrics,
        log-probs, stop token / detokenized text / stop strings, length. Returns the status to
        finish ``seq`` with when this token ended it, else None. (``generation_tokens`` is
        counted by the caller, once per step.)"""
        state = self.seq_to_req[seq.seq_id]
        sample = state.samples[seq.index]
        tokens = seq.all_token_ids
        tokens.append(token)
        metrics = state.metrics
        if metrics.first_token_time is None:
            metrics.first_token_time = now
            self.metrics.ttft.append(now - metrics.arrival_time)
        metrics.last_token_time = now
        params = state.params
        if params.logprobs is not None and logprobs is not None:
            seq.logprobs.append(logprobs)
        seq.cumulative_logprob += sampled_logprob
        if token in state.stop_ids:
            sample.finish_reason, sample.stop_reason = "stop", token
        else:
            delta = sample.detok.add(token)
            if delta:
                sample.text += delta
                if params.stop:  # a list by now (SamplingParams.__post_init__)
                    hit = find_stop_string(sample.text, cast(list[str], params.stop), len(delta))
                    if hit is not None:
                        sample.text = sample.text[: hit[0]]
                        sample.finish_reason, sample.stop_reason = "stop", hit[1]
        if sample.finish_reason is None and len(tokens) >= seq.max_total_len:
            sample.finish_reason = "length"
        if sample.finish_reason is None:
            return None
        if sample.finish_reason == "stop":
            return SequenceStatus.FINISHED_STOPPED
        return SequenceStatus.FINISHED_LENGTH

    def make_outputs(self, states: Iterable[RequestState], now: float) -> list[RequestOutput]:
        """The cumulative output of each of ``states``; a request whose output is ``finished``
        is forgotten here (its finish time and TPOT recorded at ``now``)."""
        outputs = []
        for state in states:
            out = self.make_output(state)
            if out.finished:
                self._finish_request(state, now)
            outputs.append(out)
        return outputs

    @staticmethod
    def make_output(state: RequestState) -> RequestOutput:
        """The cumulative :class:`RequestOutput` of ``state`` (running samples' text without a
        tail that could still become a stop string)."""
        outs = []
        params = state.params
        want_lp = params.logprobs is not None
        stops = cast(list[str], params.stop)  # a list by now (SamplingParams.__post_init__)
        finished = True
        for s in state.samples:
            seq = s.seq
            if s.finish_reason is None:
                finished = False
                text = visible_text(s.text, stops) if stops else s.text
            else:
                text = s.text
            # positional: index, text, token_ids, finish_reason, stop_reason, logprobs,
            # cumulative_logprob (half the cost of keywords; this runs per request per step)
            outs.append(
                CompletionOutput(
                    seq.index,
                    text,
                    seq.all_token_ids[len(seq.prompt_token_ids) :],  # a new list
                    s.finish_reason,
                    s.stop_reason,
                    list(seq.logprobs) if want_lp else None,
                    seq.cumulative_logprob if want_lp else None,
                )
            )
        seq0 = state.samples[0].seq
        cached = seq0.num_cached_tokens
        # positional: request_id, prompt_token_ids, num_cached_tokens, outputs, finished,
        # metrics, prompt, num_cpu_cached_tokens, num_disk_cached_tokens
        return RequestOutput(
            state.request_id,
            state.prompt_token_ids,
            cached if cached > 0 else 0,
            outs,
            finished,
            state.metrics,
            state.prompt,
            seq0.num_cpu_cached_tokens if cached > 0 else 0,
            seq0.num_disk_cached_tokens if cached > 0 else 0,
        )

    def _finish_request(self, state: RequestState, now: float) -> None:
        state.metrics.finish_time = now
        self.metrics.requests_finished += 1
        first = state.metrics.first_token_time
        for s in state.samples:
            n = s.seq.num_output_tokens
            if n >= 2 and first is not None:
                self.metrics.tpot.append((now - first) / (n - 1))
            self.seq_to_req.pop(s.seq.seq_id, None)
        self.requests.pop(state.request_id, None)
