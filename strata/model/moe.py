"""Sparse MoE block: router (softmax, top-k, optional renormalisation), the routed experts behind an
expert-provider interface, and Qwen3-Next's shared expert with its sigmoid gate.

The block never touches expert weights directly: it hands (hidden, top-k ids, top-k weights) to an
`ExpertProvider`, so placement (GPU slots, CPU pool, PCIe copies) can change without touching models.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from strata.config import ModelConfig
from strata.kernels import triton_available
from strata.kernels.routing import fused_routing_pays, route_and_align, softmax_topk_ref
from strata.model.mlp import DenseMLP


@dataclass
class TopkPartials:
    """An MoE layer's output before its sum over the top-k experts, left for the next RMSNorm to fold in
    (strata.kernels.rms_norm.rms_norm_topk_sum): partials [T, K, D] float32 weighted expert outputs
    ([1, 1, D] for one token, whose down kernel sums them), shared [T, D] the shared expert's output or
    None; the output itself is `total()`."""

    partials: torch.Tensor
    shared: torch.Tensor | None
    dtype: torch.dtype

    def total(self) -> torch.Tensor:
        from strata.kernels.rms_norm import topk_sum_ref

        return topk_sum_ref(self.partials, self.shared, self.dtype)


class ExpertProvider(Protocol):
    def __call__(self, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        """hidden [T, D], topk_ids [T, K], topk_weights [T, K] -> weighted sum of expert outputs [T, D]."""
        ...


# Where LocalExperts allocate their weights while a model is built (None: the default device). The
# loader points it at host memory when only part of the experts will live on the GPU, so a model whose
# experts do not fit in VRAM never has to be placed there whole.
_EXPERT_WEIGHTS_DEVICE: contextvars.ContextVar[str | None] = contextvars.ContextVar("expert_device", default=None)


@contextlib.contextmanager
def expert_weights_on(device: str | None):
    token = _EXPERT_WEIGHTS_DEVICE.set(device)
    try:
        yield
    finally:
        _EXPERT_WEIGHTS_DEVICE.reset(token)


class LocalExperts(nn.Module):
    """All experts as stacked tensors on one device; rows are grouped by expert so each expert
    used by any row of the step is read once."""

    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.num_experts = num_experts
        device = _EXPERT_WEIGHTS_DEVICE.get()
        self.w13 = nn.Parameter(torch.empty(num_experts, 2 * intermediate_size, hidden_size, device=device))  # [E, 2I, D]
        self.w2 = nn.Parameter(torch.empty(num_experts, hidden_size, intermediate_size, device=device))       # [E, D, I]

    def forward(self, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        return run_experts(hidden, self.w13, self.w2, topk_ids, topk_weights)


def run_experts(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
                topk_weights: torch.Tensor, may_skip: bool = False) -> torch.Tensor:
    """The grouped experts on the fused kernel (CUDA, 16-bit) or the torch path. `may_skip`: negative
    ids mark pairs computed elsewhere (the kernel then sees id 0 with weight 0; no host sync)."""
    # the Triton kernel was tuned and tested for 16-bit weights; float32 takes the torch path
    if hidden.is_cuda and hidden.dtype in (torch.bfloat16, torch.float16) and triton_available():
        from strata.kernels.fused_moe import fused_moe

        if may_skip:
            skipped = topk_ids < 0
            topk_ids, topk_weights = topk_ids.clamp(min=0), topk_weights.masked_fill(skipped, 0)
        return fused_moe(hidden, w13, w2, topk_ids, topk_weights)
    return grouped_experts(hidden, w13, w2, topk_ids, topk_weights)


def expert_mlp(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """One expert's SwiGLU: x [n, D], w13 [2I, D] ([gate; up] rows), w2 [D, I] -> [n, D]."""
    gate, up = F.linear(x, w13).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, w2)


