"""LLMEngine: requests in, one scheduler step at a time, RequestOutputs out.

Data flows one way: ``add_request`` -> :class:`~local_engine.scheduler.Scheduler` ->
:class:`~local_engine.runner.ModelRunner` (batch tensors, model, paged attention, sampler) ->
output processing here (detokenize, stop checks, finish and free). ``step()`` is synchronous and
single-threaded; the async server drives it from one thread.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

import torch

from .config import EngineConfig
from .detokenizer import StreamDetokenizer, token_text_table
from .errors import EngineError, RequestTooLongError
from .kv_cache.manager import KVCacheManager
from .loader import load_model
from .metrics import EngineMetrics, MetricsRecorder
from .outputs import CompletionOutput, RequestMetrics, RequestOutput
from .runner import ModelRunner, kv_block_bytes, plan_num_blocks
from .sampling import SamplingParams, make_generator
from .scheduler import Scheduler
from .sequence import Sequence, SequenceStatus
from .tokenizer import Tokenizer

logger = logging.getLogger("local_engine")


def cpu_threads(requested: int | None) -> int:
    """Intra-op threads for CPU inference: ``requested`` when given, else torch's default (one
    per core) minus the cores other processes already keep busy (the 1-minute load average),
    at least 1. On a shared, busy 2-core box two threads that meet at every operator's barrier
    wait for each other's time slices: measured 4-15x slower than one thread there, while on an
    idle box two threads prefill ~1.8x faster than one."""
    if requested is not None:
        return requested
    default = torch.get_num_threads()
    try:
        busy = int(os.getloadavg()[0] + 0.5)
    except OSError:  # no load average on this platform
        busy = 0
    return max(1, min(default, (os.cpu_count() or default) - busy))


@dataclass
class _SampleState:
    seq: Sequence
    detok: StreamDetokenizer
    text: str = ""
    finish_reason: str | None = None
    stop_reason: object | None = None


@dataclass
class _RequestState:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    samples: list[_SampleState]
    metrics: RequestMetrics
    prompt: str | None = None
    stop_ids: frozenset = frozenset()

    @property
    def finished(self) -> bool:
        for s in self.samples:
            if s.finish_reason is None:
                return False
        return True


class LLMEngine:
    """The engine (see ``notes/engine_api.md``).

    Attributes:
        config: the :class:`EngineConfig`.
        model_config: architecture read from the file.
        tokenizer: :class:`~local_engine.tokenizer.Tokenizer`.
        model_name: e.g. ``"SmolLM2-135M-Instruct"``.
        max_model_len: longest context (prompt + output) in tokens.
        kv_cache_manager: block tables and the pool (``num_blocks``, ``num_free_blocks``).

    Raises (constructor):
        ModelNotFoundError: no model at ``config.model``.
        EngineError: an unsupported model or configuration.
    """

    def __init__(self, config: EngineConfig | None = None, *, loaded=None):
        self.config = config = config or EngineConfig()
        t0 = time.monotonic()
        if config.device == "cpu":
            torch.set_num_threads(cpu_threads(config.num_threads))
        # [TRITON] ``loaded``: a LoadedModel built by from_config (weights None = random)
        loaded = loaded if loaded is not None else load_model(config.model)
        self.model_config = mc = loaded.config
        self.model_name = mc.name
        self.model_path = loaded.path
        self.tokenizer = Tokenizer(loaded.tokenizer)
        self.max_model_len = config.max_model_len or mc.max_position_embeddings
        dtype = config.torch_dtype()
        if str(config.device).startswith("cuda") and not torch.cuda.is_available():
            raise EngineError(f"device {config.device!r} requested but CUDA is not available")
        # weights go to the device first, so the pool is sized from the memory left
        self.runner = ModelRunner(config, mc, loaded.weights, self.max_model_len)
        del loaded
        num_blocks = plan_num_blocks(config, mc, dtype, self.max_model_len)
        self.runner.allocate_kv_cache(num_blocks)
        block_bytes = kv_block_bytes(mc, config.block_size, dtype)
        num_cpu_blocks = config.swap_space // block_bytes
        self.runner.allocate_swap_space(num_cpu_blocks)
        self.kv_cache_manager = KVCacheManager(
            num_blocks, config.block_size, config.enable_prefix_caching, num_cpu_blocks
        )
        self.scheduler = Scheduler(
            self.kv_cache_manager,
            config.max_num_seqs,
            config.max_num_batched_tokens,
            config.enable_chunked_prefill,
        )
        token_text_table(self.tokenizer, True)  # built once here, not on the first request
        self._requests: dict[str, _RequestState] = {}
        self._seq_to_req: dict[str, _RequestState] = {}
        self._metrics = MetricsRecorder()
        self.load_seconds = time.monotonic() - t0
        logger.info(
            "%s loaded in %.1fs on %s (%s, %d threads); KV cache: %d blocks x %d tokens = %d tokens max "
            "(%.1f MiB, %d bytes/token); swap space %d blocks; max_model_len=%d",
            self.model_name,
            self.load_seconds,
            config.device,
            str(dtype).replace("torch.", ""),
            torch.get_num_threads(),
            num_blocks,
            config.block_size,
            num_blocks * config.block_size,
            num_blocks * block_bytes / 2**20,
            block_bytes // config.block_size,
            num_cpu_blocks,
            self.max_model_len,
        )

    @classmethod
    def from_model(cls, model: str | None = None, **overrides) -> LLMEngine:
        """``LLMEngine(EngineConfig(model=model, **overrides))``.

        Raises:
            EngineError: an unknown config field.
        """
        unknown = set(overrides) - EngineConfig.field_names()
        if unknown:
            raise EngineError(f"unknown engine option(s): {sorted(unknown)}")
        return cls(EngineConfig(model=model, **overrides))

    # [TRITON] an engine from an architecture alone (GPU benchmarks of the Llama-3-8B shape)
    @classmethod
    def from_config(cls, folder, weights=None, **overrides) -> LLMEngine:
        """An engine for the architecture in ``folder/config.json`` (Hugging Face Llama format)
        with the tokenizer of ``folder/tokenizer.json`` and random weights (transformers'
        initialisation, seeded by ``seed``), or ``weights`` (HF-named tensors, any device).

        Raises:
            EngineError: an unknown config field or an unsupported architecture.
            ModelNotFoundError: ``tokenizer.json`` is missing.
        """
        from pathlib import Path

        from .loader import LoadedModel
        from .loader.hf_loader import read_hf_config, read_hf_tokenizer

        unknown = set(overrides) - EngineConfig.field_names()
        if unknown:
            raise EngineError(f"unknown engine option(s): {sorted(unknown)}")
        folder = Path(folder)
        loaded = LoadedModel(
            config=read_hf_config(folder),
            weights=weights,
            tokenizer=read_hf_tokenizer(folder),
            path=folder,
        )
        return cls(EngineConfig(model=str(folder), **overrides), loaded=loaded)

    # [/TRITON]

    # ---- requests ------------------------------------------------------------------------
    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams | None = None,
        cache_salt: str | None = None,
        prompt: str | None = None,
        arrival_time: float | None = None,
    ) -> None:
        """Queue a request.

        Raises:
            EngineError: duplicate ``request_id``, empty prompt, or a token id out of range.
            RequestTooLongError: the prompt leaves no room for one output token within
                ``max_model_len``, or can never fit the KV pool (message names the lengths).
        """
        params = params or SamplingParams()
        if request_id in self._requests:
            raise EngineError(f"request id {request_id!r} is already in use")
        ids = list(prompt_token_ids)
        if not ids:
            raise EngineError("the prompt is empty; send at least one token")
        vocab = self.model_config.vocab_size
        bad = [t for t in ids if not isinstance(t, int) or not 0 <= t < vocab]
        if bad:
            raise EngineError(f"prompt token id {bad[0]!r} is out of range 0..{vocab - 1}")
        if len(ids) >= self.max_model_len:
            raise RequestTooLongError(
                f"prompt is {len(ids)} tokens; this model's context is {self.max_model_len} "
                f"tokens (max_model_len), which must hold the prompt plus at least one output token",
                prompt_len=len(ids),
                limit=self.max_model_len,
            )
        pool_tokens = self.kv_cache_manager.num_blocks * self.config.block_size
        if len(ids) + 1 > pool_tokens:
            raise RequestTooLongError(
                f"prompt is {len(ids)} tokens but the KV cache holds at most {pool_tokens} tokens "
                f"({self.kv_cache_manager.num_blocks} blocks of {self.config.block_size}); "
                f"raise kv_cache_memory or num_kv_blocks",
                prompt_len=len(ids),
                limit=pool_tokens,
            )
        seq_limit = self.scheduler.max_sequence_tokens
        if len(ids) + 1 > seq_limit:
            raise RequestTooLongError(
                f"prompt is {len(ids)} tokens but with chunked prefill off one step computes at "
                f"most {seq_limit} tokens (max_num_batched_tokens); shorten the prompt or enable "
                f"chunked prefill",
                prompt_len=len(ids),
                limit=seq_limit,
            )
        max_total = min(self.max_model_len, seq_limit)
        if params.max_tokens is not None:
            max_total = min(max_total, len(ids) + params.max_tokens)
        now = time.monotonic() if arrival_time is None else arrival_time
        seqs = []
        for i in range(params.n):
            seq = Sequence(
                seq_id=request_id if i == 0 else f"{request_id}#{i}",
                request_id=request_id,
                index=i,
                prompt_token_ids=ids,
                params=params,
                arrival_time=now,
                cache_salt=cache_salt,
                generator=make_generator(params.seed, i, self.runner.device),
                max_total_len=max_total,
            )
            seqs.append(seq)
        seqs[0].num_forks = params.n - 1
        stop_ids = set(params.stop_token_ids or ())
        if not params.ignore_eos:
            stop_ids |= self.tokenizer.stop_token_ids
        state = _RequestState(
            request_id=request_id,
            prompt_token_ids=ids,
            params=params,
            samples=[
                _SampleState(s, StreamDetokenizer(self.tokenizer, ids, params.skip_special_tokens))
                for s in seqs
            ],
            metrics=RequestMetrics(arrival_time=now),
            prompt=prompt,
            stop_ids=frozenset(stop_ids),
        )
        self._requests[request_id] = state
        for s in seqs:
            self._seq_to_req[s.seq_id] = state
        self.scheduler.add(seqs[0])

    def abort_request(self, request_id: str) -> None:
        """Stop a request now and free its blocks; unknown ids are a no-op."""
        state = self._requests.pop(request_id, None)
        if state is None:
            return
        for s in state.samples:
            if not s.seq.is_finished:
                self.scheduler.finish(s.seq, SequenceStatus.FINISHED_ABORTED)
            if s.finish_reason is None:
                s.finish_reason = "abort"
            self._seq_to_req.pop(s.seq.seq_id, None)

    def has_unfinished_requests(self) -> bool:
        """True while any added request has not finished (waiting, running or preempted)."""
        return bool(self._requests)

    def get_num_unfinished_requests(self) -> int:
        """Number of added requests that have not finished (waiting, running or preempted)."""
        return len(self._requests)

    # ---- the step ------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Run one scheduler step; return the outputs of the requests that advanced (each
        cumulative so far; ``finished`` set on the last one)."""
        sched = self.scheduler.schedule()
        if sched.is_empty:
            return []
        now = time.monotonic()
        tables = self.kv_cache_manager.block_table_array([s.seq.seq_id for s in sched.scheduled])
        self.runner.swap(sched.swap_out, sched.swap_in)
        self.runner.copy_blocks(sched.block_copies)
        batch = self.runner.prepare(sched, tables)
        logits = self.runner.forward_logits(batch)

        # rows to sample: each sampling sequence once, plus its unforked siblings
        row_src, row_seqs = [], []
        for r, i in enumerate(batch.sample_rows):
            seq = sched.scheduled[i].seq
            row_src.append(r)
            row_seqs.append(seq)
            if seq.num_forks:
                for sib in self._seq_to_req[seq.seq_id].samples[1:]:
                    row_src.append(r)
                    row_seqs.append(sib.seq)
        if len(row_src) != logits.shape[0]:
            logits = logits[torch.tensor(row_src, dtype=torch.long, device=logits.device)]
        sampled = (
            self.runner.sample(
                logits, [s.params for s in row_seqs], [s.generator for s in row_seqs]
            )
            if row_seqs
            else None
        )

        advanced: dict[str, _RequestState] = {}
        seq_to_req = self._seq_to_req
        cache_blocks = self.kv_cache_manager.cache_computed_blocks
        for s in sched.scheduled:
            seq = s.seq
            start = s.num_computed
            end = start + s.num_new_tokens
            seq.num_computed_tokens = end
            cache_blocks(seq)  # a dict lookup unless a block was completed
            state = seq_to_req.get(seq.seq_id)
            if state is not None:
                if state.metrics.first_scheduled_time is None:
                    state.metrics.first_scheduled_time = now
                advanced[state.request_id] = state
            num_prompt = len(seq.prompt_token_ids)
            if start < num_prompt:
                self._metrics.prompt_tokens += min(end, num_prompt) - start
        done = time.monotonic()
        if sampled is not None:
            # fork n > 1 siblings off sample 0 first (before sample 0 may finish and free)
            for seq in row_seqs:
                if seq.index > 0 and seq.status == SequenceStatus.WAITING:
                    parent = seq_to_req[seq.seq_id].samples[0].seq
                    seq.num_computed_tokens = parent.num_computed_tokens
                    seq.num_cached_tokens = parent.num_cached_tokens
                    self.kv_cache_manager.fork(parent, seq)
                    self.scheduler.add_running(seq)
                elif seq.num_forks:
                    seq.num_forks = 0
            self._metrics.generation_tokens += len(row_seqs)
            append = self._append_token
            for seq, token, lps, lp in zip(
                row_seqs, sampled.token_ids, sampled.logprobs, sampled.sampled_logprob
            ):
                state = seq_to_req[seq.seq_id]
                append(state, state.samples[seq.index], token, lps, lp, done)
        if self.config.debug_checks:
            self.scheduler.check_invariants()
        outputs = [self._make_output(st) for st in advanced.values()]
        for st, out in zip(advanced.values(), outputs):
            if out.finished:
                self._finish_request(st, done)
        return outputs

    def _append_token(
        self,
        state: _RequestState,
        sample: _SampleState,
        token: int,
        logprobs,
        sampled_lp: float,
        now: float,
    ) -> None:
        """Record one sampled token of ``sample`` (``generation_tokens`` is counted by the
        caller): metrics, log-probs, stop token / detokenized text / stop strings, length;
        finish the sequence when it stops."""
        seq = sample.seq
        tokens = seq.all_token_ids
        tokens.append(token)
        metrics = state.metrics
        if metrics.first_token_time is None:
            metrics.first_token_time = now
            self._metrics.ttft.append(now - metrics.arrival_time)
        metrics.last_token_time = now
        params = state.params
        if params.logprobs is not None:
            seq.logprobs.append(logprobs)
        seq.cumulative_logprob += sampled_lp
        if token in state.stop_ids:
            sample.finish_reason, sample.stop_reason = "stop", token
        else:
            delta = sample.detok.add(token)
            if delta:
                sample.text += delta
                if params.stop:
                    self._check_stop_strings(sample, params.stop, len(delta))
        if sample.finish_reason is None and len(tokens) >= seq.max_total_len:
            sample.finish_reason = "length"
        if sample.finish_reason is not None:
            status = (
                SequenceStatus.FINISHED_STOPPED
                if sample.finish_reason == "stop"
                else SequenceStatus.FINISHED_LENGTH
            )
            self.scheduler.finish(seq, status)

    @staticmethod
    def _check_stop_strings(sample: _SampleState, stops: list[str], delta_len: int) -> None:
        """Cut the text at the earliest occurrence of any stop string (whichever comes first in
        the text, not in the list), looking only where the last ``delta_len`` characters could
        have completed one."""
        text = sample.text
        best_idx, best = -1, None
        for stop in stops:
            start = max(0, len(text) - delta_len - len(stop) + 1)
            idx = text.find(stop, start)
            if idx != -1 and (best is None or idx < best_idx):
                best_idx, best = idx, stop
        if best is not None:
            sample.text = text[:best_idx]
            sample.finish_reason, sample.stop_reason = "stop", best

    @staticmethod
    def _visible_text(sample: _SampleState, stops: list[str]) -> str:
        """While running, hold back a tail that could still become a stop string."""
        text = sample.text
        if sample.finish_reason is not None or not stops:
            return text
        hold = 0
        for stop in stops:
            for k in range(min(len(stop) - 1, len(text)), hold, -1):
                if text.endswith(stop[:k]):
                    hold = k
                    break
        return text[: len(text) - hold] if hold else text

    def _make_output(self, state: _RequestState) -> RequestOutput:
        outs = []
        params = state.params
        want_lp = params.logprobs is not None
        stops = params.stop
        finished = True
        for s in state.samples:
            seq = s.seq
            if s.finish_reason is None:
                finished = False
            # positional: index, text, token_ids, finish_reason, stop_reason, logprobs,
            # cumulative_logprob (half the cost of keywords; this runs per request per step)
            outs.append(
                CompletionOutput(
                    seq.index,
                    self._visible_text(s, stops) if stops else s.text,
                    seq.all_token_ids[len(seq.prompt_token_ids) :],  # a new list
                    s.finish_reason,
                    s.stop_reason,
                    list(seq.logprobs) if want_lp else None,
                    seq.cumulative_logprob if want_lp else None,
                )
            )
        cached = state.samples[0].seq.num_cached_tokens
        # positional: request_id, prompt_token_ids, num_cached_tokens, outputs, finished,
        # metrics, prompt
        return RequestOutput(
            state.request_id,
            state.prompt_token_ids,
            cached if cached > 0 else 0,
            outs,
            finished,
            state.metrics,
            state.prompt,
        )

    def _finish_request(self, state: _RequestState, now: float) -> None:
        state.metrics.finish_time = now
        self._metrics.requests_finished += 1
        for s in state.samples:
            n = s.seq.num_output_tokens
            if n >= 2 and state.metrics.first_token_time is not None:
                self._metrics.tpot.append((now - state.metrics.first_token_time) / (n - 1))
            self._seq_to_req.pop(s.seq.seq_id, None)
        self._requests.pop(state.request_id, None)

    # ---- metrics -------------------------------------------------------------------------
    @property
    def metrics(self) -> EngineMetrics:
        """A snapshot (see :class:`~local_engine.metrics.EngineMetrics`)."""
        kv = self.kv_cache_manager
        m = self._metrics
        return EngineMetrics(
            prefix_cache_queries=kv.prefix_cache_queries,
            prefix_cache_hits=kv.prefix_cache_hits,
            kv_usage=kv.usage(),
            num_blocks=kv.num_blocks,
            num_free_blocks=kv.num_free_blocks,
            num_running=self.scheduler.num_running,
            num_waiting=self.scheduler.num_waiting,
            num_preemptions=self.scheduler.num_preemptions,
            num_swaps=self.scheduler.num_swaps,
            num_evictions=kv.pool.num_evictions,
            prompt_tokens=m.prompt_tokens,
            generation_tokens=m.generation_tokens,
            requests_finished=m.requests_finished,
            ttft_seconds=list(m.ttft),
            tpot_seconds=list(m.tpot),
        )
