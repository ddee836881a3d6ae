"""How K and V are stored in the paged KV pool, in one place for the torch paths and the Triton kernels:
in the model's dtype, as float8 e4m3 (rounded, scale 1), or as int8 with one float32 scale per (token, KV
head) vector of head_dim values in a parallel scale pool [N_blocks, B, Hkv] (symmetric: scale = absmax /
127, values rounded half away from zero into -127..127; a vector of zeros has scale 0).

Scales are float32, not float16: they cost 4 bytes a vector (3 % of its int8 bytes at head_dim 128, 1.6 %
at 256; float16 would save half of that), the kernels multiply by them without a conversion, and no
vector's scale leaves the range (float16 scales turn subnormal below an absmax of 0.008 and overflow
above 8.3e6). The Triton helper `quantize_int8` gives quantize_int8_ref's numbers exactly (correctly
rounded divisions, div_rn, not Triton's approximate `/`; the same rounding), up to subnormal quotients,
which the GPU flushes to zero.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: the refs still work
    triton = tl = None

SCALE_DTYPE = torch.float32


def quantize_int8_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] -> (int8 values [..., D], float32 scales [...]): x ~ values * scale per vector."""
    xf = x.float()
    # divided by a 0-dim tensor, not a Python number: CUDA torch multiplies by a scalar divisor's reciprocal,
    # which is not the correctly rounded quotient the kernels compute (scales a bit apart on the H200)
    absmax = xf.abs().amax(dim=-1)
    scale = absmax / absmax.new_full((), 127.0)                           # [...]
    y = xf / torch.where(scale > 0, scale, 1.0)[..., None]                 # in [-127, 127]
    values = y.abs().add(0.5).floor().clamp(max=127.0).copysign(y)          # half away from zero
    return values.to(torch.int8), scale


def dequantize_int8_ref(values: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """int8 values [..., D] and their scales [...] -> [..., D] in `dtype`."""
    return (values.float() * scale[..., None]).to(dtype)


def read_kv_ref(values: torch.Tensor, scale: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """Rows read from a KV cache [..., Hkv, D] (with their scales [..., Hkv] for an int8 cache, else None)
    -> [..., Hkv, D] in `dtype`: int8 dequantized, float8 widened."""
    return values.to(dtype) if scale is None else dequantize_int8_ref(values, scale, dtype)


def write_kv_ref(x: torch.Tensor, cache: torch.Tensor, scale: torch.Tensor | None,
                 slot_mapping: torch.Tensor) -> None:
    """x [T, Hkv, D] into cache [N_blocks, B, Hkv, D] at the flat token slots slot_mapping [T]: rounded to a
    float8 cache (its bytes copied: torch has no float8 index_copy_); quantized to an int8 one, whose scale
    pool [N_blocks, B, Hkv] takes the vectors' scales (None for other caches)."""
    rows = cache.view(-1, *cache.shape[2:])                                # [N_blocks * B, Hkv, D]
    if scale is not None:
        x, x_scale = quantize_int8_ref(x)
        scale.view(-1, scale.shape[-1]).index_copy_(0, slot_mapping, x_scale)
    x = x.to(cache.dtype)
    if cache.dtype.is_floating_point and cache.element_size() == 1:
        rows, x = rows.view(torch.uint8), x.view(torch.uint8)
    rows.index_copy_(0, slot_mapping, x)


if triton is not None:

    @triton.jit
    def quantize_int8(x):
        """One vector x [BLOCK] float32 (zeros past its length) -> (int8 values [BLOCK], float32 scale)."""
        scale = tl.math.div_rn(tl.max(tl.abs(x), axis=0), 127.0)
        divisor = tl.zeros_like(x) + tl.where(scale > 0, scale, 1.0)
        y = tl.math.div_rn(x, divisor)
        r = tl.minimum(tl.floor(tl.abs(y) + 0.5), 127.0)
        return tl.where(y < 0, -r, r).to(tl.int8), scale
