"""GGUF block formats as data, and their dequantization in torch (`dequantize_ref`).

A GGUF row of K values of a block type is K / block_size blocks of type_size bytes, so a weight [N, K] is
a uint8 tensor [N, row_bytes], rows in file order. `dequantize_ref` equals gguf-py's numpy
`gguf.quants.dequantize` bit for bit: the same float32 operations in the same order (a multiply and an
add stay two roundings, never one fused multiply-add). It and `packed_matmul_ref` (dequantize, then
matmul in float32) are the references every kernel reading packed blocks is tested against. gguf is
imported on first use (it takes ~0.3 s), for its type ids and sizes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

# the i-quants' decoders and code books (re-exported: the Triton kernels' tables are built from these grids)
from strata.kernels.gguf_iquants import IQ_BLOCKS, _iq_grid, _ksigns  # noqa: F401

# block types whose weights stay packed in memory (dense types F32 / F16 / BF16 load as tensors)
# (Q5_0 / Q5_1: llama.cpp's fallbacks for Q4_K / Q5_K rows that 256 does not divide, e.g. Qwen4-Exp's
# 640-wide expert down projections in a Q4_K_M file)
# (Q2_K / Q3_K: the bulk of llama.cpp's Q2_K and Q3_K_S/M/L files, what a 125B model takes to fit 64 GB of RAM)
# (the i-quants: llama.cpp's 1-3 bit files (IQ1_S ... IQ3_S; grid code books, 7-bit sign codes), read by the float
# kernels on the GPU (packed_iquants) and the native CPU kernels; IQ4_NL: those files' and IQ4_XS files' fallback
# for rows 256 does not divide, such as Qwen4-Exp's 640-wide expert down rows, and its PLE table's type)
# (MXFP4: llama.cpp's MXFP4_MOE files keep the routed experts in it: 4-bit E2M1 values, a power-of-two scale per 32)
IQ_TYPE_NAMES = ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M")
PACKED_TYPE_NAMES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                     "IQ4_XS", "IQ4_NL", "MXFP4") + IQ_TYPE_NAMES
DENSE_TYPE_NAMES = ("F32", "F16", "BF16")
_QK_K = 256  # values per superblock of the K and IQ types
# IQ4_NL / IQ4_XS: the non-linear 4-bit code book (llama.cpp's kvalues_iq4nl)
IQ4_VALUES = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
# MXFP4: E2M1's 16 values, doubled to integers (the scale is halved to match: gguf-py's MXFP4.kvalues)
MXFP4_VALUES = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)


@dataclass(frozen=True)
class BlockFormat:
    qtype: int       # gguf.GGMLQuantizationType id
    name: str
    block_size: int  # values per block
    type_size: int   # bytes per block

    def row_bytes(self, num_values: int) -> int:
        """Bytes of a row of `num_values` values; ValueError when it is not a whole number of blocks."""
        if num_values <= 0 or num_values % self.block_size:
            raise ValueError(f"a row of {num_values} values is not a whole number of {self.name} blocks "
                             f"({self.block_size} values each)")
        return num_values // self.block_size * self.type_size


@functools.cache
def block_formats() -> dict[int, BlockFormat]:
    """qtype -> BlockFormat for every type dequantize_ref reads (dense, packed, lookup-only and i-quants)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    formats = {}
    for name in DENSE_TYPE_NAMES + PACKED_TYPE_NAMES:
        qtype = GGMLQuantizationType[name]
        formats[int(qtype)] = BlockFormat(int(qtype), name, *GGML_QUANT_SIZES[qtype])
    return formats


def block_format(qtype: int) -> BlockFormat | None:
    return block_formats().get(int(qtype))


def is_packed_type(qtype: int) -> bool:
    """Whether weights of this type stay packed (a quantized type with a reference dequantization here)."""
    fmt = block_format(qtype)
    return fmt is not None and fmt.name in PACKED_TYPE_NAMES


def dequantize_ref(blocks: torch.Tensor, qtype: int, k: int) -> torch.Tensor:
    """blocks uint8 [N, row_bytes] (N GGUF rows of `qtype`, K values each) -> float32 [N, K]."""
    fmt = block_format(qtype)
    if fmt is None:
        raise ValueError(f"GGML type {qtype} has no reference dequantization here; known: "
                         f"{', '.join(f.name for f in block_formats().values())}")
    if blocks.dtype != torch.uint8 or blocks.dim() != 2 or blocks.shape[1] != fmt.row_bytes(k):
        raise ValueError(f"{fmt.name} rows of {k} values are uint8 [N, {fmt.row_bytes(k)}], got {blocks.dtype} "
                         f"{tuple(blocks.shape)}")
    num_rows = blocks.shape[0]
    blocks = blocks.contiguous()
    if fmt.name in DENSE_TYPE_NAMES:
        return _DENSE[fmt.name](blocks)
    # [N * K / block_size, type_size]: one row per block
    return _BLOCKS[fmt.name](blocks.view(-1, fmt.type_size)).reshape(num_rows, k)


