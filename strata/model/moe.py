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
from torch import nn

from strata.config import ModelConfig
from strata.kernels.fused_moe import expert_mlp  # noqa: F401 (strata.experts' CPU pool)
from strata.kernels.rms_norm import gated_shared_ref, topk_sum_ref
from strata.model import ops
from strata.model.linear import Linear
from strata.model.mlp import DenseMLP
from strata.model.packed import ExpertBlocks, PackedExpertWeight


@dataclass
class TopkPartials:
    """An MoE layer's output before its sum over the top-k experts, left for the next RMSNorm to fold in
    (strata.kernels.rms_norm.rms_norm_topk_sum): partials [T, K, D] float32 weighted expert outputs
    ([1, 1, D] for one token, whose down kernel sums them), shared [T, D] the shared expert's output or
    None, shared_gate [T, 1] its gate's logits where the sum applies the gate (sigmoid) too; the output
    itself is `total()`."""

    partials: torch.Tensor
    shared: torch.Tensor | None
    dtype: torch.dtype
    shared_gate: torch.Tensor | None = None

    def total(self) -> torch.Tensor:
        return topk_sum_ref(self.partials, self.shared, self.dtype, self.shared_gate)


class ExpertProvider(Protocol):
    def __call__(self, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        """hidden [T, D], topk_ids [T, K], topk_weights [T, K] -> weighted sum of expert outputs [T, D]."""
        ...


# Where LocalExperts allocate their weights while a model is built (None: the default device). The
# loader points it at host memory when only part of the experts will live on the GPU, so a model whose
# experts do not fit in VRAM never has to be placed there whole. With `packed`, the checkpoint's experts
# come as GGUF blocks (PackedLocalExperts replace LocalExperts at load): the dense tensors are only
# shapes (meta), and the blocks go to that device.
_EXPERT_WEIGHTS_DEVICE: contextvars.ContextVar[str | None] = contextvars.ContextVar("expert_device", default=None)
_EXPERTS_PACKED: contextvars.ContextVar[bool] = contextvars.ContextVar("experts_packed", default=False)


@contextlib.contextmanager
def expert_weights_on(device: str | None, packed: bool = False):
    tokens = _EXPERT_WEIGHTS_DEVICE.set(device), _EXPERTS_PACKED.set(packed)
    try:
        yield
    finally:
        _EXPERT_WEIGHTS_DEVICE.reset(tokens[0])
        _EXPERTS_PACKED.reset(tokens[1])


@contextlib.contextmanager
def experts_on_meta():
    """Experts built inside are shapes only (another pipeline stage's layers), whatever device they would get."""
    token = _EXPERT_WEIGHTS_DEVICE.set("meta")
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
        self.home = torch.device(device) if device is not None else torch.get_default_device()
        if _EXPERTS_PACKED.get():
            device = "meta"
        self.w13 = nn.Parameter(torch.empty(num_experts, 2 * intermediate_size, hidden_size, device=device))  # [E, 2I, D]
        self.w2 = nn.Parameter(torch.empty(num_experts, hidden_size, intermediate_size, device=device))       # [E, D, I]

    def forward(self, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
        return ops.fused_moe(hidden, self.w13, self.w2, topk_ids, topk_weights)


class PackedLocalExperts(nn.Module):
    """All experts of a layer as GGUF blocks on one device (what LocalExperts become when the checkpoint's
    experts come packed): w13 uint8 [E, 2I, rb13], w2 uint8 [E, D, rb2] (ExpertBlocks)."""

    def __init__(self, w13: PackedExpertWeight, w2: PackedExpertWeight) -> None:
        super().__init__()
        self.num_experts = w13.shape[0]
        # buffers: Module.to moves them (not persistent: no state_dict entry)
        self.register_buffer("w13", w13.blocks, persistent=False)
        self.register_buffer("w2", w2.blocks, persistent=False)
        self.qtype13, self.qtype2 = w13.qtype, w2.qtype
        self.int8_activations = False  # --cpu-matmul int8 (packed.set_cpu_matmul): the CPU's quant_moe

    def blocks(self) -> ExpertBlocks:
        return ExpertBlocks(self.w13, self.qtype13, self.w2, self.qtype2)

    def forward(self, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                longest_query: int = 0) -> torch.Tensor:
        return ops.packed_moe(hidden, self.blocks(), topk_ids, topk_weights, int8=self.int8_activations,
                              longest_query=longest_query)

    def extra_repr(self) -> str:
        from gguf import GGMLQuantizationType

        types = f"{GGMLQuantizationType(self.qtype13).name}/{GGMLQuantizationType(self.qtype2).name}"
        return f"experts={self.num_experts}, {types}, {(self.w13.numel() + self.w2.numel()) / 2**20:.1f} MiB"


def run_experts(hidden: torch.Tensor, weights: tuple[torch.Tensor, torch.Tensor] | ExpertBlocks,
                topk_ids: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
    """The grouped experts as the expert providers (strata.experts) call them, on dense (w13, w2) or an
    ExpertBlocks; pairs with a negative id are computed elsewhere and skipped. hidden [T, D] -> [T, D]."""
    if isinstance(weights, ExpertBlocks):
        return ops.packed_moe(hidden, weights, topk_ids, topk_weights)
    return ops.fused_moe(hidden, *weights, topk_ids, topk_weights, may_skip=True)


class MoEBlock(nn.Module):
    def __init__(self, cfg: ModelConfig, experts: ExpertProvider | None = None) -> None:
        super().__init__()
        self.top_k = cfg.num_experts_per_tok
        self.norm_topk_prob = cfg.norm_topk_prob
        self.gate = nn.Linear(cfg.hidden_size, cfg.num_experts, bias=False)
        self.experts = experts if experts is not None else LocalExperts(
            cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size)
        # routing statistics (stats.record(layer_idx, topk_ids)): given by attach_experts, else none kept
        self.stats = None
        self.layer_idx = -1
        # random: models only: a synthetic per-expert skew of the routing (a Zipf prior), [E] or None
        self.routing_bias: torch.Tensor | None = None
        # int32 [1] device counter of route_and_align's programs (0 between launches), made on first use
        self._route_counter: torch.Tensor | None = None
        self.shared_expert = self.shared_expert_gate = None
        if cfg.shared_expert_intermediate_size:
            self.shared_expert = DenseMLP(cfg.hidden_size, cfg.shared_expert_intermediate_size)
            self.shared_expert_gate = Linear(cfg.hidden_size, 1, bias=False)
            self.shared_expert_gate.row_invariant = True

    def attach_experts(self, layer_idx: int, stats, provider: ExpertProvider | None = None) -> None:
        """The expert manager's one way in: this block's index among the MoE layers, the routing
        statistics it records into, and a provider replacing its experts (None: keep the current one)."""
        self.layer_idx, self.stats = layer_idx, stats
        if provider is not None:
            self.experts = provider

    def route(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden [T, D] -> (topk_ids [T, K] int64, topk_weights [T, K]): softmax, top-k, renormalise;
        the routing statistics are recorded on the way (in the same launch on CUDA)."""
        logits = ops.row_wise_linear(hidden, self.gate.weight, self.gate.bias)  # [T, E]
        if self.routing_bias is not None:
            logits = logits + self.routing_bias
        return ops.softmax_topk(logits, self.top_k, self.norm_topk_prob, hidden.dtype, self.stats, self.layer_idx)

    def forward(self, hidden: torch.Tensor, longest_query: int = 0) -> torch.Tensor:
        out = self.forward_unsummed(hidden, longest_query)
        return out.total() if isinstance(out, TopkPartials) else out

    def forward_unsummed(self, hidden: torch.Tensor, longest_query: int = 0) -> torch.Tensor | TopkPartials:
        """forward, except that a decode-sized CUDA step returns its TopkPartials: the decoder layers hand
        them to the next norm, which sums them in its own launch. longest_query: the step's longest query
        (ctx.max_query_len; 0: unknown), by which packed experts tell a prompt's step from windows'."""
        if self._routes_fused(hidden):
            return self._forward_fused(hidden)
        topk_ids, topk_weights = self.route(hidden)
        shared, gate = self._shared(hidden)
        if isinstance(self.experts, PackedLocalExperts):
            out = self.experts(hidden, topk_ids, topk_weights, longest_query=longest_query)
        else:
            out = self.experts(hidden, topk_ids, topk_weights)
        return out if shared is None else out + gated_shared_ref(shared, gate)

    def _shared(self, hidden: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Qwen3-Next's shared expert: (its output [T, D], its gate's logits [T, 1], or None where the output
        is already gated), or (None, None). Queued before the routed experts: with offloaded experts the
        device computes it while the host computes the missed ones (in the same graph piece)."""
        if self.shared_expert is None:
            return None, None
        return self.shared_expert.forward_ungated(hidden, self.shared_expert_gate)

    def _routes_fused(self, hidden: torch.Tensor) -> bool:
        """Decode-sized CUDA steps on device-resident experts route in one launch (route_and_align) where
        that is the faster way (fused_routing_pays)."""
        return (self.routing_bias is None and self.gate.bias is None
                and isinstance(self.experts, (LocalExperts, PackedLocalExperts))
                and ops.fused_routing_on(hidden, self.gate.weight, self.experts.w13))

    def _forward_fused(self, hidden: torch.Tensor) -> torch.Tensor | TopkPartials:
        """Router projection, routing (and statistics) and the expert row layout in one launch, then the
        grouped expert GEMMs (packed experts: the packed MoE kernels, which take the ids as they are):
        two launches fewer per layer than route() + fused_moe."""
        cfg, rows = self._one_launch_routing(hidden)
        routing = ops.route_and_align(hidden, self.gate.weight, self.top_k, self.norm_topk_prob, cfg["BLOCK_M"],
                                      self._route_counter, *rows, layout=self._lays_out())
        return self._experts_routed(hidden, *routing, cfg)

    def _lays_out(self) -> bool:
        """Whether the one-launch routing lays out the rows: the grouped GEMMs read that layout; the packed
        experts' pairs take the ids as they are."""
        return not isinstance(self.experts, PackedLocalExperts)

    def _one_launch_routing(self, hidden: torch.Tensor) -> tuple[dict, tuple]:
        """What a one-launch routing of hidden [T, D] needs beside the router: its program counter (made on first
        use), the experts' tiling and this layer's statistics rows."""
        if self._route_counter is None or self._route_counter.device != hidden.device:
            self._route_counter = torch.zeros(1, dtype=torch.int32, device=hidden.device)
        cfg = ops.default_config(hidden.shape[0] * self.top_k, self.experts.num_experts)
        rows = self.stats.layer_rows(self.layer_idx) if self.stats is not None else (None, None, None)
        return cfg, rows

    def _experts_routed(self, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                        sorted_ids: torch.Tensor, block_expert: torch.Tensor, cfg: dict) -> TopkPartials:
        """The shared expert and the routed experts of a step routed in one launch -> their TopkPartials."""
        shared, gate = self._shared(hidden)  # the gate's sigmoid and product go into the sum's launch
        if isinstance(self.experts, PackedLocalExperts):
            partials = ops.packed_moe(hidden, self.experts.blocks(), topk_ids, topk_weights, sum_topk=False)
            return TopkPartials(partials, shared, hidden.dtype, gate)     # [T, K or 1, D] float32
        partials = ops.moe_grouped_gemms(hidden, self.experts.w13, self.experts.w2, topk_weights, sorted_ids,
                                         block_expert, cfg, sum_topk=False)   # [T, K or 1, D] float32
        return TopkPartials(partials, shared, hidden.dtype, gate)
