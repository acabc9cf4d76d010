"""Draft-model drafting: a small model (or the target's own first layers) proposes K tokens
autoregressively over the same paged block tables as the target.

The draft's KV cache lives in the target's block-id space: the draft's cache tensor has the same
number of blocks and block size, so a sequence's block table addresses both, and the target's
allocation, copy-on-write and freeing cover the draft's slots too (vLLM v1 shares block tables
between the target and its EAGLE head the same way). Two kinds:

- a separate checkpoint (``{"model": PATH}``): its own layers and cache tensor. Per sequence the
  proposer remembers how many leading tokens have draft K/V; a proposal first runs the draft over
  the committed tokens it has not seen (the whole prompt the first time, then the tokens accepted
  since, a few per step), then K - 1 single-token steps. A preemption or swap (the blocks change)
  makes it start over.
- self-speculation (``{"layers": n}``, LayerSkip-style): the target's own embedding, first ``n``
  decoder layers, final norm and LM head, and the target's own cache for those layers: the target
  already wrote K/V for every computed token there, so a proposal runs only the newest token and
  then K - 1 steps. The draft's writes at the drafted positions are overwritten by the target's
  verification pass in the same step, which computes those positions.

Drafted tokens are drawn from the draft's *processed* distribution ``q`` (the request's
temperature, top-k and top-p; argmax for greedy requests) with the request's generator, and
``q`` is returned for the rejection sampler.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence as Seq

import numpy as np
import torch

from ..attention.metadata import AttentionMetadata
from ..errors import EngineError
from ..sequence import Sequence
from .config import SpeculativeConfig
from .rejection_sampler import processed_probs


def paged_batch(
    tokens: Seq[Seq[int]],
    starts: Seq[int],
    block_tables: np.ndarray,
    block_size: int,
    device,
    backend: str | None,
) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
    """Flat inputs for running ``tokens[i]`` at positions ``starts[i]..`` of sequence ``i``.

    Args:
        tokens: per sequence the new token ids (at least one each).
        starts: per sequence the position of its first new token (its K/V before that is cached).
        block_tables: int32 ``[n, max_blocks]``, covering every new position.

    Returns:
        ``input_ids`` int64 ``[T]``, ``positions`` int64 ``[T]`` and the
        :class:`AttentionMetadata` (logits of each sequence's last new token).
    """
    news = np.array([len(t) for t in tokens], dtype=np.int64)
    cu = np.zeros(len(news) + 1, dtype=np.int64)
    np.cumsum(news, out=cu[1:])
    total = int(cu[-1])
    seq_of = np.repeat(np.arange(len(news)), news)
    pos = np.arange(total, dtype=np.int64) - np.repeat(cu[:-1] - np.asarray(starts), news)
    bt = np.asarray(block_tables, dtype=np.int32)
    slots = bt[seq_of, pos // block_size].astype(np.int64) * block_size + pos % block_size
    ids = np.fromiter((x for t in tokens for x in t), dtype=np.int64, count=total)

    def dev(a, dtype=torch.int64):
        return torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=dtype)

    meta = AttentionMetadata(
        slot_mapping=dev(slots),
        block_tables=dev(bt, torch.int32),
        cu_seqlens_q=dev(cu, torch.int32),
        seq_lens=dev(np.asarray(starts, dtype=np.int64) + news, torch.int32),
        logits_indices=dev(cu[1:] - 1),
        backend=backend,
    )
    return dev(ids), dev(pos), meta


def check_same_vocabulary(target_tok, draft_tok, draft_name: str) -> None:
    """Raise unless the two :class:`~local_engine.tokenizer.Tokenizer` s spell every id the same.

    Raises:
        EngineError: sizes or spellings differ (the message names the first differing id).
    """
    if target_tok.vocab_size != draft_tok.vocab_size:
        raise EngineError(
            f"draft model {draft_name} has a vocabulary of {draft_tok.vocab_size} tokens but the "
            f"target's has {target_tok.vocab_size}; use a draft that shares the target's "
            "tokenizer (or 'layers': n for the target's own first n layers)"
        )
    for i in range(target_tok.vocab_size):
        if target_tok.token_to_text(i) != draft_tok.token_to_text(i):
            raise EngineError(
                f"draft model {draft_name}: token {i} is {draft_tok.token_to_text(i)!r} but the "
                f"target's is {target_tok.token_to_text(i)!r}; use a draft that shares the "
                "target's tokenizer (or 'layers': n for the target's own first n layers)"
            )


class DraftModelProposer:
    """Proposes drafts with a draft model.

    Args:
        spec: the validated :class:`SpeculativeConfig` (method ``"draft"``).
        engine_config: the target's :class:`~local_engine.config.EngineConfig` (device, dtype,
            block size, attention backend).
        target_runner: the target's :class:`~local_engine.runner.ModelRunner` (its model and
            cache are shared by a ``layers`` draft).
        target_tokenizer: the target's tokenizer (a separate draft's must match it).
        max_model_len: longest context (the draft's rotary table length).

    Raises:
        ModelNotFoundError: no model at ``spec.model``.
        EngineError: the draft's vocabulary differs from the target's, or ``layers`` is not
            fewer than the target's layers.
    """

    def __init__(
        self,
        spec: SpeculativeConfig,
        engine_config,
        target_runner,
        target_tokenizer,
        max_model_len: int,
    ):
        self.spec = spec
        self.block_size = engine_config.block_size
        self.device = target_runner.device
        self.backend = engine_config.attention_backend
        self.target_runner = target_runner
        # unseeded requests draw their drafts from this generator (seeded ones from their own)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(engine_config.seed + 1)
        self._computed: weakref.WeakKeyDictionary[Sequence, tuple[int, int]] = (
            weakref.WeakKeyDictionary()
        )
        if spec.layers is not None:
            n_target = target_runner.model_config.num_layers
            if spec.layers >= n_target:
                raise EngineError(
                    f"draft 'layers' ({spec.layers}) must be fewer than the target's {n_target} "
                    "decoder layers"
                )
            self.runner = None
            self.model = target_runner.model
            self.shares_kv = True
        else:
            from ..loader import load_model
            from ..runner import ModelRunner
            from ..tokenizer import Tokenizer

            loaded = load_model(spec.model)
            check_same_vocabulary(target_tokenizer, Tokenizer(loaded.tokenizer), str(spec.model))
            if loaded.config.vocab_size != target_runner.model_config.vocab_size:
                raise EngineError(
                    f"draft model {spec.model} has {loaded.config.vocab_size} embedding rows but "
                    f"the target has {target_runner.model_config.vocab_size}; use a draft that "
                    "shares the target's tokenizer"
                )
            cfg = engine_config.replace(enforce_eager=True, speculative=None)
            self.runner = ModelRunner(cfg, loaded.config, loaded.weights, max_model_len)
            self.model = self.runner.model
            self.shares_kv = False

    # ---- memory --------------------------------------------------------------------------
    def kv_block_bytes(self) -> int:
        """Extra bytes per KV block the draft needs (0 for a ``layers`` draft: it shares)."""
        if self.runner is None:
            return 0
        from ..runner import kv_block_bytes

        return kv_block_bytes(self.runner.model_config, self.block_size, self.runner.kv_format)

    def allocate_kv_cache(self, num_blocks: int) -> None:
        """Allocate the draft's cache with the target's number of blocks (same block ids)."""
        if self.runner is not None:
            self.runner.allocate_kv_cache(num_blocks)

    def _kv_caches(self):
        if self.shares_kv:
            return self.target_runner.kv_caches[: self.spec.layers]
        return self.runner.kv_caches

    def copy_blocks(self, copies) -> None:
        """Mirror the target's copy-on-write block copies in the draft's own cache."""
        if self.runner is not None:
            self.runner.copy_blocks(copies)

    # ---- proposing -----------------------------------------------------------------------
    @torch.inference_mode()
    def propose(
        self, seqs: Seq[Sequence], ks: Seq[int], block_tables: np.ndarray
    ) -> tuple[list[list[int]], list[torch.Tensor | None]]:
        """Draft ``ks[i]`` tokens after the committed tokens of ``seqs[i]``.

        Args:
            seqs: sequences in decode: ``num_computed_tokens == num_tokens - 1`` for the target.
            ks: drafts wanted, each >= 1.
            block_tables: int32 ``[len(seqs), max_blocks]`` covering positions up to
                ``num_tokens + ks[i] - 1`` (the scheduler allocated the slots).

        Returns:
            ``(drafts, q)``: per sequence ``ks[i]`` token ids, and the processed draft
            probabilities ``[ks[i], vocab]`` they were drawn from (None for greedy requests).
        """
        if not seqs:
            return [], []
        caches = self._kv_caches()
        model = self.model
        drafts: list[list[int]] = [[] for _ in seqs]
        qs: list[list[torch.Tensor]] = [[] for _ in seqs]
        # pass 1: the committed tokens without draft K/V, ending with the newest token
        tokens, starts = [], []
        for seq in seqs:
            if self.shares_kv:
                start = seq.num_computed_tokens
            else:
                done, preemptions = self._computed.get(seq, (0, seq.num_preemptions))
                start = done if preemptions == seq.num_preemptions else 0
                start = min(start, seq.num_tokens - 1)
            tokens.append(seq.all_token_ids[start:])
            starts.append(start)
        live = list(range(len(seqs)))
        bt = np.asarray(block_tables)
        step = 0
        while live:
            ids, pos, meta = paged_batch(
                [tokens[i] for i in live],
                [starts[i] for i in live],
                bt[live],
                self.block_size,
                self.device,
                self.backend,
            )
            hidden = model(ids, pos, meta, caches)  # zip(layers, caches): the first n layers
            logits = model.compute_logits(hidden[meta.logits_indices])
            params = [seqs[i].params for i in live]
            greedy = [p.greedy for p in params]
            picked = logits.argmax(dim=-1)
            if not all(greedy):
                probs = processed_probs(logits, params)
                noise = torch.empty_like(probs)
                for r, i in enumerate(live):
                    g = seqs[i].generator
                    if not greedy[r]:
                        noise[r].exponential_(generator=g if g is not None else self.generator)
                        qs[i].append(probs[r])
                sampled = (probs / noise).argmax(dim=-1)
                picked = torch.where(torch.tensor(greedy, device=logits.device), picked, sampled)
            picked_l = picked.tolist()
            nxt = []
            for r, i in enumerate(live):
                drafts[i].append(picked_l[r])
                if step == 0 and not self.shares_kv:
                    self._computed[seqs[i]] = (seqs[i].num_tokens, seqs[i].num_preemptions)
                if len(drafts[i]) < ks[i]:
                    starts[i] += len(tokens[i])
                    tokens[i] = [picked_l[r]]
                    nxt.append(i)
            live = nxt
            step += 1
        q_out = [torch.stack(q) if q else None for q in qs]
        return drafts, q_out


__all__ = ["DraftModelProposer", "paged_batch", "check_same_vocabulary"]
