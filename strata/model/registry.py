"""Model registry: HF `architectures` name -> model class, imported lazily. Also the model package's one
public face to strata.weights: the layer types and the build-time switch that weight sources need."""

from __future__ import annotations

import importlib

from strata.config import SUPPORTED_ARCHITECTURES, ModelConfig
from strata.model.decoder import outside_stage, owning_layers  # noqa: F401 (for strata.weights)
from strata.model.moe import LocalExperts, MoEBlock, PackedLocalExperts, expert_weights_on  # noqa: F401
from strata.model.norm import GatedRMSNorm, RMSNorm  # noqa: F401 (for strata.weights)
from strata.model.ple import hash_multipliers, head_vocab_sizes, tables_packed  # noqa: F401 (for strata.weights)
from strata.model.packed import (  # noqa: F401 (for strata.weights)
    ExpertBlocks, PackedExpertWeight, PackedWeight, dense_on_gpu, is_packed_expert_stack, keeps_packed)

_REGISTRY = {
    "LlamaForCausalLM": "strata.model.llama",
    "Qwen3ForCausalLM": "strata.model.llama",
    "Qwen3MoeForCausalLM": "strata.model.qwen3_moe",
    "Qwen3NextForCausalLM": "strata.model.qwen3_next",
    "Qwen3_5ForCausalLM": "strata.model.qwen3_5",
    "Qwen3_5MoeForCausalLM": "strata.model.qwen3_5",
    "Qwen4ExpForCausalLM": "strata.model.qwen4_exp",
}
assert set(_REGISTRY) == set(SUPPORTED_ARCHITECTURES)


def model_class(cfg: ModelConfig) -> type:
    module_name = _REGISTRY.get(cfg.architecture)
    if module_name is None:
        raise ValueError(f"unsupported architecture {cfg.architecture!r}; supported: {', '.join(_REGISTRY)}")
    return getattr(importlib.import_module(module_name), cfg.architecture)
