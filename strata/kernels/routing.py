"""MoE routing in one launch: softmax over the router logits (float32), top-k, optional renormalisation
of the k weights, cast to the model dtype, and optionally the layer's routing statistics. One program per
token; the k picks are k passes of argmax over the row held in registers (k is small), replacing torch's
softmax + topk + sum + div + cast.

`route_and_align` goes further for decode-sized steps (at most ROUTE_FUSED_MAX_TOKENS tokens): the router
projection itself, the routing and fused_moe's row layout in one launch instead of three. Programs
split the projection by (expert block, hidden slice) and write float32 partial logits; the last program
to finish (an atomic counter, reset by that program) sums them in a fixed order (deterministic), rounds
them to the model dtype as the router's linear layer would, picks the top-k and lays out the rows. The
router weight's first tile loads before the PDL wait (it does not depend on the previous kernel). A
single token's rows are laid out from the picks in registers (`lay_out_picks`); more tokens take
moe_align's counting sort through global memory (`align_pairs`): the register layout padded to 16
rows measured slower there (session 8).
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: the ref still works
    triton = tl = None

from strata.kernels import triton_available
from strata.kernels.launch import pdl_options
from strata.kernels.moe_align import align_buffers

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel


def softmax_topk_ref(logits: torch.Tensor, top_k: int, renormalize: bool,
                     out_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [T, E] -> (topk_ids [T, K] int64, topk_weights [T, K] in out_dtype), largest first."""
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return ids, weights.to(out_dtype)


def record_routing_ref(topk_ids: torch.Tensor, counts: torch.Tensor, touched: torch.Tensor,
                       real_rows: torch.Tensor | None = None) -> None:
    """Routing statistics of one MoE layer: counts [E] += pairs routed to each expert; touched [E] := 1
    for every expert used (int64 rows owned by strata.experts.stats). With `real_rows` (a device
    scalar [1]) token rows at or past it are padding and not counted (no host sync: graph safe)."""
    num_tokens, top_k = topk_ids.shape
    flat = topk_ids.flatten()                                                        # [T * K]
    if real_rows is None:
        counts.index_add_(0, flat, torch.ones_like(flat))
        touched.index_fill_(0, flat, 1)
        return
    real = (torch.arange(num_tokens, device=flat.device) < real_rows).repeat_interleave(top_k).long()  # [T * K]
    counts.index_add_(0, flat, real)
    touched.scatter_reduce_(0, flat, real, reduce="amax")


def fold_step_ref(touched: torch.Tensor, touched_total: torch.Tensor, num_steps: torch.Tensor) -> None:
    """End of a step's routing statistics: touched [L, E] (1 = expert used this step) summed into
    touched_total [L], num_steps [1] += 1 if any expert was used, touched zeroed (int64, in place)."""
    touched_total += touched.sum(dim=1)
    num_steps += touched.any().long()
    touched.zero_()


