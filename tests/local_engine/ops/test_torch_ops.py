"""The torch reference ops against transformers' own formulas, written out here.

``rms_norm`` (float32: ATen's fused ``torch.rms_norm``) and ``rotary_and_write_kv`` (the
half-swap ``flip`` with a signed sine, q and k rotated as one tensor when they are adjacent
slices of one qkv projection, the gathered rows reused across layers) must give bit-identical
float32 results to ``LlamaRMSNorm`` and ``apply_rotary_pos_emb`` (``x * cos + rotate_half(x) *
sin``, ``rotate_half = cat(-x2, x1)``): the same roundings in the same order.
"""

from __future__ import annotations

import pytest
import torch

from local_engine.models.llama import RotaryEmbedding
from local_engine.ops import torch_ops


def _hf_rms(h, w, eps):
    hf = h.float()
    hf = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps)
    return w * hf.to(h.dtype)


def _hf_rotate(x, cos, sin):
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


@pytest.mark.parametrize("rows", [1, 20, 2000])
def test_rms_norm_float32_is_bit_identical(rows):
    g = torch.Generator().manual_seed(rows)
    x, r = torch.randn(rows, 576, generator=g) * 3, torch.randn(rows, 576, generator=g)
    w = torch.randn(576, generator=g)
    out, h = torch_ops.rms_norm(x, w, 1e-5, r)
    assert torch.equal(h, x + r)
    assert torch.equal(out, _hf_rms(x + r, w, 1e-5))
    out, h = torch_ops.rms_norm(x, w, 1e-5)
    assert h is x and torch.equal(out, _hf_rms(x, w, 1e-5))


@pytest.mark.parametrize("fused_qkv", [True, False])
@pytest.mark.parametrize("tokens", [1, 7])
def test_rotary_and_write_kv_bit_identical(fused_qkv, tokens):
    g = torch.Generator().manual_seed(tokens)
    hq, hkv, d, bs = 9, 3, 64, 16
    rope = RotaryEmbedding(d, 512, 100000.0, None)
    if fused_qkv:  # views of one projection output, as the model passes them
        qkv = torch.randn(tokens, (hq + 2 * hkv) * d, generator=g)
        q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
        q, k, v = q.view(tokens, hq, d), k.view(tokens, hkv, d), v.view(tokens, hkv, d)
    else:
        q = torch.randn(tokens, hq, d, generator=g)
        k, v = torch.randn(2, tokens, hkv, d, generator=g)
    assert torch_ops._adjacent(q, k) == fused_qkv
    positions = torch.randperm(500, generator=g)[:tokens]
    slots = torch.randperm(4 * bs, generator=g)[:tokens]
    k_cache = torch.zeros(4, bs, hkv, d)
    v_cache = torch.zeros(4, bs, hkv, d)
    out = torch_ops.rotary_and_write_kv(
        q, k, v, positions, rope.cos, rope.sin, k_cache, v_cache, slots
    )
    c, s = rope.cos[positions].unsqueeze(1), rope.sin[positions].unsqueeze(1)
    assert torch.equal(out, _hf_rotate(q, c, s))
    assert torch.equal(k_cache.view(-1, hkv, d)[slots], _hf_rotate(k, c, s))
    assert torch.equal(v_cache.view(-1, hkv, d)[slots], v)
    # a second layer of the same step reuses the gathered rows; new positions do not
    other = (positions + 1) % 500
    out2 = torch_ops.rotary_and_write_kv(
        q, k, v, other, rope.cos, rope.sin, k_cache, v_cache, slots
    )
    c2, s2 = rope.cos[other].unsqueeze(1), rope.sin[other].unsqueeze(1)
    assert torch.equal(out2, _hf_rotate(q, c2, s2))
    # an in-place write to the same positions tensor invalidates the reused rows
    positions.copy_(other)
    out3 = torch_ops.rotary_and_write_kv(
        q, k, v, positions, rope.cos, rope.sin, k_cache, v_cache, slots
    )
    assert torch.equal(out3, out2)


def test_rotary_rows_are_not_reused_for_inference_tensors():
    """Inference-mode tensors have no version counter: an in-place write to the same positions
    tensor between two calls must still be seen (the draft model's tensors are such)."""
    rope = RotaryEmbedding(16, 64, 10000.0, None)
    with torch.inference_mode():
        q = torch.randn(3, 2, 16)
        k, v = torch.randn(2, 3, 1, 16)
        positions = torch.tensor([1, 2, 3])
        slots = torch.tensor([0, 1, 2])
        cache = torch.zeros(2, 2, 4, 1, 16)
        torch_ops.rotary_and_write_kv(q, k, v, positions, rope.cos, rope.sin, *cache, slots)
        positions.copy_(torch.tensor([10, 20, 30]))
        slots.copy_(torch.tensor([5, 6, 7]))
        out = torch_ops.rotary_and_write_kv(q, k, v, positions, rope.cos, rope.sin, *cache, slots)
        c, s = rope.cos[positions].unsqueeze(1), rope.sin[positions].unsqueeze(1)
        assert torch.equal(out, _hf_rotate(q, c, s))
        assert torch.equal(cache[1].view(-1, 1, 16)[5:8], v)