# values per dequantized chunk of packed_matmul_ref (16 MiB of float32): bounds the temporary of a large
# weight (an LM head) while keeping ops few and large
_CHUNK_VALUES = 1 << 22


def packed_matmul_ref(x: torch.Tensor, blocks: torch.Tensor, qtype: int, k: int) -> torch.Tensor:
    """x float32 [T, K] @ the weight blocks [N, row_bytes] hold, transposed -> float32 [T, N]: dequantize,
    then matmul in float32 (the contract of every packed matmul kernel); large weights in row chunks."""
    rows = max(1, _CHUNK_VALUES // k)
    if blocks.shape[0] <= rows:
        return x @ dequantize_ref(blocks, qtype, k).t()
    out = x.new_empty(x.shape[0], blocks.shape[0])
    for start in range(0, blocks.shape[0], rows):
        out[:, start:start + rows] = x @ dequantize_ref(blocks[start:start + rows], qtype, k).t()
    return out


# ---- dense types: rows [N, K * type_size] -> [N, K] -------------------------------------------------

def _bf16(rows: torch.Tensor) -> torch.Tensor:
    # the bits shifted into a float32's high half, as gguf-py does (keeps NaN payloads)
    return (rows.view(torch.int16).to(torch.int32) << 16).view(torch.float32)


_DENSE = {
    "F32": lambda rows: rows.view(torch.float32),
    "F16": lambda rows: rows.view(torch.float16).float(),
    "BF16": _bf16,
}


# ---- block types: blocks [B, type_size] -> [B, block_size] ------------------------------------------
# Few, whole-tensor ops written into one float32 output (out= and in place): this is also the CPU's
# float32 decode path, where each extra small op costs a thread-pool round trip.

def _f16(b: torch.Tensor, at: int) -> torch.Tensor:
    """The float16 at byte `at` (even: every type's scales are 2-aligned) of each block -> float32 [B, 1]."""
    return b.view(torch.float16)[:, at // 2:at // 2 + 1].float()


def _nibbles_into(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """x uint8 [..., n] -> out [..., 2, n] (any dtype): the n low nibbles, then the n high ones."""
    if out.is_cuda and out.is_floating_point():  # CUDA's bitwise ops write integer outputs only
        out.select(-2, 0).copy_(x & 0x0F)
        out.select(-2, 1).copy_(x >> 4)
        return out
    torch.bitwise_and(x, 0x0F, out=out.select(-2, 0))
    torch.bitwise_right_shift(x, 4, out=out.select(-2, 1))
    return out


def _shifts(start: int, stop: int, step: int, device: torch.device) -> torch.Tensor:
    return torch.arange(start, stop, step, dtype=torch.uint8, device=device)


def _q8_0(b: torch.Tensor) -> torch.Tensor:
    return b[:, 2:].view(torch.int8).float().mul_(_f16(b, 0))


def _q4_0(b: torch.Tensor) -> torch.Tensor:
    q = _nibbles_into(b.new_empty(b.shape[0], 2, 16, dtype=torch.float32), b[:, 2:]).view(-1, 32)
    return q.sub_(8).mul_(_f16(b, 0))


def _q4_1(b: torch.Tensor) -> torch.Tensor:
    q = _nibbles_into(b.new_empty(b.shape[0], 2, 16, dtype=torch.float32), b[:, 4:]).view(-1, 32)
    return q.mul_(_f16(b, 0)).add_(_f16(b, 2))


def _fifth_bits(qh: torch.Tensor) -> torch.Tensor:
    """Q5_0 / Q5_1: the 4 bytes qh [B, 4] (a little-endian uint32, bit i the fifth bit of value i) -> [B, 32]
    bits, 0 or 1."""
    return ((qh.unsqueeze(-1) >> _shifts(0, 8, 1, qh.device)) & 1).view(-1, 32)


def _q5_0(b: torch.Tensor) -> torch.Tensor:
    # [B, 22]: float16 d, qh, then 16 bytes whose low nibbles are values 0-15 and high nibbles 16-31
    q = _nibbles_into(b.new_empty(b.shape[0], 2, 16, dtype=torch.float32), b[:, 6:]).view(-1, 32)
    return q.add_(_fifth_bits(b[:, 2:6]), alpha=16).sub_(16).mul_(_f16(b, 0))


def _q5_1(b: torch.Tensor) -> torch.Tensor:
    # [B, 24]: float16 d, float16 m, qh, then Q5_0's 16 bytes of low 4 bits; w = d * q + m
    q = _nibbles_into(b.new_empty(b.shape[0], 2, 16, dtype=torch.float32), b[:, 8:]).view(-1, 32)
    return q.add_(_fifth_bits(b[:, 4:8]), alpha=16).mul_(_f16(b, 0)).add_(_f16(b, 2))


def _q2_k(b: torch.Tensor) -> torch.Tensor:
    # [B, 84]: 16 scale bytes (low nibble the sub-block's scale, high its min), 64 bytes of 2-bit values,
    # float16 d, float16 dmin; w = d * scale * q - dmin * min over sub-blocks of 16
    scales = b[:, 0:16]
    scale = (_f16(b, 80) * (scales & 0x0F).float()).unsqueeze(-1)  # [B, 16, 1]
    minimum = (_f16(b, 82) * (scales >> 4).float()).unsqueeze(-1)   # [B, 16, 1]
    # each half of 128 values takes 32 bytes, at shifts 0, 2, 4, 6
    q = (b[:, 16:80].reshape(-1, 2, 1, 32) >> _shifts(0, 8, 2, b.device).view(1, 1, 4, 1)) & 3
    return q.view(-1, 16, 16).float().mul_(scale).sub_(minimum).view(-1, _QK_K)


def _q3_k(b: torch.Tensor) -> torch.Tensor:
    # [B, 110]: 32 bytes hmask (bit t of byte j: value 32t + j's high bit, set = no -4), 64 bytes of low 2 bits
    # (Q2_K's order), 12 bytes of 6-bit scales (low nibbles in bytes 0-7: scales 0-7 low, 8-15 high; top two
    # bits in bytes 8-11 at shifts 0, 2, 4, 6), float16 d; w = d * (scale - 32) * (low - 4 * !high)
    s = b[:, 96:108]
    low = torch.cat((s[:, 0:8] & 0x0F, s[:, 0:8] >> 4), dim=-1)                                    # [B, 16]
    top = (s[:, 8:12].unsqueeze(1) >> _shifts(0, 8, 2, b.device).view(1, 4, 1)).reshape(-1, 16) & 3  # [B, 16]
    scale = (_f16(b, 108) * ((low | (top << 4)).float() - 32)).unsqueeze(-1)                         # [B, 16, 1]
    q = (b[:, 32:96].reshape(-1, 2, 1, 32) >> _shifts(0, 8, 2, b.device).view(1, 1, 4, 1)) & 3
    high = (b[:, 0:32].unsqueeze(1) >> _shifts(0, 8, 1, b.device).view(1, 8, 1)) & 1               # [B, 8, 32]
    q = q.view(-1, _QK_K).float().add_(high.view(-1, _QK_K), alpha=4).sub_(4)
    return q.view(-1, 16, 16).mul_(scale).view(-1, _QK_K)


def _k_scales(s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The 12 scale bytes of a Q4_K / Q5_K superblock [B, 12] -> (scales [B, 8], mins [B, 8]), 6 bits each:
    bytes 0-3 hold scales 0-3 (+ the top bits of scales 4-7), 4-7 the mins likewise, 8-11 the low nibbles
    of scales 4-7 and mins 4-7."""
    lo_sc, lo_min, rest = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    scales = torch.cat((lo_sc & 0x3F, (rest & 0x0F) | ((lo_sc >> 2) & 0x30)), dim=-1)
    mins = torch.cat((lo_min & 0x3F, (rest >> 4) | ((lo_min >> 2) & 0x30)), dim=-1)
    return scales, mins


def _k_scale_min(b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K / Q5_K: (d * scale, dmin * min) of the 8 sub-blocks of 32 -> [B, 8, 1] each."""
    scales, mins = _k_scales(b[:, 4:16])
    return (_f16(b, 0) * scales.float()).unsqueeze(-1), (_f16(b, 2) * mins.float()).unsqueeze(-1)


def _q4_k(b: torch.Tensor) -> torch.Tensor:
    scale, minimum = _k_scale_min(b)
    # 4 x (32 low nibbles, 32 high): sub-blocks 2j and 2j + 1 share bytes 32j .. 32j + 31
    q = _nibbles_into(b.new_empty(b.shape[0], 4, 2, 32, dtype=torch.float32), b[:, 16:].view(-1, 4, 32))
    return q.view(-1, 8, 32).mul_(scale).sub_(minimum).view(-1, _QK_K)


def _q5_k(b: torch.Tensor) -> torch.Tensor:
    scale, minimum = _k_scale_min(b)
    q = _nibbles_into(b.new_empty(b.shape[0], 4, 2, 32, dtype=torch.float32), b[:, 48:].view(-1, 4, 32))
    # bit i of high byte j is the fifth bit of value j of sub-block i (exact in float32: small integers)
    high = (b[:, 16:48].unsqueeze(1) >> _shifts(0, 8, 1, b.device).view(1, 8, 1)) & 1
    return q.view(-1, 8, 32).add_(high, alpha=16).mul_(scale).sub_(minimum).view(-1, _QK_K)


def _q6_k(b: torch.Tensor) -> torch.Tensor:
    scale = (_f16(b, 208) * b[:, 192:208].view(torch.int8).float()).unsqueeze(-1)  # [B, 16, 1]
    q = _nibbles_into(b.new_empty(b.shape[0], 2, 2, 64, dtype=torch.float32), b[:, 0:128].view(-1, 2, 64))
    # two high bits per value: each half of 128 values takes 32 bytes, at shifts 0, 2, 4, 6
    high = (b[:, 128:192].reshape(-1, 2, 1, 32) >> _shifts(0, 8, 2, b.device).view(1, 1, 4, 1)) & 3
    q = q.view(-1, _QK_K).add_(high.view(-1, _QK_K), alpha=16).sub_(32)
    return q.view(-1, 16, 16).mul_(scale).view(-1, _QK_K)


@functools.cache
def _iq4_values(device: torch.device) -> torch.Tensor:
    # cached per device: built once, before any CUDA graph capture reads it (a capture allows no host copy)
    return torch.tensor(IQ4_VALUES, dtype=torch.float32, device=device)


def _iq4_nl(b: torch.Tensor) -> torch.Tensor:
    # [B, 18]: float16 d, then 16 bytes whose low nibbles code values 0-15 and high nibbles 16-31
    codes = _nibbles_into(b.new_empty(b.shape[0], 2, 16), b[:, 2:])
    return _iq4_values(b.device)[codes.view(-1).long()].view(-1, 32).mul_(_f16(b, 0))


@functools.cache
def _mxfp4_values(device: torch.device) -> torch.Tensor:
    return torch.tensor(MXFP4_VALUES, dtype=torch.float32, device=device)


def e8m0_half(e: torch.Tensor) -> torch.Tensor:
    """E8M0 exponents (integers 0-255, any shape) -> 2^(e - 128) in float32 (gguf-py's e8m0_to_fp32_half: subnormal
    below e = 2)."""
    e = e.to(torch.int32)
    bits = torch.where(e < 2, torch.full_like(e, 0x00200000) << (e & 1), (e - 1) << 23)
    return bits.view(torch.float32)


def _mxfp4(b: torch.Tensor) -> torch.Tensor:
    # [B, 17]: the scale's exponent byte, then 16 bytes whose low nibbles code values 0-15 and high nibbles 16-31
    codes = _nibbles_into(b.new_empty(b.shape[0], 2, 16), b[:, 1:])
    return _mxfp4_values(b.device)[codes.view(-1).long()].view(-1, 32).mul_(e8m0_half(b[:, 0:1]))


def _interleaved_nibbles(x: torch.Tensor) -> torch.Tensor:
    """x uint8 [B, n] -> uint8 [B, 2n]: byte i's low nibble at 2i, its high nibble at 2i + 1."""
    return torch.stack((x & 0x0F, x >> 4), dim=-1).view(x.shape[0], -1)


def _iq4_xs(b: torch.Tensor) -> torch.Tensor:
    low = _interleaved_nibbles(b[:, 4:8])  # [B, 8]
    high = b[:, 2].to(torch.int32) | (b[:, 3].to(torch.int32) << 8)  # uint16 of 2-bit fields
    high = (high.unsqueeze(-1) >> torch.arange(0, 16, 2, dtype=torch.int32, device=b.device)) & 3
    scale = (_f16(b, 0) * ((low.to(torch.int32) | (high << 4)).float() - 32)).unsqueeze(-1)  # [B, 8, 1]
    codes = _nibbles_into(b.new_empty(b.shape[0], 8, 2, 16), b[:, 8:].view(-1, 8, 16))
    values = _iq4_values(b.device)[codes.view(-1).long()]
    return values.view(-1, 8, 32).mul_(scale).view(-1, _QK_K)


_BLOCKS = {"Q8_0": _q8_0, "Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1, "Q2_K": _q2_k, "Q3_K": _q3_k,
           "Q4_K": _q4_k,
           "Q5_K": _q5_k, "Q6_K": _q6_k, "IQ4_XS": _iq4_xs, "IQ4_NL": _iq4_nl, "MXFP4": _mxfp4,
           **IQ_BLOCKS}
