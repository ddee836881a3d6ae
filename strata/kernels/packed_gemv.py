"""Few-row projections over packed GGUF blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K,
Q6_K, IQ4_XS, and the i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) as one Triton launch.

y = x @ W.T for x [M <= 16, K] where W [N, K] is stored as GGUF rows of blocks (a row is K / 256
superblocks of 256 weights, or K / 32 blocks of 32 for the 32-value types, byte for byte as in the
file). Each program owns BLOCK_N rows of W and walks K one 256-weight chunk at a time (eight blocks of
the 32-value types, the last chunk of a row partial when 256 does not divide K): it gathers the chunk's
bytes, decodes scales and quants in registers, and multiplies on the CUDA cores, so the weights cross
memory once at their packed size (~0.56 byte per weight at Q4_K against 2 at bf16). Decode of a step
of one sequence is bandwidth-bound, which is what packing buys.

Layouts (gguf-py's quants.py is the reference; `packed_gemv_ref` dequantizes with it):
- 32-value blocks (llama.cpp's fallbacks for rows 256 does not divide: Q4_K -> Q5_0, Q5_K -> Q5_1,
  Q6_K -> Q8_0): f16 d, for the _1 types f16 m, for Q5_* 4 bytes of fifth bits (bit i: weight i), then
  the quants: Q8_0 32 x int8 (w = d * q); Q4_* / Q5_* 16 bytes, weight i < 16 in the low nibble of
  byte i, weight 16 + i in its high one; w = d * (q - 8) (Q4_0), d * (q - 16) (Q5_0), d * q + m (_1).
- Q4_K, 144 bytes per 256: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins for 8 sub-blocks of 32,
  128 bytes of 4-bit quants (bytes 32j..32j+31 hold sub-block 2j in their low nibbles, 2j+1 in their
  high ones); w = d * sc[s] * q - dmin * m[s].
- Q5_K, 176 bytes per 256: Q4_K's header, then 32 bytes of fifth bits (bit s of byte l: weight l of
  sub-block s), then Q4_K's 128 bytes of low 4 bits.
- IQ4_NL, 18 bytes per 32: Q4_0's layout, w = d * level[q] (16 non-linear levels); MXFP4, 17 bytes per 32: an
  exponent byte e, then Q4_0's nibbles, w = 2^(e - 128) * value[q] (E2M1's values doubled); IQ4_XS, 136 bytes per
  256: f16 d, 2 bytes of the sub-block scales' high 2 bits, 4 bytes of their low 4 bits, then per sub-block
  s 16 bytes (weight i < 16 in the low nibble of byte i, 16 + i in its high one); w = d * (ls[s] - 32) *
  level[q].
- Q6_K, 210 bytes per 256: 128 bytes of low 4 bits, 64 bytes of high 2 bits, 16 int8 scales (one per
  16 weights), f16 d; w = d * scale * (q - 32).
- Q2_K, 84 bytes per 256: 16 bytes, one per 16 weights g (4-bit scale sc[g] in the low nibble, 4-bit min
  m[g] in the high one), 64 bytes of 2-bit quants (weight 128 h + 32 s + l in bits 2 s of byte 32 h + l),
  f16 d, f16 dmin; w = d * sc[g] * q - dmin * m[g].
- Q3_K, 110 bytes per 256: 32 bytes hmask (bit i of byte l: weight 32 i + l's high bit), 64 bytes of low
  2 bits (Q2_K's order), 12 bytes of 6-bit scales (low 4 bits of scale g in nibble g // 8 of byte g % 8,
  high 2 bits in bits 2 (g // 4) of byte 8 + g % 4), f16 d; w = d * (scale[g] - 32) * (low - 4 * !high).
- the i-quants (256 per superblock): groups of 8 weights from a code book, signs and scales, decoded by
  packed_iquants (its docstring; the kernels take its decode_table as `table_ptr`).
"""

from __future__ import annotations

import numpy as np
import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: packed_gemv_ref still works
    triton = tl = None

from strata.kernels import packed_iquants
from strata.kernels.gguf_blocks import MXFP4_VALUES
from strata.kernels.launch import pdl_options

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel
    from strata.kernels.packed_iquants import iq_dot, iq_values

