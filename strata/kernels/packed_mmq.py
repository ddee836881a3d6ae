"""A layer's routed experts over Q4_K / Q6_K (and Q8_0 / Q5_0) blocks for steps of several tokens: 8-bit
activations times the weights' integer quants on the tensor cores (int8 tl.dot), each used expert's blocks read
once per step.

packed_q8.moe_pairs_q8 runs one program per (token, k) pair: a step of 8-16 tokens at top-8 rereads each
expert once per pair that routes to it, and its dp4a work grows with the pairs. Here the pairs are grouped by
expert in blocks of BLOCK_M rows (moe_align, as the 16-bit fused_moe does); a program owns one block and
BLOCK_N rows of its expert and walks K one 32-value sub-block at a time: it unpacks the sub-block's quants
of its BLOCK_N rows to an int8 tile, multiplies the block's int8 activations with it (int32 [BM, BN]) and
scales the product once per (row of x, row of W) with dx and the sub-block's scale (llama.cpp's MMQ).

Same numbers as moe_pairs_q8 (hidden and SiLU(gate) * up rounded to 8 bits per 32, exact integer sums):
the two agree up to float32 summation order. Q6_K's scales cover 16 values, so a sub-block is two dots of
the tile with the other half zeroed.

packed_moe sends it the steps of Q4_K / Q6_K / Q8_0 / Q5_0 experts (Q8_0 / Q5_0: Qwen4-Exp Q4_K_M's 640-wide down
rows) between its Q8_PAIRS_PER_EXPERT (a prompt's step: PROMPT_Q8_PAIRS_PER_EXPERT) and MMQ_PAIRS_PER_EXPERT pairs an
expert.

linear_q8 is the same product for one dense weight: x [M, K] (rounded as above) times every row of W, one program
per (BLOCK_M rows of x, BLOCK_N rows of W), for steps of more rows than packed_q8's GEMV reads well (LM heads and
projections at 8-64 rows: decode of several streams, verification windows, short prompts).

Nsight Compute (session 38, 30B-A3B experts, 512 tokens, 32-row blocks) finds its programs at 255 registers with
local-memory spills and 12 % occupancy, the float scaling of each 32-value product (I2F, FMUL, FFMA) most of the
instructions and the int8 MMAs 2 %. Session 58 made the epilogue leaner: each sub-block's integer product is
multiplied by its integer scale before one conversion and one multiply-add with dx, and d / dmin apply once a
superblock (sm_90 SASS of the Q4_K gate/up 3,160 -> 2,912 instructions, float multiplies 472 -> 104); on an H100 the
30B-A3B's experts at 16-128 tokens took 8-10 % less (`mmq_prompt_ab.py`: 64 tokens 662.2 / 658.4 -> 602.0 / 604.1
us, 128 tokens 720.2 / 718.6 -> 660.7 / 656.9). Byte handling (PRMT, LOP3) is now most of its instructions;
unpacks_by_word (the default since session 59: 4-6 % less again) does it four bytes an instruction. The gate/up
programs round SiLU(gate) * up to 8 bits themselves (session 74, an H100: a 64-token prompt of issue 23's 30B-A3B
11.70 / 11.48 -> 11.35 / 11.12 ms, its rounding launches 1.78 -> 0.12 ms; bench/results/2026-12-07-h100-session74/).
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install
    triton = tl = None

from strata.kernels import packed_q8, q8_rounding
from strata.kernels.launch import pdl_options
from strata.kernels.moe_align import moe_align, moe_align_ref

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel
    from strata.kernels.q8_rounding import store_rounding
    from strata.kernels.q8_words import bytes_where, nibbles, q6k_quants

Q4_K, Q6_K = packed_q8.Q4_K, packed_q8.Q6_K
# its best tiling from 4 to 16 pairs an expert on the 30B-A3B's and Qwen3-Next's experts (session 38, H200,
# `GROUPED_ARMS=mmq prompt_moe_ab.py`: 16-row blocks waste the fewest padding rows, which cost as much as real ones;
# 64-row blocks spill and ran 2-10x slower)
CONFIG = dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=2)


# linear_q8's tiling, and the steps ops.packed_linear sends it: LM heads (at least packed_q8.WIDE_N rows) at more rows
# than packed_q8's GEMV takes, up to LINEAR_MAX_ROWS. Session 39 (`linear_mmq_ab.py`, H200, CUDA graphs, cold weights;
# the fastest of 6 tilings): the 30B-A3B's Q6_K head at 16 rows 346.7 us against 822.4 in packed_q8's GEMV and 461.9
# dequantized + GEMM, Qwen4-Exp's 815.3 against 1,520.1 / 1,111.4; at 32 rows dequantize + GEMM was as fast or faster
# (464.4 / 1,114.2 against 457.7 / 1,160.2 at 32-row blocks), and on narrower weights (4,096 x 2,048 and smaller) it
# won from 4 rows on (12.2 against 16.9 us for the q_proj): too few programs of 16-row blocks for their long K loops.
LINEAR_CONFIG = dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=2)
LINEAR_MAX_ROWS = 16


def unpacks_by_word() -> bool:
    """Whether the kernels unpack quant bytes four at a time in inline PTX (q8_words.nibbles, q6k_quants, bytes_where;
    sm_90 SASS of the Q4_K gate/up 2,912 -> 2,504 instructions, the Q6_K down's 72 bytes of stack gone): by default
    (STRATA_MMQ_WORD_UNPACK=0 keeps the byte-wise form); never in Triton's interpreter, which has no inline PTX.
    Session 59 (an H100, bench/results/2026-12-06-h100-session59/ call 3): its GPU tests pass both ways, and the
    30B-A3B's experts (tools/gpu_ab/mmq_prompt_ab.py, two alternated rounds) took 4-6 % less at 16-128 tokens (64
    tokens 603 / 604 -> 572 / 574 us, 128 tokens 658 / 659 -> 637 / 637)."""
    from strata.config import debug_value

    return debug_value("MMQ_WORD_UNPACK") != "0" and not packed_q8.interpreted()


def linear_takes(qtype: int, k: int, blocks: torch.Tensor, rows: int) -> bool:
    """Whether ops.packed_linear sends a step of `rows` rows through these [N, row bytes] blocks here."""
    return (packed_q8.LINEAR_MAX_ROWS < rows <= LINEAR_MAX_ROWS and blocks.shape[0] >= packed_q8.WIDE_N
            and supports(qtype, k, blocks))


# 32-value block types (Qwen4-Exp Q4_K_M's 640-wide down rows: llama.cpp's fallbacks Q8_0 and Q5_0), bytes a block
BLOCK32_BYTES = {packed_q8.Q8_0: 34, packed_q8.Q5_0: 22}


def supports(qtype: int, k: int, w: torch.Tensor) -> bool:
    """Q4_K / Q6_K rows of whole superblocks, Q8_0 / Q5_0 rows of whole 128-value runs (q8_rounding.quantize's
    unit); byte loads: any row start."""
    if qtype in BLOCK32_BYTES:
        return k % 128 == 0
    return qtype in (Q4_K, Q6_K) and k % 256 == 0


def moe_grouped_q8(hidden: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
                   topk_ids: torch.Tensor, topk_weights: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """hidden [T, D], w13 uint8 [E, 2I, row bytes], w2 uint8 [E, D, row bytes], topk_ids / topk_weights [T, K]
    -> float32 [T, K, D]: each pair's routing weight times its expert's output (zeros for negative ids)."""
    num_tokens, top_k = topk_ids.shape
    dim, inter = hidden.shape[1], w13.shape[1] // 2
    num_experts = w13.shape[0]
    assert hidden.stride(1) == 1 and w13.stride(2) == 1 and w2.stride(2) == 1 and w2.shape[1] == dim
    cfg = {**CONFIG, **(config or {})}
    block_m, block_n = cfg["BLOCK_M"], cfg["BLOCK_N"]
    skipped = topk_ids < 0
    ids = topk_ids.clamp(min=0).long()
    weights = topk_weights.float().masked_fill(skipped, 0).reshape(-1).contiguous()     # [P]
    align = moe_align if hidden.is_cuda else moe_align_ref
    sorted_ids, block_expert = align(ids, num_experts, block_m)                        # [B * BM], [B]
    num_blocks = block_expert.numel()
    hq, hdx, hsums = q8_rounding.quantize(hidden)                                         # [T, D] int8 ...
    # SiLU(gate) * up rounded to 8 bits by the gate/up programs themselves (their BLOCK_N columns are whole blocks
    # of 32): the rows of the blocks, those of no pair left unwritten (the down kernel masks them)
    assert block_n % 32 == 0 and inter % 32 == 0
    aq, adx, asums = q8_rounding.empty_rounding(num_blocks * block_m, inter, hidden.device)   # [B * BM, I] ...
    common = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
                  ASM=unpacks_by_word(), **pdl_options(hidden))
    _gate_up_kernel[(num_blocks, triton.cdiv(inter, block_n))](
        hq, hdx, hsums, w13, sorted_ids, block_expert, aq, adx, asums, inter, dim, top_k, ids.numel(),
        w13.stride(0), w13.stride(1), QTYPE=qtype13, **common)
    partials = torch.zeros(num_tokens, top_k, dim, dtype=torch.float32, device=hidden.device)  # [T, K, D]
    _down_kernel[(num_blocks, triton.cdiv(dim, block_n))](
        aq, adx, asums, w2, sorted_ids, block_expert, weights, partials, dim, inter, ids.numel(), w2.stride(0),
        w2.stride(1), QTYPE=qtype2, **common)
    return partials.masked_fill_(skipped.unsqueeze(2), 0.0)


def linear_q8(x: torch.Tensor, blocks: torch.Tensor, qtype: int, n: int, k: int, config: dict | None = None,
              quantized=None, out: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] @ blocks uint8 [N, row bytes] (rows of a type `supports` takes) transposed -> float32 [M, N], with x
    rounded to 8 bits per 32: packed_q8.packed_gemv_q8's contract (`quantized` = q8_rounding.quantize(x) when the
    caller has it; `out` [M, N] of any float dtype, unit column stride, takes the result in its dtype). config's
    SPLIT_K (default 1) splits K among that many programs a tile (float32 partials, then their sum): more
    programs for a narrow weight's long rows."""
    num_rows = x.shape[0]
    assert x.shape[1] == k and supports(qtype, k, blocks) and blocks.dtype == torch.uint8
    assert blocks.shape[0] == n and blocks.stride(1) == 1
    cfg = {**LINEAR_CONFIG, **(config or {})}
    q, dx, sums = quantized if quantized is not None else q8_rounding.quantize(x)
    if out is None:
        out = torch.empty(num_rows, n, dtype=torch.float32, device=x.device)
    assert out.shape == (num_rows, n) and out.stride(1) == 1
    split_k = cfg.get("SPLIT_K", 1)
    assert k % (split_k * (128 if qtype in BLOCK32_BYTES else 256)) == 0, "each split whole runs of the type's units"
    target = out if split_k == 1 else torch.empty(split_k, num_rows, n, dtype=torch.float32, device=x.device)
    _linear_kernel[(triton.cdiv(num_rows, cfg["BLOCK_M"]), triton.cdiv(n, cfg["BLOCK_N"]), split_k)](
        q, dx, sums, blocks, target, n, k, num_rows, blocks.stride(0), target.stride(-2),
        target.stride(0) if split_k > 1 else 0, QTYPE=qtype, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
        SPLIT_K=split_k, ASM=unpacks_by_word(), num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        **pdl_options(x))
    if split_k > 1 and out.dtype == torch.float32 and out.is_contiguous():  # the splits' partials, in a fixed order
        torch.sum(target, dim=0, out=out)
    elif split_k > 1:
        out.copy_(target.sum(dim=0))
    return out


