"""A layer's routed experts on 8-bit activations for steps of a few pairs an expert (short prompts, verification
windows of several streams): the pairs grouped by expert in blocks of ROWS, each block's expert rows decoded once
for all its rows (packed_q8's multi-row GEMV on gathered rows), where packed_q8.moe_pairs_q8 decodes them once a
pair.

A 64-token prompt of the 30B-A3B routes ~4 pairs to each of its 128 experts: the pairs kernels unpack every used
expert about four times, and their time is mostly that unpacking (session 50's Nsight Compute: selects, integer to
float conversions, shuffles; dp4a 9 %). Here a program owns one block of ROWS pairs of one expert (moe_align's
layout; pairs with a negative id go to an extra bucket no program computes) and BLOCK_N rows of that expert, and
runs q8_steps.k_step with a row dimension: each word of W is loaded and unpacked once and dotted with the ROWS
rows of x (rows past a block's pairs read its first pair's, and are not stored).

Same numbers as moe_pairs_q8 (hidden and SiLU(gate) * up rounded to 8 bits per 32, exact integer sums, float32
scaling): the two agree up to float32 summation order. Every type packed_q8 reads.

Off by default until timed on a GPU: STRATA_GROUPED_PAIRS=1 sends packed_moe's 8-bit steps of GROUPED_PAIRS_MIN
up to (not incl.) packed_moe.MMQ_PAIRS_PER_EXPERT pairs an expert (on average) here: the pairs' top and packed_mmq's
range.
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
from strata.kernels.moe_align import moe_align, moe_align_ref
from strata.kernels.packed_q8 import UNIT, interpreted, units_per_step, word_tiles
from strata.kernels.q8_rounding import quantize

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel
    from strata.kernels.q8_steps import k_step, sum_parts

# rows of a block (pairs of one expert), rows of W a program, superblocks a K step, warps; integer group sums as the
# multi-row GEMV takes them. Not yet timed: the GEMV's 2-8 row tiling (packed_q8.default_config).
CONFIG = dict(ROWS=4, BLOCK_N=4, SUPERBLOCKS=2, num_warps=2, num_stages=3, ISUM=1)
GROUPED_PAIRS_MIN = 2  # pairs an expert of the layer (on average) from which STRATA_GROUPED_PAIRS=1 sends a step here


def enabled() -> bool:
    """STRATA_GROUPED_PAIRS=1 (an A/B switch until timed on a GPU)."""
    from strata.config import debug_flag

    return debug_flag("GROUPED_PAIRS")


def moe_grouped_pairs_q8(hidden: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
                         topk_ids: torch.Tensor, topk_weights: torch.Tensor, config: dict | None = None
                         ) -> torch.Tensor:
    """packed_q8.moe_pairs_q8's contract: hidden [T, D], w13 uint8 [E, 2I, row bytes], w2 uint8 [E, D, row bytes],
    topk_ids / topk_weights [T, K] -> float32 [T, K, D] (each pair's routing weight times its expert's output,
    zeros for a negative id)."""
    assert w13.stride(2) == 1 and w2.stride(2) == 1 and w2.shape[1] == hidden.shape[1]
    cfg = {**CONFIG, **(config or {})}
    layout = align_blocks(topk_ids, w13.shape[0], cfg["ROWS"])
    act = grouped_gate_up(quantize(hidden), w13, qtype13, layout, topk_ids.shape[1], cfg)       # [P, I]
    return grouped_down(quantize(act), w2, qtype2, layout, topk_ids.shape, topk_weights, cfg)


def align_blocks(topk_ids: torch.Tensor, num_experts: int, rows: int) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """topk_ids [T, K] -> (sorted_ids [B * rows], block_expert [B], P, E): the pairs in blocks of `rows` of one
    expert (moe_align); pairs with a negative id in the extra bucket E, whose blocks no program computes."""
    ids = torch.where(topk_ids < 0, num_experts, topk_ids).long()                       # [T, K]
    align = moe_align if topk_ids.is_cuda else moe_align_ref
    sorted_ids, block_expert = align(ids, num_experts + 1, rows)
    return sorted_ids, block_expert, ids.numel(), num_experts


def grouped_gate_up(hidden_q, w13: torch.Tensor, qtype13: int, layout: tuple, top_k: int, cfg: dict) -> torch.Tensor:
    """The first launch: quantize(hidden) rows (hidden_q) -> act float32 [P, I] = SiLU(gate) * up of each pair's
    expert on its token (zeros for skipped pairs)."""
    hq, hdx, hsums = hidden_q                                                          # [T, D] int8 ...
    sorted_ids, block_expert, num_pairs, num_experts = layout
    dim, inter = hq.shape[1], w13.shape[1] // 2
    act = torch.zeros(num_pairs, inter, dtype=torch.float32, device=hq.device)         # [P, I]
    _gate_up_kernel[(block_expert.numel(), triton.cdiv(inter, cfg["BLOCK_N"]))](
        hq, hdx, hsums, w13, packed_iquants.table_for(qtype13, w13), sorted_ids, block_expert, act, inter, dim, top_k,
        num_pairs, num_experts, w13.stride(0), w13.stride(1), **_options(cfg, qtype13, dim, hq))
    return act


def grouped_down(act_q, w2: torch.Tensor, qtype2: int, layout: tuple, shape: tuple[int, int],
                 topk_weights: torch.Tensor, cfg: dict) -> torch.Tensor:
    """The second launch: quantize(act) (act_q) -> partials float32 [T, K, D] = each pair's routing weight times
    its expert's down projection (zeros for skipped pairs)."""
    aq, adx, asums = act_q                                                             # [P, I] int8 ...
    sorted_ids, block_expert, num_pairs, num_experts = layout
    dim, inter = w2.shape[1], aq.shape[1]
    partials = torch.zeros(*shape, dim, dtype=torch.float32, device=aq.device)         # [T, K, D]
    weights = topk_weights.float().reshape(-1).contiguous()                            # [P]
    _down_kernel[(block_expert.numel(), triton.cdiv(dim, cfg["BLOCK_N"]))](
        aq, adx, asums, w2, packed_iquants.table_for(qtype2, w2), sorted_ids, block_expert, weights, partials, dim,
        inter, num_pairs, num_experts, w2.stride(0), w2.stride(1), **_options(cfg, qtype2, inter, aq))
    return partials


