"""MoE experts over packed GGUF rows with 8-bit activations, the pairs grouped by expert: each program owns BLOCK_M
pairs of one expert (moe_align's layout) and BLOCK_N of its rows, so a step reads each used expert's rows once per
block of its pairs, where packed_q8.moe_pairs_q8 reads them once per pair.

Why: packed_q8's pairs kernels are bound by the bytes they read, and they reread an expert for each pair that
routes to it: at 8 tokens of the 30B-A3B (64 pairs over ~52 distinct experts of 128) ~20 % of the reads are
rereads; a 64-token prompt's 512 pairs read each of the 128 experts ~4 times (~550 us a layer on an H100, 84 % of
the prompt step's kernels: session 48). Each weight word here is unpacked once for the BLOCK_M pairs
(q8_steps.k_step's rows), then dotted with each pair's 8-bit activations.

A step routed in one launch (routing.route_and_align, decode-sized steps of device-resident experts) has its rows
laid out there at this module's block (grouped_block_m), so no moe_align launch of its own.

The same numbers as moe_pairs_q8 up to float32 summation order (the integer sums of a scale group come first
here, as packed_q8's several-row GEMV does): hidden rounded per 32 values, SiLU(gate) * up in float32 rounded again
for down, each pair's weighted output in float32 [T, K, D], zeros for a negative id.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install
    triton = tl = None

from strata.kernels import packed_iquants
from strata.kernels.launch import pdl_options
from strata.kernels.moe_align import moe_align
from strata.kernels.packed_q8 import UNIT, interpreted, word_tiles, units_per_step
from strata.kernels.q8_rounding import quantize

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel
    from strata.kernels.q8_steps import k_step, sum_parts

# rows of an expert a program, K units a step, warps; the pairs of a program by grouped_block_m (not yet measured on
# a GPU: tools/gpu_ab's grouped_pairs_sweep.py times the choices)
GROUPED_CONFIG = dict(BLOCK_N=8, SUPERBLOCKS=1, num_warps=2, num_stages=3)


def grouped_block_m(num_pairs: int, num_experts: int) -> int:
    """Pairs of an expert a program: about as many as an expert has on average (at least 2), at most 8. A block's
    padding rows cost arithmetic, not reads."""
    per_expert = num_pairs / num_experts
    return 2 if per_expert <= 1 else 4 if per_expert <= 4 else 8


def moe_grouped_pairs_q8(hidden: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
                         topk_ids: torch.Tensor, topk_weights: torch.Tensor, config: dict | None = None,
                         layout: tuple[torch.Tensor, torch.Tensor, int] | None = None) -> torch.Tensor:
    """moe_pairs_q8's contract (hidden [T, D], experts w13 [E, 2I, row bytes] and w2 [E, D, row bytes] packed,
    topk_ids / topk_weights [T, K]) -> float32 [T, K, D], by expert: moe_align lays the pairs out in blocks of
    BLOCK_M pairs of one expert (a negative id computes expert 0 with weight 0). `layout`: (sorted_ids,
    block_expert, BLOCK_M) of these ids already laid out (routing.route_and_align's, no negative ids): no
    moe_align launch."""
    num_tokens, top_k = topk_ids.shape
    dim, inter = hidden.shape[1], w13.shape[1] // 2
    assert w13.stride(2) == 1 and w2.stride(2) == 1 and w2.shape[1] == dim and hidden.stride(1) == 1
    cfg = {**GROUPED_CONFIG, **(config or {})}
    skipped = topk_ids < 0
    if layout is None:
        block_m = cfg.get("BLOCK_M") or grouped_block_m(topk_ids.numel(), w13.shape[0])
        sorted_ids, block_expert = moe_align(topk_ids.clamp(min=0), w13.shape[0], block_m)  # [blocks * M], [blocks]
    else:
        sorted_ids, block_expert, block_m = layout
    block_n = cfg["BLOCK_N"]
    weights = topk_weights.masked_fill(skipped, 0).reshape(-1).contiguous()           # [P]
    num_pairs, num_blocks = topk_ids.numel(), block_expert.numel()
    hq, hdx, hsums = quantize(hidden)                                                 # [T, D], [T, D/32], [T, D/16]
    act = torch.empty(num_pairs, inter, dtype=torch.float32, device=hidden.device)   # [P, I]
    several = block_m > 1  # integer sums per scale group first (packed_q8.word_tiles)
    options = dict(BLOCK_M=block_m, BLOCK_N=block_n, ASM=not interpreted(), num_warps=cfg["num_warps"],
                   num_stages=cfg["num_stages"], **pdl_options(hidden))
    _gate_up_grouped_kernel[(num_blocks, triton.cdiv(inter, block_n))](
        hq, hdx, hsums, w13, packed_iquants.table_for(qtype13, w13), sorted_ids, block_expert, act, inter, dim,
        top_k, num_pairs, w13.stride(0), w13.stride(1), QTYPE=qtype13,
        SB=units_per_step(cfg["SUPERBLOCKS"], qtype13, dim), UNIT=UNIT[qtype13], WT=word_tiles(qtype13, several),
        **options)
    aq, adx, asums = quantize(act)                                                    # [P, I] ...
    partials = torch.empty(num_tokens, top_k, dim, dtype=torch.float32, device=hidden.device)  # [T, K, D]
    _down_grouped_kernel[(num_blocks, triton.cdiv(dim, block_n))](
        aq, adx, asums, w2, packed_iquants.table_for(qtype2, w2), sorted_ids, block_expert, weights, partials, dim,
        inter, num_pairs, w2.stride(0), w2.stride(1), QTYPE=qtype2,
        SB=units_per_step(cfg["SUPERBLOCKS"], qtype2, inter), UNIT=UNIT[qtype2], WT=word_tiles(qtype2, several),
        **options)
    return partials


if triton is not None:

    @triton.jit
    def _block_pairs(sorted_ids_ptr, block, num_pairs, BLOCK_M: tl.constexpr):
        """The block's pairs [M] (int64; padding rows read pair 0, whose results are not stored) and which are real."""
        pair = tl.load(sorted_ids_ptr + block * BLOCK_M + tl.arange(0, BLOCK_M))
        real = pair < num_pairs
        return tl.where(real, pair, 0).to(tl.int64), real

    @triton.jit
    def _gate_up_grouped_kernel(q_ptr, dx_ptr, sums_ptr, w13_ptr, table_ptr, sorted_ids_ptr, block_expert_ptr,
                                act_ptr, inter, dim, top_k, num_pairs, stride_we, stride_wn, QTYPE: tl.constexpr,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr, UNIT: tl.constexpr,
                                WT: tl.constexpr, USE_PDL: tl.constexpr, ASM: tl.constexpr):
        """One program per (block of BLOCK_M pairs of an expert, BLOCK_N rows of gate and of up): SiLU(gate) * up
        of each pair's token row, float32, into the pair's row of act."""
        wait_for_previous_kernel(USE_PDL)
        block = tl.program_id(0)
        expert = tl.load(block_expert_ptr + block).to(tl.int64)
        if expert >= 0:  # (-1: a block the layout did not use)
            pair, real = _block_pairs(sorted_ids_ptr, block, num_pairs, BLOCK_M)
            offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
            token = (pair // top_k)[:, None, None, None, None]                           # [M, 1, 1, 1, 1]
            rok = tl.full((BLOCK_M, 1, 1, 1, 1), 1, tl.int1)  # (padding rows read pair 0's token: no masks)
            ok = tl.full((1, 1, BLOCK_N, 1, 1), 1, tl.int1)   # (rows past the end read the last)
            rows = tl.minimum(offs_n, inter - 1).to(tl.int64)[None, None, :, None, None]
            gate = expert * stride_we + rows * stride_wn
            up = gate + inter * stride_wn
            xq = q_ptr.to(tl.pointer_type(tl.int32)) + token * (dim // 4)
            dx = dx_ptr + token * (dim // 32)
            sums = sums_ptr + token * (dim // 16)
            s = tl.arange(0, SB)[None, :, None, None, None]
            acc_g = tl.zeros((BLOCK_M, SB, BLOCK_N, 4, WT), dtype=tl.float32)
            acc_u = tl.zeros((BLOCK_M, SB, BLOCK_N, 4, WT), dtype=tl.float32)
            off_g = tl.zeros((BLOCK_M, SB, BLOCK_N, 4, 1), dtype=tl.float32)
            off_u = tl.zeros((BLOCK_M, SB, BLOCK_N, 4, 1), dtype=tl.float32)
            for j in tl.range(0, dim // UNIT, SB):
                parts, off = k_step(w13_ptr, table_ptr, gate, xq, dx, sums, j + s, ok, rok, QTYPE, BLOCK_M > 1, ASM)
                acc_g += parts
                off_g += off
                parts, off = k_step(w13_ptr, table_ptr, up, xq, dx, sums, j + s, ok, rok, QTYPE, BLOCK_M > 1, ASM)
                acc_u += parts
                off_u += off
            g = sum_parts(acc_g, off_g)                                                     # [M, BN]
            u = sum_parts(acc_u, off_u)
            tl.store(act_ptr + pair[:, None] * inter + offs_n[None, :], g * tl.sigmoid(g) * u,
                     mask=real[:, None] & (offs_n < inter)[None, :])

    @triton.jit
    def _down_grouped_kernel(q_ptr, dx_ptr, sums_ptr, w2_ptr, table_ptr, sorted_ids_ptr, block_expert_ptr,
                             weights_ptr, out_ptr, dim, inter, num_pairs, stride_we, stride_wn, QTYPE: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr, UNIT: tl.constexpr,
                             WT: tl.constexpr, USE_PDL: tl.constexpr, ASM: tl.constexpr):
        """One program per (block of BLOCK_M pairs of an expert, BLOCK_N output columns): each pair's routing weight
        times the expert's down projection of its rounded act row, float32, into the pair's row of out."""
        wait_for_previous_kernel(USE_PDL)
        block = tl.program_id(0)
        expert = tl.load(block_expert_ptr + block).to(tl.int64)
        if expert >= 0:
            pair, real = _block_pairs(sorted_ids_ptr, block, num_pairs, BLOCK_M)
            offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
            p = pair[:, None, None, None, None]                                          # [M, 1, 1, 1, 1]
            rok = tl.full((BLOCK_M, 1, 1, 1, 1), 1, tl.int1)
            ok = tl.full((1, 1, BLOCK_N, 1, 1), 1, tl.int1)
            rows = expert * stride_we + tl.minimum(offs_n, dim - 1).to(tl.int64)[None, None, :, None, None] * stride_wn
            xq = q_ptr.to(tl.pointer_type(tl.int32)) + p * (inter // 4)
            dx = dx_ptr + p * (inter // 32)
            sums = sums_ptr + p * (inter // 16)
            s = tl.arange(0, SB)[None, :, None, None, None]
            acc = tl.zeros((BLOCK_M, SB, BLOCK_N, 4, WT), dtype=tl.float32)
            offsets = tl.zeros((BLOCK_M, SB, BLOCK_N, 4, 1), dtype=tl.float32)
            for j in tl.range(0, inter // UNIT, SB):
                parts, off = k_step(w2_ptr, table_ptr, rows, xq, dx, sums, j + s, ok, rok, QTYPE, BLOCK_M > 1, ASM)
                acc += parts
                offsets += off
            y = sum_parts(acc, offsets) * tl.load(weights_ptr + pair).to(tl.float32)[:, None]  # [M, BN]
            tl.store(out_ptr + pair[:, None] * dim + offs_n[None, :], y, mask=real[:, None] & (offs_n < dim)[None, :])
