"""The K steps of packed_q8's kernels: one step of packed GGUF rows (a unit: one superblock of the K types and the
i-quants, four 32-value blocks of the others) against R rows of 8-bit activations, by integer dot products (dp4a),
and the final sum of a step's partial sums. packed_q8's kernels (one program per rows of W, or per pair and rows of its
expert) loop over them; packed_q8's docstring says what they compute.

Layouts (packed_gemv's docstring; all offsets in bytes from a row's start). Blocks of an even size may
start two bytes into a word: those words are funnelled from the upper half of one word and the next half
word (word_at), so no byte outside the weight is read.
- Q4_K (144 per 256): word 0 = f16 d | f16 dmin << 16, words 1-3 the 12 bytes of 6-bit scales and mins,
  words 4 + 8 j + t the quants of sub-blocks 2 j (low nibbles) and 2 j + 1 (high): weight 4 t + b of each
  in byte b. Its activations are x words 16 j + t (low) and 16 j + 8 + t (high) of the superblock's 64.
- Q5_K (176 per 256): Q4_K's header, then the fifth bits in words 4-11 (bit 2 j of byte b of word 4 + t: weight
  4 t + b of sub-block 2 j, bit 2 j + 1: of sub-block 2 j + 1), then Q4_K's quants from word 12.
- Q6_K (210 per 256): half h keeps low bits in ql words 16 h + t (weights 4 t.., low nibbles; 4 t + 64..,
  high) and 16 h + 8 + t (4 t + 32.., 4 t + 96..), the high bit pairs in qh words 32 + 8 h + t; int8
  scales at 192 + (weight // 16), f16 d at 208. Quants are 0..63 (the -32 is taken off per 16 with x's sums).
- Q2_K (84 per 256: every superblock on a word): words 0-3 one byte per 16 weights g (4-bit scale, 4-bit min
  << 4), quant words 4 + 8 h + t (half h of 128 weights: bits 2 s of byte b hold weight 128 h + 32 s + 4 t + b),
  word 20 = f16 d | f16 dmin << 16; w = d sc[g] q - dmin m[g], the min term dmin m[g] dx times x's sum per 16.
- Q3_K (110 per 256): hmask words 0-7 (bit i of byte b of word t: the high bit of weight 32 i + 4 t + b; set
  means no -4), then Q2_K's quant words from word 8 (bytes 32-95), 6-bit scales at bytes 96-107 (low 4 bits of
  scale g in nibble g // 8 of byte 96 + g % 8, high 2 bits at bit 2 (g // 4) of byte 104 + g % 4), f16 d at
  108. Quants are low | high << 2, 0..7 (the -4 taken off per 16 with x's sums), times d (scale[g] - 32).
- Q8_0 (34 per 32): f16 d, 32 int8 quants (signed dp4a). Q4_0 (18) / Q4_1 (20): f16 d (and f16 m), 16
  bytes: weight i < 16 in the low nibble of byte i, 16 + i in its high one; Q5_0 (22) / Q5_1 (24) put a
  32-bit word of fifth bits (bit i: weight i) before those bytes. w = d (q - 8), d (q - 16), d q + m.
- IQ4_NL / IQ4_XS / MXFP4: q8_iq4's docstring.
- The i-quants: packed_iquants' docstring and gguf_blocks (byte loads: any alignment); their code books come in
  as table_ptr (packed_iquants.decode_table; the other types get their own blocks there, never read).
"""

from __future__ import annotations

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install
    triton = tl = None

