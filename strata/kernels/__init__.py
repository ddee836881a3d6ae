"""Triton kernels for the CUDA path, each with a plain-torch `*_ref` beside it that states its semantics.

Importing this package (or a kernel module) never needs Triton: the kernel modules import it lazily
and define their kernels only where it is installed, so the refs run on CPU-only machines and in CI.
Modules: `fused_moe` (grouped expert GEMMs), `moe_align` (their row layout), `routing` (softmax/top-k,
and router + routing + layout in one launch), `paged_attention` (decode/verify windows over paged KV,
QSA's chosen blocks included), `qsa_scores` (QSA's block scores for those windows),
`gdn` (gated delta rule recurrence and causal conv1d update over ragged short windows), `rms_norm`
(with the residual add, and the MoE top-k sum folded in), `rope_kv` (qk-norm, rotary, KV write),
`skinny_linear` (one-row dense projections), `argmax` (greedy tokens from a step's logits), `launch`
(programmatic dependent launch between a step's kernels).
"""

import functools


@functools.cache
def triton_available() -> bool:
    """Triton kernels are used on CUDA tensors unless STRATA_NO_TRITON=1 (the eager torch path)."""
    from strata.config import debug_flag

    if debug_flag("NO_TRITON"):
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True
