"""HF model folder: config.json plus one safetensors file or shards listed in model.safetensors.index.json
(FP8 block-scaled checkpoints are dequantized as they are read: fp8_blocks.py)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator

import torch
from safetensors import SafetensorError, safe_open

from strata.config import ModelConfig
from strata.weights.fp8_blocks import SCALE_SUFFIX, dequantize_fp8, fp8_block_size

logger = logging.getLogger(__name__)


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
        self.fp8_block = fp8_block_size(self.hf_config)  # (rows, columns) of a scale's block, or None

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
        """Tensors tensors() yields (an FP8 weight's scales are not one of them)."""
        total = 0
        for path in self.files:
            with _open(path) as f:
                total += len(f.keys())
        return total - len(self._fp8_scales())

    def weight_sizes(self, dtype: torch.dtype, owned: range | None = None) -> None:
        return None  # the model's parameters in dtype

    def tensors(self, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, tensor in dtype) of every tensor; an FP8 weight comes dequantized by its block scales (which
        are not yielded themselves), then one notice counts them."""
        scales = self._fp8_scales()  # FP8 weight name -> the file holding its scales
        num_fp8 = 0
        for path in self.files:
            with _open(path) as f:
                for name in f.keys():
                    if name.endswith(SCALE_SUFFIX) and name[:-len(SCALE_SUFFIX)] in scales:
                        continue
                    tensor = _read(f, path, name)
                    if tensor.dtype == torch.float8_e4m3fn:
                        if name not in scales:
                            raise ValueError(f"{path}: {name} is float8_e4m3fn but the checkpoint has no "
                                             f"{name}{SCALE_SUFFIX} (or no quantization_config with "
                                             f"weight_block_size): re-download it, or use an unquantized copy")
                        scale = _read(f, path, name + SCALE_SUFFIX) if scales[name] == path else \
                            _read_from(scales[name], name + SCALE_SUFFIX)  # (most checkpoints keep them together)
                        tensor = dequantize_fp8(tensor, scale, self.fp8_block, f"{path}: {name}")
                        num_fp8 += 1
                    yield name, tensor.to(dtype)
        if num_fp8:
            logger.warning("loaded %d FP8 (float8_e4m3fn, %d x %d block scales) weights dequantized to %s; FP8 kept "
                           "as FP8 on the GPU is not built yet", num_fp8, *self.fp8_block,
                           str(dtype).removeprefix("torch."))

    def _fp8_scales(self) -> dict[str, str]:
        """weight name -> the file with its `_scale_inv`, for an FP8 checkpoint ({} otherwise)."""
        if self.fp8_block is None:
            return {}
        scales = {}
        for path in self.files:
            with _open(path) as f:
                scales.update({name[:-len(SCALE_SUFFIX)]: path for name in f.keys() if name.endswith(SCALE_SUFFIX)})
        return scales


def _read_from(path: str, name: str) -> torch.Tensor:
    with _open(path) as f:
        return _read(f, path, name)


def _read(f, path: str, name: str) -> torch.Tensor:
    try:
        return f.get_tensor(name)
    except (SafetensorError, RuntimeError) as e:
        raise ValueError(f"{path}: cannot read tensor {name!r}: {e}") from e


def _open(path: str):
    try:
        return safe_open(path, framework="pt", device="cpu")
    except (SafetensorError, OSError, RuntimeError) as e:
        raise ValueError(f"{path} is not a valid safetensors file ({e}); re-download or re-save it") from e
