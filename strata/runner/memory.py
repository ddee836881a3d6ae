"""GPU memory planning: what the engine may use (--gpu-memory-utilization, --vram-reserve-mib), whether the
weights fit before they are loaded, and how much is left for the KV pool after weights and a headroom for
activations, CUDA graphs, per-token verification states and logits.

All sizes are bytes. The plan is checked, not trusted: the engine reports the peak it actually reached
(torch.cuda.max_memory_allocated) beside the plan in its status.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from strata.config import ModelConfig
from strata.transfer import host_available_bytes  # noqa: F401 (the planner's name for it)
from strata.types import WeightSizes  # noqa: F401 (the planner's and the tests' name for it)

GiB = 2**30
_BASE_HEADROOM = 1 * GiB  # cuBLAS/Triton workspaces, allocator fragmentation, the CUDA graph pool


class ModelDoesNotFit(ValueError):
    """The model (or the smallest usable KV pool) does not fit the GPU memory the options allow."""


@dataclass(frozen=True)
class GpuBudget:
    total: int          # the device's memory
    allowed: int        # total * utilization - reserve
    in_use: int         # used on the device when measured (weights, this and other processes)

    @property
    def available(self) -> int:
        return self.allowed - self.in_use

    def describe(self, utilization: float, reserve_mib: int) -> str:
        return (f"GPU total {self.total / GiB:.1f} GiB; gpu_memory_utilization {utilization} and "
                f"vram_reserve_mib {reserve_mib} allow {self.allowed / GiB:.1f} GiB; "
                f"{self.in_use / GiB:.1f} GiB in use")


def measure_budget(utilization: float, reserve_mib: int, limit_mib: int = 0) -> GpuBudget:
    """The device's memory now; with `limit_mib` the plan treats the device as a card of that size (what is
    in use still counts in full)."""
    if not 0.0 < utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {utilization}")
    if reserve_mib < 0:
        raise ValueError(f"vram_reserve_mib must be >= 0, got {reserve_mib}")
    if limit_mib < 0:
        raise ValueError(f"gpu_memory_limit_mib must be >= 0 (0: the device's memory), got {limit_mib}")
    free, total = torch.cuda.mem_get_info()
    in_use = total - free
    if limit_mib:
        total = min(total, limit_mib * 2**20)
    return GpuBudget(total, int(total * utilization) - reserve_mib * 2**20, in_use)


def check_weights_fit(weight_bytes: int, budget: GpuBudget, utilization: float, reserve_mib: int) -> None:
    if weight_bytes > budget.available:
        raise ModelDoesNotFit(
            f"the weights need {weight_bytes / GiB:.1f} GiB but only {max(budget.available, 0) / GiB:.1f} GiB "
            f"are available ({budget.describe(utilization, reserve_mib)}); raise --gpu-memory-utilization, "
            f"lower --vram-reserve-mib, or use a smaller model / fewer layers")


def check_host_fits(expert_bytes: int, available: int | None, other_bytes: int = 0) -> None:
    """The offloaded experts' host copy (all of them, pinned) and the weights that always stay in host memory
    (`other_bytes`) must fit in the RAM available now."""
    if available is not None and expert_bytes + other_bytes > available:
        what = "the routed experts" if not other_bytes else "the routed experts and the PLE tables"
        raise ModelDoesNotFit(
            f"{what} need {(expert_bytes + other_bytes) / GiB:.1f} GiB of host RAM beside the GPU's share, but "
            f"only {available / GiB:.1f} GiB are available; use a more compact quantization (a smaller GGUF), "
            f"free host memory, or a machine with more RAM")


def meta_model(model_class, cfg: ModelConfig) -> torch.nn.Module:
    """The model built on the meta device: shapes only, nothing allocated (about 1 s for 48 MoE layers)."""
    with torch.device("meta"):
        return model_class(cfg)


def weight_sizes(model: torch.nn.Module, dtype: torch.dtype, owned: range | None = None) -> WeightSizes:
    """Parameter bytes in `dtype` of a model built by meta_model; the parameters of modules marked
    `host_resident` (they stay in host memory) are counted apart. `owned`: a pipeline stage's layers (the
    others' are left out)."""
    from strata.model.decoder import outside_stage
    from strata.model.moe import LocalExperts

    cfg = model.config
    modules = [(name, m) for name, m in model.named_modules() if not outside_stage(name + ".", owned, cfg)]
    experts = [m for _, m in modules if isinstance(m, LocalExperts)]
    expert_params = sum(p.numel() for m in experts for p in m.parameters())
    host_params = sum(p.numel() for _, m in modules if getattr(m, "host_resident", False) for p in m.parameters())
    total = sum(p.numel() for name, p in model.named_parameters() if not outside_stage(name, owned, cfg)) - host_params
    return WeightSizes(total * dtype.itemsize, expert_params * dtype.itemsize, sum(m.num_experts for m in experts),
                       host=host_params * dtype.itemsize)


# with --expert-cache auto, the KV pool keeps room for max_num_seqs sequences of up to this many tokens
# (at least one of max_model_len) before the rest of the memory goes to expert slots
KV_RESERVE_TOKENS_PER_SEQ = 4096


def kv_reserve_tokens(max_model_len: int, max_num_seqs: int) -> int:
    return max(max_model_len, max_num_seqs * min(max_model_len, KV_RESERVE_TOKENS_PER_SEQ))


def auto_expert_slots(sizes: WeightSizes, available: int, headroom: int, kv_reserve: int, staging_slots: int) -> int:
    """--expert-cache auto: how many routed experts get a device slot. Every one when they fit beside the
    other weights, the step headroom and the KV reserve; else as many as the rest of the memory holds
    (PCIe staging slots set aside), possibly none."""
    if not sizes.num_experts:
        return 0
    per_expert = sizes.per_slot
    room = available - (sizes.total - sizes.experts) - headroom - kv_reserve
    if room >= sizes.experts:
        return sizes.num_experts
    return max(0, min(sizes.num_experts, room // per_expert - staging_slots))


def activation_headroom(cfg: ModelConfig, max_num_batched_tokens: int, max_num_seqs: int, window: int,
                        state_shapes: dict, dtype: torch.dtype) -> int:
    """An upper estimate of what one step needs beyond weights and KV: per-token MoE and projection
    temporaries of the largest prompt chunk, float32 logits of every verified row, and the per-token
    recurrent states a verification window records (hybrid models with speculation)."""
    top_k = max(cfg.num_experts_per_tok, 1)
    inter = max(cfg.moe_intermediate_size, cfg.intermediate_size)
    widest = max(cfg.hidden_size, (cfg.num_attention_heads * 2 + 2 * cfg.num_key_value_heads) * cfg.head_dim)
    per_token = 4 * top_k * (cfg.hidden_size + inter) + 16 * widest * dtype.itemsize
    logits = 3 * max_num_seqs * window * cfg.vocab_size * 4
    window_states = 0
    if window > 1:
        window_states = max_num_seqs * window * sum(
            math.prod(conv) * dtype.itemsize + math.prod(ssm) * 4 for conv, ssm in state_shapes.values())
    return _BASE_HEADROOM + max_num_batched_tokens * per_token + logits + window_states
