"""Few-row projections over Q4_K, Q5_K and Q6_K rows, decoded a 32-bit word at a time.

Same contract as packed_gemv.packed_gemv (y = x @ W.T, x [M <= 16, K], W as GGUF rows of superblocks, the
file's bytes), another decoder: packed_gemv gathers the block bytes one by one and spends ~20 instructions
a weight on loads, byte shuffles and conversions, which made it instruction-bound at ~1 TB/s on the H200
(the 248,320 x 2,560 Q6_K LM head of Qwen4-Exp: ~530-680 us for 521 MB). Here each load brings four
bytes, the quant fields of four weights are combined with word-wide masks and shifts (SIMD within a
register), and each byte becomes a float with one PRMT into the mantissa of 2^23 and one subtraction:
~4 instructions a weight. That LM head takes 250 us (2.1 TB/s). packed_gemv sends Q6_K here by default;
Q4_K / Q5_K only when asked (WORDS=True): the group sums were faster on most of their small shapes, where
this decoder's activation loads are shared by too few rows (bench/results/2026-12-02-h200-packed-words).

Word access needs rows of whole words (row_bytes % 4 == 0: an even number of Q6_K superblocks, any
Q4_K / Q5_K row). Q4_K (144 bytes) and Q5_K (176) superblocks start on words; Q6_K's (210) start on
every other one, so an odd superblock's words are funnelled from two aligned loads (the second one an L1
hit), and its f16 factor is read as bytes.

Layouts (packed_gemv's docstring and gguf-py's quants.py): Q4_K's quant byte 16 + 32 j + l holds weight
l of sub-block 2 j in its low nibble and of 2 j + 1 in its high one; Q5_K adds the fifth bit s of byte
16 + l for weight l of sub-block s (its quants start at 48); Q6_K's half h (128 weights) keeps low bits
in ql[64 h + l] (weights l, low nibble; l + 64, high) and ql[64 h + 32 + l] (l + 32, l + 96), high bits
in qh[128 + 32 h + l] (bit pairs for l, l + 32, l + 64, l + 96), int8 scales at 192 + 8 h (one per 16).
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install
    triton = tl = None

from strata.kernels.launch import pdl_options

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel
    from strata.kernels.packed_gemv import _f16_at, _q4k_scales


def _interpreted() -> bool:
    """Under TRITON_INTERPRET=1 (no inline PTX): the kernels take their plain-Triton byte decode."""
    return os.environ.get("TRITON_INTERPRET") == "1"


Q4_K, Q5_K, Q6_K = 12, 13, 14
SUPERBLOCK_BYTES = {Q4_K: 144, Q5_K: 176, Q6_K: 210}
MAX_ROWS = 16
# rows of W per program, superblocks side by side per K step (at most: the largest power of two dividing the
# row's superblocks is taken): the best of 12 tilings on the H200 for Q6_K (bench/results/2026-12-02-h200-packed-words):
# wide weights (the LM heads: 248,320 and 151,936 rows) want many one-warp programs, narrow ones a split of K
WIDE_CONFIG = dict(BLOCK_N=4, SUPERBLOCKS=1, num_warps=1, num_stages=3)
NARROW_CONFIG = dict(BLOCK_N=2, SUPERBLOCKS=4, num_warps=2, num_stages=3)
WIDE_ROWS = 32768


def default_config(n: int) -> dict:
    """The tiling for a weight of n rows."""
    return WIDE_CONFIG if n >= WIDE_ROWS else NARROW_CONFIG


def supports(qtype: int, k: int, blocks: torch.Tensor) -> bool:
    """Rows of whole superblocks of a word-decoded type, each row a whole number of aligned words."""
    if qtype not in SUPERBLOCK_BYTES or k % 256:
        return False
    row_bytes = k // 256 * SUPERBLOCK_BYTES[qtype]
    return row_bytes % 4 == 0 and blocks.data_ptr() % 4 == 0


def superblocks_per_step(configured: int, k: int) -> int:
    """The configured power of two, halved until it divides the row's K / 256 superblocks."""
    step = configured
    while (k // 256) % step:
        step //= 2
    return step


def packed_gemv_words(x: torch.Tensor, blocks: torch.Tensor, qtype: int, n: int, k: int,
                      config: dict | None = None) -> torch.Tensor:
    """x [M <= MAX_ROWS, K] @ blocks uint8 [N, row_bytes] (GGUF rows of `qtype`) transposed -> float32
    [M, N]. One program per (BLOCK_N rows of W, row of x); each K step takes SUPERBLOCKS superblocks of
    each row side by side (a split of K inside the program, summed at the end: more loads in flight for
    shapes of few rows)."""
    num_rows = x.shape[0]
    assert num_rows <= MAX_ROWS and x.stride(1) == 1 and x.shape[1] == k and supports(qtype, k, blocks)
    assert blocks.dtype == torch.uint8 and blocks.is_contiguous() and blocks.shape[0] == n
    assert blocks.shape[1] == k // 256 * SUPERBLOCK_BYTES[qtype], "row bytes do not match K for this type"
    cfg = {**default_config(n), **(config or {})}
    words = blocks.view(torch.int32)  # [N, row_bytes / 4]
    out = torch.empty(num_rows, n, dtype=torch.float32, device=x.device)
    _words_gemv_kernel[(triton.cdiv(n, cfg["BLOCK_N"]), num_rows)](
        x, words, blocks, out, n, k, x.stride(0), words.shape[1], out.stride(0),
        QTYPE=qtype, BLOCK_N=cfg["BLOCK_N"], SB=superblocks_per_step(cfg["SUPERBLOCKS"], k), ASM=not _interpreted(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **pdl_options(x))
    return out


if triton is not None:

    @triton.jit
    def _word_floats(w, offset: tl.constexpr, ASM: tl.constexpr):
        """The 4 bytes of uint32 words w as float32 values minus `offset`: each byte put in the mantissa of
        2^23 (one PRMT with ASM: result bytes = byte b of w, two zero bytes of 0x4B000000 and its 0x4B;
        a shift, mask and OR without) and 2^23 + offset subtracted."""
        if ASM:
            b0, b1, b2, b3 = tl.inline_asm_elementwise(
                "prmt.b32 $0, $4, 0x4B000000, 0x7540; prmt.b32 $1, $4, 0x4B000000, 0x7541;"
                "prmt.b32 $2, $4, 0x4B000000, 0x7542; prmt.b32 $3, $4, 0x4B000000, 0x7543;",
                "=r,=r,=r,=r,r", [w], dtype=(tl.uint32, tl.uint32, tl.uint32, tl.uint32), is_pure=True, pack=1)
        else:
            b0 = (w & 255) | 0x4B000000
            b1 = ((w >> 8) & 255) | 0x4B000000
            b2 = ((w >> 16) & 255) | 0x4B000000
            b3 = (w >> 24) | 0x4B000000
        return (b0.to(tl.float32, bitcast=True) - (8388608.0 + offset),
                b1.to(tl.float32, bitcast=True) - (8388608.0 + offset),
                b2.to(tl.float32, bitcast=True) - (8388608.0 + offset),
                b3.to(tl.float32, bitcast=True) - (8388608.0 + offset))

    @triton.jit
    def _dot_bytes(w, x_ptr, x_offs, offset: tl.constexpr, ASM: tl.constexpr):
        """Sum over the 4 bytes b of words w [SB, BN, G, T] of (byte - offset) * x[x_offs + b] (x_offs
        [SB, 1, G, T]) -> [SB, BN, G, T]."""
        f0, f1, f2, f3 = _word_floats(w, offset, ASM)
        acc = f0 * tl.load(x_ptr + x_offs).to(tl.float32)
        acc += f1 * tl.load(x_ptr + x_offs + 1).to(tl.float32)
        acc += f2 * tl.load(x_ptr + x_offs + 2).to(tl.float32)
        acc += f3 * tl.load(x_ptr + x_offs + 3).to(tl.float32)
        return acc

    @triton.jit
    def _x_sums(x_ptr, x_offs):
        """x[x_offs] + ... + x[x_offs + 3] as float32."""
        acc = tl.load(x_ptr + x_offs).to(tl.float32)
        for b in tl.static_range(1, 4):
            acc += tl.load(x_ptr + x_offs + b).to(tl.float32)
        return acc

    @triton.jit
    def _word_at(words_ptr, index, shift, ok):
        """uint32 words at word indices `index` of a row, or where shift is 16 the words two bytes further
        (funnelled from index and index + 1)."""
        lo = tl.load(words_ptr + index, mask=ok, other=0).to(tl.uint32, bitcast=True)
        hi = tl.load(words_ptr + index + 1, mask=ok & (shift != 0), other=0).to(tl.uint32, bitcast=True)
        return (lo >> shift) | ((hi << 1) << (31 - shift))

    @triton.jit
    def _q6k_superblocks(words_row, bytes_row, x_row, j, ok, ASM: tl.constexpr):
        """Superblocks j [SB, 1, 1, 1] of the rows at words_row / bytes_row [1, BN, 1, 1] (mask ok) dotted
        with their activations -> [SB, BN, 4, 4], still to be summed. Tiles are [SB, BN, G, T]: scale group
        G = 2 h + g of half h, word t = 4 g + T of the half's 32-byte runs (bytes l = 4 t .. 4 t + 3)."""
        start = j * 210
        shift = ((start % 4) * 8).to(tl.uint32)
        hg = tl.arange(0, 4)[None, None, :, None]
        h = hg // 2
        t = 4 * (hg % 2) + tl.arange(0, 4)[None, None, None, :]
        wb = start // 4
        ql_a = _word_at(words_row, wb + 16 * h + t, shift, ok)          # weights l (low), l + 64 (high nibbles)
        ql_b = _word_at(words_row, wb + 16 * h + 8 + t, shift, ok)      # l + 32, l + 96
        qh = _word_at(words_row, wb + 32 + 8 * h + t, shift, ok)        # bit pairs of l, l + 32, l + 64, l + 96
        x_offs = j * 256 + 128 * h + 4 * t                               # [SB, 1, 4, 4]
        scales = bytes_row + start + 192 + 8 * h + hg % 2                # [SB, BN, 4, 1]: + 2 per quarter
        low4 = 0x0F0F0F0F
        high2 = 0x30303030
        part = _dot_bytes((ql_a & low4) | ((qh << 4) & high2), x_row, x_offs, 32.0, ASM) \
            * tl.load(scales, mask=ok, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        part += _dot_bytes((ql_b & low4) | ((qh << 2) & high2), x_row, x_offs + 32, 32.0, ASM) \
            * tl.load(scales + 2, mask=ok, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        part += _dot_bytes(((ql_a >> 4) & low4) | (qh & high2), x_row, x_offs + 64, 32.0, ASM) \
            * tl.load(scales + 4, mask=ok, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        part += _dot_bytes(((ql_b >> 4) & low4) | ((qh >> 2) & high2), x_row, x_offs + 96, 32.0, ASM) \
            * tl.load(scales + 6, mask=ok, other=0).to(tl.int8, bitcast=True).to(tl.float32)
        return _f16_at(bytes_row + start + 208, ok) * part

    @triton.jit
    def _q4k_superblocks(words_row, bytes_row, x_row, j, ok, QTYPE: tl.constexpr, ASM: tl.constexpr):
        """Superblocks j [SB, 1, 1, 1] of Q4_K / Q5_K rows dotted with their activations -> [SB, BN, 4, 8],
        still to be summed. Tiles are [SB, BN, pair, t]: quant word t of sub-blocks 2 pair (low nibbles)
        and 2 pair + 1 (high)."""
        sbytes = 144 if QTYPE == 12 else 176
        wb = j * (sbytes // 4)
        pair = tl.arange(0, 4)[None, None, :, None]
        t = tl.arange(0, 8)[None, None, None, :]
        first = 4 if QTYPE == 12 else 12                                 # the quants' first word
        w = tl.load(words_row + wb + first + 8 * pair + t, mask=ok, other=0).to(tl.uint32, bitcast=True)
        low = w & 0x0F0F0F0F
        high = (w >> 4) & 0x0F0F0F0F
        if QTYPE == 13:
            fifth = tl.load(words_row + wb + 4 + t, mask=ok, other=0).to(tl.uint32, bitcast=True)
            low |= ((fifth >> (2 * pair)) & 0x01010101) << 4
            high |= ((fifth >> (2 * pair + 1)) & 0x01010101) << 4
        x_offs = j * 256 + 64 * pair + 4 * t                             # [SB, 1, 4, 8]
        base = bytes_row + j * sbytes                                    # [SB, BN, 1, 1]
        scale_low, min_low = _q4k_scales(base, 2 * pair, ok)             # [SB, BN, 4, 1]: d * sc, dmin * m
        scale_high, min_high = _q4k_scales(base, 2 * pair + 1, ok)
        return (scale_low * _dot_bytes(low, x_row, x_offs, 0.0, ASM)
                + scale_high * _dot_bytes(high, x_row, x_offs + 32, 0.0, ASM)
                - min_low * _x_sums(x_row, x_offs) - min_high * _x_sums(x_row, x_offs + 32))

    @triton.jit
    def _words_gemv_kernel(x_ptr, words_ptr, bytes_ptr, out_ptr, n, k, stride_xm, row_words, stride_om,
                           QTYPE: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr, USE_PDL: tl.constexpr,
                           ASM: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        row = tl.program_id(1)
        offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        ok = (offs_n < n)[None, :, None, None]                                                # [1, BN, 1, 1]
        words_row = words_ptr + offs_n.to(tl.int64)[None, :, None, None] * row_words
        bytes_row = bytes_ptr + offs_n.to(tl.int64)[None, :, None, None] * (row_words * 4)
        x_row = x_ptr + row * stride_xm
        s = tl.arange(0, SB)[:, None, None, None]
        # per-thread partial sums across the K loop, summed over threads once at the end
        if QTYPE == 14:
            acc6 = tl.zeros((SB, BLOCK_N, 4, 4), dtype=tl.float32)
            for j in tl.range(0, k // 256, SB):
                acc6 += _q6k_superblocks(words_row, bytes_row, x_row, j + s, ok, ASM)
            acc = tl.sum(tl.sum(tl.sum(acc6, axis=3), axis=2), axis=0)
        else:
            acc4 = tl.zeros((SB, BLOCK_N, 4, 8), dtype=tl.float32)
            for j in tl.range(0, k // 256, SB):
                acc4 += _q4k_superblocks(words_row, bytes_row, x_row, j + s, ok, QTYPE, ASM)
            acc = tl.sum(tl.sum(tl.sum(acc4, axis=3), axis=2), axis=0)
        tl.store(out_ptr + row * stride_om + offs_n, acc, mask=offs_n < n)
