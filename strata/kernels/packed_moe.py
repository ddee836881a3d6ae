"""The routed experts of one MoE layer over packed GGUF blocks (CUDA), and the torch path they are tested
against.

Weights: w13 uint8 [E, 2I, rb13] (rows of D values of type qtype13: gate rows, then up rows) and w2 uint8
[E, D, rb2] (rows of I values of type qtype2); an expert's rows are contiguous, experts may lie further
apart (w13.stride(0): device slots sized for the largest layer's experts). Pairs with a negative id are
skipped (computed elsewhere, or no expert: an expert provider's slot misses).

Four CUDA paths, picked per call by `packed_moe`:
- q8 pairs (up to Q8_PAIRS_PER_EXPERT pairs an expert, both projections of types packed_q8 reads: Q2_K, Q3_K_*,
  Q4_K_M, Q8_0 and the i-quant files):
  packed_q8.moe_pairs_q8,
  the pairs below with hidden and SiLU(gate) * up rounded to 8 bits per 32 and integer dot products
  (llama.cpp's decode numerics): a word of quants costs a mask, a shift and two dp4a, not a float each.
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
  from copy bandwidth; its cubins spill: 920 bytes of stack a thread for Q4_K gate/up tiles at 64 rows,
  32 columns, 4 warps, by Triton 3.6's ptxas for sm_90). With STRATA_GROUPED_WORDS=1 Q4_K / Q5_K / Q6_K tiles are decoded a word
  at a time (packed_gemv_words; Q4_K / Q5_K columns permuted, activations loaded alike), and PARTS 2 takes half
  a superblock a step (none of those spill at 8 warps: tools/grouped_spills.py); not yet measured.
- dequantized: the used experts are dequantized to hidden's dtype and go through the 16-bit grouped GEMMs
  (fused_moe). One host sync (which experts are used).
Rows the block kernels do not read (superblock rows not a multiple of 256; types outside packed_gemv's
BLOCK_LAYOUT) always take the dequantized path (rows of any whole number of 32-value blocks are read: Qwen4-Exp's
640-wide down rows in Q5_0 / Q8_0); inside a capture that path dequantizes every expert of the layer (no sync).
IQ4_XS is read by the float pairs and grouped kernels, not by packed_q8 (packed_q8.supports refuses it, so `packed_moe`
never sends it there); the i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) by all three.
"""

from __future__ import annotations

import torch

