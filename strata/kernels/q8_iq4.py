"""packed_q8's K steps for IQ4_NL, IQ4_XS and MXFP4: 4-bit codes into 16 int8 levels (gguf-py's kvalues: IQ4's
non-linear ones, MXFP4's E2M1 values doubled), dotted with 8-bit activations by signed dp4a; a block's sum is exact in
int32 and scaled once.

- IQ4_NL (18 bytes per 32): Q4_0's layout, w = d level[q]; a K step (a unit) is four blocks, as Q4_0's (q8_steps).
- IQ4_XS (136 bytes per 256, every superblock on a word): word 0 = f16 d | scales_h << 16 (2 bits a 32-value block),
  word 1 = scales_l (a nibble a block), words 2 + 4 b + t the codes of block b (low nibbles: weights 32 b + 4 t..,
  high: 32 b + 16 + 4 t..); w = d (ls - 32) level[q], ls = low nibble | high bits << 4. A step is one superblock,
  taken in two halves of four blocks (the tiles' 4 x 4 as the i-quants': [R, SB, BN, block, word]).
- MXFP4 (17 bytes per 32): an exponent byte e, then Q4_0's nibbles; w = 2^(e - 128) value[q]. Its blocks lie at any
  byte offset, so a word of codes is four byte loads (a word load would read past a tensor's last byte).
A word of eight codes becomes two words of four levels by eight byte permutes (prmt) of the levels' 16 bytes on the
GPU, or by shifts of the levels' words under Triton's interpreter (same bits).
"""

from __future__ import annotations

from strata.kernels.packed_gemv import IQ4_WORDS, MXFP4_WORDS

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install
    triton = tl = None

