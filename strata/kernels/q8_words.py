"""The word-level helpers of packed_q8's K steps (q8_steps, q8_iq4): dp4a on int32 words of four bytes (one PTX
instruction on the GPU, four byte products under Triton's interpreter), words of a row at even byte offsets, and
float16 fields; and packed_mmq's quant bytes unpacked four at a time (nibbles, q6k_quants, bytes_where: inline PTX on
the GPU where ASM, byte-wise forms otherwise)."""

from __future__ import annotations

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install
    triton = tl = None

if triton is not None:

    @triton.jit
    def dp4a(a, b, SIGNED: tl.constexpr, ASM: tl.constexpr):
        """Sum over the 4 bytes of (byte of a, unsigned or SIGNED) * (signed byte of b), int32 words -> int32."""
        if ASM:
            if SIGNED:
                out = tl.inline_asm_elementwise("dp4a.s32.s32 $0, $1, $2, 0;", "=r,r,r", [a, b], dtype=tl.int32,
                                                is_pure=True, pack=1)
            else:
                out = tl.inline_asm_elementwise("dp4a.u32.s32 $0, $1, $2, 0;", "=r,r,r", [a, b], dtype=tl.int32,
                                                is_pure=True, pack=1)
        else:
            out = tl.zeros(a.shape, dtype=tl.int32)
            for i in tl.static_range(4):
                ai = (a >> (8 * i)) & 255
                if SIGNED:
                    ai = (ai ^ 128) - 128
                out += ai * ((((b >> (8 * i)) & 255) ^ 128) - 128)
        return out

    @triton.jit
    def dp4a_into(acc, a, b, ASM: tl.constexpr):
        """acc plus the unsigned-by-signed dp4a of int32 words a and b (one instruction: dp4a's own addend)."""
        if ASM:
            out = tl.inline_asm_elementwise("dp4a.u32.s32 $0, $1, $2, $3;", "=r,r,r,r", [a, b, acc], dtype=tl.int32,
                                            is_pure=True, pack=1)
        else:
            out = acc + dp4a(a, b, False, ASM)
        return out

    @triton.jit
    def word_at(w_words, w_halves, start, words, ok, NEXT_WORD: tl.constexpr):
        """The int32 words `words` words after even byte offsets `start` (one per row and block: the int64
        address arithmetic stays on the small tensor, the word offsets are int32): one word load where start
        is on a word, else the upper half of the word before and the lower half of the next. NEXT_WORD reads
        that next half as a whole word (vectorised like the first load: Q6_K, whose funnelled words all lie
        13+ bytes before its superblock's end); else as a half word, so that no byte past the last one asked
        for is read (the 32-value blocks' last words end their block, maybe the tensor)."""
        first = start >> 2  # (not // 4: offsets are never negative, and a signed division costs a sign fix-up)
        odd = (start & 2) != 0
        lo = tl.load(w_words + first + words, mask=ok, other=0).to(tl.uint32, bitcast=True)
        if NEXT_WORD:
            hi = tl.load(w_words + first + 1 + words, mask=ok & odd, other=0).to(tl.uint32, bitcast=True)
        else:
            hi = tl.load(w_halves + (first * 2 + 2) + 2 * words, mask=ok & odd, other=0).to(tl.uint16, bitcast=True)
            hi = hi.to(tl.uint32)
        return tl.where(odd, (lo >> 16) | (hi << 16), lo).to(tl.int32, bitcast=True)

    @triton.jit
    def f16_half(w_halves, start, ok):
        """The float16 at even byte offsets `start`, as float32."""
        return tl.load(w_halves + (start >> 1), mask=ok, other=0).to(tl.float16, bitcast=True).to(tl.float32)

    @triton.jit
    def nibbles(qbyte, HIGH: tl.constexpr, ASM: tl.constexpr):
        """The low (HIGH: high) nibbles of quant bytes [BN, 32] uint8 as int8; with ASM four bytes a 32-bit
        instruction (the byte-wise form costs byte extracts and inserts, PRMT, each)."""
        if ASM:
            if HIGH:
                out = tl.inline_asm_elementwise("{ .reg .b32 t; shr.b32 t, $1, 4; and.b32 $0, t, 0x0F0F0F0F; }",
                                                "=r,r", [qbyte], dtype=tl.int8, is_pure=True, pack=4)
            else:
                out = tl.inline_asm_elementwise("and.b32 $0, $1, 0x0F0F0F0F;", "=r,r", [qbyte], dtype=tl.int8,
                                                is_pure=True, pack=4)
        else:
            out = ((qbyte >> (4 if HIGH else 0)) & 15).to(tl.int8, bitcast=True)
        return out

    @triton.jit
    def q6k_quants(low, high, C: tl.constexpr, ASM: tl.constexpr):
        """Q6_K's signed quants (-32..31) of sub-block 4 h + C from its low-bit bytes (nibble C // 2) and high-bit
        bytes (bits 2 C, 2 C + 1) [BN, 32] uint8 -> int8 (int32 without ASM); with ASM four bytes at a time: each
        byte's 6-bit q from C's nibble and bit pair, then q - 32 (_signed_q6)."""
        if ASM:
            if C == 0:
                q = tl.inline_asm_elementwise(
                    "{ .reg .b32 a, b; and.b32 a, $1, 0x0F0F0F0F; and.b32 b, $2, 0x03030303; shl.b32 b, b, 4; "
                    "or.b32 $0, a, b; }", "=r,r,r", [low, high], dtype=tl.uint8, is_pure=True, pack=4)
            elif C == 1:
                q = tl.inline_asm_elementwise(
                    "{ .reg .b32 a, b; and.b32 a, $1, 0x0F0F0F0F; shl.b32 b, $2, 2; and.b32 b, b, 0x30303030; "
                    "or.b32 $0, a, b; }", "=r,r,r", [low, high], dtype=tl.uint8, is_pure=True, pack=4)
            elif C == 2:
                q = tl.inline_asm_elementwise(
                    "{ .reg .b32 a, b; shr.b32 a, $1, 4; and.b32 a, a, 0x0F0F0F0F; and.b32 b, $2, 0x30303030; "
                    "or.b32 $0, a, b; }", "=r,r,r", [low, high], dtype=tl.uint8, is_pure=True, pack=4)
            else:
                q = tl.inline_asm_elementwise(
                    "{ .reg .b32 a, b; shr.b32 a, $1, 4; and.b32 a, a, 0x0F0F0F0F; shr.b32 b, $2, 2; "
                    "and.b32 b, b, 0x30303030; or.b32 $0, a, b; }", "=r,r,r", [low, high], dtype=tl.uint8,
                    is_pure=True, pack=4)
            out = _signed_q6(q)
        else:
            # int32 here (narrowed by bytes_where: the form session 58's GPU run timed)
            out = (((low.to(tl.int32) >> ((C // 2) * 4)) & 15) | (((high.to(tl.int32) >> (2 * C)) & 3) << 4)) - 32
        return out

    @triton.jit
    def _signed_q6(q):
        """6-bit values q [.., 32] uint8 (0..63) -> q - 32 as int8, four bytes at a time: bit 5 flipped, bits 6-7
        copied from it (two's complement, no borrow across bytes)."""
        return tl.inline_asm_elementwise(
            "{ .reg .b32 a, b; xor.b32 a, $1, 0x20202020; and.b32 b, a, 0x20202020; mul.lo.u32 b, b, 6; "
            "or.b32 $0, a, b; }", "=r,r", [q], dtype=tl.int8, is_pure=True, pack=4)

    @triton.jit
    def bytes_where(values, keep, ASM: tl.constexpr):
        """values [BN, 32] (int8; int32 without ASM) where keep [1, 32] is true, else 0, as int8; with ASM four
        bytes an AND with keep's bytes (255 or 0)."""
        if ASM:
            keep_bytes = tl.where(keep, 255, 0).to(tl.uint8).broadcast_to(values.shape)
            out = tl.inline_asm_elementwise("and.b32 $0, $1, $2;", "=r,r,r", [values, keep_bytes], dtype=tl.int8,
                                            is_pure=True, pack=4)
        else:
            out = tl.where(keep, values, 0).to(tl.int8)
        return out
