"""Verification of drafted tokens: greedy matching at temperature 0, modified rejection sampling
otherwise, so that the emitted tokens are distributed exactly as the target model's samples.

Modified rejection sampling (Leviathan et al. 2023, "Fast Inference from Transformers via
Speculative Decoding", Algorithm 1 and Appendix A.1; Chen et al. 2023): for drafted token ``d``
drawn from the draft distribution ``q`` at a position where the target's distribution is ``p``,
accept with probability ``min(1, p(d) / q(d))``; at the first rejection emit a token drawn from
``norm(max(0, p - q))`` and stop; when all K drafts are accepted, emit a bonus token drawn from the
target's distribution at the position after the last draft. Each emitted token is then exactly
``p``-distributed. Prompt lookup drafts deterministically, which is ``q = one_hot(d)``: accept
with probability ``p(d)``, else draw from ``p`` with ``d`` removed.

``p`` and ``q`` are both the *processed* distributions (temperature, then top-k, then top-p,
then softmax: :func:`processed_probs`), so the output matches the non-speculative sampler's
:class:`~local_engine.sampling.Sampler`, which processes logits the same way. Random draws
(the uniforms and the exponential race ``argmax(r / E)``, ``E ~ Exp(1)``, used for the resample
and the bonus) come from the request's own generator when it is seeded, so a seeded request
gets the same tokens alone or batched (given the same drafts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..sampling import Sampler, SamplingParams


def processed_probs(logits: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """float32 probabilities ``[rows, vocab]`` of ``logits`` ``[rows, vocab]`` after row i's
    temperature, top-k and top-p (``params[i]``; a greedy row is left at temperature 1), as
    :class:`~local_engine.sampling.Sampler` computes them."""
    temps = torch.tensor(
        [1.0 if p.greedy else p.temperature for p in params],
        dtype=torch.float32,
        device=logits.device,
    )
    scaled = Sampler._top_k_top_p(logits.float() / temps[:, None], params)
    return torch.softmax(scaled, dim=-1)


def accept_mask(
    uniforms: torch.Tensor, p_draft: torch.Tensor, q_draft: torch.Tensor
) -> torch.Tensor:
    """The acceptance rule: draft ``j`` is accepted iff ``u_j < min(1, p_j / q_j)``, written
    ``u_j * q_j < p_j`` (no division; ``q_j > 0`` for a sampled draft). All ``[D]`` float32."""
    return uniforms * q_draft < p_draft


@dataclass
class VerifyOutput:
    """Per sequence: the emitted tokens (``num_accepted`` drafts then one resampled or bonus
    token), their ``{token_id: logprob}`` dicts when asked (else None each) and their
    log-probabilities under the target's raw logits (0.0 when no logprobs were asked)."""

    token_ids: list[list[int]]
    num_accepted: list[int]
    logprobs: list[list[dict[int, float] | None]]
    sampled_logprob: list[list[float]]