MAX_ROWS = 16
# gguf.GGMLQuantizationType values -> (weights per block, bytes per block)
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS = 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 20, 23
MXFP4 = 39
BLOCK_LAYOUT = {Q4_0: (32, 18), Q4_1: (32, 20), Q5_0: (32, 22), Q5_1: (32, 24), Q8_0: (32, 34), IQ4_NL: (32, 18),
                MXFP4: (32, 17),
                Q2_K: (256, 84), Q3_K: (256, 110), Q4_K: (256, 144), Q5_K: (256, 176), Q6_K: (256, 210),
                IQ4_XS: (256, 136), **{q: (256, b) for q, b in packed_iquants.SUPERBLOCK_BYTES.items()}}
# IQ4_NL's 16 levels (gguf-py's IQ4_NL.kvalues), as the bytes of four int32 words the kernels shift out
IQ4_LEVELS = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)


def level_words(levels: tuple[int, ...]) -> list[int]:
    """16 int8 levels -> the 4 int32 words whose bytes they are (level 4 i + b in byte b of word i)."""
    return [int.from_bytes(bytes(v & 255 for v in levels[i:i + 4]), "little", signed=True) for i in (0, 4, 8, 12)]


# MXFP4's 16 values (E2M1 doubled: gguf_blocks.MXFP4_VALUES) the same way
IQ4_WORDS, MXFP4_WORDS = level_words(IQ4_LEVELS), level_words(MXFP4_VALUES)
CHUNK = 256  # weights of one row decoded per inner step (one superblock, or eight 32-value blocks)


def supports(qtype: int, k: int) -> bool:
    """Rows of whole blocks of a type the kernels read: any number of 32-value blocks (a partial last
    chunk is masked by `_chunk_ok` / `_chunk_x`: Qwen4-Exp's 640-wide expert down rows), whole superblocks."""
    return qtype in BLOCK_LAYOUT and k % BLOCK_LAYOUT[qtype][0] == 0