if triton is not None:

    @triton.jit
    def _f16(ptr, mask):
        """The little-endian float16 at byte pointers `ptr`, as float32."""
        lo = tl.load(ptr, mask=mask, other=0).to(tl.uint16)
        hi = tl.load(ptr + 1, mask=mask, other=0).to(tl.uint16)
        return (lo | (hi << 8)).to(tl.float16, bitcast=True).to(tl.float32)

    @triton.jit
    def _q4k_scale_min(sb_ptr, s, ok):
        """Sub-block s's (0-7, constant or not) 6-bit scale and min of the Q4_K superblocks at byte pointers
        sb_ptr [BN] -> int32."""
        s4 = s % 4
        a = tl.load(sb_ptr + 4 + s4, mask=ok, other=0).to(tl.int32)
        b = tl.load(sb_ptr + 8 + s4, mask=ok, other=0).to(tl.int32)
        c = tl.load(sb_ptr + 12 + s4, mask=ok, other=0).to(tl.int32)
        sc = tl.where(s < 4, a & 63, (c & 15) | ((a >> 6) << 4))
        mn = tl.where(s < 4, b & 63, (c >> 4) | ((b >> 6) << 4))
        return sc, mn

    @triton.jit
    def _subblock_pair(acc, mins, x_base, dx_ptr, sums_ptr, x_rows, row_ok, sb, n_ok, i, j, p, k, QTYPE: tl.constexpr,
                       ASM: tl.constexpr):
        """(acc, mins) [BM, BN] plus sub-blocks 2 p and 2 p + 1 of superblock j, each one int8 dot with the rows'
        activations (Q6_K: two, for its 16-value scales) whose integer product is scaled by the sub-block's integer
        scale before one conversion to float and one multiply-add with dx: acc gathers sum(dx * sc * dot) and mins
        Q4_K's sum(dx * x_sum * min), both times the superblock's d / dmin after its last pair (_rows_times_weights).
        A Q4_K pair's quant bytes (low nibbles: sub-block 2 p, high: 2 p + 1) load once for both."""
        if QTYPE == 12:
            qbyte = tl.load(sb[:, None] + 16 + p * 32 + i[None, :], mask=n_ok[:, None], other=0)    # [BN, 32] uint8
        for half in tl.static_range(2):
            s = 2 * p + half
            x = tl.load(x_base + j * 256 + s * 32, mask=row_ok[:, None], other=0)         # [BM, 32] int8
            dx = tl.load(dx_ptr + x_rows.to(tl.int64) * (k // 32) + j * 8 + s, mask=row_ok, other=0.0)   # [BM]
            if QTYPE == 12:
                quants = nibbles(qbyte, half == 1, ASM)                                   # [BN, 32] int8
                dots = tl.dot(x, tl.trans(quants), out_dtype=tl.int32)                     # [BM, BN]
                sc, mn = _q4k_scale_min(sb, s, n_ok)
                acc += (dots * sc[None, :]).to(tl.float32) * dx[:, None]
                sums = sums_ptr + x_rows.to(tl.int64) * (k // 16) + j * 16 + 2 * s
                x_sum = tl.load(sums, mask=row_ok, other=0.0) + tl.load(sums + 1, mask=row_ok, other=0.0)
                mins += (dx * x_sum)[:, None] * mn.to(tl.float32)[None, :]
            else:
                # sub-block s = 4 h + c of half h: low bits in nibble c // 2 of ql[64 h + 32 (c % 2) + i], high bits
                # in bits 2 c of qh[32 h + i]
                low = tl.load(sb[:, None] + 64 * (s // 4) + 32 * (s % 2) + i[None, :], mask=n_ok[:, None], other=0)
                high = tl.load(sb[:, None] + 128 + 32 * (s // 4) + i[None, :], mask=n_ok[:, None], other=0)
                q = q6k_quants(low, high, s % 4, ASM)                                     # [BN, 32] int8
                scaled = tl.zeros(acc.shape, dtype=tl.int32)
                for g in tl.static_range(2):  # the 16-value groups: |dot| <= 16 * 127 * 32, their sum exact in int32
                    quants = bytes_where(q, (i // 16 == g)[None, :], ASM)                   # [BN, 32] int8
                    dots = tl.dot(x, tl.trans(quants), out_dtype=tl.int32)
                    scale = tl.load(sb + 192 + 2 * s + g, mask=n_ok, other=0).to(tl.int8, bitcast=True)
                    scaled += dots * scale.to(tl.int32)[None, :]
                acc += scaled.to(tl.float32) * dx[:, None]
        return acc, mins

    @triton.jit
    def _block32(acc, x_base, dx_ptr, x_rows, row_ok, w_rows, n_ok, i, b, k, QTYPE: tl.constexpr):
        """acc [BM, BN] plus 32-value block b of Q8_0 rows (f16 d, 32 int8) or Q5_0 rows (f16 d, 32 high bits,
        16 bytes of nibbles: weight i in nibble i // 16 of byte i % 16, minus 16): one int8 dot, scaled by dx * d."""
        x = tl.load(x_base + b * 32, mask=row_ok[:, None], other=0)                         # [BM, 32] int8
        dx = tl.load(dx_ptr + x_rows.to(tl.int64) * (k // 32) + b, mask=row_ok, other=0.0)   # [BM]
        if QTYPE == 8:
            block = w_rows + b * 34                                                           # [BN]
            quants = tl.load(block[:, None] + 2 + i[None, :], mask=n_ok[:, None], other=0).to(tl.int8, bitcast=True)
        else:
            block = w_rows + b * 22
            qh = tl.load(block[:, None] + 2 + i[None, :] // 8, mask=n_ok[:, None], other=0).to(tl.int32)
            low = tl.load(block[:, None] + 6 + i[None, :] % 16, mask=n_ok[:, None], other=0).to(tl.int32)
            q = ((low >> ((i[None, :] // 16) * 4)) & 15) | (((qh >> (i[None, :] % 8)) & 1) << 4)
            quants = (q - 16).to(tl.int8)                                                     # [BN, 32]
        dots = tl.dot(x, tl.trans(quants), out_dtype=tl.int32)                                 # [BM, BN]
        return acc + dots.to(tl.float32) * dx[:, None] * _f16(block, n_ok)[None, :]

    @triton.jit
    def _rows_times_weights(xq_ptr, dx_ptr, sums_ptr, x_rows, row_ok, w_rows, n_ok, k, first, end,
                            QTYPE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ASM: tl.constexpr):
        """x_rows [BM] (row indices into the int8 activations [., k], row_ok) times W's rows at byte pointers w_rows
        [BN] (n_ok) over values first..end of each row (whole units of the type) -> float32 [BM, BN]: a
        superblock's 8 sub-blocks two at a time (_subblock_pair), or 32-value blocks one at a time (_block32)."""
        i = tl.arange(0, 32)
        x_base = xq_ptr + x_rows.to(tl.int64)[:, None] * k + i[None, :]                   # [BM, 32]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if QTYPE == 8 or QTYPE == 6:  # 32-value blocks: d, then the quants
            for b in range(first // 32, end // 32):
                acc = _block32(acc, x_base, dx_ptr, x_rows, row_ok, w_rows, n_ok, i, b, k, QTYPE)
        for j in range(first // 256, end // 256 if QTYPE == 12 or QTYPE == 14 else 0):
            sb = w_rows + j * (144 if QTYPE == 12 else 210)                                # [BN]
            scaled = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            mins = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for p in tl.static_range(4):  # unrolled: 1.4-1.5x faster than a loop, whose cubin spills nothing
                scaled, mins = _subblock_pair(scaled, mins, x_base, dx_ptr, sums_ptr, x_rows, row_ok, sb, n_ok, i, j,
                                              p, k, QTYPE, ASM)
            if QTYPE == 12:
                acc += scaled * _f16(sb, n_ok)[None, :] - mins * _f16(sb + 2, n_ok)[None, :]
            else:
                acc += scaled * _f16(sb + 208, n_ok)[None, :]
        return acc

    @triton.jit
    def _gate_up_kernel(q_ptr, dx_ptr, sums_ptr, w13_ptr, sorted_ids_ptr, block_expert_ptr, aq_ptr, adx_ptr,
                        asums_ptr, inter, dim, top_k, num_pairs, stride_we, stride_wn, QTYPE: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, ASM: tl.constexpr, USE_PDL: tl.constexpr):
        """One program per (block of BLOCK_M pairs of one expert, BLOCK_N rows of gate and of up): SiLU(gate) *
        up of the block's rows in float32, rounded as q8_rounding.quantize rounds it, at the block's rows of the
        activations' (q, dx, sums)."""
        wait_for_previous_kernel(USE_PDL)
        pid_m, pid_n = tl.program_id(0), tl.program_id(1)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        if expert >= 0:
            pair = tl.load(sorted_ids_ptr + offs_m)
            row_ok = pair < num_pairs
            token = tl.where(row_ok, pair // top_k, 0)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            n_ok = offs_n < inter
            gate = w13_ptr + expert * stride_we + offs_n.to(tl.int64) * stride_wn                # [BN]
            g = _rows_times_weights(q_ptr, dx_ptr, sums_ptr, token, row_ok, gate, n_ok, dim, 0, dim, QTYPE, BLOCK_M,
                                    BLOCK_N, ASM)
            u = _rows_times_weights(q_ptr, dx_ptr, sums_ptr, token, row_ok, gate + inter * stride_wn, n_ok, dim, 0,
                                    dim, QTYPE, BLOCK_M, BLOCK_N, ASM)
            store_rounding(g * tl.sigmoid(g) * u, offs_m.to(tl.int64), pid_n * BLOCK_N, inter, row_ok, inter,
                           aq_ptr, adx_ptr, asums_ptr, BLOCK_M, BLOCK_N)

    @triton.jit
    def _down_kernel(q_ptr, dx_ptr, sums_ptr, w2_ptr, sorted_ids_ptr, block_expert_ptr, weights_ptr, out_ptr, dim,
                     inter, num_pairs, stride_we, stride_wn, QTYPE: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, ASM: tl.constexpr, USE_PDL: tl.constexpr):
        """One program per (block, BLOCK_N output columns): each pair's routing weight times its down
        projection, float32, at partials[pair]."""
        wait_for_previous_kernel(USE_PDL)
        pid_m, pid_n = tl.program_id(0), tl.program_id(1)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        if expert >= 0:
            pair = tl.load(sorted_ids_ptr + offs_m)
            row_ok = pair < num_pairs
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            n_ok = offs_n < dim
            rows = w2_ptr + expert * stride_we + offs_n.to(tl.int64) * stride_wn
            y = _rows_times_weights(q_ptr, dx_ptr, sums_ptr, offs_m, row_ok, rows, n_ok, inter, 0, inter, QTYPE,
                                    BLOCK_M, BLOCK_N, ASM)
            route = tl.load(weights_ptr + pair, mask=row_ok, other=0.0)
            tl.store(out_ptr + pair.to(tl.int64)[:, None] * dim + offs_n[None, :], y * route[:, None],
                     mask=row_ok[:, None] & n_ok[None, :])

    @triton.jit
    def _linear_kernel(q_ptr, dx_ptr, sums_ptr, w_ptr, out_ptr, n, k, num_rows, stride_wn, stride_om, stride_os,
                       QTYPE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr,
                       ASM: tl.constexpr, USE_PDL: tl.constexpr):
        """One program per (BLOCK_M rows of x, BLOCK_N rows of W, 1 / SPLIT_K of K): their products, at out's rows
        and columns (SPLIT_K > 1: float32 partials, out[split] apart by stride_os)."""
        wait_for_previous_kernel(USE_PDL)
        offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        split = tl.program_id(2)
        row_ok = offs_m < num_rows
        n_ok = offs_n < n
        rows = w_ptr + offs_n.to(tl.int64) * stride_wn                                     # [BN] byte pointers
        part = k // SPLIT_K
        y = _rows_times_weights(q_ptr, dx_ptr, sums_ptr, offs_m, row_ok, rows, n_ok, k, split * part,
                                split * part + part, QTYPE, BLOCK_M, BLOCK_N, ASM)
        tl.store(out_ptr + split * stride_os + offs_m.to(tl.int64)[:, None] * stride_om + offs_n[None, :],
                 y.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & n_ok[None, :])
