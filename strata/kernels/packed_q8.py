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
so their sums are exact too), IQ4_NL, IQ4_XS and MXFP4 (their 16 levels are int8: q8_iq4). The K loop takes a "unit"
a step: one superblock (256 values) of the K types, the i-quants and IQ4_XS, four 32-value blocks (128) of the
others.

The blocks' layouts and the K steps over them: q8_steps.py.
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
    from strata.kernels.q8_steps import k_step, sum_parts

Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS = 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 20, 23
MXFP4 = 39
# the i-quants this module reads (packed_iquants' values; every one >= 16, which is how q8_steps.k_step tells them
# apart)
IQUANTS = (packed_iquants.IQ2_XXS, packed_iquants.IQ2_XS, packed_iquants.IQ2_S, packed_iquants.IQ3_XXS,
           packed_iquants.IQ3_S, packed_iquants.IQ1_S, packed_iquants.IQ1_M)
# bytes per block, and the K step of the loops (a "unit": one superblock, or four 32-value blocks)
BLOCK_BYTES = {Q4_0: 18, Q4_1: 20, Q5_0: 22, Q5_1: 24, Q8_0: 34, Q2_K: 84, Q3_K: 110, Q4_K: 144, Q5_K: 176, Q6_K: 210,
               IQ4_NL: 18, IQ4_XS: 136, MXFP4: 17, **{q: packed_iquants.SUPERBLOCK_BYTES[q] for q in IQUANTS}}
UNIT = {Q2_K: 256, Q3_K: 256, Q4_K: 256, Q5_K: 256, Q6_K: 256, Q4_0: 128, Q4_1: 128, Q5_0: 128, Q5_1: 128, Q8_0: 128,
        IQ4_NL: 128, IQ4_XS: 256, MXFP4: 128, **{q: 256 for q in IQUANTS}}
# types whose rows must start on whole words (every superblock on a word: 84, 136, 144, 176 bytes); the others' rows
# may start two bytes into one (their odd blocks do anyway, read by q8_words.word_at)
WORD_ROWS = (Q2_K, Q4_K, Q5_K, IQ4_XS)
MAX_ROWS = 16
# ops.packed_linear sends steps of up to LINEAR_MAX_ROWS rows here (linear_takes); beyond, dequantize + GEMM, or
# packed_mmq.linear_q8 for weights of at least WIDE_N rows (LM heads). Session
# 39 (`linear_mmq_ab.py`, H200, CUDA graphs, cold weights): the 30B-A3B's q_proj / o_proj / v_proj (Q4_K, Q4_K,
# Q6_K) at 4 rows 11.8 / 9.8 / 5.6 us here against 12.2 / 14.6 / 7.6 dequantized, at 8 rows 16.1 / 26.7 / 7.9
# against 12.2 / 14.2 / 7.6; its Q6_K LM head at 8 rows 263.9 against 460.8, Qwen4-Exp's 549.2 against 1,108.8.
# Session 50 (`gemv_rows_sweep.py`, an H100, the same conditions) timed 24 tilings at 8 and 16 rows: at 8 rows, 4 rows
# of W a program, 2 superblocks a step and 2 warps beat dequantize + GEMM on all four (q / o / v / k_proj 11.1 / 13.5 /
# 7.5 / 5.8 us against 13.1 / 15.5 / 8.4 / 7.8; the old 8-row tiling took 16.5 / 27.0 / 11.5 / 13.4); at 16 rows
# dequantize + GEMM still wins (13.0 / 15.6 / 8.4 against the best tilings' 17.8 / 21.5 / 8.6).
LINEAR_MAX_ROWS = 8
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
# Session 51 (an H100, pairs_sweep with 1-2 rows of W a program and up to 8 superblocks a step): gate/up at one row of
# W and 8 superblocks (a whole 2,048-value row in flight) 9.14 us against 11.70; down at 2 superblocks 8.01 against
# 8.06. Issue 23's c1 in one machine start, two alternated rounds: 638.6 / 641.3 -> 667.9 / 668.5 tok/s.
# Session 52 (an H100, pairs_sweep over q8_steps.k_step's ISUM, each launch's fastest): one token gate/up at 4 rows
# of W and integer group sums 8.17 us against 9.09, down with its words in a loop 7.17 against 8.03; 8 + 64 tokens
# gate/up (8, 4) at ISUM 1 318.9 against 344.5, down (16, 2) at ISUM 2 281.0 against 285.5. Issue 23 in one machine
# start, two alternated rounds: c1 671.5 / 671.7 -> 676.7 / 675.5, c8 1,904.7 / 1,903.1 -> 1,994.9 / 1,992.9, c16
# 2,581.2 / 2,581.5 -> 2,768.0 / 2,765.4 tok/s, TTFT p50 16 -> 14 ms. The pairs' GPU tests at these defaults then
# failed for several tokens of (IQ1_S, IQ1_M) (28 % of the largest output, at 4 and 48 tokens) and (Q6_K, Q4_K) at
# 48 tokens (1.2e-3 against the 1e-3 bound) and passed everywhere else (60 of 63): the several-token tilings serve
# only Q4_K / Q5_K gate/up with K-quant down rows (the K_M files' experts, whose tests pass). Session 53
# (pairs_isum_diag.py, an H100): IQ1's error is the down launch at 16 rows of W with integer group sums on IQ1_M rows
# (0.23-0.28 of the largest output; ISUM 0 and the one-token 8 rows pass; the interpreter passes), Q6_K gate/up's
# 1.2e-3 the gate/up tiling (8, 4) at ISUM 1, within one activation's 8-bit rounding step of the old test's bound.
ONE_TOKEN_GATE_UP = dict(BLOCK_N=4, SUPERBLOCKS=8, num_warps=1, num_stages=3, ISUM=1)
ONE_TOKEN_DOWN = dict(BLOCK_N=8, SUPERBLOCKS=2, num_warps=1, num_stages=3, ISUM=2)
PAIRS_GATE_UP = dict(BLOCK_N=8, SUPERBLOCKS=4, num_warps=1, num_stages=3, ISUM=1)  # 2+ tokens
PAIRS_DOWN = dict(BLOCK_N=16, SUPERBLOCKS=2, num_warps=1, num_stages=3, ISUM=2)
# One token's pairs read in place from pinned host memory (the offload's zero-copy experts, over PCIe): session 50's
# one-token tilings without integer group sums. Session 54 (an H100 host, issue 23's offload command at 25 %, two
# alternated rounds): session 52's tilings above cost 103.0 / 92.7 -> 89.1 / 81.9 tok/s (ad90c54 against the commit
# before it), and HEAD with these tilings gave 101.6 / 91.6 against HEAD's 86.2 / 80.6.
HOST_ONE_TOKEN_GATE_UP = dict(BLOCK_N=4, SUPERBLOCKS=2, num_warps=1, num_stages=3)
HOST_ONE_TOKEN_DOWN = dict(BLOCK_N=8, SUPERBLOCKS=1, num_warps=1, num_stages=3)


