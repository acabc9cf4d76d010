"""Storage formats of the paged KV cache: the model dtype (``"auto"``), FP8 E4M3, INT8,
packed INT4 and KIVI-style 2-bit (``"int2"``: its own layout and arithmetic,
:mod:`local_engine.kv_cache.int2`).

Scales: one float32 scale per (token, KV head), computed when the token is written, from that
token-head's own values: ``scale = amax(|x|) / QMAX`` over its ``head_dim`` values (``QMAX`` =
448 for E4M3, the largest finite value; 127 for INT8, symmetric), stored ``q = x / scale``
(INT8: ``floor(x / scale + 0.5)`` clamped to [-127, 127]; FP8: clamped to [-448, 448], then
rounded to nearest-even by the cast), read back ``x' = q * scale``. Why per token and head
(docs/DESIGN.md, "Quantized KV cache"): no calibration data; a token is written once, by one
kernel, at one slot, so its scale never changes afterwards (a per-block scale would need the
block's later tokens, or a re-quantization, when a decode step appends to it); an outlier
token (the attention sink, a huge-norm position) spoils only its own scale.

INT4 (``"int4"``) is the INT8 arithmetic with ``QMAX`` = 7, two values per byte, split-half:
byte ``j`` holds channel ``j`` in its low nibble and channel ``j + head_dim / 2`` in its high
nibble, each stored as ``q + 8`` (1..15); the views are uint8 ``[..., head_dim // 2]``
(:func:`pack_int4` / :func:`unpack_int4`). Split-half, not adjacent pairs: the rotary
embedding rotates channel ``j`` with ``j + head_dim / 2``, so the fused rotary + write kernel
holds exactly the two halves a byte needs, and a kernel reading channel ``d`` loads byte
``d mod head_dim / 2`` and shifts by ``4 * (d >= head_dim / 2)``.

INT4 keys are stored rotated: ``k H`` with ``H`` the orthonormal Sylvester Hadamard matrix of
``head_dim`` (a power of two; :func:`hadamard`), and the attention multiplies the queries by
the same ``H`` (``(q H) . (k H) = q . k``: ``H`` is orthonormal and symmetric). Why: keys have
a few large channels (KIVI, Liu et al. 2024, section 3; SmolLM2's reach ~20x the others), and
with 4 bits a per-token scale set by them rounds the other channels to 0 or +-1; the rotation
spreads every channel over all of them (QuaRot, Ashkboos et al. 2024), so a per-token scale
fits again, and a token is still quantized once, alone, as it is written. Measured on SmolLM2
(4 chat prompts x 32 tokens, teacher-forced top-1 against the float32 cache, 2026-12-03):
0.66 per-token without the rotation, 0.91 with it (rotating V as well: 0.85, so V is not).
Values stay unrotated, per token.

Bounds of one round trip (``s`` the token-head's scale, ``amax = s * QMAX``):
- INT8: ``|x - x'| <= s / 2 = amax / 254``; INT4: ``|x - x'| <= s / 2 = amax / 14`` (for
  keys in the rotated space: ``|k H - x'| <= amax(|k H|) / 14``, and ``||k - x' H||_2 =
  ||k H - x'||_2``);
- FP8 E4M3 (3 mantissa bits): ``|x - x'| <= 2**-4 * |x| + 2**-10 * s`` (half an ULP of a normal
  value, or half the subnormal step ``2**-9``); the Triton interpreter flushes E4M3 subnormals,
  so the bound there is ``2**-4 * |x| + 2**-6 * s``.

Memory layout (:func:`allocate_kv_cache`): the whole pool is one tensor ``[layers, 2, num_blocks,
block_bytes]`` (uint8 for quantized formats) whose block holds its ``block_size x num_kv_heads x
head_dim`` 1-byte values followed by its ``block_size x num_kv_heads`` float32 scales (K's
values token-major, V's and the scales token-minor: :data:`DEFAULT_LAYOUT`). A
block therefore carries its scales: copy-on-write, swapping and prefix caching move whole blocks
(``kv_cache[:, :, block]``) and need no scale bookkeeping. For ``"auto"`` the pool is the
unchanged ``[layers, 2, num_blocks, block_size, num_kv_heads, head_dim]`` tensor of the model
dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import KV_CACHE_DTYPES, ModelConfig
from ..errors import EngineError
from . import int2 as int2_format

#: Bytes of one per-(token, KV head) scale (float32).
SCALE_BYTES = 4
SCALE_DTYPE = torch.float32
#: Largest magnitude each quantized storage dtype holds (E4M3 finite max; symmetric INT8).
QMAX = (
    {torch.float8_e4m3fn: 448.0, torch.int8: 127.0}
    if hasattr(torch, "float8_e4m3fn")
    else {torch.int8: 127.0}
)
QUANT_DTYPES = tuple(QMAX)

#: Packed integer formats: storage dtype uint8, ``bits`` per value, symmetric ``QMAX``.
PACKED_QMAX = {4: 7.0}
#: Stored dtype of the packed formats' views (``is_quantized`` tells them by it).
PACKED_DTYPE = torch.uint8

#: Oldest CUDA compute capability whose Triton lowers float8e4nv (E4M3) conversions (Ada, sm_89).
FP8_MIN_CAPABILITY = (8, 9)


def is_quantized(cache: torch.Tensor) -> bool:
    """Whether a per-layer cache view holds quantized (1-byte or packed) values that need
    scales."""
    return cache.dtype in QMAX or cache.dtype == PACKED_DTYPE


def packed_bits(cache: torch.Tensor, head_dim: int) -> int:
    """Bits per value of a cache view ``[..., head_dim * bits // 8]``: 8 for 1-byte formats,
    4 for packed INT4 (told by the view's last dimension against ``head_dim``)."""
    if cache.dtype != PACKED_DTYPE:
        return 8 * cache.element_size()
    return 8 * cache.shape[-1] // head_dim


_HADAMARD: dict[tuple, torch.Tensor] = {}


def hadamard(n: int, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """The orthonormal Sylvester Hadamard matrix ``[n, n]`` (symmetric, its own inverse),
    cached per (n, dtype, device).

    Raises:
        ValueError: ``n`` is not a power of two."""
    if n <= 0 or n & (n - 1):
        raise ValueError(f"a Hadamard rotation needs head_dim a power of two, got {n}")
    key = (n, dtype, str(device))
    h = _HADAMARD.get(key)
    if h is None:
        m = torch.ones(1, 1, dtype=torch.float64)
        while m.shape[0] < n:
            m = torch.cat([torch.cat([m, m], 1), torch.cat([m, -m], 1)], 0)
        h = _HADAMARD[key] = (m / n**0.5).to(dtype=dtype, device=device)
    return h


def rotate_int4(x: torch.Tensor) -> torch.Tensor:
    """``x @ H`` over the last dimension (keys into an INT4 cache, queries reading one), in
    float32 for half-precision inputs, returned in ``x``'s dtype; also undoes itself."""
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    h = hadamard(x.shape[-1], compute, x.device)
    return (x.to(compute) @ h).to(x.dtype)


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """INT4 values ``q`` (any integer dtype, ``[..., D]`` in [-7, 7], D even) -> uint8
    ``[..., D // 2]``: byte ``j`` = (channel ``j`` + 8) | (channel ``j + D/2`` + 8) << 4."""
    u = (q.to(torch.int16) + 8).to(torch.uint8)
    half = u.shape[-1] // 2
    return u[..., :half] | (u[..., half:] << 4)


def unpack_int4(p: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`pack_int4`: uint8 ``[..., D // 2]`` -> int8 ``[..., D]``."""
    lo = (p & 0xF).to(torch.int8) - 8
    hi = (p >> 4).to(torch.int8) - 8
    return torch.cat((lo, hi), dim=-1)


@dataclass(frozen=True)
class KVCacheFormat:
    """How the pool stores K and V.

    Attributes:
        name: ``"auto"``, ``"fp8"``, ``"int8"``, ``"int4"`` or ``"int2"``.
        dtype: element dtype of the stored values (the model dtype for ``"auto"``,
            ``torch.float8_e4m3fn``, ``torch.int8``, uint8 for packed ``"int4"``/``"int2"``).
        bits: bits per stored value (16/32 for ``"auto"``, 8, 4 for ``"int4"``, 2 for
            ``"int2"``'s codes; its bytes are :func:`int2.block_bytes
            <local_engine.kv_cache.int2.block_bytes>` per block).
    """

    name: str
    dtype: torch.dtype
    bits: int = 0
    #: int2: the model dtype its residual slots hold (:mod:`local_engine.kv_cache.int2`)
    residual_dtype: torch.dtype | None = None

    def __post_init__(self) -> None:
        if not self.bits:
            object.__setattr__(self, "bits", 8 * torch.empty((), dtype=self.dtype).element_size())

    @property
    def quantized(self) -> bool:
        return self.name != "auto"

    @property
    def packed(self) -> bool:
        """Several values per byte (``"int4"``)."""
        return self.bits < 8

    @property
    def element_bytes(self) -> float:
        """Bytes per stored value (0.5 for ``"int4"``)."""
        return self.bits / 8

    def value_bytes(self, head_dim: int) -> int:
        """Bytes of one token-head's ``head_dim`` values."""
        return head_dim * self.bits // 8

    @property
    def scale_bytes(self) -> int:
        """Bytes of scale per (token, KV head): 4 when quantized, else 0."""
        return SCALE_BYTES if self.quantized else 0

    def bytes_per_token(self, mc: ModelConfig) -> int:
        """KV bytes of one token over all layers: ``2 * layers * kv_heads * (head_dim *
        bits / 8 + scale_bytes)`` (SmolLM2-135M int8: 2 x 30 x 3 x (64 + 4) = 12,240; int4:
        2 x 30 x 3 x (32 + 4) = 6,480); int2 (whose per-channel key scales are per block): a
        16-token block's bytes / 16, ``layers * kv_heads * (3 * head_dim / 4 + 4)`` (SmolLM2:
        30 x 3 x (48 + 4) = 4,680; :mod:`local_engine.kv_cache.int2`)."""
        if self.name == "int2":
            return self.block_bytes(mc, 16) // 16
        return (
            2 * mc.num_layers * mc.num_kv_heads * (self.value_bytes(mc.head_dim) + self.scale_bytes)
        )

    def block_bytes(self, mc: ModelConfig, block_size: int) -> int:
        """Bytes of one KV block over all layers (``bytes_per_token * block_size``; int2:
        :func:`int2.block_bytes <local_engine.kv_cache.int2.block_bytes>` x layers)."""
        if self.name == "int2":
            return mc.num_layers * int2_format.block_bytes(block_size, mc.num_kv_heads, mc.head_dim)
        return self.bytes_per_token(mc) * block_size

    def residual_blocks(self, mc: ModelConfig, block_size: int, max_num_seqs: int) -> int:
        """Pseudo-blocks int2's residual slots take (0 for other formats): ``max_num_seqs +
        int2.CHUNK_SLOTS`` slots of ``ceil(2 * block_size * kv_heads * head_dim * model dtype
        bytes / int2 block bytes)`` blocks each."""
        if self.name != "int2" or self.residual_dtype is None:
            return 0
        lay = int2_format.Layout(block_size, mc.num_kv_heads, mc.head_dim)
        per = torch.empty((), dtype=self.residual_dtype).element_size()
        return int2_format.residual_slots(max_num_seqs) * lay.blocks_per_slot(per)

    def describe(self) -> str:
        """``"int8 (per-token-head float32 scales)"`` / ``"bfloat16"``, for logs (the first
        word is the format's name)."""
        if not self.quantized:
            return str(self.dtype).replace("torch.", "")
        if self.name == "int2":
            return "int2 (KIVI: per-channel keys per block, per-token values, model-dtype residual)"
        return f"{self.name} (per-token-head float32 scales)"


def kv_cache_format(
    name: str,
    model_dtype: torch.dtype,
    device: str | torch.device = "cpu",
    backend: str | None = None,
) -> KVCacheFormat:
    """The :class:`KVCacheFormat` for ``EngineConfig.kv_cache_dtype`` on this device.

    Raises:
        EngineError: an unknown name, or ``"fp8"`` where float8 E4M3 is missing (a torch
            without ``float8_e4m3fn``, or a CUDA device older than compute capability 8.9 with
            the Triton backend); the message names what is supported. Never falls back.
    """
    key = str(name).lower()
    if key not in KV_CACHE_DTYPES:
        raise EngineError(
            f"unknown kv_cache_dtype {name!r}; supported: {', '.join(KV_CACHE_DTYPES)}"
        )
    if key == "auto":
        return KVCacheFormat("auto", model_dtype)
    if key == "int8":
        return KVCacheFormat("int8", torch.int8)
    if key == "int4":
        return KVCacheFormat("int4", PACKED_DTYPE, bits=4)
    if key == "int2":
        return KVCacheFormat("int2", PACKED_DTYPE, bits=2, residual_dtype=model_dtype)
    if not hasattr(torch, "float8_e4m3fn"):
        raise EngineError(
            f"kv_cache_dtype 'fp8' needs torch.float8_e4m3fn (torch >= 2.1; this is "
            f"{torch.__version__}); supported here: auto, int8"
        )
    dev = torch.device(device)
    if dev.type == "cuda" and backend in (None, "triton") and torch.cuda.is_available():
        cap = torch.cuda.get_device_capability(dev)
        if cap < FP8_MIN_CAPABILITY:
            raise EngineError(
                f"kv_cache_dtype 'fp8' (E4M3) needs CUDA compute capability >= 8.9 for the "
                f"Triton kernels; {torch.cuda.get_device_name(dev)} is {cap[0]}.{cap[1]}; "
                f"supported here: auto, int8 (or attention_backend='torch')"
            )
    return KVCacheFormat("fp8", torch.float8_e4m3fn)


def allocate_kv_cache(
    mc: ModelConfig,
    num_blocks: int,
    block_size: int,
    fmt: KVCacheFormat,
    device,
    num_residual_slots: int = 0,
) -> tuple[torch.Tensor, list[tuple[torch.Tensor, ...]]]:
    """Allocate the pool (zeros) and its per-layer views.

    Returns:
        ``(kv_cache, layers)``. ``kv_cache``: ``[layers, 2, num_blocks, block_size,
        num_kv_heads, head_dim]`` of the model dtype for ``"auto"``; ``[layers, 2, num_blocks,
        block_bytes]`` uint8 when quantized (see the module docstring); ``"int2"``: ``[layers,
        1, num_blocks + residual pseudo-blocks, block_bytes]`` with ``num_residual_slots``
        slots (:func:`local_engine.kv_cache.int2.allocate`). Dimension 2 is the
        block in both, so ``kv_cache[:, :, ids]`` copies or swaps whole blocks, scales
        included. ``layers[i]``: ``(k_cache, v_cache)`` views ``[num_blocks, block_size,
        num_kv_heads, head_dim]``, plus ``(k_scale, v_scale)`` float32 ``[num_blocks,
        block_size, num_kv_heads]`` when quantized.
    """
    L, H, D = mc.num_layers, mc.num_kv_heads, mc.head_dim
    if fmt.name == "int2":
        return int2_format.allocate(
            L,
            num_blocks,
            block_size,
            H,
            D,
            device,
            num_residual_slots,
            fmt.residual_dtype or torch.float32,
        )
    if not fmt.quantized:
        kv = torch.zeros((L, 2, num_blocks, block_size, H, D), dtype=fmt.dtype, device=device)
        return kv, [(kv[i, 0], kv[i, 1]) for i in range(L)]
    if fmt.packed and (D % 2 or D & (D - 1)):
        raise EngineError(
            f"kv_cache_dtype {fmt.name!r} needs head_dim a power of two (its keys are stored "
            f"Hadamard-rotated); this model's is {D}; supported here: auto, fp8, int8"
        )
    n_val = block_size * H * fmt.value_bytes(D)
    per_block = n_val + block_size * H * SCALE_BYTES
    # int4 blocks start as code 8 | 8 << 4 (value 0), the others as byte 0 (value 0)
    fill = 0x88 if fmt.packed else 0
    raw = torch.full((L, 2, num_blocks, per_block), fill, dtype=torch.uint8, device=device)
    raw[..., n_val:] = 0
    return raw, layer_views(raw, block_size, H, D, fmt.dtype, bits=fmt.bits)


#: How a quantized block lays out its bytes (:func:`layer_views`). ``"v_token_minor"`` (the
#: default since 2026-12-01 session 3): K values ``[block_size, kv_heads, head_dim]``, then V
#: values ``[kv_heads, head_dim, block_size]`` (each head-dim channel's ``block_size`` keys
#: contiguous, as vLLM's original paged-attention value cache), then K's and V's float32
#: scales ``[kv_heads, block_size]``. The attention kernel's ``P @ V`` product sums over keys,
#: and a tensor-core operand wants the summed axis contiguous: with 1-byte V laid out
#: head_dim-minor, triton gathers it byte by byte from shared memory (256 ``LDS.U8`` per
#: thread and 128-key tile, sm_90 SASS), token-minor it is 16-byte loads and ``ldmatrix``;
#: the scales, read per key, become contiguous vectors too. ``"token_major"`` (sessions 1-2):
#: K and V values ``[block_size, kv_heads, head_dim]``, scales ``[block_size, kv_heads]``.
#: The logical shapes of the views are the same for both; only strides differ.
LAYOUTS = ("v_token_minor", "token_major")
DEFAULT_LAYOUT = "v_token_minor"


def layer_views(
    raw: torch.Tensor,
    block_size: int,
    num_kv_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    layout: str = DEFAULT_LAYOUT,
    bits: int = 8,
) -> list[tuple[torch.Tensor, ...]]:
    """Per-layer ``(k_cache, v_cache, k_scale, v_scale)`` views of a quantized pool ``raw``
    (uint8 ``[layers, 2, num_blocks, block_bytes]``): values ``[num_blocks, block_size,
    num_kv_heads, head_dim * bits // 8]`` of ``dtype`` (uint8 packed for ``bits`` 4), scales
    float32 ``[num_blocks, block_size, num_kv_heads]``, strided as :data:`DEFAULT_LAYOUT` (or
    ``layout``) says.

    Raises:
        ValueError: an unknown ``layout``."""
    if layout not in LAYOUTS:
        raise ValueError(f"unknown quantized KV layout {layout!r}; supported: {LAYOUTS}")
    bs, H, D = block_size, num_kv_heads, head_dim * bits // 8
    n_val = bs * H * D
    vals = raw[..., :n_val].view(dtype)
    scales = raw[..., n_val:].view(SCALE_DTYPE)
    if layout == "token_major":
        vals_k = vals_v = vals.unflatten(-1, (bs, H, D))
        sc = scales.unflatten(-1, (bs, H))
    else:
        vals_k = vals.unflatten(-1, (bs, H, D))
        vals_v = vals.unflatten(-1, (H, D, bs)).permute(0, 1, 2, 5, 3, 4)
        sc = scales.unflatten(-1, (H, bs)).transpose(-1, -2)
    return [(vals_k[i, 0], vals_v[i, 1], sc[i, 0], sc[i, 1]) for i in range(raw.shape[0])]


def quantize(
    x: torch.Tensor, dtype: torch.dtype, bits: int = 8
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` ``[..., head_dim]`` (any float dtype) with one scale per row.

    Returns: ``(q, scale)``: ``q`` of ``dtype`` (``torch.float8_e4m3fn`` or ``torch.int8``),
    ``x``'s shape, or for ``bits`` 4 (``dtype`` uint8) the packed ``[..., head_dim // 2]``;
    ``scale`` float32 ``x.shape[:-1]``, ``amax / QMAX`` (0 for an all-zero row). The Triton
    kernels do the same float32 arithmetic.
    """
    packed = dtype == PACKED_DTYPE
    qmax = PACKED_QMAX[bits] if packed else QMAX[dtype]
    xf = x.float()
    scale = xf.abs().amax(-1) / qmax
    y = xf / torch.where(scale > 0, scale, 1.0).unsqueeze(-1)
    if packed:
        return pack_int4(torch.floor(y + 0.5).clamp_(-qmax, qmax).to(torch.int8)), scale
    if dtype == torch.int8:
        q = torch.floor(y + 0.5).clamp_(-qmax, qmax).to(torch.int8)
    else:
        q = y.clamp_(-qmax, qmax).to(dtype)
    return q, scale


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``q.float() * scale[..., None]`` rounded to ``dtype`` (``q`` ``[..., head_dim]``,
    ``scale`` ``q.shape[:-1]``; a packed uint8 ``q`` ``[..., head_dim // 2]`` is unpacked
    first)."""
    if q.dtype == PACKED_DTYPE:
        q = unpack_int4(q)
    return (q.float() * scale.float().unsqueeze(-1)).to(dtype)


__all__ = [
    "KVCacheFormat",
    "kv_cache_format",
    "allocate_kv_cache",
    "layer_views",
    "quantize",
    "dequantize",
    "LAYOUTS",
    "DEFAULT_LAYOUT",
    "is_quantized",
    "packed_bits",
    "pack_int4",
    "unpack_int4",
    "hadamard",
    "rotate_int4",
    "PACKED_QMAX",
    "QMAX",
    "SCALE_BYTES",
]
