"""Float weights -> GGUF tensor bytes (F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
IQ4_NL, MXFP4; the i-quants IQ4_XS, IQ3_S, IQ3_XXS, IQ2_S, IQ2_XXS in quantize_iq) in torch, on
the weights' own device (CPU or CUDA), vectorised over blocks and done in chunks so a 15B-parameter model
quantizes in seconds on a GPU with bounded scratch memory. All math is float32.

For test and benchmark files, not a rival to llama.cpp's quantizer: K-quant and IQ4_NL scales come from each
group's range in one pass, without llama.cpp's search for the scale that minimises the error (the error is
somewhat larger than llama-quantize's). Q8_0, Q4_0, Q5_0 and Q5_1 (the last three: llama.cpp's fallbacks for
Q2_K / Q3_K, Q4_K and Q5_K rows that 256 does not divide) and MXFP4 are llama.cpp's reference quantizers, bit for
bit gguf-py's (MXFP4's exponent from the float's own exponent, where gguf-py takes a float32 log2). The blocks are
the file format byte for byte: gguf-py's `dequantize` reads them (the tests check it).
"""

from __future__ import annotations

import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from strata.kernels.gguf_blocks import IQ4_VALUES, MXFP4_VALUES, e8m0_half
from strata.weights.block_bytes import f16_bytes as _f16_bytes
from strata.weights.block_bytes import f16_rounded as _f16
from strata.weights.block_bytes import safe_div as _safe_div
from strata.weights.quantize_iq import iq2_s, iq2_xxs, iq3_s, iq3_xxs, iq4_xs

QK_K = 256
F32, F16, BF16 = GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16
Q8_0, Q4_K, Q5_K, Q6_K = (GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q5_K,
                          GGMLQuantizationType.Q6_K)
Q2_K, Q3_K = GGMLQuantizationType.Q2_K, GGMLQuantizationType.Q3_K
Q4_0, Q5_0, Q5_1 = GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q5_0, GGMLQuantizationType.Q5_1
IQ4_NL, MXFP4 = GGMLQuantizationType.IQ4_NL, GGMLQuantizationType.MXFP4
_FLOATS = {F32: torch.float32, F16: torch.float16, BF16: torch.bfloat16}
_CHUNK_VALUES = 1 << 24  # values quantized per step: bounds the float32 scratch to a few hundred MiB


