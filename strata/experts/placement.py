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


# --zero-copy-frac auto: the share of each layer's experts outside the hot set that the device reads in place (PCIe),
# beside the CPU pool's pairs. Session 42 balanced them at 0.4 on the H200 host; since the CPU experts run as one
# job (session 49: 16 threads, 6 pairs ~380 -> ~290 us a call) the CPU takes more: issue 23's offload command on an
# H100 host, 3 repeats, tok/s: 25 % static 114.9-119.0 at 0.15 / 0.2 / 0.3 against 102.9 at 0.4; 50 % 153.9 / 154.3
# at 0.1 / 0.2 against 141.3 (bench/results/2026-12-05-h100-session49).
AUTO_ZERO_COPY_SHARE_OF_MISSED = 0.2


def zero_copy_set(share: float, resident: torch.Tensor, profile_counts: torch.Tensor | None = None,
                  of_missed: bool = False) -> list[Expert]:
    """The experts the device reads in place from host memory: in every layer round(share * E) of those without a
    slot (resident [L, E] bool), or with `of_missed` round(share * the layer's experts without one), the most routed
    of a profile or window first ([L, E] counts), ties (and no counts) by the lowest id. In layer order, each
    layer's most routed first."""
    num_layers, num_experts = resident.shape
    outside = ~resident.bool()
    num_outside = outside.sum(1)                                                                 # [L]
    counts = profile_counts.double() if profile_counts is not None else torch.zeros(num_layers, num_experts,
                                                                                    dtype=torch.double)
    order = torch.argsort(counts.masked_fill(~outside, -1.0), dim=1, descending=True, stable=True)  # [L, E]
    wanted = share * num_outside.double() if of_missed else torch.full((num_layers,), share * num_experts)
    take = torch.minimum(torch.round(wanted).long(), num_outside)                                # [L]
    chosen = torch.arange(num_experts)[None, :] < take[:, None]                                  # [L, E] by rank
    layers = torch.nonzero(chosen)[:, 0]
    return list(zip(layers.tolist(), order[chosen].tolist()))


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
