"""HF model folder: config.json plus one safetensors file or shards listed in model.safetensors.index.json."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import torch
from safetensors import SafetensorError, safe_open

from strata.config import ModelConfig


class HFSource:
    experts_packed = False

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.description = folder
        config_path = os.path.join(folder, "config.json")
        if not os.path.isfile(config_path):
            raise FileNotFoundError(f"model folder {folder} has no config.json; pass an HF model folder, "
                                    f"a .gguf file or a built-in name")
        with open(config_path) as f:
            self.hf_config = json.load(f)
        self.files = self._safetensors_files()

    def _safetensors_files(self) -> list[str]:
        index = os.path.join(self.folder, "model.safetensors.index.json")
        if os.path.isfile(index):
            with open(index) as f:
                names = sorted(set(json.load(f)["weight_map"].values()))
        else:
            names = sorted(n for n in os.listdir(self.folder) if n.endswith(".safetensors"))
        if not names:
            raise FileNotFoundError(f"model folder {self.folder} has no .safetensors files")
        paths = [os.path.join(self.folder, n) for n in names]
        for p in paths:
            if not os.path.isfile(p):
                raise FileNotFoundError(f"shard {p} listed in model.safetensors.index.json is missing")
        return paths

    def model_config(self) -> ModelConfig:
        return ModelConfig.from_hf(self.hf_config)

    def num_tensors(self) -> int:
        total = 0
        for path in self.files:
            with _open(path) as f:
                total += len(f.keys())
        return total

    def weight_sizes(self, dtype: torch.dtype, owned: range | None = None) -> None:
        return None  # the model's parameters in dtype

    def tensors(self, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
        for path in self.files:
            with _open(path) as f:
                for name in f.keys():
                    try:
                        tensor = f.get_tensor(name)
                    except (SafetensorError, RuntimeError) as e:
                        raise ValueError(f"{path}: cannot read tensor {name!r}: {e}") from e
                    yield name, tensor.to(dtype)


def _open(path: str):
    try:
        return safe_open(path, framework="pt", device="cpu")
    except (SafetensorError, OSError, RuntimeError) as e:
        raise ValueError(f"{path} is not a valid safetensors file ({e}); re-download or re-save it") from e
