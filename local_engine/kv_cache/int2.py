"""The 2-bit KV cache format (``kv_cache_dtype="int2"``), KIVI (Liu et al., 2024, "KIVI: A
Tuning-Free Asymmetric 2bit Quantization for KV Cache", sections 3-4): keys quantized per
channel over a group of tokens, values per token, both asymmetric (``q = floor((x - min) / s +
0.5)`` clamped to 0..3, ``s = (max - min) / 3``, float16 ``s`` and ``min``, read back ``q * s +
min``), and the most recent tokens kept in full precision until their group fills.

**Groups and residual on the paged pool** (docs/DESIGN.md, "int2"). The key group is the KV
block (``block_size`` tokens; KIVI's ``G`` is 32-128, its residual ``R`` up to 128): a block's
keys get one float16 scale and minimum per (KV head, channel). A sequence's open (partly
written) block is its residual window: its tokens' keys and values are written in the model
dtype into a *residual slot*, a piece of a small second region of the same pool tensor (one
slot per open block, sized by the running sequences, not the context). The write that fills
the block's last slot quantizes the block from its residual slot (keys per channel, values
per token) into the block's own 2-bit bytes; a block whose ``block_size`` tokens all arrive in
one write (a prefill) is quantized straight from the written tokens and never has a slot.
Attention reads block ``i`` of a ``ctx``-token context as 2-bit when it is finished (``(i + 1)
* block_size <= ctx``) and from its residual slot otherwise, so a block must never be written
after it fills (speculative decoding is refused with int2).

**Pool** ``[layers, 1, num_blocks + residual_slots * blocks_per_slot, block_bytes]`` uint8 (one
K/V axis: a block holds both). Per block (:class:`Layout`): K codes ``[block_size, kv_heads,
D/4]`` at byte 0, V codes ``[block_size, kv_heads, D/4]``, K scales and minima float16
``[kv_heads, 2, D]`` (row 0 the scales, row 1 the minima), V scale and minimum float16
``[block_size, kv_heads, 2]``. 2-bit codes are quarter-split: byte ``j`` holds channels ``j, j
+ D/4, j + D/2, j + 3D/4`` in bits 0-1, 2-3, 4-5, 6-7. Bytes of a block per layer
``block_size * kv_heads * (3D/4 + 4) + 4 * kv_heads * D`` (block 16: ``3D/4 + 4`` a token
and KV head plus ``D / 4``: ``D`` 128 gives 100 bytes against bf16's 512).

**Residual slots.** Slot ``r`` is ``blocks_per_slot`` consecutive pseudo-blocks from
``num_blocks + r * blocks_per_slot`` (enough for K then V ``[block_size, kv_heads, D]`` in the
model dtype); an open block names its slot by that first pseudo-block id, an int32 in its K
codes' first 4 bytes (unused until the block is finished; the finishing write overwrites it).
The cache manager hands slots out and the runner writes those ids
(:func:`set_residual_ids`); copy-on-write copies a slot's pseudo-blocks like blocks.

**Bounds** (a float16 scale or minimum adds at most ``2**-11`` relative to it): values
``|v - v'| <= (max - min) / 6 * (1 + 2**-10)`` over the token-head's ``head_dim`` values;
finished keys ``|k_c - k'_c| <= (max_c - min_c) / 6 * (1 + 2**-10)`` over the block's tokens of
channel ``c``; residual keys and values: exact (the model dtype).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import EngineError

#: Largest 2-bit code (levels 0..3, asymmetric).
CODE_MAX = 3.0
#: Smallest block (KIVI's group; 16 keeps per-channel scales at D/4 bytes a token-head).
MIN_BLOCK = 16


def check_shape(block_size: int, head_dim: int) -> None:
    """Raises EngineError unless ``block_size`` is a power of two >= 16 and ``head_dim`` a
    power of two >= 16 (the kernels' tiles)."""
    if block_size < MIN_BLOCK or block_size & (block_size - 1):
        raise EngineError(
            f"kv_cache_dtype 'int2' needs block_size >= {MIN_BLOCK}, a power of two (a block is "
            f"its keys' quantization group); got {block_size}; supported here: auto, fp8, int8, "
            f"int4"
        )
    if head_dim < 16 or head_dim & (head_dim - 1):
        raise EngineError(
            f"kv_cache_dtype 'int2' needs head_dim a power of two >= 16; this model's is "
            f"{head_dim}; supported here: auto, fp8, int8"
        )


@dataclass(frozen=True)
class Layout:
    """Byte offsets inside one block of one layer (see the module docstring)."""

    block_size: int
    num_kv_heads: int
    head_dim: int

    @property
    def codes_bytes(self) -> int:
        """Bytes of K's (or V's) 2-bit codes: ``block_size * kv_heads * D / 4``."""
        return self.block_size * self.num_kv_heads * self.head_dim // 4

    @property
    def v_codes(self) -> int:
        """Byte offset of V's 2-bit codes in a block (K's codes come first, at 0)."""
        return self.codes_bytes

    @property
    def k_meta(self) -> int:
        """Byte offset of K's per-channel float16 scales and minima (``kv_heads x D`` pairs)."""
        return 2 * self.codes_bytes

    @property
    def v_pairs(self) -> int:
        """Byte offset of V's per-token float16 scale and minimum pairs (after K's
        ``4 x kv_heads x D`` bytes of metadata)."""
        return self.k_meta + 4 * self.num_kv_heads * self.head_dim

    @property
    def block_bytes(self) -> int:
        """``block_size * kv_heads * (3D/4 + 4) + 4 * kv_heads * D`` (a multiple of 4)."""
        return self.v_pairs + 4 * self.block_size * self.num_kv_heads

    def residual_bytes(self, element_size: int) -> int:
        """Bytes of one residual slot's K and V ``[2, block_size, kv_heads, D]``."""
        return 2 * self.block_size * self.num_kv_heads * self.head_dim * element_size

    def blocks_per_slot(self, element_size: int) -> int:
        """Pseudo-blocks one residual slot takes: ``ceil(residual_bytes / block_bytes)``."""
        return math.ceil(self.residual_bytes(element_size) / self.block_bytes)


def block_bytes(block_size: int, num_kv_heads: int, head_dim: int) -> int:
    """Bytes of one int2 block of one layer (:attr:`Layout.block_bytes`)."""
    return Layout(block_size, num_kv_heads, head_dim).block_bytes


#: Residual slots beyond one per running sequence: a prefill chunk that starts in an open block
#: and ends in another holds two during its step (a decode releases its full block's slot
#: before taking the next one); past these the scheduler waits or preempts as for blocks.
CHUNK_SLOTS = 4


def residual_slots(max_num_seqs: int) -> int:
    """Residual slots of an engine: ``max_num_seqs + CHUNK_SLOTS``."""
    return max_num_seqs + CHUNK_SLOTS


def is_int2(k_cache: torch.Tensor, k_scale: torch.Tensor | None) -> bool:
    """Whether per-layer views ``(k_cache, ..., k_scale, ...)`` are int2's (uint8 codes,
    float16 K scales: no other format stores float16 scales)."""
    return k_cache.dtype == torch.uint8 and k_scale is not None and k_scale.dtype == torch.float16


def layer_views(raw: torch.Tensor, block_size: int, num_kv_heads: int, head_dim: int):
    """Per-layer ``(k_cache, v_cache, k_scale, v_scale)`` of an int2 pool ``raw`` (uint8
    ``[layers, 1, blocks, block_bytes]``, pseudo-blocks included): K codes uint8 ``[blocks,
    block_size, kv_heads, D/4]``, V codes the same, K scales/minima float16 ``[blocks,
    kv_heads, 2, D]``, V scale/minimum float16 ``[blocks, block_size, kv_heads, 2]``."""
    lay = Layout(block_size, num_kv_heads, head_dim)
    bs, H, D = block_size, num_kv_heads, head_dim
    n_c = lay.codes_bytes
    k = raw[..., :n_c].unflatten(-1, (bs, H, D // 4))
    v = raw[..., n_c : 2 * n_c].unflatten(-1, (bs, H, D // 4))
    km = raw[..., lay.k_meta : lay.v_pairs].view(torch.float16).unflatten(-1, (H, 2, D))
    vp = raw[..., lay.v_pairs :].view(torch.float16).unflatten(-1, (bs, H, 2))
    return [(k[i, 0], v[i, 0], km[i, 0], vp[i, 0]) for i in range(raw.shape[0])]


def allocate(
    num_layers: int,
    num_blocks: int,
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    device,
    num_residual_slots: int = 0,
    residual_dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, ...]]]:
    """The zeroed pool ``[layers, 1, num_blocks + num_residual_slots * blocks_per_slot,
    block_bytes]`` uint8 and its :func:`layer_views`.

    Raises:
        EngineError: see :func:`check_shape`."""
    check_shape(block_size, head_dim)
    lay = Layout(block_size, num_kv_heads, head_dim)
    per_slot = lay.blocks_per_slot(torch.empty((), dtype=residual_dtype).element_size())
    total = num_blocks + num_residual_slots * per_slot
    raw = torch.zeros((num_layers, 1, total, lay.block_bytes), dtype=torch.uint8, device=device)
    return raw, layer_views(raw, block_size, num_kv_heads, head_dim)


def layer_bytes(k_cache: torch.Tensor) -> torch.Tensor:
    """A layer's whole blocks as uint8 ``[blocks, block_bytes]`` (from its K codes view,
    which starts each block)."""
    n, bs, h, q = k_cache.shape
    bb = k_cache.stride(0)
    return torch.as_strided(k_cache, (n, bb), (bb, 1), k_cache.storage_offset())


def residual_ids(k_cache: torch.Tensor) -> torch.Tensor:
    """int32 ``[blocks]``: each block's residual slot (first pseudo-block id); meaningful
    for open blocks only."""
    return layer_bytes(k_cache)[:, :4].view(torch.int32)[:, 0]


def set_residual_ids(raw: torch.Tensor, blocks: list[int], ids: list[int]) -> None:
    """Write open ``blocks``' residual slot ids (first pseudo-block) into every layer of the
    pool ``raw`` ``[layers, 1, blocks, block_bytes]``."""
    if not blocks:
        return
    b = torch.tensor(blocks, dtype=torch.long, device=raw.device)
    v = torch.tensor(ids, dtype=torch.int32).view(torch.uint8).view(len(ids), 4)
    raw[:, 0, b, :4] = v.to(raw.device)


def read_residual(k_cache: torch.Tensor, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Residual slots starting at pseudo-blocks ``ids`` (int ``[n]``) as ``dtype`` ``[n, 2,
    block_size, kv_heads, D]`` (K then V), copied out."""
    n, bs, h, q = k_cache.shape
    d = 4 * q
    per = torch.empty((), dtype=dtype).element_size()
    flat = layer_bytes(k_cache).reshape(-1)
    nbytes = 2 * bs * h * d * per
    start = ids.to(torch.long) * k_cache.stride(0)
    idx = start[:, None] + torch.arange(nbytes, device=k_cache.device)[None, :]
    return flat[idx].view(dtype).view(-1, 2, bs, h, d)


def write_residual(
    k_cache: torch.Tensor, ids: torch.Tensor, offs: torch.Tensor, key, value
) -> None:
    """Tokens ``[T, H, D]`` (model dtype) into residual slots ``ids`` (``[T]`` first
    pseudo-block ids) at block offsets ``offs``."""
    n, bs, h, q = k_cache.shape
    d = 4 * q
    flat = layer_bytes(k_cache).reshape(-1)
    per = key.element_size()
    row = h * d * per  # one token's K (or V) bytes
    start = ids.to(torch.long) * k_cache.stride(0) + offs.to(torch.long) * row
    ar = torch.arange(row, device=key.device)[None, :]
    flat[start[:, None] + ar] = key.contiguous().view(torch.uint8).view(len(ids), row)
    vstart = start + bs * row
    flat[vstart[:, None] + ar] = value.contiguous().view(torch.uint8).view(len(ids), row)


def pack_int2(q: torch.Tensor) -> torch.Tensor:
    """2-bit codes ``q`` (integer ``[..., D]`` in 0..3, D a multiple of 4) -> uint8 ``[...,
    D/4]``: byte ``j`` = ``q[j] | q[j + D/4] << 2 | q[j + D/2] << 4 | q[j + 3D/4] << 6``."""
    u = q.to(torch.uint8)
    n = u.shape[-1] // 4
    return (
        u[..., :n]
        | (u[..., n : 2 * n] << 2)
        | (u[..., 2 * n : 3 * n] << 4)
        | (u[..., 3 * n :] << 6)
    )


def unpack_int2(p: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_int2`: uint8 ``[..., D/4]`` -> uint8 codes ``[..., D]``."""
    return torch.cat((p & 3, (p >> 2) & 3, (p >> 4) & 3, p >> 6), dim=-1)


def quantize_asym(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """2-bit asymmetric quantization of ``x`` (any float dtype) along ``dim``.

    Returns: ``(codes, scale, minimum)``: uint8 codes (``x``'s shape, 0..3), float16 ``scale =
    (max - min) / 3`` and ``minimum`` (``x``'s shape without ``dim``); the codes are computed
    with the float16-rounded scale and minimum in float32 (``floor((x - min) / scale + 0.5)``
    clamped to 0..3; a zero scale gives code 0). The Triton kernels do the same arithmetic."""
    xf = x.float()
    mn, mx = xf.amin(dim), xf.amax(dim)
    s16 = ((mx - mn) / CODE_MAX).to(torch.float16)
    m16 = mn.to(torch.float16)
    s, m = s16.float().unsqueeze(dim), m16.float().unsqueeze(dim)
    y = (xf - m) / torch.where(s > 0, s, 1.0)
    codes = torch.floor(y + 0.5).clamp_(0.0, CODE_MAX).to(torch.uint8)
    return codes, s16, m16


def dequantize_asym(
    codes: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor, dim: int
) -> torch.Tensor:
    """``codes * scale + minimum`` in float32 (scale and minimum broadcast along ``dim``)."""
    return codes.float() * scale.float().unsqueeze(dim) + minimum.float().unsqueeze(dim)


def quantize_block(k: torch.Tensor, v: torch.Tensor):
    """One block's tokens ``[n, block_size, H, D]`` (K and V) -> ``(k codes [n, bs, H, D/4],
    k meta float16 [n, H, 2, D], v codes [n, bs, H, D/4], v pairs float16 [n, bs, H, 2])``:
    keys per (head, channel) over the tokens, values per (token, head)."""
    kc, ks, km = quantize_asym(k, 1)  # scale/min [n, H, D]
    vc, vs, vm = quantize_asym(v, -1)  # [n, bs, H]
    return pack_int2(kc), torch.stack((ks, km), 2), pack_int2(vc), torch.stack((vs, vm), -1)


def dequantize_keys(k_cache: torch.Tensor, k_scale: torch.Tensor, index) -> torch.Tensor:
    """Finished blocks ``index`` (int ``[n]``) -> float32 keys ``[n, block_size, H, D]``."""
    meta = k_scale.index_select(0, index).float()  # [n, H, 2, D]
    codes = unpack_int2(k_cache.index_select(0, index)).float()
    return codes * meta[:, None, :, 0] + meta[:, None, :, 1]


def dequantize_values(v_cache: torch.Tensor, v_scale: torch.Tensor, index) -> torch.Tensor:
    """Blocks ``index`` (int ``[n]``) -> float32 values ``[n, block_size, H, D]``."""
    pairs = v_scale.index_select(0, index).float()  # [n, bs, H, 2]
    codes = unpack_int2(v_cache.index_select(0, index)).float()
    return codes * pairs[..., :1] + pairs[..., 1:]


def read_blocks(
    k_cache, v_cache, k_scale, v_scale, index: torch.Tensor, finished: torch.Tensor, dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of blocks ``index`` (any integer shape ``S``) as float32 ``[*S,
    block_size, H, D]``: dequantized where ``finished`` (bool ``S``), else the residual slot
    read exactly (stored in ``dtype``, the dtype the keys were written in)."""
    flat = index.reshape(-1).to(torch.long)
    fin = finished.reshape(-1)
    k = dequantize_keys(k_cache, k_scale, flat)
    v = dequantize_values(v_cache, v_scale, flat)
    open_ = (~fin).nonzero().flatten()
    if open_.numel():
        res = read_residual(k_cache, residual_ids(k_cache)[flat[open_]], dtype).float()
        k[open_] = res[:, 0]
        v[open_] = res[:, 1]
    shape = (*index.shape, *k.shape[1:])
    return k.view(shape), v.view(shape)


def whole_block_rows(slots: torch.Tensor, block_size: int) -> torch.Tensor:
    """bool ``[T]``: whether token ``t``'s block gets all ``block_size`` tokens in this write
    (its first and last slots are written by rows ``t - off`` and ``t + block_size - 1 - off``:
    a block's tokens are consecutive rows)."""
    T = slots.shape[0]
    off = slots % block_size
    base = slots - off
    r0 = torch.arange(T, device=slots.device) - off
    r1 = r0 + block_size - 1
    ok = (r0 >= 0) & (r1 < T)
    s0 = slots[r0.clamp(0, T - 1)]
    s1 = slots[r1.clamp(0, T - 1)]
    return ok & (s0 == base) & (s1 == base + block_size - 1)


def write(key, value, k_cache, v_cache, k_scale, v_scale, slots: torch.Tensor) -> None:
    """Write tokens ``[T, H, D]`` at int64 ``slots`` (``[T]``, all >= 0): tokens of blocks
    that get all their tokens in this call are quantized straight from ``key``/``value``, the
    others go to their block's residual slot in ``key``'s dtype; every block whose last slot
    is written is then quantized (torch reference of the Triton write)."""
    bs = k_cache.shape[1]
    blk, off = slots // bs, slots % bs
    whole = whole_block_rows(slots, bs)
    part = (~whole).nonzero().flatten()
    if part.numel():
        ids = residual_ids(k_cache)[blk[part]]
        write_residual(k_cache, ids, off[part], key[part], value[part])
    last = (off == bs - 1).nonzero().flatten()
    if not last.numel():
        return
    src_k = torch.empty((len(last), bs, *key.shape[1:]), dtype=torch.float32, device=key.device)
    src_v = torch.empty_like(src_k)
    w = whole[last]
    if w.any():
        rows = last[w][:, None] - (bs - 1) + torch.arange(bs, device=key.device)[None, :]
        src_k[w], src_v[w] = key[rows].float(), value[rows].float()
    if (~w).any():
        res = read_residual(k_cache, residual_ids(k_cache)[blk[last[~w]]], key.dtype).float()
        src_k[~w], src_v[~w] = res[:, 0], res[:, 1]
    kc, km, vc, vp = quantize_block(src_k, src_v)
    b = blk[last]
    k_cache[b], k_scale[b], v_cache[b], v_scale[b] = kc, km, vc, vp


__all__ = [
    "Layout",
    "allocate",
    "layer_views",
    "layer_bytes",
    "block_bytes",
    "residual_slots",
    "check_shape",
    "is_int2",
    "pack_int2",
    "unpack_int2",
    "quantize_asym",
    "dequantize_asym",
    "quantize_block",
    "dequantize_keys",
    "dequantize_values",
    "read_blocks",
    "read_residual",
    "write_residual",
    "residual_ids",
    "set_residual_ids",
    "whole_block_rows",
    "write",
]
