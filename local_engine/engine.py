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

import torch

from .config import EngineConfig
from .detokenizer import token_text_table
from .errors import EngineError, RequestTooLongError
from .kv_cache.disk_glue import disk_metrics, flush_to_disk, open_disk_tier, spill_to_disk
from .kv_cache.disk_store import model_identity
from .kv_cache.disk_tier import DiskTier
from .kv_cache.manager import KVCacheManager
from .loader import load_model
from .metrics import EngineMetrics, MetricsRecorder
from .output_processor import OutputProcessor, RequestState
from .outputs import RequestOutput
from .runner import ModelRunner, kv_block_bytes, plan_num_blocks
from .sampling import SamplerOutput, SamplingParams, apply_token_bitmask, make_generator
from .scheduler import Scheduler, SchedulerOutput
from .sequence import Sequence, SequenceStatus
from .spec_decode.decoder import SpeculativeDecoder
from .spec_decode.rejection_sampler import VerifyOutput
from .structured import GrammarCompiler, advance, verify_masks
from .tokenizer import Tokenizer

logger = logging.getLogger("local_engine")


def cpu_threads(requested: int | None) -> int:
    """Intra-op threads for CPU inference: ``requested`` when given, else torch's default (one
    per core) minus the cores other processes already keep busy (the 1-minute load average),
    at least 1. On a shared, busy 2-core box two threads that meet at every operator's barrier
    wait for each other's time slices: measured 4-15x slower than one thread there, while on an
    idle box two threads prefill ~1.8x faster than one."""
    if requested is not None:
        logger.info("CPU threads: %d (set by num_threads / serve --threads)", requested)
        return requested
    default = torch.get_num_threads()
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform
        load = 0.0
    cores = os.cpu_count() or default
    n = max(1, min(default, cores - int(load + 0.5)))
    logger.info(
        "CPU threads: %d (auto: %d cores, 1-minute load average %.1f; "
        "num_threads / serve --threads overrides)",
        n,
        cores,
        load,
    )
    return n


