"""Paged attention for decode and verification windows: each sequence brings 1..16 query tokens (the
last tokens of its context, causal among themselves) and attends to its KV through its block table.

One program owns (sequence, KV head, split of the context): its query tile stacks every window token
of every query head in the KV head's GQA group, so each K/V tile is read once for the whole group.
Splits along the context (flash-decoding) keep the chip busy when few sequences run; a second small
kernel merges the splits' partial softmax sums. The split count is fixed by shapes (CUDA-graph safe);
splits past a sequence's last KV tile return at once, and a context of one tile has its one split write
the output itself (its merge programs return at once). In steps of two or more sequences (STRATA_FUSED_MERGE unset
or 2; 1: every step, 0: none) there is no merge launch: the last split of a (sequence, KV head) to finish, counted
by an atomic counter (`merge_counters`: zeros kept per device, each launch leaves them at zero), merges the partial
sums itself. Issue 23's 30B-A3B Q4_K_M on an H100 (session 52, two alternated rounds): c8 1,903.9 / 1,905.4 ->
1,929.7 / 1,930.1 tok/s, c16 2,581.6 / 2,581.6 -> 2,589.9 / 2,593.2, c1 674.0 / 669.8 -> 669.1 / 670.9 (1: c1
668.5 / 665.0).
The K/V of this step must already be in the pool.
Int8 caches (kv_quant.py) are read as int8 (exact in the query's dtype) with their per-vector scales
folded into the scores (K) and the probabilities (V), not multiplied into each tile.

KV beyond VRAM (--kv-resident-tokens): a sequence's first `host_block_counts[s]` blocks are in a second
cache of the same block shape in pinned host memory, read directly over PCIe (unified addressing) through
`host_block_tables`; each KV row picks its tier by position, so splits are unchanged (a split inside
the host part reads only host memory) and the merge is the same. HAS_HOST is a constexpr: steps without
host blocks run the kernel they always did.

QSA's block choice (Qwen4-Exp, model/qsa.py; `block_choice`): a query row at position p has seen
complete = (p + 1) // ratio blocks of `ratio` tokens; past `top_blocks` of them it reads only the tokens
of the blocks its row of `chosen` [T, W] marks, plus those after its last complete block. Each KV tile's
rows are loaded only where some query row of the program reads them, so a long context's unchosen tiles
cost no memory traffic; the online softmax over the rows read is the dense kernel's, with the others
masked.

The output's own epilogue (`gate`, `rounding`): whichever launch writes a row (the merge, or a context's one
split) can multiply it by sigmoid(gate) with the roundings of torch's `out * sigmoid(gate)` on the 16-bit
output (Qwen3-Next's and Qwen4-Exp's gated attention), and round the result to 8 bits per 32 for a packed
o_proj (q8_rounding.quantize's numbers): two or three launches fewer a layer after attention.
"""

from __future__ import annotations

import functools

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: paged_attention_ref still works
    triton = tl = None

from strata.kernels.kv_quant import read_kv_ref
from strata.kernels.launch import arrival_counters, pdl_options

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel
    from strata.kernels.q8_rounding import store_rounding
    from strata.kernels.rms_norm import gated_shared

MAX_QUERY_LEN = 16

# QSA's choice of context blocks for each query row: (chosen [T, W] uint8, ratio, top_blocks)
BlockChoice = tuple[torch.Tensor, int, int] | None


