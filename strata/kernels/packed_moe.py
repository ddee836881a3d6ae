"""The routed experts of one MoE layer over packed GGUF blocks (CUDA), and the torch path they are tested
against.

Weights: w13 uint8 [E, 2I, rb13] (rows of D values of type qtype13: gate rows, then up rows) and w2 uint8
[E, D, rb2] (rows of I values of type qtype2); an expert's rows are contiguous, experts may lie further
apart (w13.stride(0): device slots sized for the largest layer's experts). Pairs with a negative id are
skipped (computed elsewhere, or no expert: an expert provider's slot misses).

Five CUDA paths, picked per call by `packed_moe`:
- q8 pairs (up to Q8_PAIRS_PER_EXPERT pairs an expert, both projections of types packed_q8 reads: Q2_K, Q3_K_*,
  Q4_K_M, Q8_0 and the i-quant files):
  packed_q8.moe_pairs_q8,
  the pairs below with hidden and SiLU(gate) * up rounded to 8 bits per 32 and integer dot products
  (llama.cpp's decode numerics): a word of quants costs a mask, a shift and two dp4a, not a float each.
  Grouping a step's pairs by expert to unpack each expert's rows once a block (session 48's packed_q8_grouped,
  session 54's q8_grouped_pairs) lost to them on the GPU both times and was removed: session 55 (an H100, the
  30B-A3B's experts at 32 / 64 tokens) 540 / 796 us against 277 / 521 for Q4_K / Q6_K.
- q8 grouped (from there up to MMQ_PAIRS_PER_EXPERT pairs an expert, Q4_K / Q6_K / Q8_0 / Q5_0 experts: short
  prompts and verification windows of Q4_K_M files; a prompt's step from PROMPT_Q8_PAIRS_PER_EXPERT on, its tokens'
  routings crowding fewer experts): packed_mmq.moe_grouped_q8, the same numerics with the pairs
  grouped by expert in 16-row blocks and int8 tensor-core products per 32 values; its time follows the rows.
- pairs (up to PAIRS_MAX pairs: decode steps of up to 16 sequences at top-8): one program per (pair,
  BLOCK_N rows of the expert) decodes the blocks in registers and multiplies on the CUDA cores
  (packed_gemv._chunk_dot), SiLU(gate) * up stored in hidden's dtype like the 16-bit kernel; then one
  program per (pair, BLOCK_N output columns) writes its weighted down projection to float32 partials
  [T, K, D], which the next norm sums (rms_norm_topk_sum) or packed_moe sums itself. Each pair reads its
  expert's rows: a step whose pairs share experts rereads them (from L2 when small).
- grouped (more pairs: large verify windows, prompts): pairs sorted by expert in
  blocks of rows (moe_align); a program decodes a tile of its expert's blocks once and multiplies it with
  the block's rows on the tensor cores, so each used expert is read once per row block. Block decoding is
  this path's limit (session 37: a 512-token prompt of the 30B-A3B at Q4_K_M spends 27 of its 31 ms here, far
  from copy bandwidth). Tiles decoded a word at a time (session 37) spilled no registers but were 1.2-2.7x
  slower on the H200 (session 38); they were removed.
- dequantized: the used experts are dequantized to hidden's dtype and go through the 16-bit grouped GEMMs
  (fused_moe). One host sync (which experts are used).
Rows the block kernels do not read (superblock rows not a multiple of 256; types outside packed_gemv's
BLOCK_LAYOUT) always take the dequantized path (rows of any whole number of 32-value blocks are read: Qwen4-Exp's
640-wide down rows in Q5_0 / Q8_0); inside a capture that path dequantizes every expert of the layer (no sync).
IQ4_NL / IQ4_XS, MXFP4 and the i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) are read by the 8-bit
pairs and the float pairs and grouped kernels, not by packed_mmq.
"""

from __future__ import annotations

import torch

from strata.kernels import packed_dequant, packed_gemv, packed_iquants, packed_mmq, packed_q8
from strata.kernels.fused_moe import fused_moe as fused_moe_kernel
from strata.kernels.fused_moe import grouped_experts_ref
from strata.kernels.gguf_blocks import dequantize_ref
from strata.kernels.launch import pdl_options
from strata.kernels.moe_align import moe_align

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: packed_moe_ref still works
    triton = tl = None

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel
    from strata.kernels.packed_gemv import _chunk_dot, _chunk_ok, _chunk_values, _chunk_x