class RejectionSampler:
    """Verifies a step's drafts for all sequences at once.

    Args:
        seed: seed of the generator unseeded requests draw from.
        device: where the logits live.
    """

    def __init__(self, seed: int = 0, device="cpu"):
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)

    def __call__(
        self,
        logits: torch.Tensor,
        draft_token_ids: Sequence[Sequence[int]],
        draft_probs: Sequence[torch.Tensor | None],
        params: Sequence[SamplingParams],
        generators: Sequence[torch.Generator | None],
    ) -> VerifyOutput:
        """Verify.

        Args:
            logits: float32 target logits ``[sum(k_i + 1), vocab]``: for sequence i,
                ``k_i + 1`` consecutive rows, the positions of its last committed token and of
                its ``k_i = len(draft_token_ids[i])`` drafts (``k_i = 0``: plain sampling).
            draft_token_ids: per sequence the drafted token ids.
            draft_probs: per sequence the draft distribution ``q`` ``[k_i, vocab]`` the drafts
                were drawn from (processed with the same params), or None for a
                deterministic drafter (prompt lookup: ``q = one_hot(d)``).
            params, generators: per sequence.

        Returns:
            :class:`VerifyOutput`.
        """
        dev = logits.device
        ks = [len(d) for d in draft_token_ids]
        starts, r = [], 0
        for k in ks:
            starts.append(r)
            r += k + 1
        if r != logits.shape[0]:
            raise ValueError(f"{logits.shape[0]} logits rows for {r} verified positions")
        logits = logits.float()
        argmax = logits.argmax(dim=-1).tolist()
        out_tokens: list[list[int]] = []
        accepted: list[int] = [0] * len(ks)
        random_seqs = [i for i, p in enumerate(params) if not p.greedy]
        for i, k in enumerate(ks):
            if params[i].greedy:
                a = 0
                drafts = draft_token_ids[i]
                while a < k and drafts[a] == argmax[starts[i] + a]:
                    a += 1
                accepted[i] = a
                out_tokens.append(list(drafts[:a]) + [argmax[starts[i] + a]])
            else:
                out_tokens.append([])
        if random_seqs:
            self._verify_random(
                logits,
                ks,
                starts,
                draft_token_ids,
                draft_probs,
                params,
                generators,
                random_seqs,
                out_tokens,
                accepted,
            )
        want_lp = any(p.logprobs is not None for p in params)
        lps: list[list[dict[int, float] | None]] = [[None] * len(t) for t in out_tokens]
        chosen_lp: list[list[float]] = [[0.0] * len(t) for t in out_tokens]
        if want_lp:
            rows = [starts[i] + j for i, t in enumerate(out_tokens) for j in range(len(t))]
            flat = [tok for t in out_tokens for tok in t]
            rows_t = torch.tensor(rows, dtype=torch.long, device=dev)
            logp = torch.log_softmax(logits[rows_t], dim=-1)
            chosen = logp.gather(1, torch.tensor(flat, device=dev)[:, None]).squeeze(1).tolist()
            kmax = max(p.logprobs or 0 for p in params)
            top_v = top_i = None
            if kmax > 0:
                tv, ti = logp.topk(kmax, dim=-1)
                top_v, top_i = tv.tolist(), ti.tolist()
            f = 0
            for i, t in enumerate(out_tokens):
                p = params[i]
                for j, tok in enumerate(t):
                    chosen_lp[i][j] = chosen[f]
                    if p.logprobs is not None:
                        d = {tok: chosen[f]}
                        if p.logprobs and top_v is not None and top_i is not None:
                            for v, ti_ in zip(top_v[f][: p.logprobs], top_i[f][: p.logprobs]):
                                d.setdefault(ti_, v)
                        lps[i][j] = d
                    f += 1
        return VerifyOutput(out_tokens, accepted, lps, chosen_lp)

    def _verify_random(
        self,
        logits,
        ks,
        starts,
        draft_token_ids,
        draft_probs,
        params,
        generators,
        seqs,
        out_tokens,
        accepted,
    ) -> None:
        """Modified rejection sampling for the sampling (temperature > 0) sequences ``seqs``;
        fills ``out_tokens[i]`` and ``accepted[i]`` in place."""
        dev = logits.device
        rows = [starts[i] + j for i in seqs for j in range(ks[i] + 1)]
        row_params = [params[i] for i in seqs for _ in range(ks[i] + 1)]
        probs = processed_probs(
            logits[torch.tensor(rows, dtype=torch.long, device=dev)], row_params
        )
        local = {}  # seq -> first row in probs
        r = 0
        for i in seqs:
            local[i] = r
            r += ks[i] + 1
        # 1. accept/reject every draft (uniforms: seeded sequences from their own generator,
        # the rest from the shared one in one draw)
        d_rows: list[int] = []
        d_tok: list[int] = []
        q_parts: list[torch.Tensor | None] = []
        d_gen: list[tuple[int, torch.Generator | None]] = []
        for i in seqs:
            k = ks[i]
            if not k:
                continue
            d_rows.extend(range(local[i], local[i] + k))
            d_tok.extend(draft_token_ids[i])
            d_gen.append((k, generators[i]))
            q = draft_probs[i]
            if q is not None:
                idx = torch.tensor(list(draft_token_ids[i]), device=q.device)
                q_parts.append(q.float().gather(1, idx[:, None]).squeeze(1).to(dev))
            else:
                q_parts.append(None)
        acc_list: list[bool] = []
        if d_rows:
            p_d = probs[torch.tensor(d_rows, device=dev), torch.tensor(d_tok, device=dev)]
            if all(q is None for q in q_parts):
                q_d = torch.ones_like(p_d)
            else:
                q_d = torch.cat(
                    [
                        torch.ones(k, device=dev) if q is None else q
                        for q, (k, _g) in zip(q_parts, d_gen)
                    ]
                )
            u = self._uniforms(d_gen, dev)
            acc_list = accept_mask(u, p_d, q_d).tolist()
        # 2. the first rejected position (resample) or the bonus position, per sequence
        final_rows, f = [], 0
        for i in seqs:
            k = ks[i]
            a = 0
            while a < k and acc_list[f + a]:
                a += 1
            f += k
            accepted[i] = a
            final_rows.append(local[i] + a)
        dist = probs[torch.tensor(final_rows, device=dev)]
        zero_r, zero_c, sub_n, sub_q = [], [], [], []
        for n, i in enumerate(seqs):
            a = accepted[i]
            if a == ks[i]:
                continue  # bonus: p itself
            q = draft_probs[i]
            if q is None:  # q = one_hot(d): the residual is p without d
                zero_r.append(n)
                zero_c.append(draft_token_ids[i][a])
            else:
                sub_n.append(n)
                sub_q.append(q[a].float().to(dev))
        if zero_r:
            dist[torch.tensor(zero_r, device=dev), torch.tensor(zero_c, device=dev)] = 0.0
        if sub_n:
            idx = torch.tensor(sub_n, device=dev)
            dist[idx] = (dist[idx] - torch.stack(sub_q)).clamp_(min=0.0)
        # a residual that is all zero cannot follow a rejection in exact arithmetic
        # (sum max(0, p - q) = sum max(0, q - p) > 0 when p(d) < q(d)); under rounding fall
        # back to p
        empty = dist.sum(dim=-1) <= 0
        if bool(empty.any()):
            dist[empty] = probs[torch.tensor(final_rows, device=dev)][empty]
        noise = torch.empty_like(dist)
        shared = [n for n, i in enumerate(seqs) if generators[i] is None]
        if len(shared) == len(seqs):
            noise.exponential_(generator=self.generator)
        else:
            if shared:
                noise[shared] = torch.empty(len(shared), dist.shape[1], device=dev).exponential_(
                    generator=self.generator
                )
            for n, i in enumerate(seqs):
                if generators[i] is not None:
                    noise[n].exponential_(generator=generators[i])
        final = (dist / noise).argmax(dim=-1).tolist()
        for n, i in enumerate(seqs):
            a = accepted[i]
            out_tokens[i] = list(draft_token_ids[i][:a]) + [final[n]]

    def _uniforms(self, parts, dev) -> torch.Tensor:
        """float32 U(0, 1) draws ``[sum k]`` for ``parts`` = ``(k, generator or None)`` in
        order: a seeded sequence's from its generator, the others' from the shared one."""
        if all(g is None for _k, g in parts):
            return torch.rand(sum(k for k, _g in parts), generator=self.generator, device=dev)
        return torch.cat(
            [
                torch.rand(k, generator=g if g is not None else self.generator, device=dev)
                for k, g in parts
            ]
        )


__all__ = ["RejectionSampler", "VerifyOutput", "processed_probs", "accept_mask"]