if triton is not None:
    from strata.kernels.packed_gemv import mxfp4_scale, table_level
    from strata.kernels.q8_words import dp4a, f16_half, word_at

    # the 16 levels as the bytes of 4 words, which byte permutes select from (packed_gemv's)
    _W0, _W1, _W2, _W3 = (tl.constexpr(w) for w in IQ4_WORDS)
    _M0, _M1, _M2, _M3 = (tl.constexpr(w) for w in MXFP4_WORDS)

    @triton.jit
    def _prmt(a, b, selector):
        """PTX prmt: byte n of the result is byte (nibble n of selector, 0-7) of the 8 bytes of a then b."""
        return tl.inline_asm_elementwise("prmt.b32 $0, $1, $2, $3;", "=r,r,r,r", [a, b, selector], dtype=tl.int32,
                                         is_pure=True, pack=1)

    @triton.jit
    def code_levels(words, ASM: tl.constexpr, MX: tl.constexpr):
        """int32 words of 8 codes (byte b: code b in its low nibble, code 4 + b in its high one) -> (levels of the low
        nibbles, levels of the high nibbles), words of int8 bytes in the codes' order. On the GPU each half word's
        four nibbles select levels by byte permutes (prmt reads a selector's low 16 bits, a nibble a byte): from levels
        0-7 and, selector ^ 8 each, 8-15 (a set top bit makes prmt copy a sign instead: those bytes are the other
        lookup's), then bit 3 picks one; two more permutes part the low nibbles' levels from the high ones'. MX: MXFP4's
        values, else IQ4's levels."""
        if ASM:
            first = _half_levels(words, MX)          # levels of codes 0, 4, 1, 5 (the low half word's nibbles in order)
            second = _half_levels(words >> 16, MX)   # 2, 6, 3, 7
            return _prmt(first, second, 0x6420), _prmt(first, second, 0x7531)
        return _levels_of_codes(words & 0x0F0F0F0F, MX), _levels_of_codes((words >> 4) & 0x0F0F0F0F, MX)

    @triton.jit
    def _half_levels(selector, MX: tl.constexpr):
        """The levels of the 4 codes in the low 16 bits of selector (nibble i: output byte i), by prmt."""
        zero = tl.full(selector.shape, 0, tl.int32)
        if MX:
            low = _prmt(zero + _M0, zero + _M1, selector)
            high = _prmt(zero + _M2, zero + _M3, selector ^ 0x8888)
        else:
            low = _prmt(zero + _W0, zero + _W1, selector)
            high = _prmt(zero + _W2, zero + _W3, selector ^ 0x8888)
        return _prmt(low, high, ((selector >> 1) & 0x4444) | 0x3210)

    @triton.jit
    def _levels_of_codes(codes, MX: tl.constexpr):
        """Words whose 4 bytes are codes 0-15 -> words of their 4 levels (packed_gemv.table_level's, as bytes)."""
        out = tl.zeros(codes.shape, dtype=tl.int32)
        for i in tl.static_range(4):
            out |= (table_level((codes >> (8 * i)) & 15, MX).to(tl.int32) & 255) << (8 * i)
        return out

    @triton.jit
    def _block_dots(words, x_block, t, rok, ISUM: tl.constexpr, ASM: tl.constexpr, MX: tl.constexpr):
        """Words t of 32-value blocks' codes [1, SB, BN, 4, 4] (low nibbles: weights 4 t.., high: 16 + 4 t..) against
        the blocks' 8-bit activations at x_block [R, SB, 1, 4, 1] -> their integer dots [R, SB, BN, 4, 4], or per
        block [.., 1] (ISUM)."""
        low, high = code_levels(words, ASM, MX)
        dot = dp4a(low, tl.load(x_block + t, mask=rok, other=0), True, ASM) \
            + dp4a(high, tl.load(x_block + 4 + t, mask=rok, other=0), True, ASM)
        if ISUM:
            dot = tl.sum(dot, axis=4, keep_dims=True)
        return dot

    @triton.jit
    def iq4nl_step(w_words, w_halves, base, xq, dx, j, ok, rok, ISUM: tl.constexpr, ASM: tl.constexpr):
        """Units j [1, SB, 1, 1, 1] (four 32-value blocks g each) of IQ4_NL rows at even byte offsets base
        [1, 1, BN, 1, 1] against R rows of 8-bit activations -> dot parts [R, SB, BN, 4, 4 or 1 (ISUM)]."""
        g = tl.arange(0, 4)[None, None, None, :, None]
        t = tl.arange(0, 4)[None, None, None, None, :]
        start = base + (j * 4 + g) * 18                                                  # [1, SB, BN, 4, 1]
        words = word_at(w_words, w_halves, start + 2, t, ok, False)                      # [1, SB, BN, 4, 4]
        dot = _block_dots(words, xq + j * 32 + g * 8, t, rok, ISUM, ASM, False)           # [R, SB, BN, 4, 4 or 1]
        return dot.to(tl.float32) * (f16_half(w_halves, start, ok) * tl.load(dx + j * 4 + g, mask=rok, other=0.0))

    @triton.jit
    def iq4xs_step(w_words, base, xq, dx, j, ok, rok, ISUM: tl.constexpr, ASM: tl.constexpr):
        """Superblocks j [1, SB, 1, 1, 1] of IQ4_XS rows at word-aligned byte offsets base [1, 1, BN, 1, 1] against
        R rows of 8-bit activations -> dot parts [R, SB, BN, 4, 4 or 1 (ISUM)]."""
        c = tl.arange(0, 4)[None, None, None, :, None]
        t = tl.arange(0, 4)[None, None, None, None, :]
        wb = base // 4 + j * 34                                                          # [1, SB, BN, 1, 1]
        head = tl.load(w_words + wb, mask=ok, other=0)                                   # d | scales_h << 16
        scales_l = tl.load(w_words + wb + 1, mask=ok, other=0)
        d = (head & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
        parts = tl.zeros((xq.shape[0], wb.shape[1], wb.shape[2], 4, 1 if ISUM else 4), dtype=tl.float32)
        for half in tl.static_range(2):
            b = 4 * half + c                                                             # [1, 1, 1, 4, 1]
            words = tl.load(w_words + wb + 2 + 4 * b + t, mask=ok, other=0)              # [1, SB, BN, 4, 4]
            dot = _block_dots(words, xq + j * 64 + 8 * b, t, rok, ISUM, ASM, False)       # [R, SB, BN, 4, 4 or 1]
            ls = ((scales_l >> (4 * b)) & 15) | (((head >> (16 + 2 * b)) & 3) << 4)     # [1, SB, BN, 4, 1]
            scale = d * (ls - 32).to(tl.float32)
            parts += dot.to(tl.float32) * (scale * tl.load(dx + j * 8 + b, mask=rok, other=0.0))
        return parts

    @triton.jit
    def mxfp4_step(w_ptr, base, xq, dx, j, ok, rok, ISUM: tl.constexpr, ASM: tl.constexpr):
        """Units j [1, SB, 1, 1, 1] (four 32-value blocks g each) of MXFP4 rows at byte offsets base [1, 1, BN, 1, 1]
        against R rows of 8-bit activations -> dot parts [R, SB, BN, 4, 4 or 1 (ISUM)]."""
        g = tl.arange(0, 4)[None, None, None, :, None]
        t = tl.arange(0, 4)[None, None, None, None, :]
        start = w_ptr + base + (j * 4 + g) * 17                                          # [1, SB, BN, 4, 1]
        at = start + 1 + 4 * t                                                           # [1, SB, BN, 4, 4]
        words = tl.zeros(at.shape, dtype=tl.int32)
        for b in tl.static_range(4):
            words |= tl.load(at + b, mask=ok, other=0).to(tl.int32) << (8 * b)
        dot = _block_dots(words, xq + j * 32 + g * 8, t, rok, ISUM, ASM, True)            # [R, SB, BN, 4, 4 or 1]
        e = tl.load(start, mask=ok, other=0).to(tl.int32)                                # [1, SB, BN, 4, 1]
        return dot.to(tl.float32) * (mxfp4_scale(e) * tl.load(dx + j * 4 + g, mask=rok, other=0.0))
