"""QSA block scores for decode and verification windows: each query row's score for every complete block of
`ratio` tokens of its sequence's context, read through the block table (strata.model.qsa.QSAIndexer.visible's
scores, batched and CUDA-graph safe). A block's key is its raw index keys' mean, normed (zero-centred RMSNorm)
and rotated to the block's first position; its score is sum over heads of relu(q_h . key) / sqrt(Di).

Rows that see no more complete blocks than `top_blocks` (dense rows) get unspecified scores (the kernel skips
sequences whose rows are all dense); a sparse row gets its scores below its complete-block count and -inf from
there to `width`, so torch.topk over the row picks among the blocks it has seen. One program owns (sequence,
tile of BLOCK_TILE blocks): it pools, norms and rotates its blocks' keys once and dots them with every row of
the window (at most 16 rows).

KV beyond VRAM (--kv-resident-tokens): a sequence's first blocks of index keys sit in the host tier (`host`,
HostKeys), read over PCIe like the paged attention kernel reads K and V there.
"""

from __future__ import annotations

import math

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: qsa_block_scores_ref still works
    triton = tl = None

from strata.kernels.launch import pdl_options
from strata.kernels.rms_norm import rms_norm_ref
from strata.kernels.rope_kv import rope_ref

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel

# blocks a program pools and scores: 64 beat 32 by 7-40 % on the H200 (bf16, Di 128, 32-64 heads, 64 one-row
# windows over 32K contexts, 8 16-row windows over 128K), 4 % slower for one row over 128K
BLOCK_TILE = 64

# the host KV tier's index keys (--kv-resident-tokens): (keys [N_host, B, 1, Di], host_block_tables [S, Wh],
# host_block_counts [S]); sequence s's first host_block_counts[s] blocks are there, their block_tables
# columns unread
HostKeys = tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None


