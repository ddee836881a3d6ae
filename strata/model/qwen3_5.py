"""Qwen3.5 / Qwen3.6 text models (Qwen3_5ForCausalLM dense, Qwen3_5MoeForCausalLM sparse): the Qwen3-Next
layer stack (Gated DeltaNet and gated attention, zero-centred norms, sigmoid-gated shared expert, MTP
head) with the Gated DeltaNet input projections as four checkpoint tensors in plain order, and every MoE
router renormalising its top-k. Their interleaved M-RoPE reduces to plain rotary for text: the three
position components are equal. Multimodal checkpoints load their text model (strata.config.TEXT_MODEL_OF).
"""

from __future__ import annotations

from strata.model.qwen3_next import Qwen3NextForCausalLM


class Qwen3_5MoeForCausalLM(Qwen3NextForCausalLM):
    grouped_qkvz = False


class Qwen3_5ForCausalLM(Qwen3_5MoeForCausalLM):
    pass  # no experts in its config: every layer builds a dense MLP
