"""MoE routing in one launch: softmax over the router logits (float32), top-k, optional renormalisation
of the k weights, cast to the model dtype, and optionally the layer's routing statistics. One program per token; the k picks are k passes of argmax
over the row held in registers (k is small), replacing torch's softmax + topk + sum + div + cast.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: the ref still works
    triton = tl = None


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
                                            K_PAD=triton.next_power_of_2(top_k), num_warps=4)
    return ids, weights


if triton is not None:

    @triton.jit
    def _softmax_topk_kernel(logits_ptr, ids_ptr, weights_ptr, counts_ptr, touched_ptr, real_rows_ptr, num_experts,
                             stride_t, TOP_K: tl.constexpr, RENORMALIZE: tl.constexpr, RECORD: tl.constexpr,
                             MASK_ROWS: tl.constexpr,
                             E_PAD: tl.constexpr, K_PAD: tl.constexpr):
        token = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, E_PAD)
        ok = offs < num_experts
        x = tl.load(logits_ptr + token * stride_t + offs, mask=ok, other=float("-inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        probs = e / tl.sum(e, axis=0)
        remaining = tl.where(ok, probs, -1.0)
        k_offs = tl.arange(0, K_PAD)
        picked_w = tl.zeros((K_PAD,), dtype=tl.float32)
        picked_id = tl.zeros((K_PAD,), dtype=tl.int64)
        for j in tl.static_range(TOP_K):
            best = tl.max(remaining, axis=0)
            best_id = tl.min(tl.where(remaining == best, offs, E_PAD), axis=0)
            picked_w = tl.where(k_offs == j, best, picked_w)
            picked_id = tl.where(k_offs == j, best_id.to(tl.int64), picked_id)
            remaining = tl.where(offs == best_id, -2.0, remaining)
        if RENORMALIZE:
            picked_w = picked_w / tl.sum(tl.where(k_offs < TOP_K, picked_w, 0.0), axis=0)
        k_ok = k_offs < TOP_K
        tl.store(ids_ptr + token * TOP_K + k_offs, picked_id, mask=k_ok)
        tl.store(weights_ptr + token * TOP_K + k_offs, picked_w.to(weights_ptr.dtype.element_ty), mask=k_ok)
        if RECORD:
            counted = k_ok
            if MASK_ROWS:  # padding rows of a graph layout are not counted
                counted = counted & (token < tl.load(real_rows_ptr))
            tl.atomic_add(counts_ptr + picked_id, tl.full((K_PAD,), 1, tl.int64), mask=counted)
            tl.store(touched_ptr + picked_id, tl.full((K_PAD,), 1, tl.int64), mask=counted)