def fold_step(touched: torch.Tensor, touched_total: torch.Tensor, num_steps: torch.Tensor) -> None:
    """fold_step_ref in one launch on CUDA (six small torch launches otherwise), no host sync."""
    if not (touched.is_cuda and triton_available()):
        fold_step_ref(touched, touched_total, num_steps)
        return
    num_layers, num_experts = touched.shape
    assert touched.is_contiguous() and touched_total.is_contiguous() and touched.dtype == torch.int64
    e_pad = triton.next_power_of_2(num_experts)
    _fold_step_kernel[(1,)](touched, touched_total, num_steps, num_layers, num_experts,
                            LAYERS=max(1, min(triton.next_power_of_2(num_layers), 4096 // e_pad)), E_PAD=e_pad,
                            num_warps=4, **pdl_options(touched))


def softmax_topk(logits: torch.Tensor, top_k: int, renormalize: bool, out_dtype: torch.dtype,
                 counts: torch.Tensor | None = None, touched: torch.Tensor | None = None,
                 real_rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Same contract as softmax_topk_ref (ties go to the lower expert id). With `counts` and `touched`
    (and optionally `real_rows`) it also does record_routing_ref's work in the same launch (integer
    atomics: deterministic)."""
    num_tokens, num_experts = logits.shape
    assert logits.stride(1) == 1
    ids = torch.empty(num_tokens, top_k, dtype=torch.int64, device=logits.device)
    weights = torch.empty(num_tokens, top_k, dtype=out_dtype, device=logits.device)
    record = counts is not None
    if record:
        assert counts.dtype == touched.dtype == torch.int64 and counts.is_contiguous() and touched.is_contiguous()
    if num_tokens:
        _softmax_topk_kernel[(num_tokens,)](logits, ids, weights, counts if record else ids,
                                            touched if record else ids, real_rows if real_rows is not None else ids,
                                            num_experts, logits.stride(0),
                                            TOP_K=top_k, RENORMALIZE=renormalize, RECORD=record,
                                            MASK_ROWS=real_rows is not None,
                                            E_PAD=triton.next_power_of_2(num_experts),
                                            K_PAD=triton.next_power_of_2(top_k), num_warps=4, **pdl_options(logits))
    return ids, weights


ROUTE_FUSED_MAX_TOKENS = 64
# the fused launch pays while its last program's serial routing stays short: on the H200 it beat the
# three launches up to 16 tokens at 128 experts and 1 token at 512, and lost beyond (session 6, call 6)
_FUSED_MAX_TOKENS_X_EXPERTS = 2048


def fused_routing_pays(num_tokens: int, num_experts: int) -> bool:
    """Whether route_and_align is the faster way to route num_tokens (at least 1) over num_experts."""
    return 1 <= num_tokens <= ROUTE_FUSED_MAX_TOKENS and \
        num_tokens * (1 << max(0, num_experts - 1).bit_length()) <= _FUSED_MAX_TOKENS_X_EXPERTS


def route_and_align_ref(hidden: torch.Tensor, gate_weight: torch.Tensor, top_k: int, renormalize: bool,
                        block_m: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """hidden [T, D], gate_weight [E, D] -> (topk_ids [T, K], topk_weights [T, K], sorted_ids, block_expert):
    the router's linear layer, softmax_topk_ref, then fused_moe's row layout (moe_align_ref)."""
    from strata.kernels.moe_align import moe_align_ref

    ids, weights = softmax_topk_ref(hidden @ gate_weight.T, top_k, renormalize, hidden.dtype)
    return (ids, weights, *moe_align_ref(ids, gate_weight.shape[0], block_m))


def route_and_align(hidden: torch.Tensor, gate_weight: torch.Tensor, top_k: int, renormalize: bool, block_m: int,
                    counter: torch.Tensor, counts: torch.Tensor | None = None, touched: torch.Tensor | None = None,
                    real_rows: torch.Tensor | None = None, num_warps: int | None = None,
                    k_splits: int | None = None, layout: bool = True) -> tuple:
    """Same contract as route_and_align_ref in one launch, for 16-bit hidden [T, D] with
    1 <= T <= ROUTE_FUSED_MAX_TOKENS. `counter` is an int32 [1] device buffer holding 0 that the launch
    leaves at 0 (owned by the caller; launches sharing one must not run concurrently). With `counts` and
    `touched` it records the routing statistics like softmax_topk. `num_warps` and `k_splits` (the hidden
    slices the router's GEMV is cut into) are tuning knobs (defaults: 4 warps while T * E <= 512, else 8,
    the faster in the H200 measurements; about 64 programs). `layout=False`: no row layout (sorted ids and
    block experts come back None), for experts that take the ids as they are (the packed pairs)."""
    num_tokens, dim = hidden.shape
    num_experts = gate_weight.shape[0]
    assert 1 <= num_tokens <= ROUTE_FUSED_MAX_TOKENS and hidden.dtype in (torch.bfloat16, torch.float16)
    assert hidden.stride(1) == 1 and gate_weight.is_contiguous() and gate_weight.dtype == hidden.dtype
    assert counter.dtype == torch.int32
    block_e = 16
    expert_blocks = triton.cdiv(num_experts, block_e)
    # about 64 programs: each streams a (16 experts x hidden slice) tile of the router weight, in one
    # BLOCK_K tile where that is at most 512 wide
    k_splits = k_splits or max(1, min(triton.cdiv(dim, 128), 64 // expert_blocks, 16))
    block_k = min(512, triton.next_power_of_2(triton.cdiv(dim, k_splits)))
    device = hidden.device
    partial = torch.empty(k_splits, num_tokens, num_experts, dtype=torch.float32, device=device)  # [S, T, E]
    ids = torch.empty(num_tokens, top_k, dtype=torch.int64, device=device)
    weights = torch.empty(num_tokens, top_k, dtype=hidden.dtype, device=device)
    if layout:
        sorted_ids, block_expert, scratch = align_buffers(num_tokens * top_k, num_experts, block_m, device)
        num_blocks = block_expert.numel()
    else:  # unread
        sorted_ids = block_expert = scratch = ids
        num_blocks = 0
    record = counts is not None
    e_pad = triton.next_power_of_2(num_experts)
    num_warps = num_warps or (4 if num_tokens * e_pad <= 512 else 8)
    # the last program routes TOK_CHUNK rows at a time. A single token lays out its rows straight from
    # registers (ONE_CHUNK), which measured faster on the H200; its tail tile keeps at least one element
    # per thread (Triton 3.6 miscompiles the layout's scans with fewer)
    one_chunk = num_tokens == 1
    tok_chunk = max(1, 32 * num_warps // e_pad) if one_chunk else \
        min(triton.next_power_of_2(num_tokens), max(1, 4096 // e_pad))
    _route_kernel[(expert_blocks, k_splits)](
        hidden, gate_weight, partial, counter, ids, weights, counts if record else ids, touched if record else ids,
        real_rows if real_rows is not None else ids, sorted_ids, block_expert, scratch,
        num_tokens, num_experts, dim, hidden.stride(0), triton.cdiv(triton.cdiv(dim, block_k), k_splits) * block_k,
        num_blocks, TOP_K=top_k, RENORMALIZE=renormalize, RECORD=record, MASK_ROWS=real_rows is not None,
        T_PAD=max(16, triton.next_power_of_2(num_tokens)), E_PAD=e_pad, K_PAD=triton.next_power_of_2(top_k),
        TOK_CHUNK=tok_chunk, BLOCK_E=block_e, BLOCK_K=block_k, K_SPLITS=k_splits, BLOCK_M=block_m, CHUNK=1024,
        ONE_CHUNK=one_chunk, LAYOUT=layout, num_warps=num_warps, **pdl_options(hidden))
    if not layout:
        sorted_ids = block_expert = None
    return ids, weights, sorted_ids, block_expert


if triton is not None:
    from strata.kernels.moe_align import align_pairs, fill_layout

    @triton.jit
    def pick_topk(probs, ok, offs, TOP_K: tl.constexpr, K_PAD: tl.constexpr, E_PAD: tl.constexpr):
        """probs [R, E_PAD] (>= 0 where ok) -> (weights [R, K_PAD] float32, ids [R, K_PAD] int64, slot [R, E_PAD]
        int32): the TOP_K largest per row, largest first, ties to the lower id; slot is each expert's pick
        (0 for the largest) or -1. Each pick is one max-reduction over an int64 key: the probability's bits
        (order-preserving for non-negative floats) above the reversed id."""
        key = (probs.to(tl.int32, bitcast=True).to(tl.int64) << 32) | (E_PAD - 1 - offs[None, :]).to(tl.int64)
        key = tl.where(ok, key, -1)
        k_offs = tl.arange(0, K_PAD)
        picked_key = tl.zeros((probs.shape[0], K_PAD), dtype=tl.int64)
        slot = tl.full(probs.shape, -1, tl.int32)
        for j in tl.static_range(TOP_K):
            best = tl.max(key, axis=1)                                                      # [R]
            picked_key = tl.where(k_offs[None, :] == j, best[:, None], picked_key)
            slot = tl.where(key == best[:, None], j, slot)
            key = tl.where(key == best[:, None], -1, key)
        ids = E_PAD - 1 - (picked_key & 0xFFFFFFFF)
        weights = (picked_key >> 32).to(tl.int32).to(tl.float32, bitcast=True)
        return weights, ids, slot

    @triton.jit
    def _route_kernel(hidden_ptr, gate_ptr, partial_ptr, counter_ptr, ids_ptr, weights_ptr, counts_ptr, touched_ptr,
                      real_rows_ptr, sorted_ids_ptr, block_expert_ptr, scratch_ptr,
                      num_tokens, num_experts, dim, stride_ht, k_per_split, num_blocks,
                      TOP_K: tl.constexpr, RENORMALIZE: tl.constexpr, RECORD: tl.constexpr,
                      MASK_ROWS: tl.constexpr, T_PAD: tl.constexpr, E_PAD: tl.constexpr, K_PAD: tl.constexpr,
                      TOK_CHUNK: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr, K_SPLITS: tl.constexpr,
                      BLOCK_M: tl.constexpr, CHUNK: tl.constexpr, ONE_CHUNK: tl.constexpr, LAYOUT: tl.constexpr,
                      USE_PDL: tl.constexpr):
        pid_e, pid_k = tl.program_id(0), tl.program_id(1)
        # this program's partial logits: [T_PAD, BLOCK_E] over hidden slice [k_start, k_end)
        offs_t = tl.arange(0, T_PAD)
        t_ok = offs_t < num_tokens
        offs_e = pid_e * BLOCK_E + tl.arange(0, BLOCK_E)
        e_ok = offs_e < num_experts
        offs_k = tl.arange(0, BLOCK_K)
        k_start = pid_k * k_per_split
        k_end = tl.minimum(k_start + k_per_split, dim)
        w_ptrs = gate_ptr + offs_e[:, None].to(tl.int64) * dim + offs_k[None, :]              # [BE, BK]
        h_ptrs = hidden_ptr + offs_t[:, None] * stride_ht + offs_k[None, :]                   # [T_PAD, BK]
        # the router weight does not depend on the previous kernel: its first tile loads before the wait
        w = tl.load(w_ptrs + k_start, mask=e_ok[:, None] & (k_start + offs_k < k_end)[None, :], other=0.0)
        wait_for_previous_kernel(USE_PDL)
        h = tl.load(h_ptrs + k_start, mask=t_ok[:, None] & (k_start + offs_k < k_end)[None, :], other=0.0)
        acc = tl.dot(h, tl.trans(w))
        for k0 in range(k_start + BLOCK_K, k_end, BLOCK_K):
            k_ok = k0 + offs_k < k_end
            w = tl.load(w_ptrs + k0, mask=e_ok[:, None] & k_ok[None, :], other=0.0)
            h = tl.load(h_ptrs + k0, mask=t_ok[:, None] & k_ok[None, :], other=0.0)
            acc = tl.dot(h, tl.trans(w), acc)
        split_stride = num_tokens * num_experts
        tl.store(partial_ptr + pid_k * split_stride + offs_t[:, None] * num_experts + offs_e[None, :], acc,
                 mask=t_ok[:, None] & e_ok[None, :])
        tl.debug_barrier()  # every thread's partial stored before the release below
        finished = tl.atomic_add(counter_ptr, 1, sem="acq_rel")
        if finished == tl.num_programs(0) * K_SPLITS - 1:  # the last program: route every token
            if ONE_CHUNK:  # every token at once, so the layout comes from registers (no global round trips)
                if LAYOUT:
                    fill_layout(sorted_ids_ptr, block_expert_ptr, num_tokens * TOP_K, num_blocks, BLOCK_M, CHUNK)
                rows, slot = _route_rows(0, partial_ptr, hidden_ptr, ids_ptr, weights_ptr, counts_ptr,
                                         touched_ptr, real_rows_ptr, num_tokens, num_experts, TOP_K, RENORMALIZE,
                                         RECORD, MASK_ROWS, E_PAD, K_PAD, TOK_CHUNK, K_SPLITS)
                if LAYOUT:
                    tl.debug_barrier()  # the fills land before the layout overwrites them
                    lay_out_picks(rows, slot, num_tokens, sorted_ids_ptr, block_expert_ptr, TOP_K, E_PAD, BLOCK_M)
            else:
                for t0 in range(0, num_tokens, TOK_CHUNK):
                    _route_rows(t0, partial_ptr, hidden_ptr, ids_ptr, weights_ptr, counts_ptr, touched_ptr,
                                real_rows_ptr, num_tokens, num_experts, TOP_K, RENORMALIZE, RECORD, MASK_ROWS,
                                E_PAD, K_PAD, TOK_CHUNK, K_SPLITS)
                if LAYOUT:
                    tl.debug_barrier()  # the ids stored above are read back by the layout
                    align_pairs(ids_ptr, sorted_ids_ptr, block_expert_ptr, scratch_ptr, num_tokens * TOP_K,
                                num_experts, num_blocks, BLOCK_M, E_PAD, CHUNK)
            tl.atomic_xchg(counter_ptr, 0)

    @triton.jit
    def _route_rows(t0, partial_ptr, hidden_ptr, ids_ptr, weights_ptr, counts_ptr, touched_ptr, real_rows_ptr,
                    num_tokens, num_experts, TOP_K: tl.constexpr, RENORMALIZE: tl.constexpr, RECORD: tl.constexpr,
                    MASK_ROWS: tl.constexpr, E_PAD: tl.constexpr, K_PAD: tl.constexpr, TOK_CHUNK: tl.constexpr,
                    K_SPLITS: tl.constexpr):
        """Route tokens [t0, t0 + TOK_CHUNK) from the summed partial logits: ids, weights and statistics
        stored; -> (rows [TC], slot [TC, E_PAD]: each expert's pick per row, -1 if not picked)."""
        k_offs = tl.arange(0, K_PAD)
        k_ok = k_offs < TOP_K
        offs_all = tl.arange(0, E_PAD)
        all_ok = offs_all < num_experts
        split_stride = num_tokens * num_experts
        rows = t0 + tl.arange(0, TOK_CHUNK)
        r_ok = rows < num_tokens
        logits = tl.zeros((TOK_CHUNK, E_PAD), dtype=tl.float32)
        for split in tl.static_range(K_SPLITS):  # unrolled: the loads go out together
            logits += tl.load(partial_ptr + split * split_stride + rows[:, None] * num_experts + offs_all[None, :],
                              mask=r_ok[:, None] & all_ok[None, :], other=0.0, cache_modifier=".cg")
        # rounded to the model dtype, as the router's linear layer returns them
        logits = logits.to(hidden_ptr.dtype.element_ty).to(tl.float32)
        logits = tl.where(all_ok[None, :], logits, float("-inf"))
        e = tl.exp(logits - tl.max(logits, axis=1)[:, None])
        probs = e / tl.sum(e, axis=1)[:, None]
        picked_w, picked_id, slot = pick_topk(probs, all_ok[None, :], offs_all, TOP_K, K_PAD, E_PAD)  # [TC, K_PAD]
        if RENORMALIZE:
            picked_w = picked_w / tl.sum(tl.where(k_ok[None, :], picked_w, 0.0), axis=1)[:, None]
        out_ok = r_ok[:, None] & k_ok[None, :]
        out_at = rows[:, None].to(tl.int64) * TOP_K + k_offs[None, :]
        tl.store(ids_ptr + out_at, picked_id, mask=out_ok)
        tl.store(weights_ptr + out_at, picked_w.to(weights_ptr.dtype.element_ty), mask=out_ok)
        if RECORD:
            counted = out_ok
            if MASK_ROWS:  # padding rows of a graph layout are not counted
                counted = counted & (rows[:, None] < tl.load(real_rows_ptr))
            tl.atomic_add(counts_ptr + picked_id, tl.full((TOK_CHUNK, K_PAD), 1, tl.int64), mask=counted)
            tl.store(touched_ptr + picked_id, tl.full((TOK_CHUNK, K_PAD), 1, tl.int64), mask=counted)
        return rows, slot

    @triton.jit
    def lay_out_picks(rows, slot, num_tokens, sorted_ids_ptr, block_expert_ptr, TOP_K: tl.constexpr,
                      E_PAD: tl.constexpr, BLOCK_M: tl.constexpr):
        """moe_align_ref's layout from every token's picks in registers (slot [T, E_PAD], rows [T] holding
        all tokens): an expert's group starts after the padded groups of lower experts, and a pair's place
        in it is the number of earlier tokens that picked the same expert."""
        picked = (slot >= 0) & (rows < num_tokens)[:, None]                                # [T, E_PAD]
        hits = picked.to(tl.int32)
        upto = tl.cumsum(hits, 0)                                                           # [T, E_PAD]
        counts = tl.max(upto, axis=0)                                                       # [E_PAD]
        padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
        position = (tl.cumsum(padded, 0) - padded)[None, :] + upto - hits                   # [T, E_PAD]
        expert = tl.arange(0, E_PAD)[None, :] + tl.zeros_like(position)
        tl.store(sorted_ids_ptr + position, rows[:, None] * TOP_K + slot, mask=picked)
        tl.store(block_expert_ptr + position // BLOCK_M, expert, mask=picked)

    @triton.jit
    def _fold_step_kernel(touched_ptr, total_ptr, steps_ptr, num_layers, num_experts, LAYERS: tl.constexpr,
                          E_PAD: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        offs_e = tl.arange(0, E_PAD)
        used = tl.zeros((LAYERS,), dtype=tl.int64)
        for l0 in range(0, num_layers, LAYERS):
            layers = l0 + tl.arange(0, LAYERS)
            l_ok = layers < num_layers
            ok = l_ok[:, None] & (offs_e < num_experts)[None, :]
            ptrs = touched_ptr + layers[:, None].to(tl.int64) * num_experts + offs_e[None, :]
            count = tl.sum(tl.load(ptrs, mask=ok, other=0), axis=1)                          # [LAYERS]
            tl.store(total_ptr + layers, tl.load(total_ptr + layers, mask=l_ok, other=0) + count, mask=l_ok)
            tl.store(ptrs, tl.zeros((LAYERS, E_PAD), dtype=tl.int64), mask=ok)
            used = tl.maximum(used, (count > 0).to(tl.int64))
        tl.store(steps_ptr, tl.load(steps_ptr) + tl.max(used, axis=0))

    @triton.jit
    def _softmax_topk_kernel(logits_ptr, ids_ptr, weights_ptr, counts_ptr, touched_ptr, real_rows_ptr, num_experts,
                             stride_t, TOP_K: tl.constexpr, RENORMALIZE: tl.constexpr, RECORD: tl.constexpr,
                             MASK_ROWS: tl.constexpr,
                             E_PAD: tl.constexpr, K_PAD: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        token = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, E_PAD)
        ok = offs < num_experts
        x = tl.load(logits_ptr + token * stride_t + offs[None, :], mask=ok[None, :],
                    other=float("-inf")).to(tl.float32)                                     # [1, E_PAD]
        e = tl.exp(x - tl.max(x, axis=1)[:, None])
        probs = e / tl.sum(e, axis=1)[:, None]
        picked_w, picked_id, _ = pick_topk(probs, ok[None, :], offs, TOP_K, K_PAD, E_PAD)   # [1, K_PAD]
        k_offs = tl.arange(0, K_PAD)
        if RENORMALIZE:
            picked_w = picked_w / tl.sum(tl.where(k_offs[None, :] < TOP_K, picked_w, 0.0), axis=1)[:, None]
        picked_w, picked_id = tl.reshape(picked_w, (K_PAD,)), tl.reshape(picked_id, (K_PAD,))
        k_ok = k_offs < TOP_K
        tl.store(ids_ptr + token * TOP_K + k_offs, picked_id, mask=k_ok)
        tl.store(weights_ptr + token * TOP_K + k_offs, picked_w.to(weights_ptr.dtype.element_ty), mask=k_ok)
        if RECORD:
            counted = k_ok
            if MASK_ROWS:  # padding rows of a graph layout are not counted
                counted = counted & (token < tl.load(real_rows_ptr))
            tl.atomic_add(counts_ptr + picked_id, tl.full((K_PAD,), 1, tl.int64), mask=counted)
            tl.store(touched_ptr + picked_id, tl.full((K_PAD,), 1, tl.int64), mask=counted)