def pair_configs(num_tokens: int, qtype2: int, qtype13: int, in_host: bool = False) -> tuple[dict, dict]:
    """The tilings of a pairs step's two launches (gate/up, down) for its token count and the experts' types;
    in_host: the experts lie in pinned host memory, read in place over PCIe."""
    if UNIT[qtype2] != 256:  # Qwen4-Exp's 640-wide down rows: not measured at session 52's tilings
        return PAIR_CONFIG, PAIR_CONFIG
    if num_tokens == 1 and in_host:
        return HOST_ONE_TOKEN_GATE_UP, HOST_ONE_TOKEN_DOWN
    if num_tokens == 1:
        return ONE_TOKEN_GATE_UP, ONE_TOKEN_DOWN
    if in_host:  # several tokens read over PCIe: the tiling they had before session 52 too (not measured there)
        return PAIR_CONFIG, PAIR_CONFIG
    if qtype13 in (Q4_K, Q5_K) and qtype2 in (Q4_K, Q5_K, Q6_K):  # K_M files' experts
        return PAIRS_GATE_UP, PAIRS_DOWN
    return PAIR_CONFIG, PAIR_CONFIG


def default_config(n: int, k: int, rows: int) -> dict:
    """The tiling (BLOCK_N rows of W per program, SUPERBLOCKS per K step, warps) for an [n, k] weight and a
    step of `rows` rows, timed in CUDA graphs with cold weights. Session 22 took the fastest of 10 tilings on the
    H200 for the 30B-A3B and Qwen4-Exp shapes at Q4_K_M (bench/results/2026-12-02-h200-q8/), session 29/30 the LM
    heads' of 30 (2026-12-03-h200-session29/: 16 rows of W, two warps at one row, one at 2-8). Session 57's
    sweep on an H100 (27 tilings of 1-4 rows of W and 2-8 superblocks a step over the 30B-A3B's attention
    projections; 2026-12-06-h100-session57/) replaced the 1-, 3-4- and 5-8-row tilings below 8,192 rows of W:
    one warp at one row, and fewer rows of W with more superblocks a step as the rows of x grow. 9-16 rows:
    session 50's sweep (an H100: 8 rows of W, 2 superblocks, 2 warps)."""
    if rows == 1:
        if n <= 1024:  # k_proj + v_proj 4.50 us against 4.92 with session 22's (1, 8, 2)
            bn, sb, warps = 1, 8, 1
        elif k >= 4096 and n <= 4096:  # o_proj 4.43 against 5.27 with (1, 8, 2)
            bn, sb, warps = 1, 4, 1
        elif 8192 <= n < 32768:
            bn, sb, warps = 8, 1, 2
        elif n >= 32768:  # LM heads: 16 rows, 2 warps (Q6_K: 199.9 us against 227.7 for 248,320 x 2,560,
            bn, sb, warps = 16, 2, 2  # 100.5 against 116.9 for 151,936 x 2,048; session 29's head_sweep)
        else:  # q_proj 4.41 against 4.77 with (2, 2, 1)
            bn, sb, warps = 2, 4, 1
    elif n >= 32768 and rows <= 8:  # LM heads at 2-8 rows: 16 rows of W, one warp (Q6_K 248,320 x 2,560: 398.6
        bn, sb, warps = 16, 2 if rows <= 4 else 1, 1  # us against 635.2 at 4 rows, 568.8 against 853.8 at 8; session 30)
    elif rows == 2:
        bn, sb, warps = (16, 1, 4) if 8192 <= n < 32768 else (2, 2, 1)
    elif rows <= 4 and n >= 8192:
        bn, sb, warps = 4, 2, 2
    elif rows <= 4:  # session 57's 4-row sweep (H100): k_proj + v_proj 6.19 us against 11.43, q + o 15.21 / 21.77
        bn, sb, warps = (2, 8, 2) if n <= 1024 else (4, 4, 1)
    elif rows <= 8:  # session 57: k_proj + v_proj 7.92 us against 13.25 with (4, 2, 2), q + o 23.33 / 24.53
        # (Q6_K and Q3_K spill registers here on sm_90, so the joined q/k/v spills with a Q6_K v; 4 superblocks a step
        # spill none but lost on an H100, session 61: joined q/k/v at 8 rows 20.07 against 18.16 us, Q6_K 4,096 x
        # 2,048 20.21 against 16.59, issue 23's c8 2,058 / 2,078 against 2,091 / 2,100 tok/s; joined_spill_ab.py)
        bn, sb, warps = (2, 8, 2) if n <= 1024 else (4, 8, 2)
    else:
        bn, sb, warps = 8, 2, 2
    return dict(BLOCK_N=bn, SUPERBLOCKS=sb, num_warps=warps, num_stages=3)