def qsa_block_scores_ref(index_q: torch.Tensor, key_cache: torch.Tensor, block_tables: torch.Tensor,
                         seq_lens: torch.Tensor, query_start_loc: torch.Tensor, norm_weight: torch.Tensor,
                         eps: float, cos: torch.Tensor, sin: torch.Tensor, rot_dim: int, ratio: int,
                         top_blocks: int, width: int, host: HostKeys = None) -> torch.Tensor:
    """index_q [T, Hi, Di] (normed, rotated), key_cache [N_blocks, B, 1, Di] raw keys, block_tables [S, nb],
    seq_lens [S] (context length after this step), query_start_loc [S + 1], norm_weight [Di] (the indexer's
    k_layernorm), cos / sin [P, rot_dim / 2] float32 -> scores [T, width] float32. Row j of a window of n rows
    sits at position seq_len - n + j and has seen complete = (position + 1) // ratio blocks; a sparse row
    (complete > top_blocks) holds block b's score for b < complete and -inf after; dense rows are all -inf
    here (unspecified in the kernel). Per sequence, the very ops of QSAIndexer.visible, so its bits on the CPU.
    host: the host KV tier's keys (module docstring)."""
    scores = torch.full((index_q.shape[0], width), float("-inf"), dtype=torch.float32, device=index_q.device)
    block_size = key_cache.shape[1]
    starts, lens = query_start_loc.tolist(), seq_lens.tolist()
    for i, seq_len in enumerate(lens):
        s, e = starts[i], starts[i + 1]
        num_blocks = seq_len // ratio
        if e == s or num_blocks <= top_blocks:
            continue  # every row of the window is dense
        table = block_tables[i, : -(-seq_len // block_size)]
        pages = key_cache.index_select(0, table.clamp(min=0))                               # [nb, B, 1, Di]
        if host is not None:  # the sequence's first blocks from the host tier
            host_cache, host_tables, host_counts = host
            num_host = int(host_counts[i])
            front = host_cache.index_select(0, host_tables[i, :num_host].to(host_cache.device)).to(pages.device)
            pages = torch.cat([front, pages[num_host:]])
        raw = pages.flatten(0, 1)[:seq_len, 0]                                              # [L, Di]
        pooled = raw[: num_blocks * ratio].unflatten(0, (num_blocks, ratio)).float().mean(1).to(raw.dtype)
        block_keys = rope_ref(rms_norm_ref(pooled, norm_weight, eps, zero_centered=True)[0], cos, sin,
                              torch.arange(num_blocks, device=raw.device) * ratio)                  # [nb, Di]
        block_scores = torch.einsum("qhd,bd->qhb", index_q[s:e].float(), block_keys.float()).relu().sum(1)
        block_scores = block_scores / math.sqrt(index_q.shape[2])                             # [n, nb]
        positions = seq_len - (e - s) + torch.arange(e - s, device=raw.device)
        complete = (positions + 1) // ratio                                                   # [n] blocks seen
        seen = torch.arange(num_blocks, device=raw.device)[None] < complete[:, None]          # [n, nb]
        seen &= (complete > top_blocks)[:, None]
        used = min(num_blocks, width)
        scores[s:e, :used] = block_scores.masked_fill(~seen, float("-inf"))[:, :used]
    return scores


def qsa_block_scores(index_q: torch.Tensor, key_cache: torch.Tensor, block_tables: torch.Tensor,
                     seq_lens: torch.Tensor, query_start_loc: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                     cos: torch.Tensor, sin: torch.Tensor, rot_dim: int, ratio: int, top_blocks: int,
                     width: int, host: HostKeys = None) -> torch.Tensor:
    """qsa_block_scores_ref's contract in one launch (windows of at most 16 rows, index_q in the cache's
    dtype), except that dense rows' scores are unspecified (a dense sequence's rows are not written at all,
    so they may hold anything, NaN included). Graph-safe: no host sync, the grid fixed by the sequence count
    and `width` (a host int, at least every sparse row's complete-block count)."""
    num_tokens, num_heads, head_dim = index_q.shape
    assert index_q.dtype == key_cache.dtype and key_cache.shape[2] == 1 and key_cache.shape[3] == head_dim
    assert index_q.stride(2) == 1 and key_cache.stride(3) == 1 and norm_weight.is_contiguous()
    assert cos.is_contiguous() and sin.is_contiguous() and cos.shape[1] * 2 == rot_dim <= head_dim
    half, rest = rot_dim // 2, head_dim - rot_dim
    has_host = host is not None
    host_cache, host_tables, host_counts = host if has_host else (key_cache, block_tables, seq_lens)  # unread
    assert host_cache.stride()[1:] == key_cache.stride()[1:]
    scores = torch.empty(num_tokens, width, dtype=torch.float32, device=index_q.device)        # [T, width]
    grid = (seq_lens.shape[0], max(1, triton.cdiv(width, BLOCK_TILE)))
    _block_scores_kernel[grid](
        index_q, key_cache, block_tables, seq_lens, query_start_loc, norm_weight, cos, sin, scores,
        host_cache, host_tables, host_counts, host_cache.stride(0), host_tables.stride(0), eps, math.sqrt(head_dim), key_cache.shape[1], top_blocks, width, num_heads, head_dim, half,
        index_q.stride(0), index_q.stride(1), key_cache.stride(0), key_cache.stride(1), block_tables.stride(0),
        scores.stride(0), HAS_HOST=has_host, RATIO=ratio, HEADS_PAD=max(16, triton.next_power_of_2(num_heads)),
        HALF_PAD=max(16, triton.next_power_of_2(half)), REST_PAD=max(16, triton.next_power_of_2(rest)),
        BLOCK_TILE=BLOCK_TILE, num_warps=4, **pdl_options(index_q))
    return scores


if triton is not None:

    @triton.jit
    def _block_scores_kernel(q_ptr, k_ptr, tables_ptr, seq_lens_ptr, qsl_ptr, w_ptr, cos_ptr, sin_ptr, out_ptr,
                             hk_ptr, host_tables_ptr, host_counts_ptr, stride_hb, stride_host_table, eps, sqrt_dim, block_size, top_blocks, width, num_heads, head_dim, half,
                             stride_qt, stride_qh, stride_kb, stride_ko, stride_table, stride_ot,
                             HAS_HOST: tl.constexpr, RATIO: tl.constexpr, HEADS_PAD: tl.constexpr, HALF_PAD: tl.constexpr,
                             REST_PAD: tl.constexpr, BLOCK_TILE: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        seq, tile = tl.program_id(0), tl.program_id(1)
        seq_len = tl.load(seq_lens_ptr + seq)
        q_start = tl.load(qsl_ptr + seq)
        q_len = tl.load(qsl_ptr + seq + 1) - q_start
        num_blocks = seq_len // RATIO  # the last row's complete blocks, the most any row has seen
        if num_blocks <= top_blocks:
            return  # every row of the window is dense
        blocks = tile * BLOCK_TILE + tl.arange(0, BLOCK_TILE)
        out_ok = blocks < width
        if tile * BLOCK_TILE >= num_blocks:  # no row has seen these blocks: -inf for topk, no keys to read
            for r in range(q_len):
                tl.store(out_ptr + (q_start + r).to(tl.int64) * stride_ot + blocks, float("-inf"), mask=out_ok)
            return
        # a key's dims in three parts: the rotated halves [0, half) and [half, 2 half), the rest unrotated,
        # so rotate_half's partner of a dim is the same column of the other half. Shapes: BT blocks of the
        # tile, HP / RP the padded half / rest dims, HQ the padded heads
        in_ctx = blocks < num_blocks
        num_host = tl.load(host_counts_ptr + seq) if HAS_HOST else 0
        offs_h, offs_r = tl.arange(0, HALF_PAD), tl.arange(0, REST_PAD)
        h_ok, r_ok = offs_h < half, offs_r < head_dim - 2 * half
        h_mask, r_mask = in_ctx[:, None] & h_ok[None, :], in_ctx[:, None] & r_ok[None, :]
        sum1 = tl.zeros((BLOCK_TILE, HALF_PAD), dtype=tl.float32)
        sum2 = tl.zeros((BLOCK_TILE, HALF_PAD), dtype=tl.float32)
        sum3 = tl.zeros((BLOCK_TILE, REST_PAD), dtype=tl.float32)
        for i in range(RATIO):  # token i of each block (a block may straddle two pages)
            pos = blocks * RATIO + i
            column = pos // block_size
            page = tl.load(tables_ptr + seq * stride_table + column, mask=in_ctx & (column >= num_host), other=0)
            row = k_ptr + page.to(tl.int64) * stride_kb + (pos % block_size) * stride_ko   # [BT]
            if HAS_HOST:  # the sequence's first num_host blocks from the host tier (over PCIe)
                in_host = column < num_host
                host_page = tl.load(host_tables_ptr + seq * stride_host_table + column, mask=in_ctx & in_host,
                                    other=0)
                row = tl.where(in_host, hk_ptr + host_page.to(tl.int64) * stride_hb + (pos % block_size) * stride_ko,
                               row)
            sum1 += tl.load(row[:, None] + offs_h[None, :], mask=h_mask, other=0.0).to(tl.float32)
            sum2 += tl.load(row[:, None] + half + offs_h[None, :], mask=h_mask, other=0.0).to(tl.float32)
            sum3 += tl.load(row[:, None] + 2 * half + offs_r[None, :], mask=r_mask, other=0.0).to(tl.float32)
        dtype = k_ptr.dtype.element_ty
        x1 = tl.div_rn(sum1, RATIO * 1.0).to(dtype).to(tl.float32)                       # [BT, HP] pooled
        x2 = tl.div_rn(sum2, RATIO * 1.0).to(dtype).to(tl.float32)
        x3 = tl.div_rn(sum3, RATIO * 1.0).to(dtype).to(tl.float32)                       # [BT, RP]
        squares = tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1) + tl.sum(x3 * x3, axis=1)
        inv_rms = tl.rsqrt(tl.div_rn(squares, head_dim.to(tl.float32)) + eps)[:, None]   # [BT, 1]
        w1 = 1.0 + tl.load(w_ptr + offs_h, mask=h_ok, other=0.0).to(tl.float32)[None, :]
        w2 = 1.0 + tl.load(w_ptr + half + offs_h, mask=h_ok, other=0.0).to(tl.float32)[None, :]
        w3 = 1.0 + tl.load(w_ptr + 2 * half + offs_r, mask=r_ok, other=0.0).to(tl.float32)[None, :]
        n1 = (x1 * inv_rms * w1).to(dtype).to(tl.float32)
        n2 = (x2 * inv_rms * w2).to(dtype).to(tl.float32)
        k3 = (x3 * inv_rms * w3).to(dtype)
        freq = (blocks * RATIO).to(tl.int64)[:, None] * half + offs_h[None, :]           # row: block's first token
        c = tl.load(cos_ptr + freq, mask=h_mask, other=1.0)
        s = tl.load(sin_ptr + freq, mask=h_mask, other=0.0)
        k1 = (n1 * c - n2 * s).to(dtype)                                                 # [BT, HP] rotated
        k2 = (n2 * c + n1 * s).to(dtype)
        offs_q = tl.arange(0, HEADS_PAD)
        q_ok = offs_q < num_heads
        for r in range(q_len):  # each window row: all heads against the tile's keys
            token = (q_start + r).to(tl.int64)
            q_row = q_ptr + token * stride_qt + offs_q[:, None] * stride_qh              # [HQ, 1]
            q1 = tl.load(q_row + offs_h[None, :], mask=q_ok[:, None] & h_ok[None, :], other=0.0)
            q2 = tl.load(q_row + half + offs_h[None, :], mask=q_ok[:, None] & h_ok[None, :], other=0.0)
            q3 = tl.load(q_row + 2 * half + offs_r[None, :], mask=q_ok[:, None] & r_ok[None, :], other=0.0)
            # IEEE float32 dots (not TF32) for float32 rows; 16-bit rows' products are exact in float32
            dots = tl.dot(q1, tl.trans(k1), input_precision="ieee")
            dots += tl.dot(q2, tl.trans(k2), input_precision="ieee")
            dots += tl.dot(q3, tl.trans(k3), input_precision="ieee")                   # [HQ, BT]
            score = tl.div_rn(tl.sum(tl.maximum(dots, 0.0), axis=0), sqrt_dim)         # [BT]
            complete = (seq_len - q_len + r + 1) // RATIO
            tl.store(out_ptr + token * stride_ot + blocks, tl.where(blocks < complete, score, float("-inf")),
                     mask=out_ok)
