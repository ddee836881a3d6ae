"""Fused MoE: the routed experts of one step as grouped GEMMs over (token, k) rows grouped by expert.

(token, k) pairs are sorted by expert and padded to BLOCK_M per expert, so a program owns BLOCK_M rows of
one expert and each used expert's weights are read from memory once while its rows fit one block (all
decode/verify steps; larger groups re-read its tiles from L2). Four launches, no host sync, buffers
sized from shapes only (CUDA-graph safe): the row layout (strata.kernels.moe_align), SiLU(gate) * up
from w13, the down projection scaled by the top-k weight, and the sum over each token's K rows.
Decode-sized steps in the model take two of them elsewhere: the layout comes with the routing
(routing.route_and_align) and the sum with the next norm (rms_norm.rms_norm_topk_sum).

A single token's down projection (`_down_sum_kernel`) instead gives each program an N slice of every
picked expert, so it sums the k weighted outputs itself and the next norm reads one float32 row, not k.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: fused_moe_ref still works
    triton = tl = None

from strata.kernels.launch import pdl_options
from strata.kernels.moe_align import aligned_num_blocks, moe_align, moe_align_ref  # noqa: F401 (re-exported)

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel


def expert_mlp(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One expert's SwiGLU: x [n, D], w13 [2I, D] ([gate; up] rows), w2 [D, I] -> [n, D]."""
    gate, up = F.linear(x, w13).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, w2)


def fused_moe_ref(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
                  topk_weights: torch.Tensor) -> torch.Tensor:
    """hidden [T, D], w13 [E, 2I, D], w2 [E, D, I], topk_ids / topk_weights [T, K]
    -> sum_k w[t, k] * expert_{ids[t, k]}(hidden[t]) [T, D] (grouped_experts_ref). The model's torch
    path for the grouped experts (float32, the CPU), not only the kernel's reference."""
    return grouped_experts_ref(hidden, topk_ids, topk_weights, lambda e: (w13[e], w2[e]))


def grouped_experts_ref(hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                        expert_weights: Callable[[int], tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """hidden [T, D], topk_ids / topk_weights [T, K] -> sum_k w[t, k] * expert_{ids[t, k]}(hidden[t]) [T, D]
    in hidden's dtype, expert e's weights (w13 [2I, D], w2 [D, I]) from `expert_weights(e)` (grouped_experts_apply
    with expert_mlp)."""
    return grouped_experts_apply(hidden, topk_ids, topk_weights, lambda x, e: expert_mlp(x, *expert_weights(e)))


def grouped_experts_apply(hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                          mlp: Callable[[torch.Tensor, int], torch.Tensor]) -> torch.Tensor:
    """hidden [T, D], topk_ids / topk_weights [T, K] -> sum_k w[t, k] * mlp(hidden[t], ids[t, k]) [T, D] in hidden's
    dtype, mlp(x [n, D], e) -> [n, D] expert e on its rows. Rows sorted by expert, each used expert once, in
    ascending order. Pairs with a negative id are skipped (an expert provider computes them elsewhere)."""
    top_k = topk_ids.shape[1]
    flat_ids = topk_ids.flatten()                        # [T * K]
    order = flat_ids.argsort(stable=True)
    used, counts = torch.unique_consecutive(flat_ids[order], return_counts=True)
    token_of = order // top_k                            # [T * K] row of each sorted entry
    weights = topk_weights.flatten()[order].unsqueeze(1)  # [T * K, 1]
    out = torch.zeros_like(hidden)
    start = 0
    for expert_id, count in zip(used.tolist(), counts.tolist()):
        if expert_id >= 0:
            rows = token_of[start:start + count]
            y = mlp(hidden[rows], expert_id)  # [n, D]
            out.index_add_(0, rows, (y * weights[start:start + count]).to(out.dtype))
        start += count
    return out


@functools.cache
def _shared_memory_per_block() -> int:
    """Bytes of shared memory one program may use on the current CUDA device (0 without CUDA)."""
    if not torch.cuda.is_available():
        return 0
    return getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "shared_memory_per_block_optin", 0)


def default_config(num_pairs: int, num_experts: int) -> dict:
    """Tile sizes by rows per expert: decode-sized groups take narrow N tiles (more programs to stream
    the weights), large groups take GEMM-shaped tiles. BLOCK_N_DOWN (optional) sets the down
    projection's N tile apart from the gate/up one."""
    rows_per_expert = num_pairs / num_experts
    if num_pairs <= 16 and _shared_memory_per_block() >= 216 * 1024:
        # a token or two: wide tiles, three stages (216 KB of shared memory, one program per SM) read the
        # few experts fastest on the H200 (session 8): gate/up 17.5 -> 16.2 us, down 10.9 -> 9.3 us
        return dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, num_warps=4, num_stages=3)
    if rows_per_expert <= 16:
        return dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=128, num_warps=4, num_stages=4)
    if rows_per_expert <= 64:
        return dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=3)
    return dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3)