from strata.kernels import packed_dequant, packed_gemv, packed_gemv_words, packed_iquants, packed_mmq, packed_q8
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
    from strata.kernels.packed_gemv_words import q4k_words_tile, q6k_words_tile, words_k_order

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
    tensor cores): both projections Q4_K / Q6_K and 8-bit activations on, unless turned off
    (STRATA_NO_GROUPED_Q8=1 keeps the float grouped kernels)."""
    from strata.config import debug_flag

    return (packed_q8.enabled() and not debug_flag("NO_GROUPED_Q8") and packed_mmq.supports(qtype13, dim, w13)
            and packed_mmq.supports(qtype2, inter, w2))


def grouped_q8_config(num_pairs: int, num_experts: int) -> dict:
    """packed_mmq's tiling for a step of num_pairs pairs over num_experts experts (session 37: 32-row blocks
    of 64 columns on 4 warps were its best at 256 and 512 tokens of the 30B-A3B; 64-row blocks spilled)."""
    return dict(BLOCK_M=32, BLOCK_N=64, num_warps=4)


def packed_moe(hidden: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
               topk_ids: torch.Tensor, topk_weights: torch.Tensor, sum_topk: bool = True) -> torch.Tensor:
    """packed_moe_ref's contract on CUDA (float32 accumulation; the pairs path rounds SiLU(gate) * up to
    hidden's dtype as the 16-bit kernel does). hidden [T, D] -> [T, D] in hidden's dtype; with sum_topk
    False, float32 partials [T, K or 1, D] for the next norm to sum (rms_norm_topk_sum)."""
    dim, inter = hidden.shape[1], w13.shape[1] // 2
    pairs_pay = topk_ids.numel() <= Q8_PAIRS_PER_EXPERT * w13.shape[0]
    if pairs_pay and q8_pairs_supported(w13, qtype13, w2, qtype2, dim, inter):
        partials = packed_q8.moe_pairs_q8(hidden, w13, qtype13, w2, qtype2, topk_ids, topk_weights)
        return partials.sum(1).to(hidden.dtype) if sum_topk else partials
    if not pairs_pay and grouped_q8_supported(w13, qtype13, w2, qtype2, dim, inter):
        config = grouped_q8_config(topk_ids.numel(), w13.shape[0])
        partials = packed_mmq.moe_grouped_q8(hidden, w13, qtype13, w2, qtype2, topk_ids, topk_weights, config=config)
        return partials.sum(1).to(hidden.dtype) if sum_topk else partials
    if pairs_supported(qtype13, qtype2, dim, inter):
        run = _pairs if topk_ids.numel() <= PAIRS_MAX else _grouped
        partials = run(hidden, w13, qtype13, w2, qtype2, topk_ids, topk_weights)   # [T, K, D] float32
        return partials.sum(1).to(hidden.dtype) if sum_topk else partials
    capturing = torch.cuda.is_current_stream_capturing()
    out = _dequantized(hidden, w13, qtype13, w2, qtype2, topk_ids, topk_weights, every_expert=capturing)
    return out if sum_topk else out.float().unsqueeze(1)


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
    compute expert 0 with weight 0. config: GROUPED_CONFIG's keys, BLOCK_M (else grouped_block_m), WORDS
    (else grouped_words(); taken where words_readable) and PARTS (2: word tiles of half superblocks)."""
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
    words = cfg.get("WORDS", grouped_words())
    parts = cfg.get("PARTS", 1)  # superblocks in halves (word tiles only): half the tile's registers
    asm = not packed_gemv_words._interpreted()
    words13, words2 = words and words_readable(w13, qtype13, dim), words and words_readable(w2, qtype2, inter)
    table13, table2 = packed_iquants.table_for(qtype13, w13), packed_iquants.table_for(qtype2, w2)
    _gate_up_grouped_kernel[(num_blocks, triton.cdiv(inter, block_n))](
        hidden, w13, table13, act, sorted_ids, block_expert, inter, dim, top_k, ids.numel(), hidden.stride(0),
        w13.stride(0), w13.stride(1), act.stride(0), QTYPE=qtype13, BLOCK_M=block_m, BLOCK_N=block_n,
        WORDS=words13, PARTS=parts if words13 else 1, ASM=asm, num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"], **pdl_options(hidden))
    _down_grouped_kernel[(num_blocks, triton.cdiv(dim, block_n))](
        act, w2, table2, partials, sorted_ids, block_expert, weights, dim, inter, ids.numel(), act.stride(0),
        w2.stride(0), w2.stride(1), QTYPE=qtype2, BLOCK_M=block_m, BLOCK_N=block_n,
        WORDS=words2, PARTS=parts if words2 else 1, ASM=asm, num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"], **pdl_options(hidden))
    return partials


def grouped_words() -> bool:
    """Whether the grouped kernels decode Q4_K / Q5_K / Q6_K tiles a word at a time (packed_gemv_words)
    instead of a byte a weight: opt-in (STRATA_GROUPED_WORDS=1) until measured on a GPU."""
    from strata.config import debug_flag

    return debug_flag("GROUPED_WORDS")


def words_readable(w: torch.Tensor, qtype: int, k: int) -> bool:
    """Experts w uint8 [E, rows, row bytes] the word decoders read: rows of whole superblocks from a word-aligned
    base, Q4_K / Q5_K rows each starting on a word, Q6_K ones (210-byte superblocks) on an even byte."""
    align = {packed_gemv_words.Q4_K: 4, packed_gemv_words.Q5_K: 4, packed_gemv_words.Q6_K: 2}.get(qtype)
    return (align is not None and k % 256 == 0 and w.data_ptr() % 4 == 0
            and w.stride(0) % align == 0 and w.stride(1) % align == 0)


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
    def _tile_of(w_ptr, row_offsets, sb, part, n_ok, k, table_ptr, QTYPE: tl.constexpr, BLOCK_N: tl.constexpr,
                 WORDS: tl.constexpr, PARTS: tl.constexpr, ASM: tl.constexpr):
        """_tile of the rows at byte offsets row_offsets [BN, 1, 1, 1] from w_ptr, or with WORDS (words_readable
        rows) part `part` of PARTS of it decoded a word at a time: Q6_K's in order (q6k_words_tile), Q4_K / Q5_K's
        with their columns in words_k_order (q4k_words_tile; the caller loads its activations in _k_order)."""
        words = w_ptr.to(tl.pointer_type(tl.int32))  # a word-aligned base (words_readable)
        if WORDS and QTYPE == 14:  # (one return: Triton wants every return of one shape, PARTS changes it)
            tile = q6k_words_tile(words, w_ptr, row_offsets, sb, part, n_ok, BLOCK_N, PARTS, ASM)
        elif WORDS:  # rows of whole words: byte offset / 4
            offsets3 = tl.reshape(row_offsets, (BLOCK_N, 1, 1))
            tile = q4k_words_tile(words + offsets3 // 4, w_ptr + offsets3, sb, part, tl.reshape(n_ok, (BLOCK_N, 1, 1)),
                                  QTYPE, BLOCK_N, PARTS, ASM)
        else:
            tile = _tile(w_ptr + row_offsets, sb, n_ok, k, table_ptr, QTYPE, BLOCK_N)
        return tile

    @triton.jit
    def _k_order(QTYPE: tl.constexpr, WORDS: tl.constexpr, PARTS: tl.constexpr):
        """The weight of a superblock part each tile column holds: words_k_order for word-decoded Q4_K / Q5_K
        tiles, else in order."""
        order = tl.arange(0, 256 // PARTS)
        if WORDS and QTYPE != 14:
            order = words_k_order(PARTS)
        return order

    @triton.jit
    def _gate_up_grouped_kernel(hidden_ptr, w13_ptr, table_ptr, act_ptr, sorted_ids_ptr, block_expert_ptr, inter,
                                dim, top_k, num_pairs, stride_ht, stride_we, stride_wn, stride_at, QTYPE: tl.constexpr,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WORDS: tl.constexpr, PARTS: tl.constexpr,
                                ASM: tl.constexpr, USE_PDL: tl.constexpr):
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
        gate_rows = expert * stride_we + offs_n.to(tl.int64)[:, None, None, None] * stride_wn   # byte offsets
        up_rows = gate_rows + inter * stride_wn
        offs_k = _k_order(QTYPE, WORDS, PARTS)
        a_ptrs = hidden_ptr + token[:, None] * stride_ht + offs_k[None, :]                 # [BM, 256 / PARTS]
        acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for c in range(0, tl.cdiv(dim, 256) * PARTS):
            sb, part = c // PARTS, c % PARTS
            first = sb * 256 + part * (256 // PARTS)
            a = tl.load(a_ptrs + first, mask=row_ok[:, None] & (first + offs_k < dim)[None, :], other=0.0)
            wg = _tile_of(w13_ptr, gate_rows, sb, part, n_ok, dim, table_ptr, QTYPE, BLOCK_N, WORDS, PARTS,
                          ASM).to(a.dtype)
            wu = _tile_of(w13_ptr, up_rows, sb, part, n_ok, dim, table_ptr, QTYPE, BLOCK_N, WORDS, PARTS,
                          ASM).to(a.dtype)
            acc_g = tl.dot(a, tl.trans(wg), acc_g)
            acc_u = tl.dot(a, tl.trans(wu), acc_u)
        act = acc_g * tl.sigmoid(acc_g) * acc_u
        tl.store(act_ptr + offs_m[:, None].to(tl.int64) * stride_at + offs_n[None, :],
                 act.to(act_ptr.dtype.element_ty), mask=row_ok[:, None] & (offs_n < inter)[None, :])

    @triton.jit
    def _down_grouped_kernel(act_ptr, w2_ptr, table_ptr, out_ptr, sorted_ids_ptr, block_expert_ptr, weights_ptr, dim,
                             inter, num_pairs, stride_at, stride_we, stride_wn, QTYPE: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, WORDS: tl.constexpr, PARTS: tl.constexpr,
                             ASM: tl.constexpr, USE_PDL: tl.constexpr):
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
        rows = expert * stride_we + offs_n.to(tl.int64)[:, None, None, None] * stride_wn      # byte offsets
        offs_k = _k_order(QTYPE, WORDS, PARTS)
        a_ptrs = act_ptr + offs_m[:, None].to(tl.int64) * stride_at + offs_k[None, :]     # [BM, 256 / PARTS]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for c in range(0, tl.cdiv(inter, 256) * PARTS):
            sb, part = c // PARTS, c % PARTS
            first = sb * 256 + part * (256 // PARTS)
            a = tl.load(a_ptrs + first, mask=row_ok[:, None] & (first + offs_k < inter)[None, :], other=0.0)
            w = _tile_of(w2_ptr, rows, sb, part, n_ok, inter, table_ptr, QTYPE, BLOCK_N, WORDS, PARTS, ASM).to(a.dtype)
            acc = tl.dot(a, tl.trans(w), acc)
        route_w = tl.load(weights_ptr + pair, mask=row_ok, other=0.0).to(tl.float32)
        tl.store(out_ptr + pair[:, None].to(tl.int64) * dim + offs_n[None, :], acc * route_w[:, None],
                 mask=row_ok[:, None] & (offs_n < dim)[None, :])
