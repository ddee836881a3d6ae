"""Projections and MoE experts over packed GGUF rows with 8-bit activations: integer dot products (dp4a).

llama.cpp's CUDA decode path (mul_mat_vec_q) quantizes the activations to 8 bits per block of 32 and
multiplies them with the weights' integer quants four at a time (one dp4a: four byte products summed into
an int32), scaling once per block. The float decoders (packed_gemv, packed_gemv_words) spend ~4-20
instructions a weight turning quants into floats; here a 32-bit word of Q4_K quants costs a mask, a shift
and two dp4a for its 8 weights, so the kernels stay bound by memory at the packed size.

What is computed, exactly: x is rounded per block of 32 values to int8 with one float32 scale (q8_rounding.quantize:
q = round(x * 127 / max|x|), dx = max|x| / 127), and y = W @ x_q8 where W is gguf's dequantized weight and
x_q8 = dx * q: the integer sums are exact, the scaling in float32. So the kernels equal packed_gemv_ref
on dequantize(x) up to float32 summation order; against unrounded x each output is off by ~0.1-0.5 % of
|W| @ |x| (the rounding of x, as in llama.cpp; tests/kernels/test_packed_q8.py states the bounds).

Types: Q4_K and Q6_K (Q4_K_M files' bulk), Q5_K (their Gated DeltaNet input projections, llama.cpp's attn_qkv
rule), Q2_K and Q3_K (Q2_K and Q3_K_S/M/L files' bulk), Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 (Q8_0 files, and
llama.cpp's fallbacks for rows 256 does not divide: Qwen4-Exp's 640-wide expert down rows), and the i-quants IQ2_XXS,
IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M (packed_iquants decodes their fields; code book times signs is int8,
so their sums are exact too). The K loop takes a "unit" a step: one superblock (256 values) of the K types and the
i-quants, four 32-value blocks (128) of the others.

Layouts (packed_gemv's docstring; all offsets in bytes from a row's start). Blocks of an even size may
start two bytes into a word: those words are funnelled from the upper half of one word and the next half
word (_word_at), so no byte outside the weight is read.
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
- The i-quants: packed_iquants' docstring and gguf_blocks (byte loads: any alignment); their code books come in
  as table_ptr (packed_iquants.decode_table; the other types get their own blocks there, never read).
"""

from __future__ import annotations

import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install
    triton = tl = None

from strata.kernels import packed_iquants
from strata.kernels.launch import pdl_options
from strata.kernels.q8_rounding import quantize

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel
    from strata.kernels.packed_iquants import signed_words

Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = 2, 3, 6, 7, 8, 10, 11, 12, 13, 14
# the i-quants this module reads (packed_iquants' values; every one >= 16, which is how _step tells them apart)
IQUANTS = (packed_iquants.IQ2_XXS, packed_iquants.IQ2_XS, packed_iquants.IQ2_S, packed_iquants.IQ3_XXS,
           packed_iquants.IQ3_S, packed_iquants.IQ1_S, packed_iquants.IQ1_M)
# bytes per block, and the K step of the loops (a "unit": one superblock, or four 32-value blocks)
BLOCK_BYTES = {Q4_0: 18, Q4_1: 20, Q5_0: 22, Q5_1: 24, Q8_0: 34, Q2_K: 84, Q3_K: 110, Q4_K: 144, Q5_K: 176, Q6_K: 210,
               **{q: packed_iquants.SUPERBLOCK_BYTES[q] for q in IQUANTS}}
UNIT = {Q2_K: 256, Q3_K: 256, Q4_K: 256, Q5_K: 256, Q6_K: 256, Q4_0: 128, Q4_1: 128, Q5_0: 128, Q5_1: 128, Q8_0: 128,
        **{q: 256 for q in IQUANTS}}