def fused_moe(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
              topk_weights: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """Same contract as fused_moe_ref; hidden [T, D] -> [T, D] in hidden's dtype (fp32 accumulation)."""
    _check_shapes(hidden, w13, w2, topk_ids)
    num_experts = w13.shape[0]
    cfg = config or default_config(topk_ids.numel(), num_experts)
    block_m = cfg["BLOCK_M"]
    sorted_ids, block_expert = moe_align(topk_ids, num_experts, block_m)
    return moe_grouped_gemms(hidden, w13, w2, topk_weights, sorted_ids, block_expert, cfg)


def _check_shapes(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                  topk_ids: torch.Tensor) -> tuple[int, int, int, int]:
    """-> (tokens, top_k, D, I) after checking the shapes and unit inner strides the kernels assume."""
    num_tokens, top_k = topk_ids.shape
    num_experts, two_i, dim = w13.shape
    inter = two_i // 2
    assert w2.shape == (num_experts, dim, inter) and hidden.shape == (num_tokens, dim)
    assert hidden.stride(1) == 1 and w13.stride(2) == 1 and w2.stride(2) == 1
    return num_tokens, top_k, dim, inter


# one token: the down projection sums its k expert outputs itself (_down_sum_kernel); 16 columns of every
# picked expert a program at 16 warps tied for the fastest of five tilings on the H200 (session 12, call 3)
DOWN_SUM_CONFIG = dict(BLOCK_N=16, BLOCK_K=128, num_warps=16, num_stages=1)


def moe_grouped_gemms(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
                      sorted_ids: torch.Tensor, block_expert: torch.Tensor, cfg: dict,
                      sum_topk: bool = True, *, _k_rows: bool = False) -> torch.Tensor:
    """The three compute launches of fused_moe, given the aligned layout. With sum_topk=False the last is
    left to the caller: -> the weighted expert outputs [T, K, D] in float32 (see rms_norm_topk_sum), or
    for one token their sum [1, 1, D] (_down_sum_kernel). `_k_rows`: one token takes the k-row down
    kernel too (tests compare the two paths)."""
    num_tokens, top_k = topk_weights.shape
    inter, dim = w2.shape[2], w2.shape[1]
    block_m, block_n, block_k = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    # float32 tiles are twice the shared memory per pipeline stage: two stages of at most 128-wide K tiles
    stages = cfg["num_stages"] if hidden.element_size() <= 2 else min(cfg["num_stages"], 2)
    if hidden.element_size() > 2:
        block_k = min(block_k, 128)
    launch = dict(num_warps=cfg["num_warps"], num_stages=stages, **pdl_options(hidden))
    num_blocks = block_expert.numel()
    act = hidden.new_empty(sorted_ids.numel(), inter)                          # [P, I]
    weights = topk_weights.reshape(-1)
    _gate_up_kernel[(num_blocks, triton.cdiv(inter, block_n))](
        hidden, w13, act, sorted_ids, block_expert, inter, dim, top_k, num_tokens * top_k,
        hidden.stride(0), w13.stride(0), w13.stride(1), act.stride(0),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, **launch)
    if num_tokens == 1 and not _k_rows:
        rows_out = 1  # the k weighted expert outputs come summed
        partial = torch.empty(1, dim, dtype=torch.float32, device=hidden.device)              # [1, D]
        dcfg = DOWN_SUM_CONFIG
        _down_sum_kernel[(triton.cdiv(dim, dcfg["BLOCK_N"]),)](
            act, w2, partial, sorted_ids, block_expert, weights, dim, top_k, act.stride(0), w2.stride(0),
            w2.stride(1), INTER=inter, K_PAD=triton.next_power_of_2(top_k), BLOCK_M=block_m,
            BLOCK_N=dcfg["BLOCK_N"], BLOCK_K=dcfg["BLOCK_K"], num_warps=dcfg["num_warps"],
            num_stages=dcfg["num_stages"], **pdl_options(hidden))
    else:
        rows_out = top_k
        partial = torch.empty(num_tokens * top_k, dim, dtype=torch.float32, device=hidden.device)  # [T * K, D]
        block_n_down = cfg.get("BLOCK_N_DOWN", block_n)
        _down_kernel[(num_blocks, triton.cdiv(dim, block_n_down))](
            act, w2, partial, sorted_ids, block_expert, weights, dim, inter, num_tokens * top_k,
            act.stride(0), w2.stride(0), w2.stride(1), partial.stride(0),
            BLOCK_M=block_m, BLOCK_N=block_n_down, BLOCK_K=block_k, **launch)
    if not sum_topk:
        return partial.view(num_tokens, rows_out, dim)
    out = torch.empty_like(hidden)
    block_d = min(1024, triton.next_power_of_2(dim))
    _sum_topk_kernel[(num_tokens, triton.cdiv(dim, block_d))](partial, out, rows_out, dim, out.stride(0),
                                                              BLOCK_D=block_d, num_warps=4, **pdl_options(hidden))
    return out


if triton is not None:

    @triton.jit
    def _gate_up_kernel(hidden_ptr, w13_ptr, act_ptr, sorted_ids_ptr, block_expert_ptr,
                        inter, dim, top_k, num_pairs, stride_ht, stride_we, stride_wn, stride_at,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        pid_m, pid_n = tl.program_id(0), tl.program_id(1)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        # the block's expert and rows load together (one memory round trip before the weights, not two)
        expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        pair = tl.load(sorted_ids_ptr + offs_m)
        if expert < 0:
            return
        row_ok = pair < num_pairs
        token = (pair // top_k).to(tl.int64)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < inter
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = hidden_ptr + token[:, None] * stride_ht + offs_k[None, :]                # [BM, BK]
        g_ptrs = w13_ptr + expert * stride_we + offs_n[None, :] * stride_wn + offs_k[:, None]  # [BK, BN]
        u_ptrs = g_ptrs + inter * stride_wn
        acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, dim, BLOCK_K):
            k_ok = offs_k < dim - k0
            a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            wg = tl.load(g_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            wu = tl.load(u_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            acc_g = tl.dot(a, wg, acc_g)
            acc_u = tl.dot(a, wu, acc_u)
            a_ptrs += BLOCK_K
            g_ptrs += BLOCK_K
            u_ptrs += BLOCK_K
        act = acc_g * tl.sigmoid(acc_g) * acc_u
        tl.store(act_ptr + offs_m[:, None].to(tl.int64) * stride_at + offs_n[None, :],
                 act.to(act_ptr.dtype.element_ty), mask=row_ok[:, None] & n_ok[None, :])

    @triton.jit
    def _down_kernel(act_ptr, w2_ptr, out_ptr, sorted_ids_ptr, block_expert_ptr, weights_ptr,
                     dim, inter, num_pairs, stride_at, stride_we, stride_wn, stride_ot,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        pid_m, pid_n = tl.program_id(0), tl.program_id(1)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        # the block's expert and rows load together (one memory round trip before the weights, not two)
        expert = tl.load(block_expert_ptr + pid_m).to(tl.int64)
        pair = tl.load(sorted_ids_ptr + offs_m)
        if expert < 0:
            return
        row_ok = pair < num_pairs
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < dim
        offs_k = tl.arange(0, BLOCK_K)
        a_ptrs = act_ptr + offs_m[:, None].to(tl.int64) * stride_at + offs_k[None, :]      # [BM, BK]
        w_ptrs = w2_ptr + expert * stride_we + offs_n[None, :] * stride_wn + offs_k[:, None]  # [BK, BN]
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, inter, BLOCK_K):
            k_ok = offs_k < inter - k0
            a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(w_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
            acc = tl.dot(a, w, acc)
            a_ptrs += BLOCK_K
            w_ptrs += BLOCK_K
        route_w = tl.load(weights_ptr + pair, mask=row_ok, other=0.0).to(tl.float32)
        acc = acc * route_w[:, None]
        tl.store(out_ptr + pair[:, None].to(tl.int64) * stride_ot + offs_n[None, :], acc,
                 mask=row_ok[:, None] & n_ok[None, :])

    @triton.jit
    def _down_sum_tile(acc, w_ptrs, a_ptrs, w_ok, row_ok, offs_k, k0, INTER: tl.constexpr):
        """acc [KP, BN] + the K tile at k0 of act rows [KP, BK] @ their experts' w2 tiles [KP, BN, BK]."""
        k_ok = offs_k < INTER - k0
        w = tl.load(w_ptrs + k0, mask=w_ok & k_ok[None, None, :], other=0.0)
        a = tl.load(a_ptrs + k0, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        return acc + tl.sum(w.to(tl.float32) * a[:, None, :].to(tl.float32), axis=2)

    @triton.jit
    def _down_sum_rows(act_ptr, w2_ptr, expert, offs_n, rows, row_ok, w_ok, stride_at, stride_we, stride_wn,
                       INTER: tl.constexpr, BLOCK_K: tl.constexpr, K_PAD: tl.constexpr, BLOCK_N: tl.constexpr,
                       UNROLL: tl.constexpr):
        """[K_PAD, BLOCK_N] float32: act row rows[b] (if row_ok[b]) @ w2[expert[b]] rows offs_n, over all
        INTER columns. UNROLL unrolls the K loop (INTER is a constant), so the tiles' loads can be in flight
        together; the rare pass keeps it rolled (fewer registers for the kernel as a whole)."""
        offs_k = tl.arange(0, BLOCK_K)
        w_ptrs = w2_ptr + expert[:, None, None] * stride_we + offs_n[None, :, None] * stride_wn \
            + offs_k[None, None, :]                                                            # [KP, BN, BK]
        a_ptrs = act_ptr + rows.to(tl.int64)[:, None] * stride_at + offs_k[None, :]            # [KP, BK]
        acc = tl.zeros((K_PAD, BLOCK_N), dtype=tl.float32)
        if UNROLL:
            for k0 in tl.static_range(0, INTER, BLOCK_K):
                acc = _down_sum_tile(acc, w_ptrs, a_ptrs, w_ok, row_ok, offs_k, k0, INTER)
        else:
            for k0 in range(0, INTER, BLOCK_K):
                acc = _down_sum_tile(acc, w_ptrs, a_ptrs, w_ok, row_ok, offs_k, k0, INTER)
        return acc

    @triton.jit
    def _down_sum_kernel(act_ptr, w2_ptr, out_ptr, sorted_ids_ptr, block_expert_ptr, weights_ptr, dim, num_pairs,
                         stride_at, stride_we, stride_wn, INTER: tl.constexpr, K_PAD: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_PDL: tl.constexpr):
        """One token: out [1, D] float32 = sum over its pairs of weight * (act row @ w2[expert].T), for this
        program's BLOCK_N columns. A token's layout holds its experts' blocks first (at most K of them, in
        expert order), each pair's row at the head of its block, unless an expert is picked twice (the
        weight-0 placeholders of run_experts): those further rows of a block take a second, rare pass."""
        wait_for_previous_kernel(USE_PDL)
        offs_b = tl.arange(0, K_PAD)
        b_ok = offs_b < num_pairs
        expert = tl.load(block_expert_ptr + offs_b, mask=b_ok, other=-1).to(tl.int64)         # [KP]
        first = offs_b * BLOCK_M
        pair = tl.load(sorted_ids_ptr + first, mask=b_ok, other=num_pairs)                    # [KP]
        second = tl.load(sorted_ids_ptr + first + 1, mask=b_ok & (BLOCK_M > 1), other=num_pairs)
        b_ok = b_ok & (expert >= 0)
        row_ok = b_ok & (pair < num_pairs)
        route_w = tl.load(weights_ptr + pair, mask=row_ok, other=0.0).to(tl.float32)          # [KP]
        offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < dim
        w_ok = b_ok[:, None, None] & n_ok[None, :, None]
        acc = _down_sum_rows(act_ptr, w2_ptr, expert, offs_n, first, row_ok, w_ok, stride_at, stride_we, stride_wn,
                             INTER, BLOCK_K, K_PAD, BLOCK_N, True)
        acc = acc * route_w[:, None]
        if tl.max((b_ok & (second < num_pairs)).to(tl.int32), axis=0) > 0:  # an expert picked twice
            for j in range(1, BLOCK_M):
                pair_j = tl.load(sorted_ids_ptr + first + j, mask=b_ok, other=num_pairs)
                ok_j = b_ok & (pair_j < num_pairs)
                w_j = tl.load(weights_ptr + pair_j, mask=ok_j, other=0.0).to(tl.float32)
                acc_j = _down_sum_rows(act_ptr, w2_ptr, expert, offs_n, first + j, ok_j, w_ok, stride_at, stride_we,
                                       stride_wn, INTER, BLOCK_K, K_PAD, BLOCK_N, False)
                acc += acc_j * w_j[:, None]
        tl.store(out_ptr + offs_n, tl.sum(acc, axis=0), mask=n_ok)

    @triton.jit
    def _sum_topk_kernel(partial_ptr, out_ptr, top_k, dim, stride_ot, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        token, d_block = tl.program_id(0), tl.program_id(1)
        offs_d = d_block * BLOCK_D + tl.arange(0, BLOCK_D)
        d_ok = offs_d < dim
        acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
        for k in range(0, top_k):
            acc += tl.load(partial_ptr + (token.to(tl.int64) * top_k + k) * dim + offs_d, mask=d_ok, other=0.0)
        tl.store(out_ptr + token.to(tl.int64) * stride_ot + offs_d, acc.to(out_ptr.dtype.element_ty), mask=d_ok)