def _options(cfg: dict, qtype: int, k: int, x: torch.Tensor) -> dict:
    isum = cfg.get("ISUM", 1)
    return dict(QTYPE=qtype, ROWS=cfg["ROWS"], BLOCK_N=cfg["BLOCK_N"], SB=units_per_step(cfg["SUPERBLOCKS"], qtype, k),
                UNIT=UNIT[qtype], WT=word_tiles(qtype, isum > 0), ISUM=isum, ASM=not interpreted(),
                num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **pdl_options(x))


if triton is not None:

    @triton.jit
    def _block_pairs(sorted_ids_ptr, block, num_pairs, ROWS: tl.constexpr):
        """A block's ROWS pairs -> (their flat indices, each clamped to the block's first, [ROWS]; which are real)."""
        pair = tl.load(sorted_ids_ptr + block * ROWS + tl.arange(0, ROWS))
        real = pair < num_pairs
        first = tl.load(sorted_ids_ptr + block * ROWS)
        return tl.where(real, pair, first).to(tl.int64), real

    @triton.jit
    def _gate_up_kernel(q_ptr, dx_ptr, sums_ptr, w13_ptr, table_ptr, sorted_ids_ptr, block_expert_ptr, act_ptr, inter,
                        dim, top_k, num_pairs, num_experts, stride_we, stride_wn, QTYPE: tl.constexpr,
                        ROWS: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr, UNIT: tl.constexpr,
                        WT: tl.constexpr, ISUM: tl.constexpr, USE_PDL: tl.constexpr, ASM: tl.constexpr):
        """One program per (block of ROWS pairs of one expert, BLOCK_N rows of gate and of up): SiLU(gate) * up in
        float32 at act[pair] of the block's pairs."""
        wait_for_previous_kernel(USE_PDL)
        block = tl.program_id(0)
        expert = tl.load(block_expert_ptr + block).to(tl.int64)
        if expert >= 0 and expert < num_experts:
            pair, real = _block_pairs(sorted_ids_ptr, block, num_pairs, ROWS)               # [R]
            token = (pair // top_k)[:, None, None, None, None]                               # [R, 1, 1, 1, 1]
            offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
            rok = tl.full((ROWS, 1, 1, 1, 1), 1, tl.int1)
            ok = tl.full((1, 1, BLOCK_N, 1, 1), 1, tl.int1)  # (rows past the end read the last: packed_q8's GEMV)
            w_rows = tl.minimum(offs_n, inter - 1).to(tl.int64)[None, None, :, None, None]     # [1, 1, BN, 1, 1]
            gate = expert * stride_we + w_rows * stride_wn
            up = gate + inter * stride_wn
            xq = q_ptr.to(tl.pointer_type(tl.int32)) + token * (dim // 4)
            dx = dx_ptr + token * (dim // 32)
            sums = sums_ptr + token * (dim // 16)
            s = tl.arange(0, SB)[None, :, None, None, None]
            acc_g = tl.zeros((ROWS, SB, BLOCK_N, 4, WT), dtype=tl.float32)
            acc_u = tl.zeros((ROWS, SB, BLOCK_N, 4, WT), dtype=tl.float32)
            off_g = tl.zeros((ROWS, SB, BLOCK_N, 4, 1), dtype=tl.float32)
            off_u = tl.zeros((ROWS, SB, BLOCK_N, 4, 1), dtype=tl.float32)
            for j in tl.range(0, dim // UNIT, SB):
                parts, off = k_step(w13_ptr, table_ptr, gate, xq, dx, sums, j + s, ok, rok, QTYPE, ISUM, ASM)
                acc_g += parts
                off_g += off
                parts, off = k_step(w13_ptr, table_ptr, up, xq, dx, sums, j + s, ok, rok, QTYPE, ISUM, ASM)
                acc_u += parts
                off_u += off
            g = sum_parts(acc_g, off_g)                                                        # [R, BN]
            u = sum_parts(acc_u, off_u)
            tl.store(act_ptr + pair[:, None] * inter + offs_n[None, :], g * tl.sigmoid(g) * u,
                     mask=real[:, None] & (offs_n < inter)[None, :])

    @triton.jit
    def _down_kernel(q_ptr, dx_ptr, sums_ptr, w2_ptr, table_ptr, sorted_ids_ptr, block_expert_ptr, weights_ptr,
                     out_ptr, dim, inter, num_pairs, num_experts, stride_we, stride_wn, QTYPE: tl.constexpr,
                     ROWS: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr, UNIT: tl.constexpr,
                     WT: tl.constexpr, ISUM: tl.constexpr, USE_PDL: tl.constexpr, ASM: tl.constexpr):
        """One program per (block, BLOCK_N output columns): each pair's routing weight times its expert's down
        projection of its act row, float32, at out[pair]."""
        wait_for_previous_kernel(USE_PDL)
        block = tl.program_id(0)
        expert = tl.load(block_expert_ptr + block).to(tl.int64)
        if expert >= 0 and expert < num_experts:
            pair, real = _block_pairs(sorted_ids_ptr, block, num_pairs, ROWS)               # [R]
            p = pair[:, None, None, None, None]                                              # [R, 1, 1, 1, 1]
            offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
            rok = tl.full((ROWS, 1, 1, 1, 1), 1, tl.int1)
            ok = tl.full((1, 1, BLOCK_N, 1, 1), 1, tl.int1)
            w_rows = tl.minimum(offs_n, dim - 1).to(tl.int64)[None, None, :, None, None]       # [1, 1, BN, 1, 1]
            rows = expert * stride_we + w_rows * stride_wn
            xq = q_ptr.to(tl.pointer_type(tl.int32)) + p * (inter // 4)
            dx = dx_ptr + p * (inter // 32)
            sums = sums_ptr + p * (inter // 16)
            s = tl.arange(0, SB)[None, :, None, None, None]
            acc = tl.zeros((ROWS, SB, BLOCK_N, 4, WT), dtype=tl.float32)
            offsets = tl.zeros((ROWS, SB, BLOCK_N, 4, 1), dtype=tl.float32)
            for j in tl.range(0, inter // UNIT, SB):
                parts, off = k_step(w2_ptr, table_ptr, rows, xq, dx, sums, j + s, ok, rok, QTYPE, ISUM, ASM)
                acc += parts
                offsets += off
            route = tl.load(weights_ptr + pair)                                              # [R]
            y = sum_parts(acc, offsets) * route[:, None]                                     # [R, BN]
            tl.store(out_ptr + pair[:, None] * dim + offs_n[None, :], y, mask=real[:, None] & (offs_n < dim)[None, :])