def grouped_experts(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
                    topk_weights: torch.Tensor) -> torch.Tensor:
    """hidden [T, D], w13 [E, 2I, D], w2 [E, D, I], topk_ids / topk_weights [T, K]
    -> sum_k w[t, k] * expert_{ids[t, k]}(hidden[t]) [T, D]; rows sorted by expert, each expert once.
    Pairs with a negative id are skipped (an expert provider computes them elsewhere)."""
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
            y = expert_mlp(hidden[rows], w13[expert_id], w2[expert_id])  # [n, D]
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
        # set by strata.experts when routing statistics are kept: stats.record(layer_idx, topk_ids)
        self.stats = None
        self.layer_idx = -1
        # random: models only: a synthetic per-expert skew of the routing (a Zipf prior), [E] or None
        self.routing_bias: torch.Tensor | None = None
        # int32 [1] device counter of route_and_align's programs (0 between launches), made on first use
        self._route_counter: torch.Tensor | None = None
        self.shared_expert = self.shared_expert_gate = None
        if cfg.shared_expert_intermediate_size:
            self.shared_expert = DenseMLP(cfg.hidden_size, cfg.shared_expert_intermediate_size)
            self.shared_expert_gate = nn.Linear(cfg.hidden_size, 1, bias=False)

    def route(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden [T, D] -> (topk_ids [T, K] int64, topk_weights [T, K]): softmax, top-k, renormalise;
        the routing statistics are recorded on the way (in the same launch on CUDA)."""
        logits = self.gate(hidden)                                      # [T, E]
        if self.routing_bias is not None:
            logits = logits + self.routing_bias
        if hidden.is_cuda and triton_available():
            from strata.kernels.routing import softmax_topk

            rows = self.stats.layer_rows(self.layer_idx) if self.stats is not None else (None, None, None)
            return softmax_topk(logits, self.top_k, self.norm_topk_prob, hidden.dtype, *rows)
        topk_ids, topk_weights = softmax_topk_ref(logits, self.top_k, self.norm_topk_prob, hidden.dtype)
        if self.stats is not None:
            self.stats.record(self.layer_idx, topk_ids)
        return topk_ids, topk_weights

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        out = self.forward_unsummed(hidden)
        return out.total() if isinstance(out, TopkPartials) else out

    def forward_unsummed(self, hidden: torch.Tensor) -> torch.Tensor | TopkPartials:
        """forward, except that a decode-sized CUDA step returns its TopkPartials: the decoder layers hand
        them to the next norm, which sums them in its own launch."""
        if self._routes_fused(hidden):
            return self._forward_fused(hidden)
        topk_ids, topk_weights = self.route(hidden)
        shared = self._shared(hidden)
        out = self.experts(hidden, topk_ids, topk_weights)
        return out if shared is None else out + shared

    def _shared(self, hidden: torch.Tensor) -> torch.Tensor | None:
        """Qwen3-Next's gated shared expert [T, D], or None. Queued before the routed experts: with offloaded
        experts the device computes it while the host computes the missed ones (in the same graph piece)."""
        if self.shared_expert is None:
            return None
        return torch.sigmoid(self.shared_expert_gate(hidden)) * self.shared_expert(hidden)

    def _routes_fused(self, hidden: torch.Tensor) -> bool:
        """Decode-sized CUDA steps on device-resident experts route in one launch (route_and_align) where
        that is the faster way (fused_routing_pays)."""
        return (hidden.is_cuda and hidden.dtype in (torch.bfloat16, torch.float16) and triton_available()
                and fused_routing_pays(hidden.shape[0], self.gate.weight.shape[0]) and self.routing_bias is None
                and self.gate.bias is None and isinstance(self.experts, LocalExperts) and self.experts.w13.is_cuda)

    def _forward_fused(self, hidden: torch.Tensor) -> TopkPartials:
        """Router projection, routing (and statistics) and the expert row layout in one launch, then the
        grouped expert GEMMs: two launches fewer per layer than route() + fused_moe."""
        from strata.kernels.fused_moe import default_config, moe_grouped_gemms  # imports this module

        if self._route_counter is None or self._route_counter.device != hidden.device:
            self._route_counter = torch.zeros(1, dtype=torch.int32, device=hidden.device)
        cfg = default_config(hidden.shape[0] * self.top_k, self.experts.num_experts)
        rows = self.stats.layer_rows(self.layer_idx) if self.stats is not None else (None, None, None)
        _, topk_weights, sorted_ids, block_expert = route_and_align(
            hidden, self.gate.weight, self.top_k, self.norm_topk_prob, cfg["BLOCK_M"], self._route_counter, *rows)
        shared = self._shared(hidden)
        partials = moe_grouped_gemms(hidden, self.experts.w13, self.experts.w2, topk_weights, sorted_ids,
                                     block_expert, cfg, sum_topk=False)       # [T, K or 1, D] float32
        return TopkPartials(partials, shared, hidden.dtype)