def quantize(weights: torch.Tensor, qtype: int) -> torch.Tensor:
    """float [..., K] (any float dtype, any strides) -> uint8 [..., K / block size * bytes per block] on the
    same device: the GGUF bytes of `qtype` (F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K,
    Q6_K, IQ4_NL, MXFP4, IQ4_XS, IQ3_S, IQ3_XXS, IQ2_S, IQ2_XXS). K must be a whole number of blocks."""
    qtype = GGMLQuantizationType(qtype)
    if qtype in _FLOATS:
        values = weights.to(_FLOATS[qtype]).contiguous()
        return values.view(torch.uint8).reshape(*weights.shape[:-1], -1)
    if qtype not in _BLOCK_QUANTIZERS:
        names = ", ".join(t.name for t in (*_FLOATS, *_BLOCK_QUANTIZERS))
        raise ValueError(f"quantize: GGUF type {qtype.name} is not one of {names}")
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    if weights.shape[-1] % block_size:
        raise ValueError(f"{qtype.name} needs rows of whole {block_size}-weight blocks, got rows of "
                         f"{weights.shape[-1]}")
    if weights.dim() == 1:
        return quantize(weights.unsqueeze(0), qtype)[0]
    out = torch.empty(*weights.shape[:-1], weights.shape[-1] // block_size * type_size, dtype=torch.uint8,
                      device=weights.device)
    # steps along dim 0: a step's float32 copy (and, for a view such as the gate half of [E, 2I, D], its
    # contiguous copy) is all the scratch there is
    step = max(1, _CHUNK_VALUES * weights.shape[0] // max(1, weights.numel()))
    for start in range(0, weights.shape[0], step):
        part = weights[start:start + step]
        blocks = _BLOCK_QUANTIZERS[qtype](part.reshape(-1, block_size).float())    # [B, type_size]
        out[start:start + step] = blocks.view(out[start:start + step].shape)
    return out


def _round_away(x: torch.Tensor) -> torch.Tensor:
    """llama.cpp's roundf (half away from zero), written as gguf-py's np_roundf so Q8_0 matches it exactly."""
    a = x.abs()
    floored = a.floor()
    return torch.sign(x) * (floored + (2 * (a - floored)).floor())


def _q8_0(x: torch.Tensor) -> torch.Tensor:
    """[B, 32] -> [B, 34]: float16 d = max |w| / 127, then 32 int8 round(w / d)."""
    d = x.abs().amax(dim=-1, keepdim=True) / 127                          # [B, 1]
    qs = _round_away(x * _inverse(d)).to(torch.int8).view(torch.uint8)   # [B, 32]
    return torch.cat([_f16_bytes(d[:, 0]), qs], dim=1)


def _inverse(d: torch.Tensor) -> torch.Tensor:
    return torch.where(d == 0, 0.0, 1 / torch.where(d == 0, 1.0, d))


def _q5_bits(q: torch.Tensor) -> torch.Tensor:
    """5-bit q [B, 32] -> [B, 20]: qh (a little-endian uint32, bit i the fifth bit of weight i), then 16 bytes
    whose low nibbles hold weights 0-15 and high nibbles 16-31."""
    fifth = (q >> 4).reshape(-1, 4, 8).to(torch.int32) << torch.arange(8, device=q.device, dtype=torch.int32)
    qh = fifth.sum(dim=-1).to(torch.uint8)                                # [B, 4]: distinct bits, so sum == or
    return torch.cat([qh, (q[:, :16] & 15) | ((q[:, 16:] & 15) << 4)], dim=1)


def _q4_0(x: torch.Tensor) -> torch.Tensor:
    """[B, 32] -> [B, 18]: float16 d = peak / -8, then q = min(15, trunc(w / d + 8.5)) as nibbles (weights 0-15
    low, 16-31 high), llama.cpp's quantize_row_q4_0_ref (its fallback for Q2_K / Q3_K rows 256 does not
    divide); w ~ d * (q - 8)."""
    peak = x.gather(-1, x.abs().argmax(dim=-1, keepdim=True))             # [B, 1]
    d = peak / -8
    q = (x * _inverse(d) + 8.5).trunc().clamp(0, 15).to(torch.uint8)      # [B, 32]
    return torch.cat([_f16_bytes(d[:, 0]), q[:, :16] | (q[:, 16:] << 4)], dim=1)


def _q5_0(x: torch.Tensor) -> torch.Tensor:
    """[B, 32] -> [B, 22]: float16 d = peak / -16 (the largest-magnitude weight lands on q = 0), then
    q = min(31, trunc(w / d + 16.5)), llama.cpp's quantize_row_q5_0_ref; w ~ d * (q - 16)."""
    peak = x.gather(-1, x.abs().argmax(dim=-1, keepdim=True))             # [B, 1]
    d = peak / -16
    q = (x * _inverse(d) + 16.5).trunc().clamp(0, 31).to(torch.uint8)     # [B, 32]
    return torch.cat([_f16_bytes(d[:, 0]), _q5_bits(q)], dim=1)


def _q5_1(x: torch.Tensor) -> torch.Tensor:
    """[B, 32] -> [B, 24]: float16 d = (max - min) / 31 and m = min, then q = trunc((w - min) / d + 0.5),
    llama.cpp's quantize_row_q5_1_ref; w ~ d * q + m."""
    low, high = x.amin(dim=-1, keepdim=True), x.amax(dim=-1, keepdim=True)    # [B, 1]
    d = (high - low) / 31
    q = ((x - low) * _inverse(d) + 0.5).trunc().clamp(0, 31).to(torch.uint8)  # [B, 32]
    return torch.cat([_f16_bytes(d[:, 0]), _f16_bytes(low[:, 0]), _q5_bits(q)], dim=1)


def _scales_mins(x: torch.Tensor, levels: int):
    """K-quant with sub-block mins (Q4_K, Q5_K): [B, 256] -> (q [B, 8, 32] in 0..levels, sc, m [B, 8]
    6-bit, d, dmin [B] float16-exact) with w ~ d * sc * q - dmin * m."""
    sub = x.reshape(-1, 8, 32)
    low = sub.amin(dim=-1).clamp(max=0.0)                                 # [B, 8] <= 0
    scale = (sub.amax(dim=-1) - low) / levels                             # [B, 8]
    d = _f16(scale.amax(dim=-1) / 63.0)                                   # [B]
    dmin = _f16(-low.amin(dim=-1) / 63.0)
    sc = _safe_div(scale, d[:, None]).round().clamp(0, 63)
    m = _safe_div(-low, dmin[:, None]).round().clamp(0, 63)
    step = d[:, None] * sc                                                # [B, 8]
    q = _safe_div(sub + (dmin[:, None] * m)[..., None], step[..., None]).round().clamp(0, levels)
    return q.to(torch.uint8), sc.to(torch.uint8), m.to(torch.uint8), d, dmin


def _pack_scales(sc: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """6-bit sc, m [B, 8] -> the 12 scale bytes of Q4_K / Q5_K: bytes 0-3 sc 0-3, 4-7 m 0-3 (their top
    two bits holding the top bits of sc, m 4-7), 8-11 the low nibbles of sc 4-7 and m 4-7."""
    return torch.cat([(sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6),
                      (m[:, :4] & 63) | ((m[:, 4:] >> 4) << 6),
                      (sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)], dim=1)


def _q4_k(x: torch.Tensor) -> torch.Tensor:
    """[B, 256] -> [B, 144]: d, dmin, 12 scale bytes, then 128 bytes whose nibbles hold sub-blocks 2j
    (low) and 2j + 1 (high) of byte group j."""
    q, sc, m, d, dmin = _scales_mins(x, 15)
    qs = q[:, 0::2] | (q[:, 1::2] << 4)                                   # [B, 4, 32]
    return torch.cat([_f16_bytes(d), _f16_bytes(dmin), _pack_scales(sc, m), qs.reshape(-1, 128)], dim=1)


def _q5_k(x: torch.Tensor) -> torch.Tensor:
    """[B, 256] -> [B, 176]: as Q4_K with 5-bit q; bit j of qh[l] is the fifth bit of sub-block j's weight l."""
    q, sc, m, d, dmin = _scales_mins(x, 31)
    low = q & 15
    qs = low[:, 0::2] | (low[:, 1::2] << 4)                               # [B, 4, 32]
    high = (q >> 4).to(torch.int32) << torch.arange(8, device=x.device, dtype=torch.int32)[:, None]
    qh = high.sum(dim=1).to(torch.uint8)                                  # [B, 32]: distinct bits, so sum == or
    return torch.cat([_f16_bytes(d), _f16_bytes(dmin), _pack_scales(sc, m), qh, qs.reshape(-1, 128)], dim=1)


def _two_bit_planes(q: torch.Tensor) -> torch.Tensor:
    """2-bit q [B, 256] -> [B, 64] bytes as Q2_K and Q3_K keep them: weight 128 h + 32 s + l in bits 2 s of
    byte 32 h + l."""
    planes = q.reshape(-1, 2, 4, 32).to(torch.int32) << torch.arange(0, 8, 2, device=q.device,
                                                                       dtype=torch.int32)[:, None]
    return planes.sum(dim=2).to(torch.uint8).reshape(-1, 64)             # distinct bits, so sum == or


def _q2_k(x: torch.Tensor) -> torch.Tensor:
    """[B, 256] -> [B, 84]: per group of 16, w ~ d * sc * q - dmin * m with q in 0..3 and 4-bit sc, m (byte i
    of the 16 scale bytes: sc | m << 4), then the 2-bit planes, float16 d and dmin."""
    groups = x.reshape(-1, 16, 16)
    low = groups.amin(dim=-1).clamp(max=0.0)                              # [B, 16] <= 0
    scale = (groups.amax(dim=-1) - low) / 3
    d = _f16(scale.amax(dim=-1) / 15.0)                                   # [B]
    dmin = _f16(-low.amin(dim=-1) / 15.0)
    sc = _safe_div(scale, d[:, None]).round().clamp(0, 15)
    m = _safe_div(-low, dmin[:, None]).round().clamp(0, 15)
    step = d[:, None] * sc                                                # [B, 16]
    q = _safe_div(groups + (dmin[:, None] * m)[..., None], step[..., None]).round().clamp(0, 3).to(torch.uint8)
    scales = sc.to(torch.uint8) | (m.to(torch.uint8) << 4)
    return torch.cat([scales, _two_bit_planes(q), _f16_bytes(d), _f16_bytes(dmin)], dim=1)


def _q3_k(x: torch.Tensor) -> torch.Tensor:
    """[B, 256] -> [B, 110]: per group of 16, w = d * sc * q with q in -4..3 (the group's peak lands on -4) and
    6-bit sc - 32 signed. Bytes: hmask (bit t of byte l: q + 4 >= 4 for weight 32 t + l), the low 2 bits of q + 4
    as Q2_K's planes, 12 scale bytes (sc + 32: low nibbles of groups 0-7 and 8-15 in bytes 0-7, top two bits of
    group 4 s + j in bits 2 s of byte 8 + j), float16 d."""
    groups = x.reshape(-1, 16, 16)
    peak = groups.gather(-1, groups.abs().argmax(dim=-1, keepdim=True))[..., 0]   # [B, 16]
    scale = -peak / 4.0
    d = _f16(scale.abs().amax(dim=-1) / 31.0)                             # [B]
    sc = _safe_div(scale, d[:, None]).round().clamp(-32, 31)              # [B, 16]
    step = d[:, None] * sc
    q = (_safe_div(groups, step[..., None]).round().clamp(-4, 3) + 4).to(torch.uint8).reshape(-1, 256)
    bits = torch.arange(8, device=x.device, dtype=torch.int32)[:, None]
    hmask = ((q >> 2).reshape(-1, 8, 32).to(torch.int32) << bits).sum(dim=1).to(torch.uint8)   # [B, 32]
    s6 = (sc + 32).to(torch.uint8)                                        # [B, 16] in 0..63
    top = (s6 >> 4).reshape(-1, 4, 4).to(torch.int32) << torch.arange(0, 8, 2, device=x.device,
                                                                       dtype=torch.int32)[:, None]
    scales = torch.cat([(s6[:, :8] & 15) | ((s6[:, 8:] & 15) << 4), top.sum(dim=1).to(torch.uint8)], dim=1)
    return torch.cat([hmask, _two_bit_planes(q & 3), scales, _f16_bytes(d)], dim=1)


def _q6_k(x: torch.Tensor) -> torch.Tensor:
    """[B, 256] -> [B, 210]: per group of 16, w = d * scale * q with q in -32..31, int8 scales, float16 d.
    Weight r * 32 + l (r < 8) keeps its low 4 bits in nibble (r // 2) % 2 of ql[64 (r // 4) + 32 (r % 2) + l]
    and its high 2 bits in bits 2 (r % 4) of qh[32 (r // 4) + l]."""
    groups = x.reshape(-1, 16, 16)
    peak = groups.gather(-1, groups.abs().argmax(dim=-1, keepdim=True))[..., 0]   # [B, 16]
    scale = -peak / 32.0                                                  # the peak maps to q = -32
    d = _f16(scale.abs().amax(dim=-1) / 127.0)                            # [B]
    sc = _safe_div(scale, d[:, None]).round().clamp(-128, 127)            # [B, 16]
    step = d[:, None] * sc
    q = (_safe_div(groups, step[..., None]).round().clamp(-32, 31) + 32).to(torch.uint8)
    q = q.reshape(-1, 2, 4, 32)                                           # [B, half h, row r % 4, l]
    ql = torch.stack([(q[:, :, 0] & 15) | ((q[:, :, 2] & 15) << 4),
                      (q[:, :, 1] & 15) | ((q[:, :, 3] & 15) << 4)], dim=2)          # [B, h, r % 2, l]
    qh = (q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6)
    sc_bytes = sc.to(torch.int8).view(torch.uint8)
    return torch.cat([ql.reshape(-1, 128), qh.reshape(-1, 64), sc_bytes, _f16_bytes(d)], dim=1)


def _iq4_nl(x: torch.Tensor) -> torch.Tensor:
    """[B, 32] -> [B, 18]: float16 d = peak / -127 (the block's largest-magnitude weight lands on level -127),
    then each weight's nearest level x / d as 4-bit codes: byte j holds weight j (low nibble) and j + 16."""
    levels = torch.tensor(IQ4_VALUES, dtype=torch.float32, device=x.device)
    peak = x.gather(-1, x.abs().argmax(dim=-1, keepdim=True))                       # [B, 1]
    d = _f16(peak / -127.0)
    codes = (_safe_div(x, d)[..., None] - levels).abs().argmin(dim=-1).to(torch.uint8)   # [B, 32]
    return torch.cat([_f16_bytes(d[:, 0]), codes[:, :16] | (codes[:, 16:] << 4)], dim=1)


def _mxfp4(x: torch.Tensor) -> torch.Tensor:
    """[B, 32] -> [B, 17]: the exponent byte e = floor(log2(max |x|)) - 2 + 127 (0 for a block of zeros), so the
    largest weight lands on a value of 4-12 times the scale 2^(e - 128); then each weight's nearest value as
    4-bit codes (the first of equals, as numpy's argmin): byte j holds weight j (low nibble) and j + 16."""
    peak = x.abs().amax(dim=-1, keepdim=True)                                           # [B, 1]
    exponent = torch.frexp(peak).exponent - 1                                           # floor(log2(peak)), exact
    e = torch.where(peak > 0, exponent - 2 + 127, torch.zeros_like(exponent)).clamp(0, 255)
    scale = e8m0_half(e)                                                                # [B, 1]
    values = torch.tensor(MXFP4_VALUES, dtype=torch.float32, device=x.device)
    codes = (scale[..., None] * values - x[..., None]).abs().argmin(dim=-1).to(torch.uint8)   # [B, 32]
    return torch.cat([e.to(torch.uint8), codes[:, :16] | (codes[:, 16:] << 4)], dim=1)


_BLOCK_QUANTIZERS = {Q8_0: _q8_0, Q4_0: _q4_0, Q5_0: _q5_0, Q5_1: _q5_1, Q2_K: _q2_k, Q3_K: _q3_k, Q4_K: _q4_k,
                     Q5_K: _q5_k, Q6_K: _q6_k, IQ4_NL: _iq4_nl, MXFP4: _mxfp4, GGMLQuantizationType.IQ4_XS: iq4_xs,
                     GGMLQuantizationType.IQ3_S: iq3_s, GGMLQuantizationType.IQ3_XXS: iq3_xxs,
                     GGMLQuantizationType.IQ2_S: iq2_s, GGMLQuantizationType.IQ2_XXS: iq2_xxs}
SUPPORTED_TYPES = (*_FLOATS, *_BLOCK_QUANTIZERS)
