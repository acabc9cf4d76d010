"""The 2-bit KV cache format (``kv_cache_dtype="int2"``), KIVI-style (Liu et al., 2024, "KIVI:
A Tuning-Free Asymmetric 2bit Quantization for KV Cache", sections 3-4): keys quantized per
channel over a group of tokens, values per token, both asymmetric (``q = floor((x - min) /
s + 0.5)`` clamped to 0..3, ``s = (max - min) / 3``, read back ``q * s + min``), and the most
recent tokens kept at higher precision until their group fills.

**How KIVI's groups and residual map onto the paged pool.** The key group is the KV block
(``block_size`` tokens, 16 by default; KIVI's groups are 32-128 tokens): a block's keys get one
float16 scale and minimum per (KV head, channel), computed once the block's last slot is
written. Until then the block is the residual window: each of its keys is held per token as
INT4 in the same bytes, Hadamard-rotated (``k H``, symmetric, ``amax / 7`` float32 scale,
split-half nibbles: exactly the ``"int4"`` format's keys, so a key channel ~20x the others
does not round the rest to zero); the write that fills the block's last slot rotates its
``block_size`` keys back (``H H = I``) and re-quantizes them per channel to 2 bits
(:func:`finalize_key_blocks`, a second launch after the write on the Triton path). Attention
reads a finished block's keys against the queries ``q`` and the open block's against ``q H``
(``(q H) . (k H) = q . k``). Values are quantized per token (over
``head_dim``) as they are written, with float16 scale and minimum.

Why INT4 and not the model dtype for the residual: a block has a fixed size in the pool (the
block is what prefix caching, copy-on-write, swap and the CPU and disk tiers move), and a
full-precision residual needs either that size in every block (bf16 keys of 16 tokens are 4x
the block's 2-bit keys) or a second pool with its own block ids that the cache manager maps,
moves on copy-on-write and swap, and frees (a change through the manager and the scheduler's
preemption paths). At block 16 the bytes a finished block's keys take (2-bit codes plus a
float16 scale and minimum per channel: ``16 * D / 4 + 4 * D = 8 * D`` per KV head) are
exactly the bytes of 16 INT4 keys (``16 * D / 2``), so the residual lives in place: a block
carries everything it needs, and copy-on-write, swap and both lower tiers move it unchanged.
Cost: the residual's keys are INT4, not float (bound below), and a finished block's keys are
quantized from their INT4 values (two roundings; quantizing from the original keys instead
measured KL 0.67 against 0.77 nats on SmolLM2 at 1k tokens, docs/DESIGN.md), but a block's
bytes never depend on how its tokens were batched into writes (a prefix hit reads what a
recompute writes). Which form a block holds follows from the
context length: block ``i`` of a ``ctx``-token sequence is finished when ``(i + 1) *
block_size <= ctx``, so a block must never be written again after it fills; speculative
decoding, whose rejected drafts are trimmed off written blocks, is refused with int2
(:class:`~local_engine.config.EngineConfig`).

**Block layout** (pool ``[layers, 1, num_blocks, block_bytes]`` uint8; the one K/V axis
because K's and V's parts differ in size). Per block: K area ``[block_size, kv_heads, D / 2]``
bytes, V codes ``[block_size, kv_heads, D / 4]``, K residual scales float32 ``[block_size,
kv_heads]``, V scale and minimum float16 ``[block_size, kv_heads, 2]``. A K area row ``(t, h)``
holds, while the block is open, token ``t``'s INT4 key (byte ``j``: channel ``j`` low nibble,
``j + D/2`` high, each ``q + 8``); once finished, token ``t``'s 2-bit codes in bytes ``[0,
D/4)`` and, in bytes ``[D/4, D/2)`` of rows 0-15, the head's ``2 * D`` float16 key scales and
minima (entry ``i`` = scale of channel ``i`` for ``i < D``, minimum of channel ``i - D``
after; row ``i // (D/8)``, float16 column ``D/8 + i % (D/8)``). 2-bit codes are quarter-split:
byte ``j`` holds channels ``j, j + D/4, j + D/2, j + 3D/4`` in bits 0-1, 2-3, 4-5, 6-7.
Bytes per token and KV head: ``D / 2 + 4`` (K) ``+ D / 4 + 4`` (V) ``= 3 D / 4 + 8`` (head_dim
128: 104 bytes against bf16's 512, 4.9x the blocks; INT4: 136). Needs ``block_size >= 16``
and ``head_dim`` a power of two >= 16.

**Bounds** (float16 rounding of a scale or minimum adds at most ``2**-11`` relative to it):

- values: ``|v - v'| <= (max - min) / 6 * (1 + 2**-10)`` over the token-head's ``head_dim``
  values (``s / 2`` with the float16 scale; the clamp costs nothing: the float16 minimum and
  scale map ``[min, max]`` into ``[-0.5, 3.5]``);
- keys of an open block, in the rotated space: ``|k H - k'| <= amax(|k H|) / 14`` over the
  token-head (INT4; ``||k - k' H||_2 = ||k H - k'||_2``);
- keys of a finished block: ``k - k' = e H + f`` with ``e`` the INT4 error above and ``|f_c|
  <= (max_c - min_c) / 6 * (1 + 2**-10)``, ``max_c - min_c`` the range of channel ``c`` over
  the block's INT4-rounded keys (rotated back) of that head; so ``||k - k'||_2 <= sqrt(D) *
  amax(|k H|) / 14 + ||f||_2``.
"""