def block_choice_visible(q_pos: torch.Tensor, seq_len: int, choice: BlockChoice,
                         chosen_rows: torch.Tensor | None) -> torch.Tensor:
    """Which of seq_len positions rows at q_pos [n] read [n, L]: causal, and under a block choice (chosen_rows
    [n, W], those rows of its mask) only the chosen complete blocks of rows past top_blocks of them."""
    positions = torch.arange(seq_len, device=q_pos.device)
    visible = positions[None, :] <= q_pos[:, None]
    if choice is None:
        return visible
    _, ratio, top_blocks = choice
    complete = (q_pos + 1) // ratio                                                       # [n]
    columns = (positions // ratio).clamp(max=chosen_rows.shape[1] - 1)
    picked = chosen_rows[:, columns].bool() | (positions[None, :] >= (complete * ratio)[:, None])
    return visible & (picked | (complete <= top_blocks)[:, None])


def paged_attention_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        block_tables: torch.Tensor, seq_lens: torch.Tensor, query_start_loc: torch.Tensor,
                        scale: float, kv_scales: tuple[torch.Tensor, torch.Tensor] | None = None,
                        block_choice: BlockChoice = None) -> torch.Tensor:
    """q [T, H, D], caches [N_blocks, B, Hkv, D], block_tables [S, nb], seq_lens [S] (context length
    after this step), query_start_loc [S + 1] -> [T, H, D]. Query j of a window of n tokens sits at
    position seq_len - n + j and sees KV positions <= its own (and, with block_choice, only those its row
    of the choice reads: module docstring). Computed in float32 (float8 caches widened, int8 ones
    dequantized with their scales kv_scales, ([N_blocks, B, Hkv] float32) x2). The host tier is not the
    reference's business: the kernel with part of the blocks there must equal this all-resident."""
    out = torch.empty_like(q)
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = q.shape[1] // num_kv_heads
    starts, lens = query_start_loc.tolist(), seq_lens.tolist()

    def context(cache: torch.Tensor, cache_scale: torch.Tensor | None, blocks: torch.Tensor, seq_len: int):
        rows = cache[blocks].flatten(0, 1)[:seq_len]                                      # [L, Hkv, D]
        row_scales = None if cache_scale is None else cache_scale[blocks].flatten(0, 1)[:seq_len]
        return read_kv_ref(rows, row_scales, torch.float32).repeat_interleave(group, 1)  # [L, H, D]

    k_scale, v_scale = kv_scales or (None, None)
    for i, seq_len in enumerate(lens):
        s, e = starts[i], starts[i + 1]
        blocks = block_tables[i, : -(-seq_len // block_size)]
        k, v = context(k_cache, k_scale, blocks, seq_len), context(v_cache, v_scale, blocks, seq_len)
        scores = torch.einsum("qhd,khd->hqk", q[s:e].float(), k) * scale                 # [H, n, L]
        q_pos = seq_len - (e - s) + torch.arange(e - s, device=q.device)
        chosen_rows = None if block_choice is None else block_choice[0][s:e]
        visible = block_choice_visible(q_pos, seq_len, block_choice, chosen_rows)         # [n, L]
        probs = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)
        out[s:e] = torch.einsum("hqk,khd->qhd", probs, v).to(q.dtype)
    return out


@functools.lru_cache(maxsize=None)
def _multiprocessors(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


# at most this many splits of one context: 128 halved one 128K-token decode step's attention against 64
# on the H200 (Qwen3-Next geometry, tools/gpu_ab/attn_long_ab.py); the merge reads one partial row a split
MAX_SPLITS = 128


def epilogue_rounds(head_dim: int) -> bool:
    """Whether the output's epilogue can round it for packed weights: heads of a power-of-two width of at least 32
    (a row's blocks of 32 are whole inside one head)."""
    return head_dim >= 32 and head_dim & (head_dim - 1) == 0


def num_splits_for(num_seqs: int, num_kv_heads: int, max_blocks: int, block_size: int, block_n: int,
                   query_pad: int, device: torch.device, programs_per_sm: int = 2) -> int:
    """Context splits per (sequence, KV head), from shapes only (graph-safe): about `programs_per_sm`
    programs per multiprocessor, no more splits than KV tiles in the longest table, and for long windows
    at least query_pad / 2 tiles per split (each split writes a float32 partial row per query row).
    Splits past a sequence's last tile return at once, so a wide table costs short contexts little.
    Two programs a multiprocessor, not eight (session 69, tools/gpu_ab/attn_splits_ab.py on an H100, one-token
    decode in CUDA graphs with a 32K table): at 2-16 sequences and 1K-16K contexts fewer, longer splits merge
    faster, e.g. 30B-A3B heads at 4 sequences x 4K 35.5 -> 19.0 us a layer, 8 x 4K 43.3 -> 32.3, Qwen3-Next heads
    at 4 x 4K 71.3 -> 29.0, 16 x 1K 33.1 -> 21.0; one sequence keeps its 64-128 splits (the tiles bound them)."""
    programs = programs_per_sm * (_multiprocessors(device.index or 0) if device.type == "cuda" else 132)
    max_tiles = max(1, -(-max_blocks * block_size // block_n))
    max_splits = max(1, max_tiles // max(1, query_pad // 2))
    return max(1, min(max_splits, -(-programs // (num_seqs * num_kv_heads)), MAX_SPLITS))


def kv_tile_for(head_dim: int, itemsize: int) -> tuple[int, int]:
    """(BLOCK_N, num_stages) keeping K and V tiles of every pipeline stage within shared memory (64 KB at
    most): 64 rows for 16-bit heads of <= 128 dims, 32 for head_dim 256 in Qwen3-Next (two stages beat
    one by 15-50 % at 4K-128K contexts on the H200), 16 and one stage for float32 rows."""
    row_bytes = head_dim * itemsize
    if row_bytes <= 256:
        return 64, 2
    return (32, 2) if row_bytes <= 512 else (16, 1)


def merge_counters(device: torch.device, num_seqs: int, num_kv_heads: int) -> torch.Tensor | None:
    """int32 zeros [>= num_seqs * num_kv_heads] for the fused merge's arrivals on `device` (module docstring;
    launch.arrival_counters); None where the fused merge is off (STRATA_FUSED_MERGE: unset or 2 on for steps of two or
    more sequences, 1 on, 0 off), or where they would have to grow during a CUDA graph capture (the merge kernel then
    runs)."""
    from strata.config import debug_value

    mode = debug_value("FUSED_MERGE") or "2"
    if mode not in ("1", "2") or (mode == "2" and num_seqs < 2):
        return None
    return arrival_counters("attention merge", device, num_seqs * num_kv_heads)


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
                    seq_lens: torch.Tensor, query_start_loc: torch.Tensor, scale: float,
                    max_query_len: int | None = None, num_splits: int | None = None, block_n: int | None = None,
                    num_stages: int | None = None, table_width: int = 0,
                    kv_scales: tuple[torch.Tensor, torch.Tensor] | None = None, host_kv: tuple | None = None,
                    host_block_tables: torch.Tensor | None = None,
                    host_block_counts: torch.Tensor | None = None, block_choice: BlockChoice = None,
                    gate: torch.Tensor | None = None, rounding: tuple | None = None) -> torch.Tensor:
    """Same contract as paged_attention_ref (windows of at most 16 tokens). Pass max_query_len (a host
    int the runner knows) to avoid a device sync; num_splits overrides the split heuristic, which
    otherwise sizes splits by max(block_tables columns, table_width). host_kv: (K, V, their int8 scales
    or None) of the host tier, [N_host, B, Hkv, D] each in pinned host memory; sequence s's first
    host_block_counts[s] blocks are host_block_tables [S, Wh]'s (their block_tables columns are unread). block_choice: QSA's
    (chosen [T, W] uint8, ratio, top_blocks) (module docstring). gate [T, H, D] (unit stride along D): the output
    is out * sigmoid(gate); rounding: q8_rounding.empty_rounding(T, H * D)'s buffers, filled with the output's 8-bit
    rounding (head_dim a power of two of at least 32: epilogue_rounds)."""
    num_tokens, num_heads, head_dim = q.shape
    # a 1-byte cache read by float32 queries is widened to float32 tiles (int8 at head_dim 256 asked for
    # 295 KB of shared memory on the H200): size the tiles by the wider type then
    itemsize = max(k_cache.element_size(), q.element_size()) if q.element_size() > 2 else k_cache.element_size()
    default_n, default_stages = kv_tile_for(head_dim, itemsize)
    block_n, num_stages = block_n or default_n, num_stages or default_stages
    num_seqs = seq_lens.shape[0]
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    if max_query_len is None:
        max_query_len = int((query_start_loc[1:] - query_start_loc[:-1]).max())
    assert max_query_len <= MAX_QUERY_LEN, "paged_attention takes windows of at most 16 tokens"
    assert q.stride(2) == 1 and k_cache.stride(3) == 1 and v_cache.stride() == k_cache.stride()
    kv_int8 = kv_scales is not None
    k_scale, v_scale = kv_scales if kv_int8 else (k_cache, v_cache)  # unread without int8
    assert not kv_int8 or (k_scale.stride(2) == 1 and v_scale.stride() == k_scale.stride())
    has_host = host_kv is not None
    if has_host:
        host_k, host_v, host_scales = host_kv
        assert host_k.stride()[1:] == k_cache.stride()[1:] and host_v.stride() == host_k.stride()
        host_ks, host_vs = host_scales if kv_int8 else (host_k, host_v)
        assert not kv_int8 or host_ks.stride()[1:] == k_scale.stride()[1:]
    else:  # unread without the host tier
        host_k, host_v, host_ks, host_vs = k_cache, v_cache, k_scale, v_scale
        host_block_tables, host_block_counts = block_tables, seq_lens
    has_choice = block_choice is not None
    chosen, ratio, top_blocks = block_choice if has_choice else (seq_lens, 1, 0)  # unread without a choice
    assert not has_choice or (chosen.dtype == torch.uint8 and chosen.stride(1) == 1 and chosen.shape[0] == num_tokens)
    q_pad, g_pad = triton.next_power_of_2(max_query_len), triton.next_power_of_2(group)
    max_blocks = max(block_tables.shape[1], table_width)
    splits = num_splits or num_splits_for(num_seqs, num_kv_heads, max_blocks, block_size, block_n, q_pad, q.device)
    block_m = max(16, q_pad * g_pad)
    partial = torch.empty(splits, num_tokens, num_heads, head_dim, dtype=torch.float32, device=q.device)
    stats = torch.empty(2, splits, num_tokens, num_heads, dtype=torch.float32, device=q.device)  # m, l
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)                        # [T, H, D]
    if gate is not None:
        assert gate.shape == q.shape and gate.stride(2) == 1
    assert rounding is None or epilogue_rounds(head_dim)
    gate_t = gate if gate is not None else out                                        # unread without a gate
    q8, dx, sums = rounding if rounding is not None else (out, out, out)              # unread without rounding
    epilogue = (gate_t, gate_t.stride(0), gate_t.stride(1), q8, dx, sums)
    flags = dict(HAS_GATE=gate is not None, ROUND=rounding is not None)
    counters = merge_counters(q.device, num_seqs, num_kv_heads) if splits > 1 else None
    _split_kernel[(num_seqs, num_kv_heads, splits)](
        q, k_cache, v_cache, k_scale, v_scale, block_tables, seq_lens, query_start_loc, partial, stats, out,
        host_k, host_v, host_ks, host_vs, host_block_tables, host_block_counts, chosen, ratio, top_blocks,
        chosen.stride(0) if has_choice else 0, scale * 1.4426950408889634, block_size, group, num_heads, head_dim, splits,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), k_cache.stride(0), k_cache.stride(1),
        k_cache.stride(2), k_scale.stride(0), k_scale.stride(1), block_tables.stride(0), partial.stride(0),
        stats.stride(0), stats.stride(1), host_k.stride(0), host_ks.stride(0), host_block_tables.stride(0), *epilogue,
        counters if counters is not None else seq_lens,
        **flags, KV_INT8=kv_int8, HAS_HOST=has_host, HAS_CHOICE=has_choice, FUSED_MERGE=counters is not None,
        G_PAD=g_pad, BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_D=triton.next_power_of_2(head_dim), num_warps=4 if block_m <= 32 else 8, num_stages=num_stages,
        **pdl_options(q))
    if counters is not None:
        return out
    _merge_kernel[(num_seqs, num_heads, max_query_len)](
        partial, stats, out, seq_lens, query_start_loc, splits, num_heads, head_dim, out.stride(0), out.stride(1),
        partial.stride(0), stats.stride(0), stats.stride(1), *epilogue, **flags, BLOCK_N=block_n,
        SPLITS_PAD=triton.next_power_of_2(splits), BLOCK_D=triton.next_power_of_2(head_dim), num_warps=4, **pdl_options(q))
    return out


if triton is not None:

    @triton.jit
    def _split_kernel(q_ptr, k_ptr, v_ptr, ks_ptr, vs_ptr, tables_ptr, seq_lens_ptr, qsl_ptr, partial_ptr,
                      stats_ptr, out_ptr, hk_ptr, hv_ptr, hks_ptr, hvs_ptr, host_tables_ptr, host_counts_ptr,
                      chosen_ptr, ratio, top_blocks, stride_chosen, qk_scale, block_size, group, num_heads, head_dim, num_splits,
                      stride_qt, stride_qh, stride_ot, stride_oh, stride_kb, stride_ko, stride_kh,
                      stride_sb, stride_so, stride_table, stride_ps, stride_sk, stride_st,
                      stride_hb, stride_hsb, stride_host_table, gate_ptr, stride_gt, stride_gh, q8_ptr, dx_ptr,
                      sums_ptr, counters_ptr, HAS_GATE: tl.constexpr, ROUND: tl.constexpr, KV_INT8: tl.constexpr,
                      HAS_HOST: tl.constexpr, HAS_CHOICE: tl.constexpr, FUSED_MERGE: tl.constexpr, G_PAD: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        seq, kv_head, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        # the context length and the window load together: one memory round trip before the query
        seq_len = tl.load(seq_lens_ptr + seq)
        q_start = tl.load(qsl_ptr + seq)
        q_len = tl.load(qsl_ptr + seq + 1) - q_start
        num_tiles = tl.cdiv(seq_len, BLOCK_N)
        per_split = tl.cdiv(num_tiles, num_splits)
        if split * per_split >= num_tiles:
            return  # a split this sequence does not need (the merge reads only the used ones)
        # row r of the tile: window token r // G_PAD, query head kv_head * group + r % G_PAD
        rows = tl.arange(0, BLOCK_M)
        tok, head = rows // G_PAD, kv_head * group + rows % G_PAD
        row_ok = (tok < q_len) & (rows % G_PAD < group)
        q_pos = seq_len - q_len + tok
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < head_dim
        q_row = (q_start + tok).to(tl.int64) * stride_qt + head * stride_qh
        q = tl.load(q_ptr + q_row[:, None] + offs_d[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        first, last = split * per_split, tl.minimum((split + 1) * per_split, num_tiles)
        m_i = tl.full((BLOCK_M,), -1e30, dtype=tl.float32)
        l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        offs_n = tl.arange(0, BLOCK_N)
        num_host = tl.load(host_counts_ptr + seq) if HAS_HOST else 0
        if HAS_CHOICE:  # rows past top_blocks complete blocks read their chosen ones and those after
            complete = (q_pos + 1) // ratio                                                     # [BM]
            sparse_row = row_ok & (complete > top_blocks)
            chosen_row = chosen_ptr + (q_start + tok).to(tl.int64) * stride_chosen
        for tile in range(first, last):
            kv_pos = tile * BLOCK_N + offs_n
            visible = kv_pos[None, :] <= q_pos[:, None]                                        # [BM, BN]
            if HAS_CHOICE:
                in_blocks = kv_pos[None, :] < (complete * ratio)[:, None]
                picked = tl.load(chosen_row[:, None] + (kv_pos // ratio)[None, :],
                                 mask=sparse_row[:, None] & in_blocks, other=1)
                visible = visible & (picked != 0)
                # a KV row no query row reads is not loaded (masked loads move no memory)
                kv_ok = (kv_pos < seq_len) & (tl.max((visible & row_ok[:, None]).to(tl.int32), axis=0) > 0)
            else:
                kv_ok = kv_pos < seq_len
            column = kv_pos // block_size
            block = tl.load(tables_ptr + seq * stride_table + column, mask=kv_ok & (column >= num_host), other=0)
            kv_row = block.to(tl.int64) * stride_kb + (kv_pos % block_size) * stride_ko + kv_head * stride_kh
            k_ptrs = k_ptr + kv_row[:, None] + offs_d[None, :]                                  # [BN, BD]
            v_ptrs = v_ptr + kv_row[:, None] + offs_d[None, :]
            if KV_INT8:
                scale_row = block.to(tl.int64) * stride_sb + (kv_pos % block_size) * stride_so + kv_head
                ks_ptrs, vs_ptrs = ks_ptr + scale_row, vs_ptr + scale_row                       # [BN]
            if HAS_HOST:  # rows of the sequence's first num_host blocks come from the host tier
                in_host = column < num_host
                host_block = tl.load(host_tables_ptr + seq * stride_host_table + column, mask=kv_ok & in_host,
                                     other=0).to(tl.int64)
                host_row = host_block * stride_hb + (kv_pos % block_size) * stride_ko + kv_head * stride_kh
                k_ptrs = tl.where(in_host[:, None], hk_ptr + host_row[:, None] + offs_d[None, :], k_ptrs)
                v_ptrs = tl.where(in_host[:, None], hv_ptr + host_row[:, None] + offs_d[None, :], v_ptrs)
                if KV_INT8:
                    host_scale_row = host_block * stride_hsb + (kv_pos % block_size) * stride_so + kv_head
                    ks_ptrs = tl.where(in_host, hks_ptr + host_scale_row, ks_ptrs)
                    vs_ptrs = tl.where(in_host, hvs_ptr + host_scale_row, vs_ptrs)
            kv_mask = kv_ok[:, None] & d_ok[None, :]
            # float8 and int8 caches widen to the query's dtype (a no-op cast for 16-bit ones; exact for int8)
            k = tl.load(k_ptrs, mask=kv_mask, other=0.0).to(q.dtype)                            # [BN, BD]
            v = tl.load(v_ptrs, mask=kv_mask, other=0.0).to(q.dtype)
            s = tl.dot(q, tl.trans(k)) * qk_scale                                              # [BM, BN]
            if KV_INT8:  # score j scales with K vector j; V's scale goes on the probability that weighs it
                s = s * tl.load(ks_ptrs, mask=kv_ok, other=0.0)[None, :]
                v_scale = tl.load(vs_ptrs, mask=kv_ok, other=0.0)                              # [BN]
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            if KV_INT8:
                p = p * v_scale[None, :]
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        if per_split >= num_tiles:  # the only split: the output itself
            _write_output(acc / l_i[:, None], (q_start + tok).to(tl.int64), head, row_ok, offs_d, out_ptr, gate_ptr,
                          q8_ptr, dx_ptr, sums_ptr, stride_ot, stride_oh, stride_gt, stride_gh, num_heads, head_dim,
                          HAS_GATE, ROUND, BLOCK_D, BLOCK_M)
            return
        th_index = (q_start + tok).to(tl.int64) * num_heads + head                          # into [T, H]
        p_ptrs = partial_ptr + split * stride_ps + th_index[:, None] * head_dim + offs_d[None, :]
        tl.store(p_ptrs, acc, mask=row_ok[:, None] & d_ok[None, :])
        tl.store(stats_ptr + split * stride_st + th_index, m_i, mask=row_ok)
        tl.store(stats_ptr + stride_sk + split * stride_st + th_index, l_i, mask=row_ok)
        if FUSED_MERGE:  # the last split of this (sequence, KV head) to arrive merges them all
            tl.debug_barrier()  # every thread's partial stored before the release below
            counter = counters_ptr + seq * tl.num_programs(1) + kv_head
            used = tl.cdiv(num_tiles, per_split)
            if tl.atomic_add(counter, 1, sem="acq_rel") == used - 1:
                _merge_splits(partial_ptr, stats_ptr, th_index, row_ok, offs_d, d_ok, used, head_dim, stride_ps,
                              stride_sk, stride_st, out_ptr, gate_ptr, q8_ptr, dx_ptr, sums_ptr, q_start + tok, head,
                              stride_ot, stride_oh, stride_gt, stride_gh, num_heads, HAS_GATE, ROUND, BLOCK_D,
                              BLOCK_M)
                tl.atomic_xchg(counter, 0)

    @triton.jit
    def _merge_splits(partial_ptr, stats_ptr, th_index, row_ok, offs_d, d_ok, used, head_dim, stride_ps, stride_sk,
                      stride_st, out_ptr, gate_ptr, q8_ptr, dx_ptr, sums_ptr, token, head, stride_ot, stride_oh,
                      stride_gt, stride_gh, num_heads, HAS_GATE: tl.constexpr, ROUND: tl.constexpr,
                      BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr):
        """The merge kernel's sum for the rows of one split program's tile (th_index [BM] into [T, H], row_ok
        [BM]) over the `used` splits' partials, written with the output's epilogue. Loads bypass L1 (.cg): the
        other programs' stores reach this one through L2."""
        m_max = tl.full((BLOCK_M,), -1e30, dtype=tl.float32)
        for split in range(used):
            m = tl.load(stats_ptr + split * stride_st + th_index, mask=row_ok, other=-1e30, cache_modifier=".cg")
            m_max = tl.maximum(m_max, m)
        acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
        total = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for split in range(used):
            m = tl.load(stats_ptr + split * stride_st + th_index, mask=row_ok, other=-1e30, cache_modifier=".cg")
            l = tl.load(stats_ptr + stride_sk + split * stride_st + th_index, mask=row_ok, other=0.0,
                        cache_modifier=".cg")
            w = tl.exp2(m - m_max)                                                         # [BM]
            part = tl.load(partial_ptr + split * stride_ps + th_index[:, None] * head_dim + offs_d[None, :],
                           mask=row_ok[:, None] & d_ok[None, :], other=0.0, cache_modifier=".cg")  # [BM, BD]
            acc += part * w[:, None]
            total += l * w
        total = tl.where(row_ok, total, 1.0)
        _write_output(acc / total[:, None], token.to(tl.int64), head, row_ok, offs_d, out_ptr, gate_ptr, q8_ptr,
                      dx_ptr, sums_ptr, stride_ot, stride_oh, stride_gt, stride_gh, num_heads, head_dim, HAS_GATE,
                      ROUND, BLOCK_D, BLOCK_M)

    @triton.jit
    def _merge_kernel(partial_ptr, stats_ptr, out_ptr, seq_lens_ptr, qsl_ptr, num_splits, num_heads, head_dim,
                      stride_ot, stride_oh, stride_ps, stride_sk, stride_st, gate_ptr, stride_gt, stride_gh, q8_ptr,
                      dx_ptr, sums_ptr, HAS_GATE: tl.constexpr, ROUND: tl.constexpr, BLOCK_N: tl.constexpr,
                      SPLITS_PAD: tl.constexpr, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        seq, head, j = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        q_start = tl.load(qsl_ptr + seq)
        num_tiles = tl.cdiv(tl.load(seq_lens_ptr + seq), BLOCK_N)
        per_split = tl.cdiv(num_tiles, num_splits)
        if (j >= tl.load(qsl_ptr + seq + 1) - q_start) | (per_split >= num_tiles):
            return  # past this window, or its one split wrote the output
        token = q_start + j
        th_index = token.to(tl.int64) * num_heads + head
        offs_s = tl.arange(0, SPLITS_PAD)
        s_ok = offs_s < tl.cdiv(num_tiles, per_split)
        m = tl.load(stats_ptr + offs_s * stride_st + th_index, mask=s_ok, other=-1e30)
        l = tl.load(stats_ptr + stride_sk + offs_s * stride_st + th_index, mask=s_ok, other=0.0)
        m_max = tl.max(m, axis=0)
        w = tl.exp2(m - m_max)                                                        # [SPLITS]
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < head_dim
        acc = tl.load(partial_ptr + offs_s[:, None] * stride_ps + th_index * head_dim + offs_d[None, :],
                      mask=s_ok[:, None] & d_ok[None, :], other=0.0)                 # [SPLITS, BD]
        o = tl.sum(acc * w[:, None], axis=0) / tl.sum(l * w, axis=0)
        one = tl.zeros((1,), dtype=tl.int64)
        _write_output(tl.reshape(o, (1, BLOCK_D)), token.to(tl.int64) + one, head + one, one == 0, offs_d, out_ptr,
                      gate_ptr, q8_ptr, dx_ptr, sums_ptr, stride_ot, stride_oh, stride_gt, stride_gh, num_heads,
                      head_dim, HAS_GATE, ROUND, BLOCK_D, 1)

    @triton.jit
    def _write_output(o, token, head, ok, offs_d, out_ptr, gate_ptr, q8_ptr, dx_ptr, sums_ptr, stride_ot, stride_oh,
                      stride_gt, stride_gh, num_heads, head_dim, HAS_GATE: tl.constexpr, ROUND: tl.constexpr,
                      BLOCK_D: tl.constexpr, R: tl.constexpr):
        """Output rows o [R, BD] (float32) of (token [R], head [R]) where ok [R]: stored in the output's dtype,
        times sigmoid(gate) where HAS_GATE (as torch's `out * sigmoid(gate)` rounds on the 16-bit output), and
        with ROUND their 8-bit rounding at columns head * head_dim .. of the [T, H * D] rows (BLOCK_D == head_dim)."""
        dtype = out_ptr.dtype.element_ty
        mask = ok[:, None] & (offs_d < head_dim)[None, :]
        y = o.to(dtype)
        if HAS_GATE:
            g = tl.load(gate_ptr + token[:, None] * stride_gt + head[:, None] * stride_gh + offs_d[None, :], mask=mask,
                        other=0.0)
            y = gated_shared(y, g, dtype)
        tl.store(out_ptr + token[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :], y, mask=mask)
        if ROUND:  # the heads' columns of the [T, H * D] rows o_proj reads
            width = num_heads * head_dim
            store_rounding(y, token, head[:, None] * head_dim, width, ok, width, q8_ptr, dx_ptr, sums_ptr, R, BLOCK_D)
