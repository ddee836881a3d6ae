"""Logits -> the distribution one row draws from, and the draw itself.

Standalone row-batched functions, shared by the Sampler and the speculative verifier (which needs
the exact target distribution for rejection sampling). Per-row parameters are [N] tensors; a filter
no row needs is passed as None so its cost (a sort over V) is skipped. Invariant: filtered tokens
get probability exactly 0, and a row's most likely token is never filtered.
"""

from __future__ import annotations

import torch


def apply_top_k_top_p(logits: torch.Tensor, top_k: torch.Tensor | None,
                      top_p: torch.Tensor | None, top_k_max: int | None = None) -> torch.Tensor:
    """Set to -inf the logits outside each row's top_k (<= 0 or >= V: off) and nucleus top_p.

    vLLM semantics: ties with the k-th logit are kept; top_p keeps the smallest set of most likely
    tokens (after top_k) whose mass reaches p. Returns a new tensor. `top_k_max`: the largest enabled
    k (1 if none), when the caller knows it on the host (else it is read from top_k: a device sync).
    """
    if top_k is None and top_p is None:
        return logits
    if top_p is None:
        return _apply_top_k_only(logits, top_k, top_k_max)
    vocab_size = logits.shape[-1]
    logits_sort, order = logits.sort(dim=-1)                          # ascending, [N, V]
    if top_k is not None:
        k = torch.where((top_k <= 0) | (top_k > vocab_size), vocab_size, top_k)   # [N]
        kth = logits_sort.gather(1, (vocab_size - k).unsqueeze(1))    # [N, 1]
        logits_sort = logits_sort.masked_fill(logits_sort < kth, float("-inf"))
    mass_up_to = logits_sort.softmax(dim=-1).cumsum(dim=-1)          # [N, V]
    outside = mass_up_to <= 1.0 - top_p.unsqueeze(1)
    # Rounding can leave the total mass just under 1; the most likely token must always survive.
    outside[:, -1] = False
    logits_sort = logits_sort.masked_fill(outside, float("-inf"))
    return logits.scatter(1, order, logits_sort)


def _apply_top_k_only(logits: torch.Tensor, top_k: torch.Tensor, top_k_max: int | None) -> torch.Tensor:
    """top_k without a full sort: topk up to the largest k in the batch."""
    vocab_size = logits.shape[-1]
    disabled = (top_k <= 0) | (top_k >= vocab_size)                   # [N]
    # Disabled rows ask for k = 1 so that one such row does not turn the topk into a full sort.
    k = top_k.masked_fill(disabled, 1)
    top_values = logits.topk(top_k_max or int(k.max()), dim=-1).values  # [N, max_k]
    kth = top_values.gather(1, (k - 1).unsqueeze(1))                  # [N, 1]
    kth = kth.masked_fill(disabled.unsqueeze(1), float("-inf"))
    return logits.masked_fill(logits < kth, float("-inf"))


def apply_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Set to -inf the tokens whose probability is below min_p times the row's top probability."""
    probs = logits.softmax(dim=-1)                                    # [N, V]
    threshold = probs.amax(dim=-1, keepdim=True) * min_p.unsqueeze(1) # [N, 1]
    return logits.masked_fill(probs < threshold, float("-inf"))


def processed_probs(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor | None = None,
                    top_p: torch.Tensor | None = None, min_p: torch.Tensor | None = None,
                    top_k_max: int | None = None) -> torch.Tensor:
    """The distribution each row samples from: temperature -> top_k -> top_p -> min_p -> softmax.

    logits [N, V] (already penalised), temperature [N]. Rows with temperature 0 get a one-hot on
    their argmax, so a rejection-sampling verifier treats greedy rows as a point mass.
    """
    is_greedy = (temperature == 0).unsqueeze(1)                       # [N, 1]
    scaled = logits / torch.where(is_greedy, 1.0, temperature.unsqueeze(1))
    scaled = apply_top_k_top_p(scaled, top_k, top_p, top_k_max)
    if min_p is not None:
        scaled = apply_min_p(scaled, min_p)
    probs = scaled.softmax(dim=-1)                                    # [N, V]
    one_hot = torch.zeros_like(probs).scatter_(1, logits.argmax(dim=-1, keepdim=True), 1.0)
    return torch.where(is_greedy, one_hot, probs)


def sample_from_probs(probs: torch.Tensor, generators: dict[int, torch.Generator] | None = None,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row by the exponential race: argmax_i p_i / E_i with E_i ~ Exp(1) i.i.d.
    picks i with probability exactly p_i.

    probs [N, V] -> [N] int64. Row r draws its noise from generators[r] when given, so its draws
    depend on that generator alone; the other rows share `generator` in one batched draw.
    """
    generators = generators or {}
    noise = torch.empty_like(probs)                                   # [N, V]
    shared_rows = [r for r in range(probs.shape[0]) if r not in generators]
    if len(shared_rows) == probs.shape[0]:
        noise.exponential_(generator=generator)
    elif shared_rows:
        shared_noise = torch.empty((len(shared_rows), probs.shape[1]), device=probs.device)
        noise[shared_rows] = shared_noise.exponential_(generator=generator)
    for row, row_generator in generators.items():
        noise[row].exponential_(generator=row_generator)
    return _race(probs, noise)


def sample_seeded_rows(probs: torch.Tensor, generator: torch.Generator, seeds: list[int]) -> torch.Tensor:
    """probs [N, V] -> [N] int64: row r drawn as sample_from_probs draws a row whose generator was seeded with
    seeds[r] (the same noise, so the same token for the same probabilities), one generator reseeded per row."""
    noise = torch.empty_like(probs)                                   # [N, V]
    for row, seed in enumerate(seeds):
        generator.manual_seed(seed)
        noise[row].exponential_(generator=generator)
    return _race(probs, noise)


def _race(probs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """argmax_i p_i / E_i per row: probs and Exp(1) noise [N, V] -> [N] int64."""
    # Exp(1) can round to 0: 0 / 0 = NaN would win the argmax for a filtered token.
    noise.clamp_min_(torch.finfo(noise.dtype).tiny)
    return probs.div(noise).argmax(dim=-1)