from __future__ import annotations

import torch

from ..errors import EngineError

#: Rows of a finished block's K area whose tails hold the per-channel scales and minima.
META_ROWS = 16
#: Largest 2-bit code (levels 0..3, asymmetric).
CODE_MAX = 3.0
#: INT4 residual: symmetric, QMAX 7 (the ``"int4"`` format's arithmetic).
RESIDUAL_QMAX = 7.0
#: Bytes per token and KV head beyond the codes: K residual float32 scale (4) and V's float16
#: scale and minimum (4).
EXTRA_BYTES = 8


def check_shape(block_size: int, head_dim: int) -> None:
    """Raises EngineError unless ``block_size >= 16`` and ``head_dim`` is a power of two >= 16
    (the layout needs 16 rows of ``head_dim / 4`` bytes for a block's key scales)."""
    if block_size < META_ROWS:
        raise EngineError(
            f"kv_cache_dtype 'int2' needs block_size >= {META_ROWS} (a block is its keys' "
            f"quantization group); got {block_size}; supported here: auto, fp8, int8, int4"
        )
    if head_dim < 16 or head_dim & (head_dim - 1):
        raise EngineError(
            f"kv_cache_dtype 'int2' needs head_dim a power of two >= 16; this model's is "
            f"{head_dim}; supported here: auto, fp8, int8"
        )


def bytes_per_token_head(head_dim: int) -> int:
    """``3 * head_dim / 4 + 8``: K area ``D/2``, V codes ``D/4``, two 4-byte scale slots."""
    return head_dim // 2 + head_dim // 4 + EXTRA_BYTES


def is_int2(k_cache: torch.Tensor, v_cache: torch.Tensor) -> bool:
    """Whether per-layer views ``(k_cache, v_cache)`` are int2's (uint8, K rows twice V's)."""
    return (
        v_cache.dtype == torch.uint8
        and k_cache.dtype == torch.uint8
        and k_cache.shape[-1] == 2 * v_cache.shape[-1]
    )


