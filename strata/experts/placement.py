"""Hot-set policy: which (layer, expert) pairs hold device slots. Pure functions on host tensors;
the slot cache (slots.py) carries the decisions out.

Experts are named by (MoE layer index, expert id). One slot pool serves all layers, so a learned hot
set may give a busy layer more slots than a quiet one.
"""

from __future__ import annotations

import math

import torch

Expert = tuple[int, int]  # (MoE layer index, expert id)

# staging slots cover the distinct misses of ~8 tokens of one layer: at decode more misses fall back to
# the CPU; a prompt chunk streams its experts through them in rounds (prompt_stream_min_pairs)
STAGING_TOKENS = 8


def staging_capacity(num_experts: int, top_k: int) -> int:
    """PCIe staging slots at full size (the memory plan sets them aside, the expert manager allocates them:
    all of them for prompt streaming, the PCIe share of them for decode staging alone)."""
    return min(num_experts, STAGING_TOKENS * top_k)


def initial_hot_set(num_slots: int, num_layers: int, num_experts: int, split: str,
                    profile_counts: torch.Tensor | None = None) -> list[Expert]:
    """The first `num_slots` experts to make resident: the most routed of a profile ([L, E] counts),
    else a static split (whole layers from the first on, like llama.cpp's --n-cpu-moe) or a uniform
    one (the same number per layer, lowest ids first)."""
    if profile_counts is not None:
        flat = profile_counts.flatten().tolist()
        # ties go to the lower (layer, expert), so a flat profile gives a static split
        order = sorted(range(len(flat)), key=lambda i: (-flat[i], i))[:num_slots]
        return sorted(divmod(i, num_experts) for i in order)
    if split == "static":
        return [divmod(i, num_experts) for i in range(num_slots)]
    per_layer, extra = divmod(num_slots, num_layers)
    return [(layer, expert) for layer in range(num_layers)
            for expert in range(per_layer + (1 if layer < extra else 0))]


def zero_copy_set(share: float, resident: torch.Tensor, profile_counts: torch.Tensor | None = None) -> list[Expert]:
    """The experts the device reads in place from host memory: in every layer round(share * E) of those without a
    slot (resident [L, E] bool), the most routed of a profile first ([L, E] counts), else the lowest ids (after a
    uniform split's resident ones)."""
    num_layers, num_experts = resident.shape
    per_layer = round(share * num_experts)
    chosen = []
    for layer in range(num_layers):
        counts = profile_counts[layer].tolist() if profile_counts is not None else [0] * num_experts
        outside = [e for e in range(num_experts) if not resident[layer, e]]
        chosen += [(layer, e) for e in sorted(outside, key=lambda e: (-counts[e], e))[:per_layer]]
    return chosen


def plan_swaps(window_counts: torch.Tensor, resident: torch.Tensor, threshold: float,
               max_swaps: int) -> list[tuple[Expert, Expert]]:
    """window_counts [L, E] pairs routed this window, resident [L, E] bool -> (evict, load) pairs:
    the most used non-resident experts for the least used resident ones, while the incoming one was
    routed to more than (1 + threshold)x as often as the one it replaces."""
    num_experts = window_counts.shape[1]
    counts = window_counts.flatten().double()
    flat_resident = resident.flatten()
    inside = torch.nonzero(flat_resident).flatten()
    outside = torch.nonzero(~flat_resident).flatten()
    if inside.numel() == 0 or outside.numel() == 0:
        return []
    coldest = inside[torch.argsort(counts[inside], stable=True)].tolist()
    hottest = outside[torch.argsort(-counts[outside], stable=True)].tolist()
    swaps = []
    for evict, load in zip(coldest, hottest):
        if len(swaps) >= max_swaps or counts[load] <= (1.0 + threshold) * counts[evict]:
            break
        swaps.append((divmod(evict, num_experts), divmod(load, num_experts)))
    return swaps


def tokens_for_expert_budget(num_experts: int, top_k: int, budget: int) -> int | None:
    """The most tokens one step may carry so that, with routing spread evenly, the distinct experts it
    touches per layer stay within `budget`: E * (1 - (1 - K/E)^T) <= B. None: no bound (B >= E or 0).
    Skewed routing touches fewer experts than this estimate, so the bound errs on the safe side."""
    if budget <= 0 or budget >= num_experts or top_k <= 0:
        return None
    if budget < top_k:
        return 1
    return max(1, int(math.log(1 - budget / num_experts) / math.log(1 - top_k / num_experts)))