def num_chunks(k: int) -> int:
    """256-value chunks of a row of K values (the last one partial for 32-value types when 256 does not
    divide K)."""
    return -(-k // CHUNK)


def chunks_per_step(configured: int, k: int) -> int:
    """Chunks per K step: the configured power of two, halved until it divides the row's chunks."""
    step = configured
    while num_chunks(k) % step:
        step //= 2
    return step


def packed_gemv_ref(x: torch.Tensor, blocks: torch.Tensor, qtype: int, n: int, k: int) -> torch.Tensor:
    """x [M, K], blocks uint8 [N, row_bytes] -> float32 [M, N]: gguf's dequantization, then a float32
    matmul."""
    from gguf.quants import dequantize

    weight = dequantize(blocks.cpu().numpy().astype(np.uint8, copy=False), qtype).reshape(n, k)
    return x.float() @ torch.from_numpy(np.ascontiguousarray(weight)).to(x.device).t()


# rows of W per program, superblocks per K step: the lowest summed one-row time over Q8_0, Q4_K, Q6_K at five
# decode shapes of the 18 tilings swept on the H200 (bench/results/2026-12-01-h200-packed-gemv)
DEFAULT_CONFIG = dict(BLOCK_N=4, SUPERBLOCKS=4, num_warps=2, num_stages=3)
# The K-loop form per type at the default tiling, from one A/B on Qwen4-Exp's shapes
# (bench/results/2026-12-02-h200-packed-types/gemv_ab.*): the accumulator form wins on Q6_K (the LM head,
# 687 -> 548 us) and Q8_0, the group sums on Q4_K / Q5_0. The accumulator form gave wrong sums on the H200 for
# the types whose scales are decoded per superblock and reshaped (Q4_K, Q5_K, IQ4_XS) while the interpreter's
# were right: it is refused for them until that is understood; the GPU tests pass it for the others.
ACC_TYPES = (Q6_K, Q8_0)
# Types packed_gemv_words decodes by default (rows of whole words): Q6_K, 2.1x faster on the LM head and 1.3-3x on
# small shapes; Q4_K / Q5_K stay on the group sums here, which were faster on 5 of their 6 decode shapes
# (bench/results/2026-12-02-h200-packed-words)
WORDS_TYPES = (Q6_K,)
# (the i-quants: their weights are decoded per 8-weight group and reshaped, as IQ4_XS's scales; untried on a GPU)
ACC_REFUSED = (Q4_K, Q5_K, IQ4_XS, *packed_iquants.SUPERBLOCK_BYTES)


def packed_gemv(x: torch.Tensor, blocks: torch.Tensor, qtype: int, n: int, k: int,
                config: dict | None = None) -> torch.Tensor:
    """Same contract as packed_gemv_ref for at most MAX_ROWS rows (float32 out). Rows of whole words of
    WORDS_TYPES go to packed_gemv_words (config WORDS True / False chooses for Q4_K, Q5_K, Q6_K; ACC=True
    keeps them here). One program
    per (BLOCK_N rows of W, row of x): the rows of a few-row step reread their weights from L2."""
    num_rows = x.shape[0]
    assert num_rows <= MAX_ROWS and x.stride(1) == 1 and x.shape[1] == k and supports(qtype, k)
    assert blocks.dtype == torch.uint8 and blocks.is_contiguous() and blocks.shape[0] == n
    per_block, block_bytes = BLOCK_LAYOUT[qtype]
    assert blocks.shape[1] == k // per_block * block_bytes, "row bytes do not match K for this type"
    from strata.kernels import packed_gemv_words  # here: it reads its block fields with this module's helpers

    config = config or {}
    words = config.get("WORDS", qtype in WORDS_TYPES) and not config.get("ACC")
    if words and packed_gemv_words.supports(qtype, k, blocks):
        return packed_gemv_words.packed_gemv_words(x, blocks, qtype, n, k)
    cfg = {**DEFAULT_CONFIG, "ACC": qtype in ACC_TYPES, **config}
    cfg.pop("WORDS", None)
    if cfg["ACC"] and qtype in ACC_REFUSED:
        raise ValueError(f"packed_gemv: the accumulator loop (ACC) is not correct on the GPU for GGUF type {qtype}")
    superblocks = chunks_per_step(cfg["SUPERBLOCKS"], k)  # a power of two (a Triton block size)
    out = torch.empty(num_rows, n, dtype=torch.float32, device=x.device)
    _packed_gemv_kernel[(triton.cdiv(n, cfg["BLOCK_N"]), num_rows)](
        x, blocks, packed_iquants.table_for(qtype, blocks), out, n, k, x.stride(0), blocks.shape[1], out.stride(0),
        QTYPE=qtype, BLOCK_N=cfg["BLOCK_N"], SB=superblocks, ACC=cfg["ACC"], num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"], **pdl_options(x))
    return out


if triton is not None:

    _IQ4_W0, _IQ4_W1, _IQ4_W2, _IQ4_W3 = (tl.constexpr(w) for w in IQ4_WORDS)
    _MX_W0, _MX_W1, _MX_W2, _MX_W3 = (tl.constexpr(w) for w in MXFP4_WORDS)

    @triton.jit
    def table_level(q, MX: tl.constexpr):
        """The level of 4-bit codes q (int32) as float32: byte q % 4 of word q // 4, sign-extended; IQ4_NL's levels,
        or (MX) MXFP4's values (E2M1 doubled)."""
        if MX:
            word = tl.where(q < 4, _MX_W0, tl.where(q < 8, _MX_W1, tl.where(q < 12, _MX_W2, _MX_W3)))
        else:
            word = tl.where(q < 4, _IQ4_W0, tl.where(q < 8, _IQ4_W1, tl.where(q < 12, _IQ4_W2, _IQ4_W3)))
        level = (word >> ((q % 4) * 8)) & 255
        return ((level ^ 128) - 128).to(tl.float32)

    @triton.jit
    def mxfp4_scale(e):
        """MXFP4's exponent bytes e (int32) -> its scale 2^(e - 128) as float32 (gguf-py's e8m0_to_fp32_half)."""
        return tl.where(e < 2, 0x00200000 << (e & 1), (e - 1) << 23).to(tl.float32, bitcast=True)

    @triton.jit
    def _iq4xs_scales(base3, s, ok3):
        """IQ4_XS superblocks at base3 [BN, SB, 1], sub-blocks s [1, 1, 8] -> d * (ls - 32) [BN, SB, 8]."""
        low = (tl.load(base3 + 4 + s // 2, mask=ok3, other=0).to(tl.int32) >> ((s % 2) * 4)) & 15
        high = tl.load(base3 + 2, mask=ok3, other=0).to(tl.int32) | (tl.load(base3 + 3, mask=ok3, other=0).to(tl.int32) << 8)
        high = (high >> (s * 2)) & 3
        return _f16_at(base3, ok3) * ((low | (high << 4)) - 32).to(tl.float32)

    @triton.jit
    def _iq4xs_levels(base, r, l, n_ok):
        """IQ4_XS weights' levels [BN, SB, 8, 32]: sub-block r's codes at bytes 8 + 16 r + l % 16, nibble l // 16."""
        code = (tl.load(base + 8 + r * 16 + l % 16, mask=n_ok, other=0).to(tl.int32) >> ((l // 16) * 4)) & 15
        return table_level(code, False)

    @triton.jit
    def _block_bytes(QTYPE: tl.constexpr):
        """Bytes of one block of QTYPE (BLOCK_LAYOUT's second column)."""
        bb = 210
        if QTYPE == 2:
            bb = 18
        elif QTYPE == 3:
            bb = 20
        elif QTYPE == 6:
            bb = 22
        elif QTYPE == 7:
            bb = 24
        elif QTYPE == 8:
            bb = 34
        elif QTYPE == 10:
            bb = 84
        elif QTYPE == 11:
            bb = 110
        elif QTYPE == 12:
            bb = 144
        elif QTYPE == 13:
            bb = 176
        elif QTYPE == 20:
            bb = 18
        elif QTYPE == 39:
            bb = 17
        elif QTYPE == 23:
            bb = 136
        elif QTYPE == 16:
            bb = 66
        elif QTYPE == 17:
            bb = 74
        elif QTYPE == 18:
            bb = 98
        elif QTYPE == 19:
            bb = 50
        elif QTYPE == 21:
            bb = 110
        elif QTYPE == 22:
            bb = 82
        elif QTYPE == 29:
            bb = 56
        return bb

    @triton.jit
    def _f16_at(ptr, mask):
        """The little-endian float16 at byte pointers `ptr`, as float32."""
        lo = tl.load(ptr, mask=mask, other=0).to(tl.uint16)
        hi = tl.load(ptr + 1, mask=mask, other=0).to(tl.uint16)
        return (lo | (hi << 8)).to(tl.float16, bitcast=True).to(tl.float32)

    @triton.jit
    def _q4k_scales(base3, s, ok3):
        """Q4_K superblocks at byte pointers base3 [BN, SB, 1], sub-blocks s [1, 1, 8] -> (d * scale, dmin * min)
        [BN, SB, 8]: the 6-bit scales and mins of the 12 packed bytes, times the f16 superblock factors (any
        shapes that broadcast: packed_gemv_words passes [SB, BN, 1, 1] and [1, 1, 4, 1])."""
        i = s % 4
        lo_d = tl.load(base3 + 4 + i, mask=ok3, other=0).to(tl.int32)
        lo_m = tl.load(base3 + 8 + i, mask=ok3, other=0).to(tl.int32)
        hi = tl.load(base3 + 12 + i, mask=ok3, other=0).to(tl.int32)
        sc = tl.where(s < 4, lo_d & 63, (hi & 15) | ((lo_d >> 2) & 48)).to(tl.float32)
        mn = tl.where(s < 4, lo_m & 63, (hi >> 4) | ((lo_m >> 2) & 48)).to(tl.float32)
        return _f16_at(base3, ok3) * sc, _f16_at(base3 + 2, ok3) * mn

    @triton.jit
    def _q4k_quants(base, r, l, n_ok, QTYPE: tl.constexpr):
        """Q4_K quants 0..15 [BN, SB, 8, 32]: row r is sub-block r (nibble r % 2 of bytes 32 * (r // 2) + l);
        Q5_K's 0..31 add bit r of byte l of the fifth bits (bytes 16..47, before the nibbles)."""
        if QTYPE == 13:
            qbyte = tl.load(base + 48 + (r // 2) * 32 + l, mask=n_ok, other=0).to(tl.int32)
            high = tl.load(base + 16 + l, mask=n_ok, other=0).to(tl.int32)
            q = ((qbyte >> ((r % 2) * 4)) & 15) | (((high >> r) & 1) << 4)
        else:
            qbyte = tl.load(base + 16 + (r // 2) * 32 + l, mask=n_ok, other=0).to(tl.int32)
            q = (qbyte >> ((r % 2) * 4)) & 15
        return q.to(tl.float32)

    @triton.jit
    def _small_block(base, l, n_ok, QTYPE: tl.constexpr):
        """32-value blocks at byte pointers base [BN, SB, 8, 1] -> (d * q + m as factors: q [BN, SB, 8, 32]
        float32 with the _0 types' offset taken off, d [BN, SB, 8], m [BN, SB, 8], zero for the _0 types)."""
        if QTYPE == 39:  # an E8M0 exponent byte, not a float16
            d = tl.sum(mxfp4_scale(tl.load(base, mask=n_ok, other=0).to(tl.int32)), axis=3)
        else:
            d = tl.sum(_f16_at(base, n_ok), axis=3)
        if QTYPE == 8:
            q = tl.load(base + 2 + l, mask=n_ok, other=0).to(tl.int8, bitcast=True).to(tl.float32)
            m = d * 0.0
        else:
            first = 4 if (QTYPE == 3 or QTYPE == 7) else (1 if QTYPE == 39 else 2)   # after d and m, d, or e
            quants = first + 4 if (QTYPE == 6 or QTYPE == 7) else first
            q = (tl.load(base + quants + l % 16, mask=n_ok, other=0).to(tl.int32) >> ((l // 16) * 4)) & 15
            if QTYPE == 6 or QTYPE == 7:
                high = tl.load(base + first + l // 8, mask=n_ok, other=0).to(tl.int32)
                q = q | (((high >> (l % 8)) & 1) << 4)
            if QTYPE == 2:
                q = q - 8
            elif QTYPE == 6:
                q = q - 16
            if QTYPE == 20 or QTYPE == 39:
                q = table_level(q, QTYPE == 39)
            else:
                q = q.to(tl.float32)
            if QTYPE == 3 or QTYPE == 7:
                m = tl.sum(_f16_at(base + 2, n_ok), axis=3)
            else:
                m = d * 0.0
        return q, d, m

    @triton.jit
    def _q6k_quants(base, r, l, n_ok):
        """Q6_K quants -32..31 [BN, SB, 8, 32]: row r: low bits in nibble (r // 2) % 2 of
        ql[64 (r // 4) + 32 (r % 2) + l], high bits in bits 2 (r % 4) of qh[32 (r // 4) + l]."""
        lo = tl.load(base + (r // 4) * 64 + (r % 2) * 32 + l, mask=n_ok, other=0).to(tl.int32)
        lo = (lo >> (((r // 2) % 2) * 4)) & 15
        hi = tl.load(base + 128 + (r // 4) * 32 + l, mask=n_ok, other=0).to(tl.int32)
        hi = (hi >> ((r % 4) * 2)) & 3
        return ((lo | (hi << 4)) - 32).to(tl.float32)

    @triton.jit
    def _q2k_scale_min(base, g, ok):
        """Q2_K superblocks at byte pointers base, groups of 16 weights g (any shapes that broadcast) ->
        (d * scale, dmin * min) as float32: byte g holds the 4-bit scale (low nibble) and min (high)."""
        byte = tl.load(base + g, mask=ok, other=0).to(tl.int32)
        return (_f16_at(base + 80, ok) * (byte & 15).to(tl.float32),
                _f16_at(base + 82, ok) * (byte >> 4).to(tl.float32))

    @triton.jit
    def _q3k_scale(base, g, ok):
        """Q3_K superblocks at byte pointers base, groups of 16 weights g (shapes that broadcast) -> d * (scale - 32)
        as float32: low 4 bits in nibble g // 8 of byte 96 + g % 8, high 2 bits at bit 2 (g // 4) of 104 + g % 4."""
        low = (tl.load(base + 96 + g % 8, mask=ok, other=0).to(tl.int32) >> ((g // 8) * 4)) & 15
        high = (tl.load(base + 104 + g % 4, mask=ok, other=0).to(tl.int32) >> ((g // 4) * 2)) & 3
        return _f16_at(base + 108, ok) * ((low | (high << 4)) - 32).to(tl.float32)

    @triton.jit
    def _q2k_quants(base, r, l, n_ok, QTYPE: tl.constexpr):
        """Q2_K quants 0..3 [BN, SB, 8, 32]: row r in bits 2 (r % 4) of byte 16 + 32 (r // 4) + l; Q3_K's -4..3
        take those bits from byte 32 + 32 (r // 4) + l, minus 4 where bit r of hmask byte l is clear."""
        if QTYPE == 11:
            low = (tl.load(base + 32 + (r // 4) * 32 + l, mask=n_ok, other=0).to(tl.int32) >> ((r % 4) * 2)) & 3
            high = (tl.load(base + l, mask=n_ok, other=0).to(tl.int32) >> r) & 1
            q = low + 4 * high - 4
        else:
            q = (tl.load(base + 16 + (r // 4) * 32 + l, mask=n_ok, other=0).to(tl.int32) >> ((r % 4) * 2)) & 3
        return q.to(tl.float32)

    @triton.jit
    def _chunk_ok(n_ok, sb, r, k, QTYPE: tl.constexpr, SB: tl.constexpr):
        """The rows' mask, and for the 32-value types also whether each block of chunks sb.. lies within K
        [BN, SB, 8, 1] (a row's last chunk may be partial); the K-quant types have whole chunks."""
        ok = n_ok   # one return: Triton's compiler wants every return of one shape
        if QTYPE <= 8 or QTYPE == 20 or QTYPE == 39:
            ok = n_ok & (((sb + tl.arange(0, SB))[None, :, None, None] * 256 + r * 32) < k)
        return ok

    @triton.jit
    def _chunk_x(x_ptr, sb, x_offs, k, QTYPE: tl.constexpr):
        """Activations of chunks sb.. at x_offs [1, SB, 8, 32] as float32 (zeros past K for the 32-value types)."""
        if QTYPE <= 8 or QTYPE == 20 or QTYPE == 39:
            x = tl.load(x_ptr + sb * 256 + x_offs, mask=sb * 256 + x_offs < k, other=0.0)
        else:
            x = tl.load(x_ptr + sb * 256 + x_offs)
        return x.to(tl.float32)

    @triton.jit
    def _chunk_dot(row_ptr, sb, r, l, x, n_ok, table_ptr, QTYPE: tl.constexpr, SB: tl.constexpr,
                   BLOCK_N: tl.constexpr):
        """Sum over SB superblocks (256 weights each, K step `sb`) of W's BLOCK_N rows times x -> [BLOCK_N].
        Tiles are [BLOCK_N, SB, 8, 32]: superblock, row r of 32 weights in gguf's order, weight l in it
        (weight index r * 32 + l); x [1, SB, 8, 32] in the same order. Quants are summed against x per
        group first and scaled per group after, so scales cost a few operations per 32 weights. table_ptr: the
        i-quants' code book and signs (packed_iquants.decode_table), unread for the other types."""
        # 32-value blocks (Q4_0 .. Q8_0 are 2 .. 8, IQ4_NL 20, MXFP4 39): row r is one block
        if QTYPE <= 8 or QTYPE == 20 or QTYPE == 39:
            bb = _block_bytes(QTYPE)
            base = row_ptr + (sb + tl.arange(0, SB))[None, :, None, None] * (8 * bb) + r * bb  # [BN, SB, 8, 1]
            q, d, m = _small_block(base, l, n_ok, QTYPE)                                      # [BN, SB, 8, 32]
            part = d * tl.sum(q * x, axis=3)                                                   # [BN, SB, 8]
            if QTYPE == 3 or QTYPE == 7:
                part += m * tl.sum(x, axis=3)
        elif QTYPE == 12 or QTYPE == 13:  # Q4_K, Q5_K
            bb = _block_bytes(QTYPE)
            base = row_ptr + (sb + tl.arange(0, SB))[None, :, None, None] * bb                  # [BN, SB, 1, 1]
            q = _q4k_quants(base, r, l, n_ok, QTYPE)                                           # [BN, SB, 8, 32]
            scale, offset = _q4k_scales(tl.reshape(base, (BLOCK_N, SB, 1)), tl.reshape(r, (1, 1, 8)),
                                        tl.reshape(n_ok, (BLOCK_N, 1, 1)))                     # [BN, SB, 8]
            part = scale * tl.sum(q * x, axis=3) - offset * tl.sum(x, axis=3)
        elif QTYPE == 23:  # IQ4_XS: one 6-bit scale per sub-block of 32
            base = row_ptr + (sb + tl.arange(0, SB))[None, :, None, None] * 136                 # [BN, SB, 1, 1]
            scale = _iq4xs_scales(tl.reshape(base, (BLOCK_N, SB, 1)), tl.reshape(r, (1, 1, 8)),
                                  tl.reshape(n_ok, (BLOCK_N, 1, 1)))                           # [BN, SB, 8]
            part = scale * tl.sum(_iq4xs_levels(base, r, l, n_ok) * x, axis=3)
        elif QTYPE == 10 or QTYPE == 11:  # Q2_K, Q3_K: a scale (and Q2_K a min) per 16 weights
            base = row_ptr + (sb + tl.arange(0, SB))[None, :, None, None] * _block_bytes(QTYPE)  # [BN, SB, 1, 1]
            q = _q2k_quants(base, r, l, n_ok, QTYPE)                                           # [BN, SB, 8, 32]
            halves = tl.sum(tl.reshape(q * x, (BLOCK_N, SB, 16, 16)), axis=3)                 # [BN, SB, 16]
            base3 = tl.reshape(base, (BLOCK_N, SB, 1))
            ok3 = tl.reshape(n_ok, (BLOCK_N, 1, 1))
            g = tl.arange(0, 16)[None, None, :]
            if QTYPE == 10:
                scale, offset = _q2k_scale_min(base3, g, ok3)                                  # [BN, SB, 16]
                part = scale * halves - offset * tl.sum(tl.reshape(x, (1, SB, 16, 16)), axis=3)
            else:
                part = _q3k_scale(base3, g, ok3) * halves
        elif QTYPE >= 16:  # the i-quants (16-19, 21, 22, 29; IQ4_NL 20 and IQ4_XS 23 are taken above)
            base = row_ptr + (sb + tl.arange(0, SB))[None, :, None, None] * _block_bytes(QTYPE)  # [BN, SB, 1, 1]
            part = iq_dot(base, x, table_ptr, n_ok, QTYPE, SB)                                  # [BN, SB, 32]
        else:  # Q6_K: one int8 scale per 16 weights
            base = row_ptr + (sb + tl.arange(0, SB))[None, :, None, None] * 210                 # [BN, SB, 1, 1]
            q = _q6k_quants(base, r, l, n_ok)                                                  # [BN, SB, 8, 32]
            halves = tl.sum(tl.reshape(q * x, (BLOCK_N, SB, 16, 16)), axis=3)                 # [BN, SB, 16]
            base3 = tl.reshape(base, (BLOCK_N, SB, 1))
            ok3 = tl.reshape(n_ok, (BLOCK_N, 1, 1))
            g = tl.arange(0, 16)[None, None, :]
            scale = tl.load(base3 + 192 + g, mask=ok3, other=0).to(tl.int8, bitcast=True).to(tl.float32)
            part = _f16_at(base3 + 208, ok3) * (scale * halves)
        return tl.sum(tl.sum(part, axis=2), axis=1)

    @triton.jit
    def _chunk_values(row_ptr, sb, r, l, n_ok, table_ptr, QTYPE: tl.constexpr, SB: tl.constexpr,
                      BLOCK_N: tl.constexpr):
        """The weights _chunk_dot multiplies, as float32 [BLOCK_N, SB, 8, 32] in the same order (gguf's
        dequantization: d * q, d * sc * q - dmin * m, d * scale * q)."""
        if QTYPE <= 8 or QTYPE == 20 or QTYPE == 39:
            bb = _block_bytes(QTYPE)
            base = row_ptr + (sb + tl.arange(0, SB))[None, :, None, None] * (8 * bb) + r * bb
            q, d, m = _small_block(base, l, n_ok, QTYPE)
            values = tl.reshape(d, (BLOCK_N, SB, 8, 1)) * q + tl.reshape(m, (BLOCK_N, SB, 8, 1))
        elif QTYPE == 12 or QTYPE == 13:
            base = row_ptr + (sb + tl.arange(0, SB))[None, :, None, None] * _block_bytes(QTYPE)
            # scales decoded from 4-d pointers ([BN, SB, 8, 1]), not reshaped from 3-d ones: the grouped MoE
            # kernels then need no layout conversion for them (session 38, their TTGIR)
            scale, offset = _q4k_scales(base, r, n_ok)                                        # [BN, SB, 8, 1]
            values = scale * _q4k_quants(base, r, l, n_ok, QTYPE) - offset
        elif QTYPE == 23:
            base = row_ptr + (sb + tl.arange(0, SB))[None, :, None, None] * 136
            scale = _iq4xs_scales(tl.reshape(base, (BLOCK_N, SB, 1)), tl.reshape(r, (1, 1, 8)),
                                  tl.reshape(n_ok, (BLOCK_N, 1, 1)))
            values = tl.reshape(scale, (BLOCK_N, SB, 8, 1)) * _iq4xs_levels(base, r, l, n_ok)
        elif QTYPE == 10 or QTYPE == 11:  # scales read per weight, not reshaped (as Q6_K's: see ACC_REFUSED)
            base = row_ptr + (sb + tl.arange(0, SB))[None, :, None, None] * _block_bytes(QTYPE)
            g = r * 2 + l // 16                                                                  # [1, 1, 8, 32]
            if QTYPE == 10:
                scale, offset = _q2k_scale_min(base, g, n_ok)                                  # [BN, SB, 8, 32]
                values = scale * _q2k_quants(base, r, l, n_ok, QTYPE) - offset
            else:
                values = _q3k_scale(base, g, n_ok) * _q2k_quants(base, r, l, n_ok, QTYPE)
        elif QTYPE >= 16:
            base = row_ptr + (sb + tl.arange(0, SB))[None, :, None, None] * _block_bytes(QTYPE)
            values = iq_values(base, table_ptr, n_ok, QTYPE, SB, BLOCK_N)
        else:
            base = row_ptr + (sb + tl.arange(0, SB))[None, :, None, None] * 210
            # one scale a 16 values, applied through a reshape: scales loaded per weight made the grouped MoE
            # kernels convert the whole float tile's layout (32 KB through shared memory a superblock; their TTGIR)
            g = tl.arange(0, 16)[None, None, :, None]
            scale = tl.load(base + 192 + g, mask=n_ok, other=0).to(tl.int8, bitcast=True).to(tl.float32)
            scale = scale * _f16_at(base + 208, n_ok)                                           # [BN, SB, 16, 1]
            q16 = tl.reshape(_q6k_quants(base, r, l, n_ok), (BLOCK_N, SB, 16, 16))
            values = tl.reshape(q16 * scale, (BLOCK_N, SB, 8, 32))
        return values

    @triton.jit
    def _packed_gemv_kernel(x_ptr, w_ptr, table_ptr, out_ptr, n, k, stride_xm, row_bytes, stride_om,
                            QTYPE: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr, USE_PDL: tl.constexpr,
                            ACC: tl.constexpr):
        """ACC False: each K step sums quants against x per 32-weight group, then scales the group sums
        (_chunk_dot); ACC True: each step adds decoded weights times x into a [BN, SB, 8, 32] accumulator,
        summed once at the end (no reductions inside the loop, one more multiply per weight)."""
        wait_for_previous_kernel(USE_PDL)
        row = tl.program_id(1)
        offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = (offs_n < n)[:, None, None, None]                                               # [BN, 1, 1, 1]
        row_ptr = w_ptr + offs_n.to(tl.int64)[:, None, None, None] * row_bytes
        r = tl.arange(0, 8)[None, None, :, None]
        l = tl.arange(0, 32)[None, None, None, :]
        x_offs = tl.arange(0, SB)[None, :, None, None] * 256 + r * 32 + l                       # [1, SB, 8, 32]
        if ACC:
            acc4 = tl.zeros((BLOCK_N, SB, 8, 32), dtype=tl.float32)
            for sb in tl.range(0, tl.cdiv(k, 256), SB):
                x = _chunk_x(x_ptr + row * stride_xm, sb, x_offs, k, QTYPE)
                acc4 += x * _chunk_values(row_ptr, sb, r, l, _chunk_ok(n_ok, sb, r, k, QTYPE, SB), table_ptr, QTYPE,
                                          SB, BLOCK_N)
            acc = tl.sum(tl.reshape(acc4, (BLOCK_N, SB * 256)), axis=1)
        else:
            acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for sb in tl.range(0, tl.cdiv(k, 256), SB):
                x = _chunk_x(x_ptr + row * stride_xm, sb, x_offs, k, QTYPE)
                acc += _chunk_dot(row_ptr, sb, r, l, x, _chunk_ok(n_ok, sb, r, k, QTYPE, SB), table_ptr, QTYPE, SB,
                                  BLOCK_N)
        tl.store(out_ptr + row * stride_om + offs_n, acc, mask=offs_n < n)