def layer_views(
    raw: torch.Tensor, block_size: int, num_kv_heads: int, head_dim: int
) -> list[tuple[torch.Tensor, ...]]:
    """Per-layer ``(k_cache, v_cache, k_scale, v_scale)`` of an int2 pool ``raw`` (uint8
    ``[layers, 1, num_blocks, block_bytes]``): K area uint8 ``[num_blocks, block_size,
    kv_heads, D/2]``, V codes uint8 ``[num_blocks, block_size, kv_heads, D/4]``, K residual
    scales float32 ``[num_blocks, block_size, kv_heads]``, V scale/minimum pairs as float32
    ``[num_blocks, block_size, kv_heads]`` (each 4 bytes = float16 scale, float16 minimum;
    :func:`value_scale_min`)."""
    bs, H, D = block_size, num_kv_heads, head_dim
    n_k, n_v, n_s = bs * H * D // 2, bs * H * D // 4, bs * H * 4
    k = raw[..., :n_k].unflatten(-1, (bs, H, D // 2))
    v = raw[..., n_k : n_k + n_v].unflatten(-1, (bs, H, D // 4))
    ks = raw[..., n_k + n_v : n_k + n_v + n_s].view(torch.float32).unflatten(-1, (bs, H))
    vs = raw[..., n_k + n_v + n_s :].view(torch.float32).unflatten(-1, (bs, H))
    return [(k[i, 0], v[i, 0], ks[i, 0], vs[i, 0]) for i in range(raw.shape[0])]


def allocate(
    num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int, device
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, ...]]]:
    """The zeroed pool ``[layers, 1, num_blocks, block_size * kv_heads * (3D/4 + 8)]`` uint8
    and its :func:`layer_views` (zero bytes read back as zeros in both forms).

    Raises:
        EngineError: see :func:`check_shape`."""
    check_shape(block_size, head_dim)
    per_block = block_size * num_kv_heads * bytes_per_token_head(head_dim)
    raw = torch.zeros((num_layers, 1, num_blocks, per_block), dtype=torch.uint8, device=device)
    return raw, layer_views(raw, block_size, num_kv_heads, head_dim)


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


def value_scale_min(v_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The float16 ``(scale, minimum)`` ``[...]`` packed in int2's V scale view (float32
    ``[...]``, contiguous last dimension)."""
    pairs = v_scale.view(torch.float16).unflatten(-1, (v_scale.shape[-1], 2))
    return pairs[..., 0], pairs[..., 1]


def quantize_values(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Values ``[..., D]`` -> (packed codes uint8 ``[..., D/4]``, float32 ``[...]`` holding the
    float16 scale and minimum, as the V scale view stores them)."""
    codes, s16, m16 = quantize_asym(v, -1)
    pair = torch.stack((s16, m16), dim=-1).view(torch.float32).squeeze(-1)
    return pack_int2(codes), pair


def dequantize_values(packed: torch.Tensor, v_scale: torch.Tensor) -> torch.Tensor:
    """Packed V codes ``[..., D/4]`` and their scale view ``[...]`` -> float32 ``[..., D]``."""
    s16, m16 = value_scale_min(v_scale.contiguous())
    return dequantize_asym(unpack_int2(packed), s16, m16, -1)


def quantize_residual_keys(k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys ``[..., D]`` -> the open block's INT4 form of ``k H``: (uint8 ``[..., D/2]``,
    float32 scale ``amax(|k H|) / 7``), the ``"int4"`` format's keys."""
    from .quant import quantize, rotate_int4  # (quant imports this module)

    return quantize(rotate_int4(k), torch.uint8, 4)


def dequantize_residual_keys(
    k_area: torch.Tensor, k_scale: torch.Tensor, rotated: bool = False
) -> torch.Tensor:
    """INT4 K rows ``[..., D/2]`` and their float32 scales ``[...]`` -> float32 ``[..., D]``,
    rotated back to the keys' space (``x' H``) unless ``rotated``."""
    from .quant import rotate_int4, unpack_int4

    k = unpack_int4(k_area).float() * k_scale.float().unsqueeze(-1)
    return k if rotated else rotate_int4(k)


def read_key_meta(k_area: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Finished blocks' K areas ``[..., block_size, H, D/2]`` -> float16 ``(scale, minimum)``
    ``[..., H, D]`` per channel."""
    d = 2 * k_area.shape[-1]
    tails = k_area[..., :META_ROWS, :, d // 4 :].transpose(-3, -2).contiguous()
    meta = tails.view(torch.float16).flatten(-2)  # [..., H, 2D]
    return meta[..., :d], meta[..., d:]


def dequantize_finished_keys(k_area: torch.Tensor) -> torch.Tensor:
    """Finished blocks' K areas ``[..., block_size, H, D/2]`` -> float32 keys ``[...,
    block_size, H, D]`` (``code * scale_c + min_c``)."""
    d = 2 * k_area.shape[-1]
    codes = unpack_int2(k_area[..., : d // 4])
    s16, m16 = read_key_meta(k_area)
    return codes.float() * s16.float().unsqueeze(-3) + m16.float().unsqueeze(-3)


def finalize_key_blocks(k_cache: torch.Tensor, k_scale: torch.Tensor, blocks: torch.Tensor) -> None:
    """Re-quantize the keys of full ``blocks`` (int64 ``[n]``) from their INT4 residual form to
    per-channel 2-bit codes with float16 scales and minima, in place (the torch reference of
    the Triton finalize kernel)."""
    if blocks.numel() == 0:
        return
    area = k_cache[blocks]  # [n, bs, H, D/2]
    k = dequantize_residual_keys(area, k_scale[blocks])  # [n, bs, H, D]
    d = k.shape[-1]
    codes, s16, m16 = quantize_asym(k, 1)  # per (block, head, channel) over the tokens
    meta = torch.cat((s16, m16), dim=-1)  # [n, H, 2D]
    rows = meta.contiguous().view(torch.uint8).unflatten(-1, (META_ROWS, d // 4))  # [n,H,16,D/4]
    area[..., : d // 4] = pack_int2(codes)
    area[:, :META_ROWS, :, d // 4 :] = rows.transpose(1, 2)
    k_cache[blocks] = area


def read_keys(
    k_cache: torch.Tensor, k_scale: torch.Tensor, index: torch.Tensor, finished: torch.Tensor
) -> torch.Tensor:
    """Keys of blocks ``index`` (any integer shape ``S``) as float32 ``[*S, block_size, H,
    D]``: the per-channel 2-bit form where ``finished`` (bool, ``S``) is set, the INT4 residual
    form elsewhere."""
    flat = index.reshape(-1)
    area = k_cache.index_select(0, flat)
    resid = dequantize_residual_keys(area, k_scale.index_select(0, flat))
    done = dequantize_finished_keys(area)
    k = torch.where(finished.reshape(-1)[:, None, None, None], done, resid)
    return k.view(*index.shape, *k.shape[1:])


def read_values(v_cache: torch.Tensor, v_scale: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Values of blocks ``index`` (shape ``S``) as float32 ``[*S, block_size, H, D]``."""
    flat = index.reshape(-1)
    v = dequantize_values(v_cache.index_select(0, flat), v_scale.index_select(0, flat))
    return v.view(*index.shape, *v.shape[1:])


def write(
    key: torch.Tensor,
    value: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
    slots: torch.Tensor,
) -> None:
    """Write tokens ``[T, H, D]`` at int64 ``slots`` (``[T]``, all >= 0): each key in INT4
    residual form, each value as 2-bit codes; then finalize every block whose last slot was
    written (torch reference of the Triton write + finalize launches)."""
    bs = k_cache.shape[1]
    blk, off = slots // bs, slots % bs
    qk, sk = quantize_residual_keys(key)
    k_cache[blk, off] = qk
    k_scale[blk, off] = sk
    qv, sv = quantize_values(value)
    v_cache[blk, off] = qv
    v_scale[blk, off] = sv
    finalize_key_blocks(k_cache, k_scale, blk[off == bs - 1])


__all__ = [
    "allocate",
    "layer_views",
    "check_shape",
    "bytes_per_token_head",
    "is_int2",
    "pack_int2",
    "unpack_int2",
    "quantize_asym",
    "dequantize_asym",
    "quantize_values",
    "dequantize_values",
    "value_scale_min",
    "quantize_residual_keys",
    "dequantize_residual_keys",
    "read_key_meta",
    "dequantize_finished_keys",
    "finalize_key_blocks",
    "read_keys",
    "read_values",
    "write",
]
