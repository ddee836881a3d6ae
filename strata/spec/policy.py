"""How many drafts a request gets: who may speculate, and the adaptive draft length.

Requests whose sampling needs the exact per-position history (penalties, min_tokens not yet met) or
per-token logprobs decode without drafts. The adaptive length falls as the batch grows (verification
rows cost compute that a large batch no longer has spare) and as the request's own acceptance drops.
"""

from __future__ import annotations

from strata.types import SamplingParams

_ACCEPTANCE_EMA_WEIGHT = 0.3


def can_speculate(params: SamplingParams, num_output_tokens: int) -> bool:
    return (params.logprobs is None and params.repetition_penalty == 1.0 and params.presence_penalty == 0.0
            and params.frequency_penalty == 0.0 and num_output_tokens >= params.min_tokens)


def draft_length(k_max: int, adaptive: bool, num_running: int, acceptance_ema: float) -> int:
    if not adaptive:
        return k_max
    k = k_max if num_running <= 4 else max(1, (k_max * 4) // num_running)
    if acceptance_ema < 0.25:
        return min(k, 1)
    if acceptance_ema < 0.5:
        return min(k, max(1, k_max // 2))
    return k


def update_acceptance(ema: float, num_drafts: int, num_accepted: int) -> float:
    if num_drafts == 0:
        return ema
    return (1 - _ACCEPTANCE_EMA_WEIGHT) * ema + _ACCEPTANCE_EMA_WEIGHT * num_accepted / num_drafts
