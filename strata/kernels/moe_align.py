"""fused_moe's row layout: (token, k) pairs grouped by expert, each group padded to a multiple of
BLOCK_M, so a program of the grouped GEMMs owns BLOCK_M rows of one expert. `moe_align` does it in one
single-program launch (a counting sort with atomics); `align_pairs` is that program's body, which the
fused routing kernel (strata.kernels.routing.route_and_align) also runs as its tail; that kernel lays out
one token's rows from registers after `fill_layout`.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: moe_align_ref still works
    triton = tl = None

from strata.kernels.launch import pdl_options

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel


def moe_align_ref(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Group (token, k) pairs by expert, each group padded to a multiple of block_m (pairs of one expert
    in token order; moe_align may order them differently within a group).

    Returns sorted_ids [P] (flat index t * K + k, or T * K for padding) and block_expert [P // block_m]
    (expert of each block, -1 for unused blocks). P depends only on shapes: at most min(E, T * K)
    groups, each adding at most one partial block."""
    num_pairs = topk_ids.numel()
    num_blocks = aligned_num_blocks(num_pairs, num_experts, block_m)
    flat_ids = topk_ids.flatten()
    order = flat_ids.argsort(stable=True)                            # [T * K]
    sorted_experts = flat_ids[order]
    # scatter_add, not bincount: bincount syncs with the host (to size its output) and breaks graph capture
    counts = torch.zeros(num_experts, dtype=torch.long, device=flat_ids.device).scatter_add_(
        0, flat_ids, torch.ones_like(flat_ids))                       # [E]
    padded = (counts + block_m - 1) // block_m * block_m
    padded_start = padded.cumsum(0) - padded                          # exclusive
    start = counts.cumsum(0) - counts
    rank = torch.arange(num_pairs, device=flat_ids.device) - start[sorted_experts]
    position = padded_start[sorted_experts] + rank                    # [T * K] row of each pair
    sorted_ids = torch.full((num_blocks * block_m,), num_pairs, dtype=torch.int32, device=flat_ids.device)
    sorted_ids[position] = order.to(torch.int32)
    block_expert = torch.full((num_blocks,), -1, dtype=torch.int32, device=flat_ids.device)
    block_expert[position // block_m] = sorted_experts.to(torch.int32)
    return sorted_ids, block_expert


def aligned_num_blocks(num_pairs: int, num_experts: int, block_m: int) -> int:
    return -(-num_pairs // block_m) + min(num_experts, num_pairs)


def align_buffers(num_pairs: int, num_experts: int, block_m: int, device: torch.device
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sorted_ids, block_expert, scratch) for align_pairs, sized from shapes only (graph-safe)."""
    num_blocks = aligned_num_blocks(num_pairs, num_experts, block_m)
    return (torch.empty(num_blocks * block_m, dtype=torch.int32, device=device),
            torch.empty(num_blocks, dtype=torch.int32, device=device),
            torch.empty(2 * num_experts + num_pairs, dtype=torch.int32, device=device))


def moe_align(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """moe_align_ref in one single-program launch (a counting sort with atomics) instead of a dozen
    torch ops: at decode sizes the launches, not the bytes, are the cost."""
    num_pairs = topk_ids.numel()
    sorted_ids, block_expert, scratch = align_buffers(num_pairs, num_experts, block_m, topk_ids.device)
    num_blocks = block_expert.numel()
    _align_kernel[(1,)](topk_ids, sorted_ids, block_expert, scratch, num_pairs, num_experts, num_blocks,
                        BLOCK_M=block_m, E_PAD=triton.next_power_of_2(num_experts), CHUNK=1024, num_warps=8,
                        **pdl_options(topk_ids))
    return sorted_ids, block_expert


if triton is not None:

    @triton.jit
    def _align_kernel(ids_ptr, sorted_ids_ptr, block_expert_ptr, scratch_ptr, num_pairs, num_experts, num_blocks,
                      BLOCK_M: tl.constexpr, E_PAD: tl.constexpr, CHUNK: tl.constexpr, USE_PDL: tl.constexpr):
        wait_for_previous_kernel(USE_PDL)
        align_pairs(ids_ptr, sorted_ids_ptr, block_expert_ptr, scratch_ptr, num_pairs, num_experts, num_blocks,
                    BLOCK_M, E_PAD, CHUNK)

    @triton.jit
    def align_pairs(ids_ptr, sorted_ids_ptr, block_expert_ptr, scratch_ptr, num_pairs, num_experts, num_blocks,
                    BLOCK_M: tl.constexpr, E_PAD: tl.constexpr, CHUNK: tl.constexpr):
        """moe_align_ref's layout by one program (also the tail of the fused routing kernel).
        scratch: [0, E) counters, [E, 2E) padded group starts, [2E, 2E + T*K) rank of each pair in its
        group. One program, so a barrier orders the passes; .cg loads read L2, where the atomics landed."""
        offs_e = tl.arange(0, E_PAD)
        e_ok = offs_e < num_experts
        offs = tl.arange(0, CHUNK)
        tl.store(scratch_ptr + offs_e, 0, mask=e_ok)
        fill_layout(sorted_ids_ptr, block_expert_ptr, num_pairs, num_blocks, BLOCK_M, CHUNK)
        tl.debug_barrier()
        for c in range(0, num_pairs, CHUNK):
            ok = c + offs < num_pairs
            expert = tl.load(ids_ptr + c + offs, mask=ok, other=0).to(tl.int32)
            rank = tl.atomic_add(scratch_ptr + expert, 1, mask=ok)
            tl.store(scratch_ptr + 2 * num_experts + c + offs, rank, mask=ok)
        tl.debug_barrier()
        counts = tl.load(scratch_ptr + offs_e, mask=e_ok, other=0, cache_modifier=".cg")
        padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
        tl.store(scratch_ptr + num_experts + offs_e, tl.cumsum(padded, 0) - padded, mask=e_ok)
        tl.debug_barrier()
        for c in range(0, num_pairs, CHUNK):
            ok = c + offs < num_pairs
            expert = tl.load(ids_ptr + c + offs, mask=ok, other=0).to(tl.int32)
            rank = tl.load(scratch_ptr + 2 * num_experts + c + offs, mask=ok, other=0, cache_modifier=".cg")
            position = tl.load(scratch_ptr + num_experts + expert, mask=ok, other=0, cache_modifier=".cg") + rank
            tl.store(sorted_ids_ptr + position, c + offs, mask=ok)
            tl.store(block_expert_ptr + position // BLOCK_M, expert, mask=ok)

    @triton.jit
    def fill_layout(sorted_ids_ptr, block_expert_ptr, num_pairs, num_blocks, BLOCK_M: tl.constexpr,
                    CHUNK: tl.constexpr):
        """Every row of the layout padding (num_pairs) and every block unused (-1)."""
        offs = tl.arange(0, CHUNK)
        for c in range(0, num_blocks * BLOCK_M, CHUNK):
            tl.store(sorted_ids_ptr + c + offs, num_pairs, mask=c + offs < num_blocks * BLOCK_M)
        for c in range(0, num_blocks, CHUNK):
            tl.store(block_expert_ptr + c + offs, -1, mask=c + offs < num_blocks)
