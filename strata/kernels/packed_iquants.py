"""The i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) in packed_gemv's block readers.

Each group of 8 weights of a 256-weight superblock is a row of the type's code book (gguf-py's grid; IQ3_*: two
rows of 4) times a sign per weight, scaled per 16 or 32 weights; IQ1_* shift a group by +-1/8 instead of signs.
Byte layouts: gguf_blocks' comments; its `dequantize_ref` is the reference, which `iq_values` equals bit for bit.
Decoding is per group and per 32-bit word, not per weight: a group's index, signs and scale are a few byte loads,
its code book words one 8-byte load from `decode_table` (a few KiB: stays in L1), its signs are applied 4 weights
an operation, and a byte becomes a float by an OR into the mantissa of 2^23 and a subtraction.
"""

from __future__ import annotations

import functools

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: decode_table still works
    triton = tl = None

# gguf.GGMLQuantizationType values -> bytes per superblock of 256 weights
IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ3_S, IQ2_S, IQ1_M = 16, 17, 18, 19, 21, 22, 29
SUPERBLOCK_BYTES = {IQ2_XXS: 66, IQ2_XS: 74, IQ2_S: 82, IQ3_XXS: 98, IQ3_S: 110, IQ1_S: 50, IQ1_M: 56}
_NAMES = {IQ2_XXS: "IQ2_XXS", IQ2_XS: "IQ2_XS", IQ2_S: "IQ2_S", IQ3_XXS: "IQ3_XXS", IQ3_S: "IQ3_S", IQ1_S: "IQ1_S",
          IQ1_M: "IQ1_M"}


@functools.cache
def decode_table(qtype: int, device: torch.device) -> torch.Tensor:
    """The int8 table of i-quant `qtype` that its kernels read (table_ptr): its code book (gguf_blocks' grid, small
    integers; rows of 8, IQ3_*: of 4; read as int32 words), then for IQ2_XXS, IQ2_XS and IQ3_XXS the sign byte of
    each 7-bit sign code (gguf-py's ksigns; bit i set: weight i negative). Cached per device: built on first use,
    which must come before a CUDA graph capture (the grid is copied from the host)."""
    from strata.kernels.gguf_blocks import _iq_grid, _ksigns

    grid = _iq_grid(_NAMES[qtype], device).to(torch.int8).flatten()
    if qtype not in (IQ2_XXS, IQ2_XS, IQ3_XXS):
        return grid
    negative = (_ksigns(device) < 0).to(torch.int32)                                            # [128, 8]
    sign_bits = (negative << torch.arange(8, device=device)).sum(-1)                            # [128]
    return torch.cat((grid, sign_bits.to(torch.uint8).view(torch.int8)))


def table_for(qtype: int, blocks: torch.Tensor) -> torch.Tensor:
    """The `table_ptr` argument of packed_gemv's kernels: decode_table for an i-quant (on the GPU for blocks the GPU
    reads in pinned host memory, the offload's zero-copy experts); for the other types, which never read it, the
    blocks themselves (no allocation: a graph capture may launch them first)."""
    if qtype not in SUPERBLOCK_BYTES:
        return blocks
    pinned_host = blocks.device.type == "cpu" and blocks.is_pinned()  # (a pinned-memory query only for host blocks)
    return decode_table(qtype, torch.device("cuda") if pinned_host else blocks.device)