# types whose rows must start on whole words (every superblock on a word: 84, 144, 176 bytes); the others' rows
# may start two bytes into one (their odd blocks do anyway, read by _word_at)
WORD_ROWS = (Q2_K, Q4_K, Q5_K)
MAX_ROWS = 16
# ops.packed_linear sends steps of up to LINEAR_MAX_ROWS rows here for weights of at least WIDE_N rows (LM heads),
# of up to NARROW_MAX_ROWS for the others (linear_takes); beyond, dequantize + GEMM or packed_mmq.linear_q8. Session
# 39 (`linear_mmq_ab.py`, H200, CUDA graphs, cold weights): the 30B-A3B's q_proj / o_proj / v_proj (Q4_K, Q4_K,
# Q6_K) at 4 rows 11.8 / 9.8 / 5.6 us here against 12.2 / 14.6 / 7.6 dequantized, at 8 rows 16.1 / 26.7 / 7.9
# against 12.2 / 14.2 / 7.6; its Q6_K LM head at 8 rows 263.9 against 460.8, Qwen4-Exp's 549.2 against 1,108.8.
LINEAR_MAX_ROWS = 8
NARROW_MAX_ROWS = 4
WIDE_N = 32768
# pairs: rows of an expert per program, superblocks per K step, by the step's tokens. Several tokens: one warp,
# 16 rows, 2 superblocks, within 4 % of the fastest of 42 tilings for both launches at 8 and 16 tokens of the
# 30B-A3B experts (gate/up + down 84.0 / 153.5 us against 123.3 / 235.0 for the 8-row, 2-warp tiling; H200, CUDA
# graphs, cold weights: bench/results/2026-12-03-h200-session24/call3_pairs_sweep.*). Whole-model decode at 8 / 16
# streams 1,623 -> 1,803 / 2,146 -> 2,489 tok/s (call 4). (For one token this tiling timed 19.9 us against 25.3 alone
# but lost 2 % in the 30B-A3B's whole model across two machine starts; in one process it was even, below.)
PAIR_CONFIG = dict(BLOCK_N=16, SUPERBLOCKS=2, num_warps=1, num_stages=3)
# One token: each launch its own tiling. pairs_sweep (session 24, 30B-A3B experts, cold weights) timed gate/up
# 13.03 us and down 12.26 at the 8-row, 2-warp tiling, against 11.49 at 4 rows, 2 superblocks, one warp (gate/up)
# and 7.71 at 8 rows, 1 superblock, one warp (down). In the whole model (pairs_ab.py, one process, 3 alternated
# rounds, bench/results/2026-12-03-h200-session31/): the 30B-A3B at Q4_K_M 596.2 -> 620.4 tok/s, every round.
# Qwen4-Exp at Q4_K_M (640-wide Q8_0 / Q5_0 down rows, smaller units) keeps PAIR_CONFIG for both: the same A/B
# gave 1,207.5 -> 1,230.0 with these tilings (2 superblocks a step for down) but one round of three went the
# other way, and the bench's one-stream run of them in a later machine start gave 992.1 against call 1's 1,070.2.
ONE_TOKEN_GATE_UP = dict(BLOCK_N=4, SUPERBLOCKS=2, num_warps=1, num_stages=3)
ONE_TOKEN_DOWN = dict(BLOCK_N=8, SUPERBLOCKS=1, num_warps=1, num_stages=3)


def pair_configs(num_tokens: int, qtype2: int) -> tuple[dict, dict]:
    """The tilings of a pairs step's two launches (gate/up, down) for its token count and down rows' type."""
    if num_tokens > 1 or UNIT[qtype2] != 256:
        return PAIR_CONFIG, PAIR_CONFIG
    return ONE_TOKEN_GATE_UP, ONE_TOKEN_DOWN


def default_config(n: int, k: int, rows: int) -> dict:
    """The tiling (BLOCK_N rows of W per program, SUPERBLOCKS per K step, warps) for an [n, k] weight and a
    step of `rows` rows: the fastest of 10 tilings on the H200 in CUDA graphs with cold weights, for the
    30B-A3B and Qwen4-Exp shapes at Q4_K_M (bench/results/2026-12-02-h200-q8/), the LM heads of 30 tilings
    (2026-12-03-h200-session29/). One row: narrow weights with long rows split K (one row of W per program,
    8 superblocks a step), mid-sized ones take 2 rows a program and one warp, wide ones 8 rows and two warps,
    very wide ones (LM heads) 16 rows and two warps (one warp at 2-8 rows, session 30); more rows of x
    want more rows of W per program, fewer superblocks a step."""
    if rows == 1:
        if n <= 1024 or (k >= 4096 and n <= 4096):
            bn, sb, warps = 1, 8, 2
        elif 8192 <= n < 32768:
            bn, sb, warps = 8, 1, 2
        elif n >= 32768:  # LM heads: 16 rows, 2 warps (Q6_K: 199.9 us against 227.7 for 248,320 x 2,560,
            bn, sb, warps = 16, 2, 2  # 100.5 against 116.9 for 151,936 x 2,048; session 29's head_sweep)
        else:
            bn, sb, warps = 2, 2, 1
    elif n >= 32768 and rows <= 8:  # LM heads at 2-8 rows: 16 rows of W, one warp (Q6_K 248,320 x 2,560: 398.6
        bn, sb, warps = 16, 2 if rows <= 4 else 1, 1  # us against 635.2 at 4 rows, 568.8 against 853.8 at 8; session 30)
    elif rows == 2:
        bn, sb, warps = (16, 1, 4) if 8192 <= n < 32768 else (2, 2, 1)
    elif rows <= 4:
        bn, sb, warps = (4, 2, 2) if n >= 8192 else (2, 2, 1)
    else:
        bn, sb, warps = 4, 1, 1
    return dict(BLOCK_N=bn, SUPERBLOCKS=sb, num_warps=warps, num_stages=3)