if triton is not None:
    from strata.kernels.packed_iquants import signed_word_pair
    from strata.kernels.q8_iq4 import iq4nl_step, iq4xs_step, mxfp4_step
    from strata.kernels.q8_words import dp4a, dp4a_into, f16_half, word_at

    @triton.jit
    def _q4k_scale_min(h1, h2, h3, s):
        """Q4_K's 6-bit scale and min of sub-blocks s from the header words 1-3 (bytes 4-15) -> float32."""
        sh = (8 * (s % 4)).to(tl.uint32)
        b1 = (h1 >> sh) & 255
        b2 = (h2 >> sh) & 255
        b3 = (h3 >> sh) & 255
        sc = tl.where(s < 4, b1 & 63, (b3 & 15) | ((b1 >> 6) << 4))
        mn = tl.where(s < 4, b2 & 63, (b3 >> 4) | ((b2 >> 6) << 4))
        return sc.to(tl.float32), mn.to(tl.float32)

    @triton.jit
    def _q4k_step(w_words, base, xq, dx, sums, j, ok, rok, ISUM: tl.constexpr, ASM: tl.constexpr,
                  FIVE: tl.constexpr):
        """Superblocks j [1, SB, 1, 1, 1] of Q4_K rows (FIVE: Q5_K's, the same with fifth bits) at byte offsets
        base [1, 1, BN, 1, 1] (mask ok) against R rows of 8-bit activations (xq, dx, sums: row pointers
        [R, 1, 1, 1, 1], mask rok) -> (dot parts [R, SB, BN, 4, T], min parts [R, SB, BN, 4, 1]): each output
        is sum(parts) - sum(min parts). Tiles are [R, SB, BN, pair, t]; each weight word is loaded and
        unpacked once for the R rows. ISUM 2 takes the 8 words t of a sub-block pair one after the other
        (_q4k_word_loop), T = 1."""
        block_words: tl.constexpr = 44 if FIVE else 36
        quant_words: tl.constexpr = 12 if FIVE else 4
        wb = base // 4 + j * block_words                                                 # [1, SB, BN, 1, 1]
        pair = tl.arange(0, 4)[None, None, None, :, None]
        if ISUM == 2:
            low, high = _q4k_word_loop(w_words, wb, xq, j, pair, ok, rok, ASM, FIVE, quant_words)
        else:
            t = tl.arange(0, 8)[None, None, None, None, :]
            w = tl.load(w_words + wb + quant_words + 8 * pair + t, mask=ok, other=0).to(tl.uint32, bitcast=True)
            low_quants = w & 0x0F0F0F0F
            high_quants = (w >> 4) & 0x0F0F0F0F
            if FIVE:  # bit 2 pair (low nibbles' sub-block) and 2 pair + 1 (high nibbles') of each byte, to bit 4
                qh = tl.load(w_words + wb + 4 + t, mask=ok, other=0).to(tl.uint32, bitcast=True)  # [1, SB, BN, 1, 8]
                shift = (2 * pair).to(tl.uint32)
                low_quants |= ((qh >> shift) & 0x01010101) << 4
                high_quants |= ((qh >> (shift + 1)) & 0x01010101) << 4
            x_at = xq + j * 64 + 16 * pair + t                                           # [R, SB, 1, 4, 8]
            low = dp4a(low_quants.to(tl.int32, bitcast=True), tl.load(x_at, mask=rok, other=0), False, ASM)
            high = dp4a(high_quants.to(tl.int32, bitcast=True), tl.load(x_at + 8, mask=rok, other=0), False, ASM)
        h0 = tl.load(w_words + wb, mask=ok, other=0).to(tl.uint32, bitcast=True)
        h1 = tl.load(w_words + wb + 1, mask=ok, other=0).to(tl.uint32, bitcast=True)
        h2 = tl.load(w_words + wb + 2, mask=ok, other=0).to(tl.uint32, bitcast=True)
        h3 = tl.load(w_words + wb + 3, mask=ok, other=0).to(tl.uint32, bitcast=True)
        d = (h0 & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
        dmin = (h0 >> 16).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
        sc_lo, mn_lo = _q4k_scale_min(h1, h2, h3, 2 * pair)                             # [1, SB, BN, 4, 1]
        sc_hi, mn_hi = _q4k_scale_min(h1, h2, h3, 2 * pair + 1)
        dx_lo = tl.load(dx + j * 8 + 2 * pair, mask=rok, other=0.0)                      # [R, SB, 1, 4, 1]
        dx_hi = tl.load(dx + j * 8 + 2 * pair + 1, mask=rok, other=0.0)
        s_lo = tl.load(sums + j * 16 + 4 * pair, mask=rok, other=0.0) \
            + tl.load(sums + j * 16 + 4 * pair + 1, mask=rok, other=0.0)
        s_hi = tl.load(sums + j * 16 + 4 * pair + 2, mask=rok, other=0.0) \
            + tl.load(sums + j * 16 + 4 * pair + 3, mask=rok, other=0.0)
        if ISUM and ISUM != 2:  # integer sums per scale group first: one float scaling per group, not per word
            low = tl.sum(low, axis=4, keep_dims=True)                                    # [R, SB, BN, 4, 1]
            high = tl.sum(high, axis=4, keep_dims=True)
        parts = low.to(tl.float32) * (d * sc_lo * dx_lo) + high.to(tl.float32) * (d * sc_hi * dx_hi)
        mins = dmin * (mn_lo * dx_lo * s_lo + mn_hi * dx_hi * s_hi)
        return parts, mins

    @triton.jit
    def _q4k_word_loop(w_words, wb, xq, j, pair, ok, rok, ASM: tl.constexpr, FIVE: tl.constexpr,
                       QUANT_WORDS: tl.constexpr):
        """The integer sums [R, SB, BN, 4, 1] of the low and high nibbles' sub-blocks of Q4_K (FIVE: Q5_K) sub-block
        pairs, their 8 words taken one at a time: each thread keeps whole groups, so a word is a load, its
        unpacking and two dp4a into the group's sum, with no cross-lane reduction (tiles with t as a dimension
        spread t across lanes, and their sums cost shuffles). The price: lanes then run along rows of W, so a warp's
        load touches up to 32 cache lines for 4 bytes each (the tiles': 4 lines, 32 bytes each). Session 52's H100
        sweep still picked it for the pairs' down launch (packed_q8.ONE_TOKEN_DOWN, PAIRS_DOWN)."""
        low = tl.zeros((xq.shape[0], wb.shape[1], wb.shape[2], 4, 1), dtype=tl.int32)
        high = tl.zeros((xq.shape[0], wb.shape[1], wb.shape[2], 4, 1), dtype=tl.int32)
        x_at = xq + j * 64 + 16 * pair                                                   # [R, SB, 1, 4, 1]
        for t in tl.static_range(8):
            w = tl.load(w_words + wb + QUANT_WORDS + 8 * pair + t, mask=ok, other=0).to(tl.uint32, bitcast=True)
            low_quants = w & 0x0F0F0F0F
            high_quants = (w >> 4) & 0x0F0F0F0F
            if FIVE:
                qh = tl.load(w_words + wb + 4 + t, mask=ok, other=0).to(tl.uint32, bitcast=True)   # [1, SB, BN, 1, 1]
                shift = (2 * pair).to(tl.uint32)
                low_quants |= ((qh >> shift) & 0x01010101) << 4
                high_quants |= ((qh >> (shift + 1)) & 0x01010101) << 4
            low = dp4a_into(low, low_quants.to(tl.int32, bitcast=True), tl.load(x_at + t, mask=rok, other=0), ASM)
            high = dp4a_into(high, high_quants.to(tl.int32, bitcast=True), tl.load(x_at + 8 + t, mask=rok, other=0),
                             ASM)
        return low, high

    @triton.jit
    def _q6k_step(w_words, w_halves, base, xq, dx, sums, j, ok, rok, ISUM: tl.constexpr, ASM: tl.constexpr):
        """Superblocks j [1, SB, 1, 1, 1] of Q6_K rows at byte offsets base [1, 1, BN, 1, 1] (even) against R
        rows of 8-bit activations -> (dot parts [R, SB, BN, 4, T], offset parts [R, SB, BN, 4, 1]): each
        output is sum(parts) - sum(offset parts). Tiles are [R, SB, BN, G, T]: G = 2 h + g of half h, word
        t = 4 g + T of the half's 32-byte runs (weights 16 g .. 16 g + 15 of each run: one int8 scale each).
        ISUM 2 takes a run's 4 words one after the other (_q6k_word_loop), T = 1."""
        start = base + j * 210                                        # [1, SB, BN, 1, 1]
        hg = tl.arange(0, 4)[None, None, None, :, None]
        h = hg // 2
        if ISUM == 2:
            dot0, dot1, dot2, dot3 = _q6k_word_loop(w_words, w_halves, start, xq, j, hg, ok, rok, ASM)
        else:
            t = 4 * (hg % 2) + tl.arange(0, 4)[None, None, None, None, :]
            ql_a = word_at(w_words, w_halves, start, 16 * h + t, ok, True)  # weights 4 t.. (low), 4 t + 64..
            ql_b = word_at(w_words, w_halves, start, 16 * h + 8 + t, ok, True)  # 4 t + 32.., 4 t + 96..
            qh = word_at(w_words, w_halves, start, 32 + 8 * h + t, ok, True)
            x_at = xq + j * 64 + 32 * h + t                           # [R, SB, 1, 4, 4]: weight 128 h + 4 t
        scales = w_halves.to(tl.pointer_type(tl.int8)) + start + 192 + 8 * h + hg % 2  # [1, SB, BN, 4, 1]: + 2 a run
        dx_at = dx + j * 8 + 4 * h                                    # [R, SB, 1, 4, 1]: + 1 per run
        sums_at = sums + j * 16 + 8 * h + hg % 2                      # + 2 per run
        parts = tl.zeros((xq.shape[0], start.shape[1], start.shape[2], 4, 1 if ISUM else 4), dtype=tl.float32)
        offsets = tl.zeros((xq.shape[0], start.shape[1], start.shape[2], 4, 1), dtype=tl.float32)
        for c in tl.static_range(4):
            factor = tl.load(scales + 2 * c, mask=ok, other=0).to(tl.float32) * tl.load(dx_at + c, mask=rok, other=0.0)
            if ISUM == 2:
                if c == 0:
                    dot = dot0
                elif c == 1:
                    dot = dot1
                elif c == 2:
                    dot = dot2
                else:
                    dot = dot3
            else:
                dot = dp4a(_q6k_quants(ql_a, ql_b, qh, c), tl.load(x_at + 8 * c, mask=rok, other=0), False, ASM)
                if ISUM:
                    dot = tl.sum(dot, axis=4, keep_dims=True)
            parts += dot.to(tl.float32) * factor
            offsets += 32.0 * factor * tl.load(sums_at + 2 * c, mask=rok, other=0.0)
        d = f16_half(w_halves, start + 208, ok)                      # [1, SB, BN, 1, 1]
        return parts * d, offsets * d

    @triton.jit
    def _q6k_quants(ql_a, ql_b, qh, c: tl.constexpr):
        """Q6_K's 6-bit quants (0..63) of run c (0-3) of a half from its low-bit words (ql_a: runs 0 and 2, ql_b:
        1 and 3) and high-bit pairs (qh)."""
        low4 = 0x0F0F0F0F
        high2 = 0x30303030
        if c == 0:
            quants = (ql_a & low4) | ((qh << 4) & high2)
        elif c == 1:
            quants = (ql_b & low4) | ((qh << 2) & high2)
        elif c == 2:
            quants = ((ql_a >> 4) & low4) | (qh & high2)
        else:
            quants = ((ql_b >> 4) & low4) | ((qh >> 2) & high2)
        return quants

    @triton.jit
    def _q6k_word_loop(w_words, w_halves, start, xq, j, hg, ok, rok, ASM: tl.constexpr):
        """The integer sums [R, SB, BN, 4, 1] of Q6_K's 4 runs of each 16-weight group (_q6k_step's tiles), the
        group's 4 words taken one at a time (as _q4k_word_loop: no cross-lane reduction)."""
        h = hg // 2
        dot0 = tl.zeros((xq.shape[0], start.shape[1], start.shape[2], 4, 1), dtype=tl.int32)
        dot1 = tl.zeros((xq.shape[0], start.shape[1], start.shape[2], 4, 1), dtype=tl.int32)
        dot2 = tl.zeros((xq.shape[0], start.shape[1], start.shape[2], 4, 1), dtype=tl.int32)
        dot3 = tl.zeros((xq.shape[0], start.shape[1], start.shape[2], 4, 1), dtype=tl.int32)
        for u in tl.static_range(4):
            t = 4 * (hg % 2) + u                                      # [1, 1, 1, 4, 1]
            ql_a = word_at(w_words, w_halves, start, 16 * h + t, ok, True)
            ql_b = word_at(w_words, w_halves, start, 16 * h + 8 + t, ok, True)
            qh = word_at(w_words, w_halves, start, 32 + 8 * h + t, ok, True)
            x_at = xq + j * 64 + 32 * h + t                           # [R, SB, 1, 4, 1]
            dot0 = dp4a_into(dot0, _q6k_quants(ql_a, ql_b, qh, 0), tl.load(x_at, mask=rok, other=0), ASM)
            dot1 = dp4a_into(dot1, _q6k_quants(ql_a, ql_b, qh, 1), tl.load(x_at + 8, mask=rok, other=0), ASM)
            dot2 = dp4a_into(dot2, _q6k_quants(ql_a, ql_b, qh, 2), tl.load(x_at + 16, mask=rok, other=0), ASM)
            dot3 = dp4a_into(dot3, _q6k_quants(ql_a, ql_b, qh, 3), tl.load(x_at + 24, mask=rok, other=0), ASM)
        return dot0, dot1, dot2, dot3

    @triton.jit
    def _q2k_step(w_words, w_halves, base, xq, dx, sums, j, ok, rok, ISUM: tl.constexpr, ASM: tl.constexpr):
        """Superblocks j [1, SB, 1, 1, 1] of Q2_K rows at byte offsets base [1, 1, BN, 1, 1] (on words) against R
        rows of 8-bit activations -> (dot parts [R, SB, BN, 4, T], min parts [R, SB, BN, 4, 1]): each output is
        sum(parts) - sum(min parts). Tiles are [R, SB, BN, S, T]: bit pair S of quant word 4 + 4 c + T (c = 2 h
        + u), weights 128 h + 32 S + 16 u + 4 T.. of scale group 8 h + 2 S + u."""
        wb = base // 4 + j * 21                                                          # [1, SB, BN, 1, 1]
        s = tl.arange(0, 4)[None, None, None, :, None]
        t = tl.arange(0, 4)[None, None, None, None, :]
        shift = (2 * s).to(tl.uint32)
        # the 16 scale bytes as words: byte 8 h + 2 s + u is byte 2 (s % 2) + u of word 2 h + s // 2
        scales_lo = tl.load(w_words + wb + s // 2, mask=ok, other=0).to(tl.uint32, bitcast=True)   # [1, SB, BN, 4, 1]
        scales_hi = tl.load(w_words + wb + 2 + s // 2, mask=ok, other=0).to(tl.uint32, bitcast=True)
        parts = tl.zeros((xq.shape[0], wb.shape[1], wb.shape[2], 4, 1 if ISUM else 4), dtype=tl.float32)
        mins = tl.zeros((xq.shape[0], wb.shape[1], wb.shape[2], 4, 1), dtype=tl.float32)
        for c in tl.static_range(4):
            h = c // 2
            u = c % 2
            w = tl.load(w_words + wb + 4 + 4 * c + t, mask=ok, other=0).to(tl.uint32, bitcast=True)  # [1, SB, BN, 1, 4]
            quants = ((w >> shift) & 0x03030303).to(tl.int32, bitcast=True)                 # [1, SB, BN, 4, 4]
            dot = dp4a(quants, tl.load(xq + j * 64 + 32 * h + 8 * s + 4 * u + t, mask=rok, other=0), False, ASM)
            if ISUM:
                dot = tl.sum(dot, axis=4, keep_dims=True)
            if h == 0:
                scale_word = scales_lo
            else:
                scale_word = scales_hi
            byte = ((scale_word >> (16 * (s % 2) + 8 * u).to(tl.uint32)) & 255).to(tl.int32)  # scale | min << 4
            dx_run = tl.load(dx + j * 8 + 4 * h + s, mask=rok, other=0.0)                    # [R, SB, 1, 4, 1]
            parts += dot.to(tl.float32) * ((byte & 15).to(tl.float32) * dx_run)
            mins += (byte >> 4).to(tl.float32) * dx_run * tl.load(sums + j * 16 + 8 * h + 2 * s + u, mask=rok,
                                                                  other=0.0)
        header = tl.load(w_words + wb + 20, mask=ok, other=0).to(tl.uint32, bitcast=True)  # f16 d | f16 dmin << 16
        d = (header & 0xFFFF).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
        dmin = (header >> 16).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
        return parts * d, mins * dmin

    @triton.jit
    def _q3k_step(w_words, w_halves, base, xq, dx, sums, j, ok, rok, ISUM: tl.constexpr, ASM: tl.constexpr):
        """Superblocks j [1, SB, 1, 1, 1] of Q3_K rows at byte offsets base [1, 1, BN, 1, 1] (even) against R rows
        of 8-bit activations -> (dot parts [R, SB, BN, 4, T], offset parts [R, SB, BN, 4, 1]): quants 0..7, the -4
        taken off per 16 with x's sums. Tiles are [R, SB, BN, C, T] as _q6k_step's: every lane loads its own qs
        word 8 + 4 C + T and hmask word 4 u + T (C = 2 h + u) once, and the static loop takes bit pair S of them:
        weights 128 h + 32 S + 16 u + 4 T.. of scale group 8 h + 2 S + u."""
        start = base + j * 110                                                           # [1, SB, BN, 1, 1]
        c = tl.arange(0, 4)[None, None, None, :, None]
        t = tl.arange(0, 4)[None, None, None, None, :]
        h = c // 2
        u = c % 2
        # qs and hmask words [1, SB, BN, 4, 4]
        low = word_at(w_words, w_halves, start, 8 + 4 * c + t, ok, True).to(tl.uint32, bitcast=True)
        high = word_at(w_words, w_halves, start, 4 * u + t, ok, True).to(tl.uint32, bitcast=True)
        # the 12 scale bytes as three words, shifted once to this lane's byte u and nibble h (a 6-bit scale is bits
        # 16 (S % 2) .. + 3 of word 24 + S // 2 and bits 16 (S % 2) + 2 (S // 2) .. + 1 of word 26, from there)
        lane = (8 * u + 4 * h).to(tl.uint32)                                             # [1, 1, 1, 4, 1]
        # scale words [1, SB, BN, 4, 1] (the lane's shift broadcasts them)
        lows_a = word_at(w_words, w_halves, start, 24, ok, True).to(tl.uint32, bitcast=True) >> lane
        lows_b = word_at(w_words, w_halves, start, 25, ok, True).to(tl.uint32, bitcast=True) >> lane
        highs = word_at(w_words, w_halves, start, 26, ok, True).to(tl.uint32, bitcast=True) >> lane
        parts = tl.zeros((xq.shape[0], start.shape[1], start.shape[2], 4, 1 if ISUM else 4), dtype=tl.float32)
        offsets = tl.zeros((xq.shape[0], start.shape[1], start.shape[2], 4, 1), dtype=tl.float32)
        for s in tl.static_range(4):
            quants = ((low >> 2 * s) & 0x03030303) | (((high >> (s + 4 * h).to(tl.uint32)) & 0x01010101) << 2)
            dot = dp4a(quants.to(tl.int32, bitcast=True),
                       tl.load(xq + j * 64 + 32 * h + 8 * s + 4 * u + t, mask=rok, other=0), False, ASM)
            if ISUM:
                dot = tl.sum(dot, axis=4, keep_dims=True)
            if s < 2:
                scale = (lows_a >> 16 * (s % 2)) & 15
            else:
                scale = (lows_b >> 16 * (s % 2)) & 15
            scale |= (highs << 4 >> 16 * (s % 2) + 2 * (s // 2)) & 0x30
            # scale - 32 as a float: the 6 bits in the mantissa of 2^23, then 2^23 + 32 taken off (no conversion)
            signed = (scale | 0x4B000000).to(tl.float32, bitcast=True) - 8388640.0
            factor = signed * tl.load(dx + j * 8 + 4 * h + s, mask=rok, other=0.0)
            parts += dot.to(tl.float32) * factor
            offsets += 4.0 * factor * tl.load(sums + j * 16 + 8 * h + 2 * s + u, mask=rok, other=0.0)
        d = f16_half(w_halves, start + 108, ok)                                         # [1, SB, BN, 1, 1]
        return parts * d, offsets * d

    @triton.jit
    def _spread_bits(nibble):
        """4 bits (int32 0..15) -> bit 4 of each byte of a word (bit i -> byte i): the fifth bits of Q5_*."""
        return ((nibble * 0x00204081) & 0x01010101) << 4

    @triton.jit
    def _small_step(w_words, w_halves, base, xq, dx, sums, j, ok, rok, QTYPE: tl.constexpr, ISUM: tl.constexpr,
                    ASM: tl.constexpr):
        """Units j [1, SB, 1, 1, 1] (four 32-value blocks g each) of Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 rows at
        byte offsets base [1, 1, BN, 1, 1] (even) against R rows of 8-bit activations -> (dot parts
        [R, SB, BN, 4, 1], offset parts [R, SB, BN, 4, 1]): each output is sum(parts) - sum(offset parts).
        Q8_0: word t of a block's quants holds weights 4 t..; the 4-bit ones: word t holds weights 4 t.. in
        its low nibbles and 16 + 4 t.. in its high ones, Q5_* their fifth bits in the block's 32-bit qh."""
        g = tl.arange(0, 4)[None, None, None, :, None]
        block_bytes: tl.constexpr = 34 if QTYPE == 8 else (18 if QTYPE == 2 else (20 if QTYPE == 3 else (
            22 if QTYPE == 6 else 24)))
        start = base + (j * 4 + g) * block_bytes                                         # [1, SB, BN, 4, 1]
        d = f16_half(w_halves, start, ok)
        x_block = xq + j * 32 + g * 8                                                    # [R, SB, 1, 4, 1]
        dxg = tl.load(dx + j * 4 + g, mask=rok, other=0.0)                               # [R, SB, 1, 4, 1]
        if QTYPE == 8:
            t = tl.arange(0, 8)[None, None, None, None, :]
            quants = word_at(w_words, w_halves, start + 2, t, ok, False)              # [1, SB, BN, 4, 8]
            dot = dp4a(quants, tl.load(x_block + t, mask=rok, other=0), True, ASM)
            if ISUM:
                dot = tl.sum(dot, axis=4, keep_dims=True)
            parts = dot.to(tl.float32) * (d * dxg)
            offsets = tl.zeros((xq.shape[0], start.shape[1], start.shape[2], 4, 1), dtype=tl.float32)
        else:
            t = tl.arange(0, 4)[None, None, None, None, :]
            first: tl.constexpr = 2 if QTYPE == 2 else (4 if QTYPE == 3 else (6 if QTYPE == 6 else 8))
            words = word_at(w_words, w_halves, start + first, t, ok, False).to(tl.uint32, bitcast=True)
            low = words & 0x0F0F0F0F
            high = (words >> 4) & 0x0F0F0F0F
            if QTYPE == 6 or QTYPE == 7:
                qh = word_at(w_words, w_halves, start + first - 4, 0, ok, False).to(tl.uint32, bitcast=True)
                low |= _spread_bits((qh >> (4 * t)) & 15)
                high |= _spread_bits((qh >> (16 + 4 * t)) & 15)
            dot = dp4a(low.to(tl.int32, bitcast=True), tl.load(x_block + t, mask=rok, other=0), False, ASM) \
                + dp4a(high.to(tl.int32, bitcast=True), tl.load(x_block + 4 + t, mask=rok, other=0), False, ASM)
            if ISUM:
                dot = tl.sum(dot, axis=4, keep_dims=True)
            parts = dot.to(tl.float32) * (d * dxg)
            block_sum = tl.load(sums + j * 8 + 2 * g, mask=rok, other=0.0) \
                + tl.load(sums + j * 8 + 2 * g + 1, mask=rok, other=0.0)                 # [R, SB, 1, 4, 1]
            if QTYPE == 2:
                offsets = 8.0 * d * dxg * block_sum
            elif QTYPE == 6:
                offsets = 16.0 * d * dxg * block_sum
            else:
                offsets = -f16_half(w_halves, start + 2, ok) * dxg * block_sum           # + m * sum(x)
        return parts, offsets

    @triton.jit
    def _iq_step(w_ptr, table_ptr, base, xq, dx, j, ok, rok, QTYPE: tl.constexpr, ISUM: tl.constexpr,
                 ASM: tl.constexpr):
        """Superblocks j [1, SB, 1, 1, 1] of i-quant rows at byte offsets base [1, 1, BN, 1, 1] against R rows of
        8-bit activations -> dot parts [R, SB, BN, 4, T]. Tiles are [R, SB, BN, C, T] for each half H of a
        superblock: group g = 16 H + 4 C + T of 8 weights (x words 2 g and 2 g + 1, 32-value block 4 H + C). A
        group's code book values times its signs are int8 (|v| <= 62), so its sums are exact in int32, scaled
        once; IQ1_*'s shift delta (+-1/8 a group) adds delta times the group's sum of x (two dp4a with ones)."""
        superblock: tl.constexpr = 66 if QTYPE == 16 else (74 if QTYPE == 17 else (98 if QTYPE == 18 else (
            50 if QTYPE == 19 else (110 if QTYPE == 21 else (82 if QTYPE == 22 else 56)))))
        at = w_ptr + base + j * superblock                                               # [1, SB, BN, 1, 1]
        c = tl.arange(0, 4)[None, None, None, :, None]
        t = tl.arange(0, 4)[None, None, None, None, :]
        parts = tl.zeros((xq.shape[0], at.shape[1], at.shape[2], 4, 1 if ISUM else 4), dtype=tl.float32)
        for half in tl.static_range(2):
            g = 16 * half + 4 * c + t                                                    # [1, 1, 1, 4, 4]
            w0, w1, scale, delta = signed_word_pair(at, g, table_ptr, ok, QTYPE)        # [1, SB, BN, 4, 4]
            x0 = tl.load(xq + j * 64 + 2 * g, mask=rok, other=0)                         # [R, SB, 1, 4, 4]
            x1 = tl.load(xq + j * 64 + 2 * g + 1, mask=rok, other=0)
            value = (dp4a(w0, x0, True, ASM) + dp4a(w1, x1, True, ASM)).to(tl.float32)
            if QTYPE == 19 or QTYPE == 29:
                ones = tl.full(w0.shape, 0x01010101, tl.int32)
                value += delta * (dp4a(ones, x0, False, ASM) + dp4a(ones, x1, False, ASM)).to(tl.float32)
            part = value * (scale * tl.load(dx + j * 8 + 4 * half + c, mask=rok, other=0.0))
            if ISUM:
                part = tl.sum(part, axis=4, keep_dims=True)
            parts += part
        return parts

    @triton.jit
    def k_step(w_ptr, table_ptr, base, xq, dx, sums, j, ok, rok, QTYPE: tl.constexpr, ISUM: tl.constexpr,
              ASM: tl.constexpr):
        """One K step of the loop the kernels run (the loop stays in the kernels: the interpreter turns
        scalars handed to a helper into tensors, which tl.range refuses). table_ptr: the i-quants' code book.
        ISUM: 0 scales each word's dot product in float; 1 sums a scale group's words in integers first (parts
        [.., 1]); 2 the same, Q4_K / Q5_K / Q6_K taking a group's words in a loop (_q4k_word_loop, _q6k_word_loop;
        the others as 1)."""
        w_words = w_ptr.to(tl.pointer_type(tl.int32))
        w_halves = w_ptr.to(tl.pointer_type(tl.int16))
        if QTYPE == 20:  # IQ4_NL
            parts = iq4nl_step(w_words, w_halves, base, xq, dx, j, ok, rok, ISUM, ASM)
            offsets = tl.zeros((xq.shape[0], parts.shape[1], parts.shape[2], 4, 1), dtype=tl.float32)
        elif QTYPE == 23:  # IQ4_XS
            parts = iq4xs_step(w_words, base, xq, dx, j, ok, rok, ISUM, ASM)
            offsets = tl.zeros((xq.shape[0], parts.shape[1], parts.shape[2], 4, 1), dtype=tl.float32)
        elif QTYPE == 39:  # MXFP4
            parts = mxfp4_step(w_ptr, base, xq, dx, j, ok, rok, ISUM, ASM)
            offsets = tl.zeros((xq.shape[0], parts.shape[1], parts.shape[2], 4, 1), dtype=tl.float32)
        elif QTYPE >= 16:  # the i-quants (IQUANTS)
            parts = _iq_step(w_ptr, table_ptr, base, xq, dx, j, ok, rok, QTYPE, ISUM, ASM)
            offsets = tl.zeros((xq.shape[0], parts.shape[1], parts.shape[2], 4, 1), dtype=tl.float32)
        elif QTYPE == 12 or QTYPE == 13:
            parts, offsets = _q4k_step(w_words, base, xq, dx, sums, j, ok, rok, ISUM, ASM, QTYPE == 13)
        elif QTYPE == 14:
            parts, offsets = _q6k_step(w_words, w_halves, base, xq, dx, sums, j, ok, rok, ISUM, ASM)
        elif QTYPE == 10:
            parts, offsets = _q2k_step(w_words, w_halves, base, xq, dx, sums, j, ok, rok, ISUM, ASM)
        elif QTYPE == 11:
            parts, offsets = _q3k_step(w_words, w_halves, base, xq, dx, sums, j, ok, rok, ISUM, ASM)
        else:
            parts, offsets = _small_step(w_words, w_halves, base, xq, dx, sums, j, ok, rok, QTYPE, ISUM, ASM)
        return parts, offsets

    @triton.jit
    def sum_parts(acc, offsets):
        """[R, SB, BN, G, T] parts and [R, SB, BN, G, 1] offsets -> the outputs [R, BN]."""
        return tl.sum(tl.sum(tl.sum(acc, axis=4), axis=3), axis=1) \
            - tl.sum(tl.sum(tl.sum(offsets, axis=4), axis=3), axis=1)