if triton is not None:

    @triton.jit
    def _u8(ptr, ok):
        return tl.load(ptr, mask=ok, other=0).to(tl.int32)

    @triton.jit
    def _u16(ptr, ok):
        """The little-endian uint16 at byte pointers ptr (any alignment) as int32."""
        return _u8(ptr, ok) | (_u8(ptr + 1, ok) << 8)

    @triton.jit
    def _half(bits):
        """float16 bit patterns (int32) -> float32."""
        return bits.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)

    # every byte's top bit, as an int32: a signed byte v xor 0x80 is v + 128 as an unsigned one
    _BIAS = tl.constexpr(0x80808080 - (1 << 32))

    @triton.jit
    def _iq_fields(base, g, h, table_ptr, ok, QTYPE: tl.constexpr):
        """Superblocks at byte pointers base (rows masked by ok), groups g of 8 weights and word halves h (index
        tensors that broadcast with base: [BN, SB, 1, 1], [1, 1, 32, 1] and [1, 1, 1, 2] in iq_dot) -> (words: the
        code book words (int32 of decode_table) of weights 8 g + 4 h .. 8 g + 4 h + 3; then per group: signs (bit
        i set: weight 8 g + i negative; IQ1_*: unused), scale, delta (IQ1_*'s shift; zeros for the others)). The
        scales are gguf_blocks' float32 expressions in its order (d * (s + 0.5) * 0.25 is two roundings, as there)."""
        if QTYPE == 29:    # IQ1_M keeps d in the top nibbles of its 4 scale words (word k: bits 4k .. 4k + 3)
            d = _half((_u8(base + 49, ok) >> 4) | ((_u8(base + 51, ok) >> 4) << 4) | ((_u8(base + 53, ok) >> 4) << 8)
                      | ((_u8(base + 55, ok) >> 4) << 12))                             # [BN, SB, 1, 1]
        else:
            d = _half(_u16(base, ok))                                                    # [BN, SB, 1, 1]
        delta = d * 0.0
        signs = g * 0
        # (the sign code tables follow the code books: at 2048 = 256 x 8 bytes, 4096 = 512 x 8, 1024 = 256 x 4)
        if QTYPE == 16:    # IQ2_XXS: per 32 weights 4 index bytes, then a uint32 of 4 sign codes and a scale
            group = base + 2 + (g // 4) * 8
            words = _u8(group + g % 4, ok) * 2 + h
            signs = _u8(table_ptr + 2048 + ((_u16(group + 4 + g % 4 * 7 // 8, ok) >> (g % 4 * 7 % 8)) & 127), ok)
            scale = d * ((_u8(group + 7, ok) >> 4).to(tl.float32) + 0.5) * 0.25
        elif QTYPE == 17:  # IQ2_XS: a uint16 per group (9-bit index, 7-bit sign code), a nibble scale per 16
            word = _u16(base + 2 + g * 2, ok)
            words = (word & 511) * 2 + h
            signs = _u8(table_ptr + 4096 + (word >> 9), ok)
            scale = d * (((_u8(base + 66 + g // 4, ok) >> (g // 2 % 2 * 4)) & 15).to(tl.float32) + 0.5) * 0.25
        elif QTYPE == 22:  # IQ2_S: index low bytes, sign bytes, index top 2 bits, IQ2_XS's scales
            high = (_u8(base + 66 + g // 4, ok) >> (g % 4 * 2)) & 3
            words = (_u8(base + 2 + g, ok) | (high << 8)) * 2 + h
            signs = _u8(base + 34 + g, ok)
            scale = d * (((_u8(base + 74 + g // 4, ok) >> (g // 2 % 2 * 4)) & 15).to(tl.float32) + 0.5) * 0.25
        elif QTYPE == 18:  # IQ3_XXS: 64 index bytes (grid rows of 4), then IQ2_XXS's uint32 per 32 weights
            aux = base + 66 + (g // 4) * 4
            words = _u8(base + 2 + g * 2 + h, ok)
            signs = _u8(table_ptr + 1024 + ((_u16(aux + g % 4 * 7 // 8, ok) >> (g % 4 * 7 % 8)) & 127), ok)
            scale = d * ((_u8(aux + 3, ok) >> 4).to(tl.float32) + 0.5) * 0.5
        elif QTYPE == 21:  # IQ3_S: index low bytes, index top bits, sign bytes, nibble scales per 32
            row = g * 2 + h                                                              # grid rows of 4
            words = _u8(base + 2 + row, ok) | (((_u8(base + 66 + row // 8, ok) >> (row % 8)) & 1) << 8)
            signs = _u8(base + 74 + g, ok)
            scale = d * ((((_u8(base + 106 + g // 8, ok) >> (g // 4 % 2 * 4)) & 15) * 2 + 1).to(tl.float32))
        elif QTYPE == 19:  # IQ1_S: index low bytes, then a uint16 per 32: 4 x 3 index bits, 3-bit scale, sign
            word = _u16(base + 34 + (g // 4) * 2, ok)
            words = (_u8(base + 2 + g, ok) | (((word >> (g % 4 * 3)) & 7) << 8)) * 2 + h
            scale = d * (((word >> 12) & 7) * 2 + 1).to(tl.float32)
            delta = (1 - 2 * (word >> 15)).to(tl.float32) * 0.125
        else:              # IQ1_M: index low bytes, a nibble per group (3 index bits, sign), 3-bit scales per 16
            nibble = (_u8(base + 32 + g // 2, ok) >> (g % 2 * 4)) & 15
            words = (_u8(base + g, ok) | ((nibble & 7) << 8)) * 2 + h
            scale = d * (((_u16(base + 48 + (g // 8) * 2, ok) >> (g // 2 % 4 * 3)) & 7) * 2 + 1).to(tl.float32)
            delta = (1 - 2 * (nibble >> 3)).to(tl.float32) * 0.125
        return words, signs, scale, delta

    @triton.jit
    def signed_words(base, g, h, table_ptr, ok, QTYPE: tl.constexpr):
        """_iq_fields' arguments -> (words int32, scale, delta as _iq_fields): byte b of a word is the signed code
        book value (int8) of weight 8 g + 4 h + b (IQ1_*: before the shift delta). The signs are applied 4
        weights an operation: with m = 0xFF in the bytes of negative weights, (v ^ m) + (m & 1) negates them (no
        carries: 0 < |v| < 128)."""
        words, signs, scale, delta = _iq_fields(base, g, h, table_ptr, ok, QTYPE)
        grid = tl.load(table_ptr.to(tl.pointer_type(tl.int32)) + words)
        if QTYPE == 19 or QTYPE == 29:
            return grid, scale, delta
        # the 4 sign bits of word h to the low bits of its 4 bytes (shifted by 0, 7, 14, 21: no carries)
        ones = (((signs >> (4 * h)) & 15) * 0x00204081) & 0x01010101
        return (grid ^ (ones * 255)) + ones, scale, delta

    @triton.jit
    def signed_word_pair(base, g, table_ptr, ok, QTYPE: tl.constexpr):
        """signed_words for both words of groups g (h 0 and 1) -> (word 0, word 1, scale, delta); a code book row of 8
        (IQ2_*, IQ1_*) is one 8-byte load (session 53, an H100: the pairs 1.1-1.5x faster than with two 4-byte
        loads)."""
        if QTYPE == 18:  # IQ3_XXS: two rows of 4 a group (a 2-byte load of both indices was no fewer instructions)
            w0, scale, delta = signed_words(base, g, 0, table_ptr, ok, QTYPE)
            w1, scale, delta = signed_words(base, g, 1, table_ptr, ok, QTYPE)
            return w0, w1, scale, delta
        words, signs, scale, delta = _iq_fields(base, g, 0, table_ptr, ok, QTYPE)
        if QTYPE == 21:  # IQ3_S: two rows of 4 a group, both index bytes in one 2-byte load (2-aligned), their top
            pair = tl.load((base + 2 + g * 2).to(tl.pointer_type(tl.uint16)), mask=ok, other=0).to(tl.int32)
            top = _u8(base + 66 + g // 4, ok) >> (g % 4 * 2)  # bits (2 g, 2 g + 1) in byte g // 4 after the low bytes
            w0 = tl.load(table_ptr.to(tl.pointer_type(tl.int32)) + ((pair & 255) | ((top & 1) << 8)))
            w1 = tl.load(table_ptr.to(tl.pointer_type(tl.int32)) + ((pair >> 8) | ((top & 2) << 7)))
        else:
            row = tl.load(table_ptr.to(tl.pointer_type(tl.int64)) + (words >> 1))
            w0 = row.to(tl.int32)
            w1 = (row >> 32).to(tl.int32)
        if QTYPE == 19 or QTYPE == 29:
            return w0, w1, scale, delta
        ones0 = ((signs & 15) * 0x00204081) & 0x01010101
        ones1 = (((signs >> 4) & 15) * 0x00204081) & 0x01010101
        return (w0 ^ (ones0 * 255)) + ones0, (w1 ^ (ones1 * 255)) + ones1, scale, delta

    @triton.jit
    def _biased_words(base, table_ptr, ok, QTYPE: tl.constexpr):
        """Superblocks at byte pointers base [BN, SB, 1, 1] (rows masked by ok [BN, 1, 1, 1]) -> (words
        [BN, SB, 32, 2] int32, then [BN, SB, 32, 1] scale, delta as _iq_fields): byte b of word h of group g is
        128 + the signed code book value of weight 8 g + 4 h + b (^ 0x80 adds 128: (v ^ m) + 1 of signed_words
        keeps bit 7)."""
        g = tl.arange(0, 32)[None, None, :, None]
        if QTYPE == 18:  # IQ3_XXS: two code book rows of 4 a group
            words, scale, delta = signed_words(base, g, tl.arange(0, 2)[None, None, None, :], table_ptr, ok, QTYPE)
        else:
            w0, w1, scale, delta = signed_word_pair(base, g, table_ptr, ok, QTYPE)     # [BN, SB, 32, 1] each
            words = tl.reshape(tl.join(w0, w1), (w0.shape[0], w0.shape[1], 32, 2))
        return words ^ _BIAS, scale, delta

    @triton.jit
    def _byte_value(words, b: tl.constexpr):
        """Byte b of _biased_words' words as its signed value in float32: the byte put in the mantissa of 2^23,
        then 2^23 + 128 taken off (exact, and no int-to-float conversion, which runs at a quarter of the rate)."""
        return (((words >> (8 * b)) & 255) | 0x4B000000).to(tl.float32, bitcast=True) - 8388736.0

    @triton.jit
    def iq_dot(base, x, table_ptr, ok, QTYPE: tl.constexpr, SB: tl.constexpr):
        """Superblocks at base [BN, SB, 1, 1] times x [1, SB, 8, 32] (weight r * 32 + l at [.., r, l]) -> sums per
        group of 8 [BN, SB, 32]: signed code book values against x, then scaled (IQ1_*: plus the shift times the
        group's sum of x)."""
        words, scale, delta = _biased_words(base, table_ptr, ok, QTYPE)
        # x as 4 tensors [1, SB, 32, 2]: the weights at byte b of each word
        x_even, x_odd = tl.split(tl.reshape(x, (1, SB, 32, 2, 2, 2)))
        x0, x2 = tl.split(x_even)
        x1, x3 = tl.split(x_odd)
        sums = (_byte_value(words, 0) * x0 + _byte_value(words, 1) * x1 + _byte_value(words, 2) * x2
                + _byte_value(words, 3) * x3)
        sums = tl.sum(sums, axis=3, keep_dims=True)                                     # [BN, SB, 32, 1]
        if QTYPE == 19 or QTYPE == 29:
            sums += delta * tl.sum(tl.reshape(x, (1, SB, 32, 8)), axis=3, keep_dims=True)
        return tl.sum(scale * sums, axis=3)

    @triton.jit
    def iq_values(base, table_ptr, ok, QTYPE: tl.constexpr, SB: tl.constexpr, BLOCK_N: tl.constexpr):
        """The weights of the superblocks at base [BN, SB, 1, 1] as float32 [BN, SB, 8, 32] (weight r * 32 + l at
        [.., r, l]), gguf_blocks' values bit for bit: grid * scale * sign (the sign exact either side), or
        (grid + delta) * scale."""
        words, scale, delta = _biased_words(base, table_ptr, ok, QTYPE)
        v0, v1, v2, v3 = (_byte_value(words, 0), _byte_value(words, 1), _byte_value(words, 2),
                          _byte_value(words, 3))                                       # [BN, SB, 32, 2] each
        if QTYPE == 19 or QTYPE == 29:
            v0, v1, v2, v3 = v0 + delta, v1 + delta, v2 + delta, v3 + delta
        # [BN, SB, 32, 2, 2, 2]: byte b = 2 c + e at [.., c, e], so row-major order is weight order
        values = tl.join(tl.join(v0 * scale, v2 * scale), tl.join(v1 * scale, v3 * scale))
        return tl.reshape(values, (BLOCK_N, SB, 8, 32))
