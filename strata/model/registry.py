"""Model registry: HF `architectures` name -> model class, imported lazily."""

from __future__ import annotations

import importlib

from strata.config import SUPPORTED_ARCHITECTURES, ModelConfig

_REGISTRY = {
    "LlamaForCausalLM": "strata.model.llama",
    "Qwen3ForCausalLM": "strata.model.llama",
    "Qwen3MoeForCausalLM": "strata.model.qwen3_moe",
    "Qwen3NextForCausalLM": "strata.model.qwen3_next",
}
assert set(_REGISTRY) == set(SUPPORTED_ARCHITECTURES)


def model_class(cfg: ModelConfig) -> type:
    module_name = _REGISTRY.get(cfg.architecture)
    if module_name is None:
        raise ValueError(f"unsupported architecture {cfg.architecture!r}; supported: {', '.join(_REGISTRY)}")
    return getattr(importlib.import_module(module_name), cfg.architecture)