class LLMEngine:
    """The engine: ``add_request`` queues, each :meth:`step` schedules, runs the model and
    returns the outputs of the requests that advanced (data flow in the module docstring;
    the public contract in "Engine contracts", ``docs/DESIGN.md``).

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
        dtype = config.torch_dtype()
        if config.device == "cpu":
            torch.set_num_threads(cpu_threads(config.num_threads))
        # ``loaded``: a LoadedModel built by from_config (weights None = random)
        if loaded is None:
            loaded = load_model(
                config.model,
                weight_dtype=config.cpu_weight_dtype(),
                act_dtype=dtype,
                cache=config.weight_cache,
            )
        # the disk tier's model identity, while the loaded weights are still here
        disk_identity = (
            model_identity(loaded.path, loaded.weights, config.seed)
            if config.disk_cache_dir is not None
            else None
        )
        self.model_config = mc = loaded.config
        self.model_name = mc.name
        self.model_path = loaded.path
        self.tokenizer = Tokenizer(loaded.tokenizer)
        self.max_model_len = config.max_model_len or mc.max_position_embeddings
        if str(config.device).startswith("cuda") and not torch.cuda.is_available():
            raise EngineError(f"device {config.device!r} requested but CUDA is not available")
        # weights go to the device first, so the pool is sized from the memory left
        self.runner = ModelRunner(config, mc, loaded.weights, self.max_model_len)
        del loaded
        self.spec: SpeculativeDecoder | None = None
        if config.speculative is not None:
            config.speculative.check_engine(config.max_num_batched_tokens, mc.num_layers)
            self.spec = SpeculativeDecoder(
                config.speculative, config, self.runner, self.tokenizer, self.max_model_len
            )
        kv_format = self.runner.kv_format
        num_blocks = plan_num_blocks(config, mc, kv_format, self.max_model_len)
        block_bytes = kv_block_bytes(mc, config.block_size, kv_format)
        if self.spec is not None:
            draft_bytes = self.spec.kv_block_bytes()  # a draft model's cache, same block ids
            if draft_bytes and config.num_kv_blocks is None:
                num_blocks = max(1, num_blocks * block_bytes // (block_bytes + draft_bytes))
            self.spec.allocate_kv_cache(num_blocks)
        self.runner.allocate_kv_cache(num_blocks)
        num_cpu_blocks = config.swap_space // block_bytes
        num_tier_blocks = config.cpu_cache_memory // block_bytes
        if config.cpu_cache_memory and not num_tier_blocks:
            raise EngineError(
                f"cpu_cache_memory={config.cpu_cache_memory} bytes holds no KV block (one block "
                f"is {block_bytes} bytes here); give at least that, or 0 to turn the tier off"
            )
        # swap space and the CPU tier share one host pool (kv_cache/cpu_tier.py)
        self.runner.allocate_swap_space(num_cpu_blocks + num_tier_blocks)
        self.disk_tier: DiskTier | None = None
        if disk_identity is not None:
            self.disk_tier = open_disk_tier(config, mc, kv_format, disk_identity, self.runner)
        self.kv_cache_manager = KVCacheManager(
            num_blocks,
            config.block_size,
            config.enable_prefix_caching,
            num_cpu_blocks,
            num_tier_blocks,
            disk=self.disk_tier.store if self.disk_tier is not None else None,
            residual=self.runner.residual_slots(),
        )
        self.scheduler = Scheduler(
            self.kv_cache_manager,
            config.max_num_seqs,
            config.max_num_batched_tokens,
            config.enable_chunked_prefill,
        )
        token_text_table(self.tokenizer, True)  # built once here, not on the first request
        self._metrics = MetricsRecorder()
        self.output_processor = OutputProcessor(self.tokenizer, self._metrics)
        self.grammar = GrammarCompiler(self.tokenizer, mc.vocab_size)
        self.load_seconds = time.monotonic() - t0
        logger.info(
            "%s loaded in %.1fs on %s (%s, weights %s, %d threads); KV cache %s: %d blocks x %d tokens = %d tokens max "
            "(%.1f MiB, %d bytes/token); swap space %d blocks; CPU tier %d blocks; max_model_len=%d",
            self.model_name,
            self.load_seconds,
            config.device,
            str(dtype).replace("torch.", ""),
            config.cpu_weight_dtype() or str(dtype).replace("torch.", ""),
            torch.get_num_threads(),
            kv_format.describe(),
            num_blocks,
            config.block_size,
            num_blocks * config.block_size,
            num_blocks * block_bytes / 2**20,
            block_bytes // config.block_size,
            num_cpu_blocks,
            num_tier_blocks,
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

    @classmethod
    def from_config(cls, folder, weights=None, **overrides) -> LLMEngine:
        """An engine for the architecture in ``folder/config.json`` (Hugging Face Llama format)
        with the tokenizer of ``folder/tokenizer.json`` and random weights (transformers'
        initialisation, seeded by ``seed``), or ``weights`` (HF-named tensors, any device):
        an engine from an architecture alone, for benchmarks of shapes with no checkpoint
        here (``bench/engine_gpu.py``: Llama-3-8B).

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
            EngineError: duplicate ``request_id``, empty prompt, a token id out of range,
                a ``num_speculative_tokens`` the engine cannot honour, or a
                ``params.structured`` grammar that does not compile (``GrammarError``).
            RequestTooLongError: the prompt leaves no room for one output token within
                ``max_model_len``, or can never fit the KV pool (message names the lengths).
        """
        params = params or SamplingParams()
        if self.spec is not None:
            self.spec.request_k(params)  # raises for a K above the engine's
        elif params.num_speculative_tokens:
            raise EngineError(
                "num_speculative_tokens needs speculative decoding on in the engine "
                "(EngineConfig.speculative / promptcache serve --speculative)"
            )
        if request_id in self.output_processor:
            raise EngineError(f"request id {request_id!r} is already in use")
        ids = list(prompt_token_ids)
        seq_limit = self._check_prompt(ids)
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
            if params.structured is not None:  # GrammarError (an EngineError) when invalid
                seq.matcher = self.grammar.matcher(params.structured)
            seqs.append(seq)
        # samples 1..n-1 fork off sample 0 when its prompt is computed (sharing its blocks)
        seqs[0].num_forks = params.n - 1
        for seq in seqs[1:]:
            seq.status = SequenceStatus.FORK_PENDING
        self.output_processor.add_request(seqs, params, now, prompt)
        self.scheduler.add(seqs[0])

    def _check_prompt(self, ids: list[int]) -> int:
        """Refuse a prompt that cannot run; returns the most tokens its sequence may hold
        (:attr:`Scheduler.max_sequence_tokens`). Raises as :meth:`add_request` says."""
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
        return seq_limit

    def abort_request(self, request_id: str) -> None:
        """Stop a request now and free its blocks; unknown ids are a no-op."""
        for seq in self.output_processor.abort_request(request_id):
            self.scheduler.finish(seq, SequenceStatus.FINISHED_ABORTED)

    def has_unfinished_requests(self) -> bool:
        """True while any added request has not finished (waiting, running or preempted)."""
        return len(self.output_processor) > 0

    # ---- the step ------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Run one scheduler step; return the outputs of the requests that advanced (each
        cumulative so far; ``finished`` set on the last one).

        Schedule, run the model, sample (:meth:`_execute`); record the computed tokens
        (:meth:`_advance`); fork pending samples; hand each sampled token to the
        :class:`~local_engine.output_processor.OutputProcessor`, finishing the sequences it
        says stopped; build the outputs."""
        if self.spec is not None:
            # drafts to make room for; a token is worth less when no request waits for a slot
            self.spec.plan(self.scheduler.running, waiting=bool(self.scheduler.waiting))
        self._poll_restores()
        sched = self.scheduler.schedule()
        if self.disk_tier is not None:
            spill_to_disk(self.kv_cache_manager, self.runner, self.disk_tier)
        if sched.is_empty:
            if sched.has_transfers:  # a restore began with nothing else to run
                self._move_blocks(sched)
            if self.kv_cache_manager.num_restores_in_flight:  # nothing runs meanwhile
                if self.runner.kv_transfer is not None:
                    self.runner.kv_transfer.wait_oldest()
                if self.disk_tier is not None:
                    self.disk_tier.wait_any()
            return []
        now = time.monotonic()
        shape = self.spec.step_shape(sched.scheduled) if self.spec is not None else None
        row_seqs, sampled = self._execute(sched)
        if shape is not None:
            assert self.spec is not None
            self.spec.observe(shape, time.monotonic() - now)  # the cost model's step times
        advanced = self._advance(sched, now)
        done = time.monotonic()
        if isinstance(sampled, VerifyOutput):
            self._fork_pending(row_seqs)
            self._commit_verified(row_seqs, sampled, done)
        elif sampled is not None:
            # fork n > 1 siblings off sample 0 first (before sample 0 may finish and free)
            self._fork_pending(row_seqs)
            self._metrics.generation_tokens += len(row_seqs)
            append = self.output_processor.append_token
            finish = self.scheduler.finish
            stops = self.tokenizer.stop_token_ids
            for seq, token, lps, lp in zip(
                row_seqs, sampled.token_ids, sampled.logprobs, sampled.sampled_logprob
            ):
                if seq.matcher is not None:
                    advance(seq.matcher, (token,), stops)
                status = append(seq, token, lps, lp, done)
                if status is not None:
                    finish(seq, status)
        if self.config.debug_checks:
            self.scheduler.check_invariants()
        return self.output_processor.make_outputs(advanced.values(), done)

    def _poll_restores(self) -> None:
        """Hand the restore copies finished since the last step (CPU tier, disk reads) to the
        KV-cache manager."""
        kv = self.kv_cache_manager
        if not kv.num_restores_in_flight:
            return
        if self.runner.kv_transfer is not None:
            kv.finish_restores(self.runner.kv_transfer.poll())
        if self.disk_tier is not None:
            for job_id, failed in self.disk_tier.poll():
                kv.finish_restores([job_id], {job_id: failed})

    def close(self) -> None:
        """Write the cached blocks not on disk yet (device pool and CPU tier) to the disk tier
        and wait for its writes (a no-op without one). The engine stays usable."""
        if self.disk_tier is not None:
            flush_to_disk(self.kv_cache_manager, self.runner, self.disk_tier)

    def _execute(
        self, sched: SchedulerOutput
    ) -> tuple[list[Sequence], SamplerOutput | VerifyOutput | None]:
        """Swap and copy blocks, run the model on the scheduled tokens and sample: one row per
        sampling sequence, plus one per sibling still to fork off it (``FORK_PENDING``; they
        sample from the parent's logits). Returns the rows' sequences and the sampler's
        output (None when no sequence samples this step)."""
        tables = self.kv_cache_manager.block_table_array([s.seq.seq_id for s in sched.scheduled])
        self._move_blocks(sched)
        self.runner.copy_blocks(sched.block_copies)
        if self.spec is not None:
            self.spec.copy_blocks(sched.block_copies)
            self.spec.draft(sched.scheduled, tables)  # the drafts the scheduler made room for
        batch = self.runner.prepare(sched, tables)
        logits = self.runner.forward_logits(batch)
        if batch.logits_rows is not None:  # some sequence verifies drafts
            return self._verify(sched, batch, logits)
        row_src: list[int] = []
        row_seqs: list[Sequence] = []
        seq_to_req = self.output_processor.seq_to_req
        for r, i in enumerate(batch.sample_rows):
            seq = sched.scheduled[i].seq
            row_src.append(r)
            row_seqs.append(seq)
            if seq.num_forks:
                for sib in seq_to_req[seq.seq_id].samples[1:]:
                    row_src.append(r)
                    row_seqs.append(sib.seq)
        if not row_seqs:
            return row_seqs, None
        if len(row_src) != logits.shape[0]:
            logits = logits[torch.tensor(row_src, dtype=torch.long, device=logits.device)]
        params = [s.params for s in row_seqs]
        jobs = [(s.matcher, r) for r, s in enumerate(row_seqs) if s.matcher is not None]
        bitmask = self.grammar.fill_masks(jobs, len(row_seqs)) if jobs else None
        generators = [s.generator for s in row_seqs]
        return row_seqs, self.runner.sample(logits, params, generators, bitmask)

    def _move_blocks(self, sched: SchedulerOutput) -> None:
        """The step's copies between the device pool and host memory, in the order that keeps
        every read before the write of the same block: CPU-tier offloads of evicted blocks
        (the blocks are handed out again this step), swap-out then swap-in, CPU-tier restores
        (into fresh blocks; asynchronous on CUDA, polled at the next step)."""
        xfer = self.runner.kv_transfer
        if xfer is not None:
            xfer.offload(sched.tier_offload)
        self.runner.swap(sched.swap_out, sched.swap_in)
        for job in sched.tier_restore:
            if job.copies:
                assert xfer is not None
                xfer.restore(job.job_id, job.copies)
            if job.disk_reads:
                assert self.disk_tier is not None
                self.disk_tier.read(job.job_id, job.disk_reads)

    def _verify(self, sched: SchedulerOutput, batch, logits) -> tuple[list[Sequence], VerifyOutput]:
        """Speculative step: each sampling sequence's ``1 + drafts`` logits rows go to the
        rejection sampler (a ``FORK_PENDING`` sibling samples from its parent's one row)."""
        row_seqs: list[Sequence] = []
        rows: list[int] = []
        seq_to_req = self.output_processor.seq_to_req
        start = 0
        for i, n_rows in zip(batch.sample_rows, batch.logits_rows):
            seq = sched.scheduled[i].seq
            row_seqs.append(seq)
            rows.extend(range(start, start + n_rows - seq.num_spec_pad))  # padding: not verified
            if seq.num_forks:
                for sib in seq_to_req[seq.seq_id].samples[1:]:
                    row_seqs.append(sib.seq)
                    rows.append(start + n_rows - seq.num_spec_pad - 1)
            start += n_rows
        if len(rows) != logits.shape[0]:
            logits = logits[torch.tensor(rows, dtype=torch.long, device=logits.device)]
        # constrained rows: each draft position masked by the grammar after the drafts before
        # it, so a draft outside the grammar has probability 0 and is rejected
        drafts = [s.spec_token_ids[: len(s.spec_token_ids) - s.num_spec_pad] for s in row_seqs]
        bitmask = verify_masks(self.grammar, [s.matcher for s in row_seqs], drafts, logits.shape[0])
        if bitmask is not None:
            with torch.inference_mode():  # the logits are inference tensors
                logits = apply_token_bitmask(logits.float(), bitmask)
        assert self.spec is not None
        return row_seqs, self.spec.verify(logits, row_seqs)

    def _commit_verified(self, row_seqs: list[Sequence], out: VerifyOutput, now: float) -> None:
        """Append each sequence's emitted tokens (accepted drafts, then the resampled or bonus
        token) until one ends it; advance ``num_computed_tokens`` over the accepted drafts only
        and cache the blocks they completed (so a block is hashed once all its tokens are
        accepted); give back blocks that held only rejected drafts; count per request."""
        append = self.output_processor.append_token
        finish = self.scheduler.finish
        seq_to_req = self.output_processor.seq_to_req
        kv = self.kv_cache_manager
        spec = self.spec
        assert spec is not None
        generated = 0
        for seq, toks, lps, lp, accepted in zip(
            row_seqs, out.token_ids, out.logprobs, out.sampled_logprob, out.num_accepted
        ):
            drafted = len(seq.spec_token_ids) - seq.num_spec_pad
            if drafted:
                m = seq_to_req[seq.seq_id].metrics
                m.num_draft_tokens += drafted
                m.num_accepted_tokens += accepted
                m.num_verify_steps += 1
            status = None
            for j, tok in enumerate(toks):
                generated += 1
                if seq.matcher is not None:
                    advance(seq.matcher, (tok,), self.tokenizer.stop_token_ids)
                status = append(seq, tok, lps[j], lp[j], now)
                if status is not None:
                    finish(seq, status)
                    break
            if status is None and accepted:
                seq.num_computed_tokens += accepted
                kv.cache_computed_blocks(seq)
            spec.rollback(seq, kv)
        self._metrics.generation_tokens += generated

    def _advance(self, sched: SchedulerOutput, now: float) -> dict[str, RequestState]:
        """Mark the scheduled tokens computed, cache the blocks they completed and count
        prompt tokens; returns the requests that advanced, by id (first-scheduled time set).
        Drafted tokens are not marked: they count once verification accepts them."""
        advanced: dict[str, RequestState] = {}
        seq_to_req = self.output_processor.seq_to_req
        cache_blocks = self.kv_cache_manager.cache_computed_blocks
        for s in sched.scheduled:
            seq = s.seq
            start = s.num_computed
            end = start + s.num_new_tokens
            if end > len(seq.all_token_ids):  # drafts: see _commit_verified
                end = len(seq.all_token_ids)
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
        return advanced

    def _fork_pending(self, row_seqs: list[Sequence]) -> None:
        """Fork each ``FORK_PENDING`` sample among ``row_seqs`` off sample 0 (whose prompt is now
        computed): it shares sample 0's blocks copy-on-write and joins the running set."""
        seq_to_req = self.output_processor.seq_to_req
        for seq in row_seqs:
            if seq.status == SequenceStatus.FORK_PENDING:
                parent = seq_to_req[seq.seq_id].samples[0].seq
                seq.num_computed_tokens = parent.num_computed_tokens
                seq.num_cached_tokens = parent.num_cached_tokens
                self.kv_cache_manager.fork(parent, seq)
                self.scheduler.add_running(seq)
            elif seq.num_forks:
                seq.num_forks = 0

    # ---- metrics -------------------------------------------------------------------------
    @property
    def metrics(self) -> EngineMetrics:
        """A snapshot (see :class:`~local_engine.metrics.EngineMetrics`)."""
        kv = self.kv_cache_manager
        m = self._metrics
        xfer = self.runner.kv_transfer
        if xfer is not None:
            xfer.poll_timing()
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
            kv_cache_dtype=self.runner.kv_format.describe().split(" ")[0],
            block_size=self.config.block_size,
            num_evictions=kv.pool.num_evictions,
            prompt_tokens=m.prompt_tokens,
            generation_tokens=m.generation_tokens,
            requests_finished=m.requests_finished,
            ttft_seconds=list(m.ttft),
            tpot_seconds=list(m.tpot),
            prefix_cache_hits_cpu=kv.prefix_cache_hits_cpu,
            gpu_cache_blocks_resident=len(kv.pool.hash_to_block),
            cpu_cache_blocks_resident=kv.host.num_tier_resident,
            cpu_cache_num_blocks=kv.host.num_tier_blocks,
            num_swap_blocks=kv.host.num_swap_blocks,
            cpu_cache_evictions=kv.host.num_tier_evictions,
            cpu_cache_offers_refused=kv.host.num_offers_refused,
            kv_bytes_gpu_to_cpu=xfer.bytes_to_host if xfer else 0,
            kv_bytes_cpu_to_gpu=xfer.bytes_to_device if xfer else 0,
            kv_transfer_seconds_gpu_to_cpu=xfer.seconds_to_host if xfer else 0.0,
            kv_transfer_seconds_cpu_to_gpu=xfer.seconds_to_device if xfer else 0.0,
            **disk_metrics(kv, self.disk_tier),
            **(
                {
                    "spec_num_draft_tokens": self.spec.counters.num_draft_tokens,
                    "spec_num_accepted_tokens": self.spec.counters.num_accepted_tokens,
                    "spec_num_verify_steps": self.spec.counters.num_verify_steps,
                }
                if self.spec is not None
                else {}
            ),
        )