def interpreted() -> bool:
    """Under TRITON_INTERPRET=1 (no inline PTX) dp4a is four byte products in plain Triton (same sums)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def enabled() -> bool:
    """STRATA_NO_Q8_ACTIVATIONS=1 keeps every packed projection on the float decoders."""
    from strata.config import debug_flag

    return not debug_flag("NO_Q8_ACTIVATIONS")


def _host_tilings() -> bool:
    """STRATA_NO_HOST_PAIR_TILINGS=1 (an A/B switch) gives experts read in host memory the device's tilings."""
    from strata.config import debug_flag

    return not debug_flag("NO_HOST_PAIR_TILINGS")


def supports(qtype: int, k: int, w: torch.Tensor) -> bool:
    """Rows of whole units (module docstring) of a type read here, in a tensor whose start is word-aligned
    and whose rows start on whole words (WORD_ROWS) or half words (the others: their words are funnelled,
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


def word_tiles(qtype: int, integer_sums: bool) -> int:
    """The last dimension of a K step's partial sums: 1 where the integer sums per scale group come first (steps
    of several rows: fewer float operations a row; one row is faster without the reductions in the loop), else
    the words of a group: Q4_K's 8 of a sub-block pair, Q8_0's 8 of a block, Q2_K's, Q3_K's and Q6_K's 4 of a
    16-weight run, the 4-bit and 5-bit blocks' 4, the i-quants' 4 groups of 8 weights."""
    if integer_sums:
        return 1
    return 8 if qtype in (Q4_K, Q5_K, Q8_0) else 4


def linear_takes(rows: int) -> bool:
    """Whether ops.packed_linear sends a step of `rows` rows here (by the measurements above LINEAR_MAX_ROWS)."""
    return rows <= LINEAR_MAX_ROWS


def gemv_takes(rows: int, qtype: int, blocks: torch.Tensor, k: int) -> bool:
    """Whether packed_gemv_q8 takes a step of `rows` rows of this weight segment (blocks [N, row_bytes] of rows of
    k values): few enough rows, a type and layout it reads, and packed_q8 on."""
    return linear_takes(rows) and enabled() and supports(qtype, k, blocks) and blocks.stride(-1) == 1


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
    isum = cfg.get("ISUM", int(num_rows > 1))  # how a K step sums (q8_steps.k_step): integer sums for several rows
    _gemv_kernel[(triton.cdiv(n, cfg["BLOCK_N"]),)](
        q, dx, sums, blocks, packed_iquants.table_for(qtype, blocks), out, n, k, num_rows, blocks.stride(0),
        out.stride(0),
        QTYPE=qtype, BLOCK_N=cfg["BLOCK_N"], SB=units_per_step(cfg["SUPERBLOCKS"], qtype, k), UNIT=UNIT[qtype],
        ROWS=triton.next_power_of_2(num_rows), WT=word_tiles(qtype, isum > 0), ISUM=isum, ASM=not interpreted(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **pdl_options(x))
    return out


def moe_pairs_q8(hidden: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
                 topk_ids: torch.Tensor, topk_weights: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """packed_moe's pairs contract -> float32 [T, K, D] (each pair's weighted expert output, zeros for a
    negative id), with hidden and SiLU(gate) * up rounded to 8 bits per 32: one program per (pair, BLOCK_N
    rows of its expert) in each of the two projections, the activations quantized once per launch."""
    num_tokens, top_k = topk_ids.shape
    dim, inter = hidden.shape[1], w13.shape[1] // 2
    assert w13.stride(2) == 1 and w2.stride(2) == 1 and w2.shape[1] == dim
    in_host = w13.device.type == "cpu" and hidden.is_cuda and _host_tilings()  # zero-copy experts
    cfg13, cfg2 = ({**c, **(config or {})} for c in pair_configs(num_tokens, qtype2, qtype13, in_host))
    ids = topk_ids.reshape(-1).contiguous()                                           # [P]
    weights = topk_weights.reshape(-1).contiguous()                                   # [P]
    act = torch.empty(ids.numel(), inter, dtype=torch.float32, device=hidden.device)  # [P, I]
    gate_up_pairs(quantize(hidden), w13, qtype13, ids, top_k, act, cfg13)
    partials = torch.empty(num_tokens, top_k, dim, dtype=torch.float32, device=hidden.device)  # [T, K, D]
    down_pairs(quantize(act), w2, qtype2, ids, weights, partials, cfg2)
    return partials


def gate_up_pairs(hidden_q, w13: torch.Tensor, qtype13: int, ids: torch.Tensor, top_k: int, act: torch.Tensor,
                  cfg: dict) -> None:
    """moe_pairs_q8's first launch: act [P, I] float32 = SiLU(gate) * up of each pair's expert on its token's
    quantize(hidden) rows (hidden_q), at the tiling cfg (pair_configs' keys, ISUM optional)."""
    hq, hdx, hsums = hidden_q                                                         # [T, D], [T, D/32], [T, D/16]
    dim, inter = hq.shape[1], w13.shape[1] // 2
    _gate_up_kernel[(ids.numel(), triton.cdiv(inter, cfg["BLOCK_N"]))](
        hq, hdx, hsums, w13, packed_iquants.table_for(qtype13, w13), ids, act, inter, dim, top_k, w13.stride(0),
        w13.stride(1), **_launch_options(cfg, qtype13, dim, hq))


def down_pairs(act_q, w2: torch.Tensor, qtype2: int, ids: torch.Tensor, weights: torch.Tensor,
               partials: torch.Tensor, cfg: dict) -> None:
    """moe_pairs_q8's second launch: partials [T, K, D] float32 = each pair's routing weight times its expert's down
    projection of quantize(act) (act_q), at the tiling cfg."""
    aq, adx, asums = act_q                                                            # [P, I] ...
    dim, inter = w2.shape[1], aq.shape[1]
    _down_kernel[(ids.numel(), triton.cdiv(dim, cfg["BLOCK_N"]))](
        aq, adx, asums, w2, packed_iquants.table_for(qtype2, w2), ids, weights, partials, dim, inter, w2.stride(0),
        w2.stride(1), **_launch_options(cfg, qtype2, inter, aq))


def _launch_options(cfg: dict, qtype: int, k: int, x: torch.Tensor) -> dict:
    """A pairs launch's constexprs for rows of `qtype` of k values: its tiling (rows of an expert a program,
    superblocks a step, warps, stages), how a K step sums (ISUM, q8_steps.k_step; 0 unless cfg says) and PDL."""
    isum = cfg.get("ISUM", 0)
    return dict(QTYPE=qtype, BLOCK_N=cfg["BLOCK_N"], SB=units_per_step(cfg["SUPERBLOCKS"], qtype, k),
                UNIT=UNIT[qtype], WT=word_tiles(qtype, isum > 0), ISUM=isum, ASM=not interpreted(),
                num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **pdl_options(x))


if triton is not None:

    @triton.jit
    def _gemv_kernel(q_ptr, dx_ptr, sums_ptr, w_ptr, table_ptr, out_ptr, n, k, num_rows, stride_wn, stride_om,
                     QTYPE: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr, ROWS: tl.constexpr,
                     UNIT: tl.constexpr, WT: tl.constexpr, ISUM: tl.constexpr, USE_PDL: tl.constexpr,
                     ASM: tl.constexpr):
        """One program per BLOCK_N rows of W, for the ROWS (>= num_rows) rows of x at once."""
        wait_for_previous_kernel(USE_PDL)
        gemv_tile(q_ptr, dx_ptr, sums_ptr, w_ptr, table_ptr, out_ptr, tl.program_id(0), 0, n, k, num_rows, stride_wn,
                  stride_om, QTYPE, BLOCK_N, SB, ROWS, UNIT, WT, ISUM, ASM)

    @triton.jit
    def gemv_tile(q_ptr, dx_ptr, sums_ptr, w_ptr, table_ptr, out_ptr, program, first_col, n, k, num_rows, stride_wn,
                  stride_om, QTYPE: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr, ROWS: tl.constexpr,
                  UNIT: tl.constexpr, WT: tl.constexpr, ISUM: tl.constexpr, ASM: tl.constexpr):
        """Rows program * BLOCK_N.. of W [n, k] for every row of x, written to out's columns from first_col plus
        those rows (packed_q8_joined: a second segment's columns follow the first's)."""
        offs_n = program * BLOCK_N + tl.arange(0, BLOCK_N)
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
            parts, off = k_step(w_ptr, table_ptr, base, xq, dx, sums, j + s, ok, rok, QTYPE, ISUM, ASM)
            acc += parts
            offsets += off
        y = sum_parts(acc, offsets).to(out_ptr.dtype.element_ty)
        tl.store(out_ptr + m[:, None] * stride_om + first_col + offs_n[None, :], y,
                 mask=(m < num_rows)[:, None] & (offs_n < n)[None, :])

    @triton.jit
    def _gate_up_kernel(q_ptr, dx_ptr, sums_ptr, w13_ptr, table_ptr, ids_ptr, act_ptr, inter, dim, top_k, stride_we,
                        stride_wn, QTYPE: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr, UNIT: tl.constexpr,
                        WT: tl.constexpr, ISUM: tl.constexpr, USE_PDL: tl.constexpr, ASM: tl.constexpr):
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
                parts, off = k_step(w13_ptr, table_ptr, gate, xq, dx, sums, j + s, ok, rok, QTYPE, ISUM, ASM)
                acc_g += parts
                off_g += off
                parts, off = k_step(w13_ptr, table_ptr, up, xq, dx, sums, j + s, ok, rok, QTYPE, ISUM, ASM)
                acc_u += parts
                off_u += off
            g = tl.sum(sum_parts(acc_g, off_g), axis=0)
            u = tl.sum(sum_parts(acc_u, off_u), axis=0)
            act = g * tl.sigmoid(g) * u
        tl.store(act_ptr + pair.to(tl.int64) * inter + offs_n, act, mask=offs_n < inter)

    @triton.jit
    def _down_kernel(q_ptr, dx_ptr, sums_ptr, w2_ptr, table_ptr, ids_ptr, weights_ptr, out_ptr, dim, inter, stride_we,
                     stride_wn, QTYPE: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr, UNIT: tl.constexpr,
                     WT: tl.constexpr, ISUM: tl.constexpr, USE_PDL: tl.constexpr, ASM: tl.constexpr):
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
                parts, off = k_step(w2_ptr, table_ptr, rows, xq, dx, sums, j + s, ok, rok, QTYPE, ISUM, ASM)
                acc += parts
                offsets += off
            y = tl.sum(sum_parts(acc, offsets), axis=0) * tl.load(weights_ptr + pair).to(tl.float32)
        tl.store(out_ptr + pair.to(tl.int64) * dim + offs_n, y, mask=offs_n < dim)
