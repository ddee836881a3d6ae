"""Sparse MoE block: router (softmax, top-k, optional renormalisation), the routed experts behind an
expert-provider interface, and Qwen3-Next's shared expert with its sigmoid gate.

The block never touches expert weights directly: it hands (hidden, top-k ids, top-k weights) to an
`ExpertProvider`, so placement (GPU slots, CPU pool, PCIe copies) can change without touching models.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from strata.config import ModelConfig
from strata.kernels import triton_available
from strata.model.mlp import DenseMLP


class ExpertProvider(Protocol):
    def __call__(self, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        """hidden [T, D], topk_ids [T, K], topk_weights [T, K] -> weighted sum of expert outputs [T, D]."""
        ...


class LocalExperts(nn.Module):
    """All experts as stacked tensors on one device; rows are grouped by expert so each expert
    used by any row of the step is read once."""

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.w13 = nn.Parameter(torch.empty(num_experts, 2 * intermediate_size, hidden_size))  # [E, 2I, D]
        self.w2 = nn.Parameter(torch.empty(num_experts, hidden_size, intermediate_size))       # [E, D, I]

    def forward(self, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        # the Triton kernel was tuned and tested for 16-bit weights; float32 takes the torch path
        if hidden.is_cuda and hidden.dtype in (torch.bfloat16, torch.float16) and triton_available():
            from strata.kernels.fused_moe import fused_moe

            return fused_moe(hidden, self.w13, self.w2, topk_ids, topk_weights)
        return grouped_experts(hidden, self.w13, self.w2, topk_ids, topk_weights)


def grouped_experts(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
                    topk_weights: torch.Tensor) -> torch.Tensor:
    """hidden [T, D], w13 [E, 2I, D] ([gate; up] rows), w2 [E, D, I], topk_ids / topk_weights [T, K]
    -> sum_k w[t, k] * expert_{ids[t, k]}(hidden[t]) [T, D]; rows sorted by expert, each expert once."""
    num_tokens, top_k = topk_ids.shape
    flat_ids = topk_ids.flatten()                        # [T * K]
    order = flat_ids.argsort(stable=True)
    counts = torch.bincount(flat_ids, minlength=w13.shape[0]).tolist()
    token_of = order // top_k                            # [T * K] row of each sorted entry
    weights = topk_weights.flatten()[order].unsqueeze(1)  # [T * K, 1]
    out = torch.zeros_like(hidden)
    start = 0
    for expert_id, count in enumerate(counts):
        if count == 0:
            continue
        rows = token_of[start:start + count]
        gate, up = F.linear(hidden[rows], w13[expert_id]).chunk(2, dim=-1)
        y = F.linear(F.silu(gate) * up, w2[expert_id])  # [n, D]
        out.index_add_(0, rows, (y * weights[start:start + count]).to(out.dtype))
        start += count
    return out


class MoEBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, experts: ExpertProvider | None = None) -> None:
        super().__init__()
        self.top_k = cfg.num_experts_per_tok
        self.norm_topk_prob = cfg.norm_topk_prob
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.experts = experts if experts is not None else LocalExperts(
            cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size)
        self.shared_expert = self.shared_expert_gate = None
        if cfg.shared_expert_intermediate_size:
            self.shared_expert = DenseMLP(cfg.hidden_size, cfg.shared_expert_intermediate_size)
            self.shared_expert_gate = nn.Linear(cfg.hidden_size, 1, bias=False)

    def route(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = torch.softmax(self.gate(hidden), dim=-1, dtype=torch.float32)  # [T, E]
        topk_weights, topk_ids = torch.topk(probs, self.top_k, dim=-1)        # [T, K]
        if self.norm_topk_prob:
            topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
        return topk_ids, topk_weights.to(hidden.dtype)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        topk_ids, topk_weights = self.route(hidden)
        out = self.experts(hidden, topk_ids, topk_weights)
        if self.shared_expert is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(hidden)) * self.shared_expert(hidden)
        return out