def _interpreted() -> bool:
    """Under TRITON_INTERPRET=1 (no inline PTX) dp4a is four byte products in plain Triton (same sums)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def enabled() -> bool:
    """STRATA_NO_Q8_ACTIVATIONS=1 keeps every packed projection on the float decoders."""
    from strata.config import debug_flag

    return not debug_flag("NO_Q8_ACTIVATIONS")


def supports(qtype: int, k: int, w: torch.Tensor) -> bool:
    """Rows of whole units (module docstring) of a type read here, in a tensor whose start is word-aligned
    and whose rows start on whole words (Q2_K, Q4_K, Q5_K) or half words (the others: their words are funnelled,
    the i-quants' fields read by the byte)."""
    if qtype not in UNIT or k % UNIT[qtype] or w.data_ptr() % 4:
        return False
    align = 4 if qtype in WORD_ROWS else 2
    return all(s % align == 0 for s in w.stride()[:-1])


def row_bytes(qtype: int, k: int) -> int:
    per_block = 256 if UNIT[qtype] == 256 else 32
    return k // per_block * BLOCK_BYTES[qtype]


def units_per_step(configured: int, qtype: int, k: int) -> int:
    """The configured power of two, halved until it divides the row's units."""
    step = configured
    while (k // UNIT[qtype]) % step:
        step //= 2
    return step


def _word_tiles(qtype: int, integer_sums: bool) -> int:
    """The last dimension of a K step's partial sums: 1 where the integer sums per scale group come first (steps
    of several rows: fewer float operations a row; one row is faster without the reductions in the loop), else
    the words of a group: Q4_K's 8 of a sub-block pair, Q8_0's 8 of a block, Q2_K's, Q3_K's and Q6_K's 4 of a
    16-weight run, the 4-bit and 5-bit blocks' 4, the i-quants' 4 groups of 8 weights."""
    if integer_sums:
        return 1
    return 8 if qtype in (Q4_K, Q5_K, Q8_0) else 4


def linear_takes(rows: int, n: int) -> bool:
    """Whether ops.packed_linear sends a step of `rows` rows through an [n, K] weight here (by the measurements
    above LINEAR_MAX_ROWS)."""
    return rows <= (LINEAR_MAX_ROWS if n >= WIDE_N else NARROW_MAX_ROWS)


def rounds_in_norm(num_rows: int, dim: int) -> bool:
    """Whether a norm feeding packed weights should round its output for them (rms_norm's `quantize`): steps
    of up to MAX_ROWS rows (the pairs' tokens; the projections take fewer: linear_takes) of a width
    quantize takes, unless packed_q8 is off."""
    return num_rows <= MAX_ROWS and dim % 128 == 0 and enabled()


def packed_gemv_q8(x: torch.Tensor, blocks: torch.Tensor, qtype: int, n: int, k: int,
                   config: dict | None = None, quantized=None, out: torch.Tensor | None = None) -> torch.Tensor:
    """x [M <= MAX_ROWS, K] @ blocks uint8 [N, row_bytes] (GGUF rows of a type in UNIT) transposed -> float32
    [M, N], with x rounded to 8 bits per 32 (module docstring). One program per BLOCK_N rows of W for all M
    rows of x: each word of W is loaded and unpacked once and dotted with every row. `quantized` passes
    quantize(x) when the caller already has it (several weights of one input); `out` ([M, N], any float dtype,
    unit column stride: the columns of a wider output) takes the result in its dtype."""
    num_rows = x.shape[0]
    assert num_rows <= MAX_ROWS and x.shape[1] == k and supports(qtype, k, blocks) and blocks.dtype == torch.uint8
    assert blocks.shape[0] == n and blocks.shape[1] == row_bytes(qtype, k) and blocks.stride(1) == 1
    cfg = {**default_config(n, k, num_rows), **(config or {})}
    q, dx, sums = quantized if quantized is not None else quantize(x)
    if out is None:
        out = torch.empty(num_rows, n, dtype=torch.float32, device=x.device)
    assert out.shape == (num_rows, n) and out.stride(1) == 1
    _gemv_kernel[(triton.cdiv(n, cfg["BLOCK_N"]),)](
        q, dx, sums, blocks, packed_iquants.table_for(qtype, blocks), out, n, k, num_rows, blocks.stride(0),
        out.stride(0),
        QTYPE=qtype, BLOCK_N=cfg["BLOCK_N"], SB=units_per_step(cfg["SUPERBLOCKS"], qtype, k), UNIT=UNIT[qtype],
        ROWS=triton.next_power_of_2(num_rows), WT=_word_tiles(qtype, num_rows > 1), ASM=not _interpreted(),
        num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"], **pdl_options(x))
    return out


def moe_pairs_q8(hidden: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
                 topk_ids: torch.Tensor, topk_weights: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """packed_moe's pairs contract -> float32 [T, K, D] (each pair's weighted expert output, zeros for a
    negative id), with hidden and SiLU(gate) * up rounded to 8 bits per 32: one program per (pair, BLOCK_N
    rows of its expert) in each of the two projections, the activations quantized once per launch."""
    num_tokens, top_k = topk_ids.shape
    dim, inter = hidden.shape[1], w13.shape[1] // 2
    assert w13.stride(2) == 1 and w2.stride(2) == 1 and w2.shape[1] == dim
    cfg13, cfg2 = ({**c, **(config or {})} for c in pair_configs(num_tokens, qtype2))
    ids = topk_ids.reshape(-1).contiguous()                                           # [P]
    weights = topk_weights.reshape(-1).contiguous()                                   # [P]
    hq, hdx, hsums = quantize(hidden)                                                 # [T, D], [T, D/32], [T, D/16]
    act = torch.empty(ids.numel(), inter, dtype=torch.float32, device=hidden.device)  # [P, I]
    _gate_up_kernel[(ids.numel(), triton.cdiv(inter, cfg13["BLOCK_N"]))](
        hq, hdx, hsums, w13, packed_iquants.table_for(qtype13, w13), ids, act, inter, dim, top_k, w13.stride(0),
        w13.stride(1),
        QTYPE=qtype13, SB=units_per_step(cfg13["SUPERBLOCKS"], qtype13, dim), UNIT=UNIT[qtype13],
        WT=_word_tiles(qtype13, False), **_launch_options(cfg13, hidden))
    aq, adx, asums = quantize(act)                                                    # [P, I] ...
    partials = torch.empty(num_tokens, top_k, dim, dtype=torch.float32, device=hidden.device)  # [T, K, D]
    _down_kernel[(ids.numel(), triton.cdiv(dim, cfg2["BLOCK_N"]))](
        aq, adx, asums, w2, packed_iquants.table_for(qtype2, w2), ids, weights, partials, dim, inter, w2.stride(0),
        w2.stride(1),
        QTYPE=qtype2, SB=units_per_step(cfg2["SUPERBLOCKS"], qtype2, inter), UNIT=UNIT[qtype2],
        WT=_word_tiles(qtype2, False), **_launch_options(cfg2, hidden))
    return partials


def _launch_options(cfg: dict, x: torch.Tensor) -> dict:
    """A pairs launch's tiling keywords (rows of an expert a program, warps, stages) and PDL."""
    return dict(BLOCK_N=cfg["BLOCK_N"], ASM=not _interpreted(), num_warps=cfg["num_warps"],
                num_stages=cfg["num_stages"], **pdl_options(x))


if triton is not None:

    @triton.jit
    def _dp4a(a, b, SIGNED: tl.constexpr, ASM: tl.constexpr):
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
    def _word_at(w_words, w_halves, start, words, ok, NEXT_WORD: tl.constexpr):
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
    def _f16_half(w_halves, start, ok):
        """The float16 at even byte offsets `start`, as float32."""
        return tl.load(w_halves + (start >> 1), mask=ok, other=0).to(tl.float16, bitcast=True).to(tl.float32)

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
        [R, 1, 1, 1, 1], mask rok) -> (dot parts [R, SB, BN, 4, 1], min parts [R, SB, BN, 4, 1]): each output
        is sum(parts) - sum(min parts). Tiles are [R, SB, BN, pair, t]; each weight word is loaded and
        unpacked once for the R rows."""
        block_words: tl.constexpr = 44 if FIVE else 36
        quant_words: tl.constexpr = 12 if FIVE else 4
        wb = base // 4 + j * block_words                                                 # [1, SB, BN, 1, 1]
        pair = tl.arange(0, 4)[None, None, None, :, None]
        t = tl.arange(0, 8)[None, None, None, None, :]
        w = tl.load(w_words + wb + quant_words + 8 * pair + t, mask=ok, other=0).to(tl.uint32, bitcast=True)
        low_quants = w & 0x0F0F0F0F
        high_quants = (w >> 4) & 0x0F0F0F0F
        if FIVE:  # bit 2 pair (low nibbles' sub-block) and 2 pair + 1 (high nibbles') of each byte, to bit 4
            qh = tl.load(w_words + wb + 4 + t, mask=ok, other=0).to(tl.uint32, bitcast=True)   # [1, SB, BN, 1, 8]
            shift = (2 * pair).to(tl.uint32)
            low_quants |= ((qh >> shift) & 0x01010101) << 4
            high_quants |= ((qh >> (shift + 1)) & 0x01010101) << 4
        x_at = xq + j * 64 + 16 * pair + t                                               # [R, SB, 1, 4, 8]
        low = _dp4a(low_quants.to(tl.int32, bitcast=True), tl.load(x_at, mask=rok, other=0), False, ASM)
        high = _dp4a(high_quants.to(tl.int32, bitcast=True), tl.load(x_at + 8, mask=rok, other=0), False, ASM)
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
        if ISUM:  # integer sums per scale group first: one float scaling per group, not per word
            low = tl.sum(low, axis=4, keep_dims=True)                                    # [R, SB, BN, 4, 1]
            high = tl.sum(high, axis=4, keep_dims=True)
        parts = low.to(tl.float32) * (d * sc_lo * dx_lo) + high.to(tl.float32) * (d * sc_hi * dx_hi)
        mins = dmin * (mn_lo * dx_lo * s_lo + mn_hi * dx_hi * s_hi)
        return parts, mins

    @triton.jit
    def _q6k_step(w_words, w_halves, base, xq, dx, sums, j, ok, rok, ISUM: tl.constexpr, ASM: tl.constexpr):
        """Superblocks j [1, SB, 1, 1, 1] of Q6_K rows at byte offsets base [1, 1, BN, 1, 1] (even) against R
        rows of 8-bit activations -> (dot parts [R, SB, BN, 4, 1], offset parts [R, SB, BN, 4, 1]): each
        output is sum(parts) - sum(offset parts). Tiles are [R, SB, BN, G, T]: G = 2 h + g of half h, word
        t = 4 g + T of the half's 32-byte runs (weights 16 g .. 16 g + 15 of each run: one int8 scale each)."""
        start = base + j * 210
        hg = tl.arange(0, 4)[None, None, None, :, None]
        h = hg // 2
        t = 4 * (hg % 2) + tl.arange(0, 4)[None, None, None, None, :]
        ql_a = _word_at(w_words, w_halves, start, 16 * h + t, ok, True)  # weights 4 t.. (low), 4 t + 64..
        ql_b = _word_at(w_words, w_halves, start, 16 * h + 8 + t, ok, True)  # 4 t + 32.., 4 t + 96..
        qh = _word_at(w_words, w_halves, start, 32 + 8 * h + t, ok, True)
        low4 = 0x0F0F0F0F
        high2 = 0x30303030
        x_at = xq + j * 64 + 32 * h + t                               # [R, SB, 1, 4, 4]: weight 128 h + 4 t
        scales = w_halves.to(tl.pointer_type(tl.int8)) + start + 192 + 8 * h + hg % 2  # [1, SB, BN, 4, 1]: + 2 a run
        dx_at = dx + j * 8 + 4 * h                                    # [R, SB, 1, 4, 1]: + 1 per run
        sums_at = sums + j * 16 + 8 * h + hg % 2                      # + 2 per run
        parts = tl.zeros((xq.shape[0], ql_a.shape[1], ql_a.shape[2], 4, 1 if ISUM else 4), dtype=tl.float32)
        offsets = tl.zeros((xq.shape[0], ql_a.shape[1], ql_a.shape[2], 4, 1), dtype=tl.float32)
        for c in tl.static_range(4):
            if c == 0:
                quants = (ql_a & low4) | ((qh << 4) & high2)
            elif c == 1:
                quants = (ql_b & low4) | ((qh << 2) & high2)
            elif c == 2:
                quants = ((ql_a >> 4) & low4) | (qh & high2)
            else:
                quants = ((ql_b >> 4) & low4) | ((qh >> 2) & high2)
            factor = tl.load(scales + 2 * c, mask=ok, other=0).to(tl.float32) * tl.load(dx_at + c, mask=rok, other=0.0)
            dot = _dp4a(quants, tl.load(x_at + 8 * c, mask=rok, other=0), False, ASM)
            if ISUM:
                dot = tl.sum(dot, axis=4, keep_dims=True)
            parts += dot.to(tl.float32) * factor
            offsets += 32.0 * factor * tl.load(sums_at + 2 * c, mask=rok, other=0.0)
        d = _f16_half(w_halves, start + 208, ok)                      # [1, SB, BN, 1, 1]
        return parts * d, offsets * d

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
            dot = _dp4a(quants, tl.load(xq + j * 64 + 32 * h + 8 * s + 4 * u + t, mask=rok, other=0), False, ASM)
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
        low = _word_at(w_words, w_halves, start, 8 + 4 * c + t, ok, True).to(tl.uint32, bitcast=True)
        high = _word_at(w_words, w_halves, start, 4 * u + t, ok, True).to(tl.uint32, bitcast=True)
        # the 12 scale bytes as three words, shifted once to this lane's byte u and nibble h (a 6-bit scale is bits
        # 16 (S % 2) .. + 3 of word 24 + S // 2 and bits 16 (S % 2) + 2 (S // 2) .. + 1 of word 26, from there)
        lane = (8 * u + 4 * h).to(tl.uint32)                                             # [1, 1, 1, 4, 1]
        # scale words [1, SB, BN, 4, 1] (the lane's shift broadcasts them)
        lows_a = _word_at(w_words, w_halves, start, 24, ok, True).to(tl.uint32, bitcast=True) >> lane
        lows_b = _word_at(w_words, w_halves, start, 25, ok, True).to(tl.uint32, bitcast=True) >> lane
        highs = _word_at(w_words, w_halves, start, 26, ok, True).to(tl.uint32, bitcast=True) >> lane
        parts = tl.zeros((xq.shape[0], start.shape[1], start.shape[2], 4, 1 if ISUM else 4), dtype=tl.float32)
        offsets = tl.zeros((xq.shape[0], start.shape[1], start.shape[2], 4, 1), dtype=tl.float32)
        for s in tl.static_range(4):
            quants = ((low >> 2 * s) & 0x03030303) | (((high >> (s + 4 * h).to(tl.uint32)) & 0x01010101) << 2)
            dot = _dp4a(quants.to(tl.int32, bitcast=True),
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
        d = _f16_half(w_halves, start + 108, ok)                                         # [1, SB, BN, 1, 1]
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
        d = _f16_half(w_halves, start, ok)
        x_block = xq + j * 32 + g * 8                                                    # [R, SB, 1, 4, 1]
        dxg = tl.load(dx + j * 4 + g, mask=rok, other=0.0)                               # [R, SB, 1, 4, 1]
        if QTYPE == 8:
            t = tl.arange(0, 8)[None, None, None, None, :]
            quants = _word_at(w_words, w_halves, start + 2, t, ok, False)              # [1, SB, BN, 4, 8]
            dot = _dp4a(quants, tl.load(x_block + t, mask=rok, other=0), True, ASM)
            if ISUM:
                dot = tl.sum(dot, axis=4, keep_dims=True)
            parts = dot.to(tl.float32) * (d * dxg)
            offsets = tl.zeros((xq.shape[0], start.shape[1], start.shape[2], 4, 1), dtype=tl.float32)
        else:
            t = tl.arange(0, 4)[None, None, None, None, :]
            first: tl.constexpr = 2 if QTYPE == 2 else (4 if QTYPE == 3 else (6 if QTYPE == 6 else 8))
            words = _word_at(w_words, w_halves, start + first, t, ok, False).to(tl.uint32, bitcast=True)
            low = words & 0x0F0F0F0F
            high = (words >> 4) & 0x0F0F0F0F
            if QTYPE == 6 or QTYPE == 7:
                qh = _word_at(w_words, w_halves, start + first - 4, 0, ok, False).to(tl.uint32, bitcast=True)
                low |= _spread_bits((qh >> (4 * t)) & 15)
                high |= _spread_bits((qh >> (16 + 4 * t)) & 15)
            dot = _dp4a(low.to(tl.int32, bitcast=True), tl.load(x_block + t, mask=rok, other=0), False, ASM) \
                + _dp4a(high.to(tl.int32, bitcast=True), tl.load(x_block + 4 + t, mask=rok, other=0), False, ASM)
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
                offsets = -_f16_half(w_halves, start + 2, ok) * dxg * block_sum           # + m * sum(x)
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
            w0, scale, delta = signed_words(at, g, 0, table_ptr, ok, QTYPE)              # [1, SB, BN, 4, 4]
            w1, scale, delta = signed_words(at, g, 1, table_ptr, ok, QTYPE)
            x0 = tl.load(xq + j * 64 + 2 * g, mask=rok, other=0)                         # [R, SB, 1, 4, 4]
            x1 = tl.load(xq + j * 64 + 2 * g + 1, mask=rok, other=0)
            value = (_dp4a(w0, x0, True, ASM) + _dp4a(w1, x1, True, ASM)).to(tl.float32)
            if QTYPE == 19 or QTYPE == 29:
                ones = tl.full(w0.shape, 0x01010101, tl.int32)
                value += delta * (_dp4a(ones, x0, False, ASM) + _dp4a(ones, x1, False, ASM)).to(tl.float32)
            part = value * (scale * tl.load(dx + j * 8 + 4 * half + c, mask=rok, other=0.0))
            if ISUM:
                part = tl.sum(part, axis=4, keep_dims=True)
            parts += part
        return parts

    @triton.jit
    def _step(w_ptr, table_ptr, base, xq, dx, sums, j, ok, rok, QTYPE: tl.constexpr, ISUM: tl.constexpr,
              ASM: tl.constexpr):
        """One K step of the loop the kernels run (the loop stays in the kernels: the interpreter turns
        scalars handed to a helper into tensors, which tl.range refuses). table_ptr: the i-quants' code book."""
        w_words = w_ptr.to(tl.pointer_type(tl.int32))
        w_halves = w_ptr.to(tl.pointer_type(tl.int16))
        if QTYPE >= 16:  # the i-quants (IQUANTS)
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
    def _total(acc, offsets):
        """[R, SB, BN, G, T] parts and [R, SB, BN, G, 1] offsets -> the outputs [R, BN]."""
        return tl.sum(tl.sum(tl.sum(acc, axis=4), axis=3), axis=1) \
            - tl.sum(tl.sum(tl.sum(offsets, axis=4), axis=3), axis=1)

    @triton.jit
    def _gemv_kernel(q_ptr, dx_ptr, sums_ptr, w_ptr, table_ptr, out_ptr, n, k, num_rows, stride_wn, stride_om,
                     QTYPE: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr, ROWS: tl.constexpr,
                     UNIT: tl.constexpr, WT: tl.constexpr, USE_PDL: tl.constexpr, ASM: tl.constexpr):
        """One program per BLOCK_N rows of W, for the ROWS (>= num_rows) rows of x at once."""
        wait_for_previous_kernel(USE_PDL)
        offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        # rows past the ends read the last ones (their sums are not stored): loads without masks, whose
        # predicates and zero fills cost as much as the unpacking of a word
        ok = tl.full((1, 1, BLOCK_N, 1, 1), 1, tl.int1)                                  # [1, 1, BN, 1, 1]
        base = tl.minimum(offs_n, n - 1).to(tl.int64)[None, None, :, None, None] * stride_wn
        m = tl.arange(0, ROWS)
        rows = tl.minimum(m, num_rows - 1)[:, None, None, None, None].to(tl.int64)       # [R, 1, 1, 1, 1]
        rok = tl.full((ROWS, 1, 1, 1, 1), 1, tl.int1)
        xq = q_ptr.to(tl.pointer_type(tl.int32)) + rows * (k // 4)
        dx = dx_ptr + rows * (k // 32)
        sums = sums_ptr + rows * (k // 16)
        s = tl.arange(0, SB)[None, :, None, None, None]
        acc = tl.zeros((ROWS, SB, BLOCK_N, 4, WT), dtype=tl.float32)
        offsets = tl.zeros((ROWS, SB, BLOCK_N, 4, 1), dtype=tl.float32)
        for j in tl.range(0, k // UNIT, SB):
            parts, off = _step(w_ptr, table_ptr, base, xq, dx, sums, j + s, ok, rok, QTYPE, ROWS > 1, ASM)
            acc += parts
            offsets += off
        tl.store(out_ptr + m[:, None] * stride_om + offs_n[None, :], _total(acc, offsets).to(out_ptr.dtype.element_ty),
                 mask=(m < num_rows)[:, None] & (offs_n < n)[None, :])

    @triton.jit
    def _gate_up_kernel(q_ptr, dx_ptr, sums_ptr, w13_ptr, table_ptr, ids_ptr, act_ptr, inter, dim, top_k, stride_we,
                        stride_wn, QTYPE: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr, UNIT: tl.constexpr,
                        WT: tl.constexpr, USE_PDL: tl.constexpr, ASM: tl.constexpr):
        """One program per (pair, BLOCK_N rows of gate and of up): SiLU(gate) * up in float32."""
        wait_for_previous_kernel(USE_PDL)
        pair = tl.program_id(0)
        expert = tl.load(ids_ptr + pair).to(tl.int64)
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        act = tl.zeros((BLOCK_N,), dtype=tl.float32)
        if expert >= 0:
            token = tl.zeros((1, 1, 1, 1, 1), dtype=tl.int64) + pair // top_k             # [1, 1, 1, 1, 1]
            rok = tl.full((1, 1, 1, 1, 1), 1, tl.int1)
            ok = tl.full((1, 1, BLOCK_N, 1, 1), 1, tl.int1)  # (rows past the end read the last: _gemv_kernel)
            rows = tl.minimum(offs_n, inter - 1).to(tl.int64)[None, None, :, None, None]
            gate = expert * stride_we + rows * stride_wn
            up = gate + inter * stride_wn
            xq = q_ptr.to(tl.pointer_type(tl.int32)) + token * (dim // 4)
            dx = dx_ptr + token * (dim // 32)
            sums = sums_ptr + token * (dim // 16)
            s = tl.arange(0, SB)[None, :, None, None, None]
            acc_g = tl.zeros((1, SB, BLOCK_N, 4, WT), dtype=tl.float32)
            acc_u = tl.zeros((1, SB, BLOCK_N, 4, WT), dtype=tl.float32)
            off_g = tl.zeros((1, SB, BLOCK_N, 4, 1), dtype=tl.float32)
            off_u = tl.zeros((1, SB, BLOCK_N, 4, 1), dtype=tl.float32)
            for j in tl.range(0, dim // UNIT, SB):
                parts, off = _step(w13_ptr, table_ptr, gate, xq, dx, sums, j + s, ok, rok, QTYPE, False, ASM)
                acc_g += parts
                off_g += off
                parts, off = _step(w13_ptr, table_ptr, up, xq, dx, sums, j + s, ok, rok, QTYPE, False, ASM)
                acc_u += parts
                off_u += off
            g = tl.sum(_total(acc_g, off_g), axis=0)
            u = tl.sum(_total(acc_u, off_u), axis=0)
            act = g * tl.sigmoid(g) * u
        tl.store(act_ptr + pair.to(tl.int64) * inter + offs_n, act, mask=offs_n < inter)

    @triton.jit
    def _down_kernel(q_ptr, dx_ptr, sums_ptr, w2_ptr, table_ptr, ids_ptr, weights_ptr, out_ptr, dim, inter, stride_we,
                     stride_wn, QTYPE: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr, UNIT: tl.constexpr,
                     WT: tl.constexpr, USE_PDL: tl.constexpr, ASM: tl.constexpr):
        """One program per (pair, BLOCK_N output columns): the pair's routing weight times its expert's down
        projection, in float32."""
        wait_for_previous_kernel(USE_PDL)
        pair = tl.program_id(0)
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        expert = tl.load(ids_ptr + pair).to(tl.int64)
        y = tl.zeros((BLOCK_N,), dtype=tl.float32)
        if expert >= 0:
            p = tl.zeros((1, 1, 1, 1, 1), dtype=tl.int64) + pair                          # [1, 1, 1, 1, 1]
            rok = tl.full((1, 1, 1, 1, 1), 1, tl.int1)
            ok = tl.full((1, 1, BLOCK_N, 1, 1), 1, tl.int1)  # (rows past the end read the last: _gemv_kernel)
            rows = expert * stride_we + tl.minimum(offs_n, dim - 1).to(tl.int64)[None, None, :, None, None] * stride_wn
            xq = q_ptr.to(tl.pointer_type(tl.int32)) + p * (inter // 4)
            dx = dx_ptr + p * (inter // 32)
            sums = sums_ptr + p * (inter // 16)
            s = tl.arange(0, SB)[None, :, None, None, None]
            acc = tl.zeros((1, SB, BLOCK_N, 4, WT), dtype=tl.float32)
            offsets = tl.zeros((1, SB, BLOCK_N, 4, 1), dtype=tl.float32)
            for j in tl.range(0, inter // UNIT, SB):
                parts, off = _step(w2_ptr, table_ptr, rows, xq, dx, sums, j + s, ok, rok, QTYPE, False, ASM)
                acc += parts
                offsets += off
            y = tl.sum(_total(acc, offsets), axis=0) * tl.load(weights_ptr + pair).to(tl.float32)
        tl.store(out_ptr + pair.to(tl.int64) * dim + offs_n, y, mask=offs_n < dim)