# up to this many (token, k) pairs, one program per pair beats the grouped kernel, whose tile decoding costs
# more than the rereads it saves (H200, 30B-A3B shape: 8 tokens 226 against 565 us, 16 tokens 434 against 898)
PAIRS_MAX = 128
# the 8-bit pairs (packed_q8) go further: their time grows with the pairs (30B-A3B experts: 19.9 / 84.0 / 153.5
# us at 8 / 64 / 128 pairs) where the float grouped kernels took 810 / 1,109 / 1,230 us at 128 / 256 / 512
# (session 24, bench/results/2026-12-03-h200-session24/). Qwen4-Exp's top-10 reaches 160 pairs at 16 streams
# and 4 verification windows of 4 tokens: with the old bound those took the float kernels (its 16-stream decode
# was below its 8-stream one). The grouped kernels read every used expert once, so their time follows the
# experts (~1.2 ms a layer for the 30B-A3B's 128 from 256 pairs on; ~2.5 ms for Qwen4-Exp's 512 at a 64-token
# prompt's 640 pairs, session 28 call 1's CUPTI table) where the pairs' follows the pairs (~1.2 us each): up to
# Q8_PAIRS_PER_EXPERT pairs an expert of the layer (512 for the 30B-A3B, 2,048 for Qwen4-Exp) take the pairs.
Q8_PAIRS_PER_EXPERT = 4
# packed_mmq (int8 tensor cores) from Q8_PAIRS_PER_EXPERT up to (not incl.) this many pairs an expert of the layer;
# from here on the float grouped kernels' 64-row blocks, which decode each used expert once, win. H200, one layer in
# CUDA graphs, `GROUPED_ARMS=mmq prompt_moe_ab.py` (session 39, with the grouped tiles' scales in their values' layout,
# 3002750): the 30B-A3B's 128 experts at 8 / 16 / 32 pairs an expert, mmq 725.2 / 1,044.9 / 1,783.1 us against the
# float grouped kernels' 887.7 / 893.3 / 909.3; Qwen3-Next's 512 experts (top 10 of 512 wide) at 5 / 10: 1,767.0 /
# 1,999.0 against 2,243.7 / 2,344.4 (the pairs 1,799.6 / 3,556.1); Qwen4-Exp's (Q4_K gate/up, Q8_0 down rows of 640)
# at 5 / 10: 2,387.1 / 2,693.7 against 3,344.4 / 3,513.3 (the pairs 3,027.1 / 5,995.9).
MMQ_PAIRS_PER_EXPERT = 12
# Prompts (a step with a query longer than a verification window: WINDOW_TOKENS) take packed_mmq from this many pairs
# an expert: one sequence's tokens route alike, so its pairs crowd fewer experts, which packed_mmq reads once while the
# pairs reread them per pair. Session 58 (an H100, issue 23's 30B-A3B Q4_K_M; bench/results/2026-12-06-h100-session58/):
# its 64-token prompts (4 pairs an expert) through packed_mmq, two alternated rounds: TTFT p50 15 -> 12 ms, prefill_64
# 4,459.1 / 4,435.7 -> 5,362.5 / 5,392.0 tok/s, c1 694.5 / 691.8 -> 699.5 / 700.5. Steps of windows or decode rows
# keep Q8_PAIRS_PER_EXPERT: those of 16 streams' 4-token windows (4 pairs an expert, many sequences' routings) ran
# 3,132.6 tok/s on the pairs against 2,874.8 through packed_mmq, which uniform routing also favours at 64 tokens
# (tools/gpu_ab/mmq_prompt_ab.py: 497 against 603 us a layer). At 2, session 59 (an H100,
# bench/results/2026-12-06-h100-session59/ calls 1-2) found Qwen3-Next 8L Q4_K_M's 96- and 128-token prompts (both
# padded to 128 rows: 2.5 pairs an expert of 512) through
# packed_mmq 21-24 % slower (prefill_128 9,475.1 / 9,264.6 against 12,321.1 tok/s). At 3 those stay on the pairs
# while the 30B-A3B's 64-token prompts (4 pairs an expert) still leave them. Call 3 (two alternated rounds,
# STRATA_PROMPT_Q8_PAIRS_PER_EXPERT 2 / 3 / 4): Qwen3-Next's prefill_128 9,659.0 / 9,723.6, 12,441.0 / 12,288.6 and
# 12,521.6 / 12,436.9 tok/s; the 30B-A3B's 16 streams with speculation at 3 / 4: 3,141.3 / 3,145.1 against 3,152.5 /
# 3,154.5, its prefill_64 5,457.2 / 5,442.2 against 4,447.4 / 4,445.4.
PROMPT_Q8_PAIRS_PER_EXPERT = 3
WINDOW_TOKENS = 16  # a verification window's most tokens (paged_attention.MAX_QUERY_LEN)
PAIR_CONFIG = dict(BLOCK_N=4, SUPERBLOCKS=4, num_warps=2, num_stages=3)
GROUPED_CONFIG = dict(BLOCK_N=32, num_warps=4, num_stages=2)


