"""Sampling: logits -> token ids, with vLLM's sampling parameters and semantics."""

from strata.sample.penalties import apply_penalties
from strata.sample.probs import apply_min_p, apply_top_k_top_p, processed_probs, sample_from_probs
from strata.sample.sampler import Sampler, SamplerOutput

__all__ = ["Sampler", "SamplerOutput", "apply_penalties", "apply_min_p", "apply_top_k_top_p",
           "processed_probs", "sample_from_probs"]