def dequantize_experts(w: torch.Tensor, qtype: int, k: int, dtype: torch.dtype) -> torch.Tensor:
    """w uint8 [E, N, row bytes] -> [E, N, K] in `dtype` (gguf's dequantization, then the cast; one launch on
    CUDA for the types packed_dequant reads)."""
    num, rows, _ = w.shape
    return packed_dequant.dequantize(w.reshape(num * rows, -1), qtype, k, dtype).view(num, rows, k)


def packed_moe_ref(hidden: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
                   topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
    """The contract (module docstring): each used expert dequantized to hidden's dtype, then exactly the
    dense grouped path (fused_moe_ref) on those weights, so a float32 model gives the same bits as the
    same file loaded dense."""
    dim, inter = hidden.shape[1], w13.shape[1] // 2

    def weights_of(e: int) -> tuple[torch.Tensor, torch.Tensor]:
        return (dequantize_ref(w13[e], qtype13, dim).to(hidden.dtype),
                dequantize_ref(w2[e], qtype2, inter).to(hidden.dtype))

    return grouped_experts_ref(hidden, topk_ids, topk_weights, weights_of)


def pairs_supported(qtype13: int, qtype2: int, dim: int, inter: int) -> bool:
    return packed_gemv.supports(qtype13, dim) and packed_gemv.supports(qtype2, inter)


def q8_pairs_supported(w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int, dim: int, inter: int) -> bool:
    """Whether the pairs go to packed_q8 (8-bit activations, integer dot products): both projections in
    types it reads (packed_q8.supports), unless turned off (STRATA_NO_Q8_ACTIVATIONS=1)."""
    return (packed_q8.enabled() and packed_q8.supports(qtype13, dim, w13)
            and packed_q8.supports(qtype2, inter, w2))


def grouped_q8_supported(w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int, dim: int,
                         inter: int) -> bool:
    """Whether steps of more pairs than Q8_PAIRS_PER_EXPERT an expert go to packed_mmq (8-bit activations, int8
    tensor cores): both projections of types it reads (Q4_K, Q6_K, Q8_0, Q5_0) and 8-bit activations on, unless
    turned off (STRATA_NO_GROUPED_Q8=1 keeps the float grouped kernels)."""
    from strata.config import debug_flag

    return (packed_q8.enabled() and not debug_flag("NO_GROUPED_Q8")
            and packed_mmq.supports(qtype13, dim, w13) and packed_mmq.supports(qtype2, inter, w2))


def packed_moe(hidden: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
               topk_ids: torch.Tensor, topk_weights: torch.Tensor, sum_topk: bool = True,
               longest_query: int = 0) -> torch.Tensor:
    """packed_moe_ref's contract on CUDA (float32 accumulation; the pairs path rounds SiLU(gate) * up to
    hidden's dtype as the 16-bit kernel does). hidden [T, D] -> [T, D] in hidden's dtype; with sum_topk
    False, float32 partials [T, K or 1, D] for the next norm to sum (rms_norm_topk_sum). longest_query: the step's
    longest query (0: unknown), which tells a prompt's step from windows' (q8_pairs_per_expert)."""
    dim, inter = hidden.shape[1], w13.shape[1] // 2
    pairs_pay = topk_ids.numel() <= q8_pairs_per_expert(longest_query) * w13.shape[0]
    if pairs_pay and q8_pairs_supported(w13, qtype13, w2, qtype2, dim, inter):
        partials = packed_q8.moe_pairs_q8(hidden, w13, qtype13, w2, qtype2, topk_ids, topk_weights)
        return partials.sum(1).to(hidden.dtype) if sum_topk else partials
    mmq_pays = topk_ids.numel() < MMQ_PAIRS_PER_EXPERT * w13.shape[0]
    if not pairs_pay and mmq_pays and grouped_q8_supported(w13, qtype13, w2, qtype2, dim, inter):
        partials = packed_mmq.moe_grouped_q8(hidden, w13, qtype13, w2, qtype2, topk_ids, topk_weights)
        return partials.sum(1).to(hidden.dtype) if sum_topk else partials
    if pairs_supported(qtype13, qtype2, dim, inter):
        run = _pairs if topk_ids.numel() <= PAIRS_MAX else _grouped
        partials = run(hidden, w13, qtype13, w2, qtype2, topk_ids, topk_weights)   # [T, K, D] float32
        return partials.sum(1).to(hidden.dtype) if sum_topk else partials
    capturing = torch.cuda.is_current_stream_capturing()
    out = _dequantized(hidden, w13, qtype13, w2, qtype2, topk_ids, topk_weights, every_expert=capturing)
    return out if sum_topk else out.float().unsqueeze(1)


def q8_pairs_per_expert(longest_query: int = 0) -> int:
    """Up to how many pairs an expert the 8-bit pairs take a step whose longest query has `longest_query` tokens:
    PROMPT_Q8_PAIRS_PER_EXPERT for a prompt's (longer than a window), else Q8_PAIRS_PER_EXPERT;
    STRATA_Q8_PAIRS_PER_EXPERT (an A/B switch) sets it for every step, STRATA_PROMPT_Q8_PAIRS_PER_EXPERT for a
    prompt's."""
    from strata.config import debug_value

    forced = debug_value("Q8_PAIRS_PER_EXPERT")
    if forced:
        return int(forced)
    if longest_query > WINDOW_TOKENS:
        return int(debug_value("PROMPT_Q8_PAIRS_PER_EXPERT") or PROMPT_Q8_PAIRS_PER_EXPERT)
    return Q8_PAIRS_PER_EXPERT


def _dequantized(hidden: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
                 topk_ids: torch.Tensor, topk_weights: torch.Tensor, every_expert: bool) -> torch.Tensor:
    """The used experts (every one: no host sync) dequantized, then the 16-bit grouped GEMMs."""
    dim, inter = hidden.shape[1], w13.shape[1] // 2
    num_experts = w13.shape[0]
    if every_expert:
        used = torch.arange(num_experts, device=hidden.device)
    else:
        used = topk_ids[topk_ids >= 0].unique()                            # [U] (a host sync)
    dense13 = dequantize_experts(w13.index_select(0, used), qtype13, dim, hidden.dtype)   # [U, 2I, D]
    dense2 = dequantize_experts(w2.index_select(0, used), qtype2, inter, hidden.dtype)    # [U, D, I]
    position = torch.full((num_experts + 1,), -1, dtype=torch.long, device=hidden.device)
    position[used] = torch.arange(used.numel(), device=hidden.device)
    local = position[topk_ids.clamp(min=-1)]                               # [T, K]; -1 (index E) stays -1
    skipped = local < 0
    return fused_moe_kernel(hidden, dense13, dense2, local.clamp(min=0), topk_weights.masked_fill(skipped, 0))


def _pairs(hidden: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
           topk_ids: torch.Tensor, topk_weights: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """-> float32 [T, K, D]: each pair's weighted expert output (zeros for a skipped pair). One program per
    (pair, BLOCK_N rows) in both launches, so even one token's step spreads over the whole GPU."""
    num_tokens, top_k = topk_ids.shape
    dim, inter = hidden.shape[1], w13.shape[1] // 2
    assert hidden.stride(1) == 1 and w13.stride(2) == 1 and w2.stride(2) == 1 and w2.shape[1] == dim
    cfg = {**PAIR_CONFIG, **(config or {})}
    ids = topk_ids.reshape(-1).contiguous()                               # [P]
    weights = topk_weights.reshape(-1).contiguous()                       # [P]
    act = torch.empty(ids.numel(), inter, dtype=hidden.dtype, device=hidden.device)   # [P, I]
    partials = torch.empty(num_tokens, top_k, dim, dtype=torch.float32, device=hidden.device)  # [T, K, D]
    block_n = cfg["BLOCK_N"]
    table13, table2 = packed_iquants.table_for(qtype13, w13), packed_iquants.table_for(qtype2, w2)
    _gate_up_pairs_kernel[(ids.numel(), triton.cdiv(inter, block_n))](
        hidden, w13, table13, ids, act, inter, dim, top_k, hidden.stride(0), w13.stride(0), w13.stride(1),
        act.stride(0), QTYPE=qtype13, BLOCK_N=block_n, SB=_superblocks(cfg, dim), num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"], **pdl_options(hidden))
    _down_pairs_kernel[(ids.numel(), triton.cdiv(dim, block_n))](
        act, w2, table2, ids, weights, partials, dim, inter, act.stride(0), w2.stride(0), w2.stride(1),
        QTYPE=qtype2, BLOCK_N=block_n, SB=_superblocks(cfg, inter), num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"], **pdl_options(hidden))
    return partials


def _grouped(hidden: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
             topk_ids: torch.Tensor, topk_weights: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """-> float32 [T, K, D] like _pairs, for steps of several tokens: pairs sorted by expert in blocks of
    BLOCK_M rows (moe_align), so each program decodes a BLOCK_N x 256 tile of its expert's blocks once
    and multiplies it with the block's rows on the tensor cores (tl.dot). Skipped pairs (negative ids)
    compute expert 0 with weight 0."""
    num_tokens, top_k = topk_ids.shape
    dim, inter = hidden.shape[1], w13.shape[1] // 2
    assert hidden.stride(1) == 1 and w13.stride(2) == 1 and w2.stride(2) == 1 and w2.shape[1] == dim
    num_experts = w13.shape[0]
    skipped = topk_ids < 0
    ids = topk_ids.clamp(min=0)
    weights = topk_weights.masked_fill(skipped, 0).reshape(-1).contiguous()          # [P]
    cfg = {**GROUPED_CONFIG, **(config or {})}
    block_m = cfg.get("BLOCK_M") or grouped_block_m(topk_ids.numel(), num_experts)
    sorted_ids, block_expert = moe_align(ids, num_experts, block_m)
    num_blocks = block_expert.numel()
    act = torch.empty(num_blocks * block_m, inter, dtype=hidden.dtype, device=hidden.device)  # [rows, I]
    partials = torch.empty(num_tokens, top_k, dim, dtype=torch.float32, device=hidden.device)  # [T, K, D]
    block_n = cfg["BLOCK_N"]
    table13, table2 = packed_iquants.table_for(qtype13, w13), packed_iquants.table_for(qtype2, w2)
    _gate_up_grouped_kernel[(num_blocks, triton.cdiv(inter, block_n))](
        hidden, w13, table13, act, sorted_ids, block_expert, inter, dim, top_k, ids.numel(), hidden.stride(0),
        w13.stride(0), w13.stride(1), act.stride(0), QTYPE=qtype13, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **pdl_options(hidden))
    _down_grouped_kernel[(num_blocks, triton.cdiv(dim, block_n))](
        act, w2, table2, partials, sorted_ids, block_expert, weights, dim, inter, ids.numel(), act.stride(0),
        w2.stride(0), w2.stride(1), QTYPE=qtype2, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"], **pdl_options(hidden))
    return partials



def grouped_block_m(num_pairs: int, num_experts: int) -> int:
    """Rows of an expert a grouped program takes: 64 (each used expert decoded once up to 64 rows) once its rows
    fill most of such a block, or, in a layer of few experts, from 4 rows an expert on; else 16, whose padding
    rows cost less tensor-core work. Session 37 (`grouped_block_m.py`, H200, one layer in CUDA graphs): the
    30B-A3B's 128 experts 1,163 / 1,169 / 1,173 us at 64 against 1,266 / 1,271 / 1,802 at 16 for 6 / 8 / 16
    rows an expert; Qwen4-Exp's 512 experts 4,182 / 4,243 against 3,527 / 3,669 at 5 / 10 rows, 4,280 against
    4,758 at 15."""
    per_expert = num_pairs / num_experts
    return 64 if per_expert >= 12 or (num_experts <= 128 and per_expert >= 4) else 16


def _superblocks(cfg: dict, k: int) -> int:
    """Superblocks (256-value chunks) per K step (packed_gemv.chunks_per_step)."""
    return packed_gemv.chunks_per_step(cfg["SUPERBLOCKS"], k)


if triton is not None:

    @triton.jit
    def _gate_up_pairs_kernel(hidden_ptr, w13_ptr, table_ptr, ids_ptr, act_ptr, inter, dim, top_k, stride_ht, stride_we,
                              stride_wn, stride_ap, QTYPE: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr,
                              USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        pair = tl.program_id(0)
        expert = tl.load(ids_ptr + pair).to(tl.int64)
        if expert < 0:
            return
        token = pair // top_k
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = (offs_n < inter)[:, None, None, None]                                         # [BN, 1, 1, 1]
        gate_rows = w13_ptr + expert * stride_we + offs_n.to(tl.int64)[:, None, None, None] * stride_wn
        up_rows = gate_rows + inter * stride_wn
        r = tl.arange(0, 8)[None, None, :, None]
        l = tl.arange(0, 32)[None, None, None, :]
        x_offs = tl.arange(0, SB)[None, :, None, None] * 256 + r * 32 + l                     # [1, SB, 8, 32]
        acc_g = tl.zeros((BLOCK_N,), dtype=tl.float32)
        acc_u = tl.zeros((BLOCK_N,), dtype=tl.float32)
        for sb in tl.range(0, tl.cdiv(dim, 256), SB):
            x = _chunk_x(hidden_ptr + token * stride_ht, sb, x_offs, dim, QTYPE)
            ok = _chunk_ok(n_ok, sb, r, dim, QTYPE, SB)
            acc_g += _chunk_dot(gate_rows, sb, r, l, x, ok, table_ptr, QTYPE, SB, BLOCK_N)
            acc_u += _chunk_dot(up_rows, sb, r, l, x, ok, table_ptr, QTYPE, SB, BLOCK_N)
        act = acc_g * tl.sigmoid(acc_g) * acc_u
        tl.store(act_ptr + pair.to(tl.int64) * stride_ap + offs_n, act.to(act_ptr.dtype.element_ty),
                 mask=offs_n < inter)

    @triton.jit
    def _down_pairs_kernel(act_ptr, w2_ptr, table_ptr, ids_ptr, weights_ptr, out_ptr, dim, inter, stride_ap, stride_we,
                           stride_wn, QTYPE: tl.constexpr, BLOCK_N: tl.constexpr, SB: tl.constexpr,
                           USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        pair = tl.program_id(0)
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        expert = tl.load(ids_ptr + pair).to(tl.int64)
        acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
        if expert >= 0:
            n_ok = (offs_n < dim)[:, None, None, None]
            rows = w2_ptr + expert * stride_we + offs_n.to(tl.int64)[:, None, None, None] * stride_wn
            r = tl.arange(0, 8)[None, None, :, None]
            l = tl.arange(0, 32)[None, None, None, :]
            x_offs = tl.arange(0, SB)[None, :, None, None] * 256 + r * 32 + l
            for sb in tl.range(0, tl.cdiv(inter, 256), SB):
                x = _chunk_x(act_ptr + pair.to(tl.int64) * stride_ap, sb, x_offs, inter, QTYPE)
                acc += _chunk_dot(rows, sb, r, l, x, _chunk_ok(n_ok, sb, r, inter, QTYPE, SB), table_ptr, QTYPE, SB,
                                  BLOCK_N)
            acc = acc * tl.load(weights_ptr + pair).to(tl.float32)
        tl.store(out_ptr + pair.to(tl.int64) * dim + offs_n, acc, mask=offs_n < dim)

    @triton.jit
    def _tile(rows_ptr, sb, n_ok, k, table_ptr, QTYPE: tl.constexpr, BLOCK_N: tl.constexpr):
        """Chunk sb of BLOCK_N weight rows of K values as a [BLOCK_N, 256] float32 tile (weights in row order;
        zeros past K)."""
        r = tl.arange(0, 8)[None, None, :, None]
        l = tl.arange(0, 32)[None, None, None, :]
        ok = _chunk_ok(n_ok, sb, r, k, QTYPE, 1)
        return tl.reshape(tl.where(ok, _chunk_values(rows_ptr, sb, r, l, ok, table_ptr, QTYPE, 1, BLOCK_N), 0.0),
                          (BLOCK_N, 256))

    @triton.jit
    def _gate_up_grouped_kernel(hidden_ptr, w13_ptr, table_ptr, act_ptr, sorted_ids_ptr, block_expert_ptr, inter,
                                dim, top_k, num_pairs, stride_ht, stride_we, stride_wn, stride_at, QTYPE: tl.constexpr,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        pid_m, pid_n = tl.program_id(0), tl.program_id(1)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        pair = tl.load(sorted_ids_ptr + offs_m)
        if expert < 0:
            return
        row_ok = pair < num_pairs
        token = (pair // top_k).to(tl.int64)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = (offs_n < inter)[:, None, None, None]
        gate_rows = w13_ptr + expert * stride_we + offs_n.to(tl.int64)[:, None, None, None] * stride_wn
        up_rows = gate_rows + inter * stride_wn
        offs_k = tl.arange(0, 256)
        a_ptrs = hidden_ptr + token[:, None] * stride_ht + offs_k[None, :]                 # [BM, 256]
        acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for sb in range(0, tl.cdiv(dim, 256)):
            a = tl.load(a_ptrs + sb * 256, mask=row_ok[:, None] & (sb * 256 + offs_k < dim)[None, :], other=0.0)
            wg = _tile(gate_rows, sb, n_ok, dim, table_ptr, QTYPE, BLOCK_N).to(a.dtype)   # [BN, 256]
            wu = _tile(up_rows, sb, n_ok, dim, table_ptr, QTYPE, BLOCK_N).to(a.dtype)
            acc_g = tl.dot(a, tl.trans(wg), acc_g)
            acc_u = tl.dot(a, tl.trans(wu), acc_u)
        act = acc_g * tl.sigmoid(acc_g) * acc_u
        tl.store(act_ptr + offs_m[:, None].to(tl.int64) * stride_at + offs_n[None, :],
                 act.to(act_ptr.dtype.element_ty), mask=row_ok[:, None] & (offs_n < inter)[None, :])

    @triton.jit
    def _down_grouped_kernel(act_ptr, w2_ptr, table_ptr, out_ptr, sorted_ids_ptr, block_expert_ptr, weights_ptr, dim,
                             inter, num_pairs, stride_at, stride_we, stride_wn, QTYPE: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        pid_m, pid_n = tl.program_id(0), tl.program_id(1)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        pair = tl.load(sorted_ids_ptr + offs_m)
        if expert < 0:
            return
        row_ok = pair < num_pairs
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = (offs_n < dim)[:, None, None, None]
        rows = w2_ptr + expert * stride_we + offs_n.to(tl.int64)[:, None, None, None] * stride_wn
        offs_k = tl.arange(0, 256)
        a_ptrs = act_ptr + offs_m[:, None].to(tl.int64) * stride_at + offs_k[None, :]     # [BM, 256]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for sb in range(0, tl.cdiv(inter, 256)):
            a = tl.load(a_ptrs + sb * 256, mask=row_ok[:, None] & (sb * 256 + offs_k < inter)[None, :], other=0.0)
            w = _tile(rows, sb, n_ok, inter, table_ptr, QTYPE, BLOCK_N).to(a.dtype)
            acc = tl.dot(a, tl.trans(w), acc)
        route_w = tl.load(weights_ptr + pair, mask=row_ok, other=0.0).to(tl.float32)
        tl.store(out_ptr + pair[:, None].to(tl.int64) * dim + offs_n[None, :], acc * route_w[:, None],
                 mask=row_ok[:, None] & (offs_n < dim)[None, :])
