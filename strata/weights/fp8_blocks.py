"""HF FP8 checkpoints (`quantization_config.quant_method` "fp8", the format of Qwen's and DeepSeek's -FP8 releases):
a linear's weight stored as float8_e4m3fn [R, C] beside `<name>_scale_inv` float32 [ceil(R / bm), ceil(C / bn)],
one scale a block of bm x bn values (`weight_block_size`, usually 128 x 128; the last blocks of a row or column
may be partial), the weight being the stored values times their block's scale. Loaded dequantized to the
runtime dtype (a notice says so): kept as FP8 on the GPU is not built yet."""

from __future__ import annotations

import torch

SCALE_SUFFIX = "_scale_inv"


def fp8_block_size(hf_config: dict) -> tuple[int, int] | None:
    """(bm, bn) of an FP8 block-scaled checkpoint, None for an unquantized one; a clear error for another
    quantization (only the block-scaled FP8 format is read)."""
    quant = hf_config.get("quantization_config")
    if not quant:
        return None
    method = quant.get("quant_method")
    if method != "fp8":
        raise ValueError(f"the checkpoint is quantized with {method!r} (quantization_config.quant_method); Strata "
                         f"reads unquantized HF folders, FP8 ones with block scales (quant_method 'fp8') and GGUF "
                         f"files: use an unquantized or GGUF copy of the model")
    block = quant.get("weight_block_size")
    if not (isinstance(block, list) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block)):
        raise ValueError(f"quantization_config.weight_block_size is {block!r}; Strata reads FP8 checkpoints with "
                         f"block scales ([rows, columns] of each scale's block, e.g. [128, 128])")
    return block[0], block[1]


def dequantize_fp8(weight: torch.Tensor, scale_inv: torch.Tensor, block: tuple[int, int], name: str) -> torch.Tensor:
    """weight [R, C] float8_e4m3fn, scale_inv [ceil(R / bm), ceil(C / bn)] -> [R, C] float32."""
    rows, cols = weight.shape if weight.dim() == 2 else (None, None)
    grid = (-(-rows // block[0]), -(-cols // block[1])) if rows is not None else None
    if grid is None or tuple(scale_inv.shape) != grid:
        raise ValueError(f"{name}: an FP8 weight of shape {tuple(weight.shape)} needs a {SCALE_SUFFIX} of "
                         f"shape {grid} for blocks of {block[0]} x {block[1]}, got {tuple(scale_inv.shape)}")
    scales = scale_inv.float().repeat_interleave(block[0], 0)[:rows].repeat_interleave(block[1], 1)[:, :cols]
    return weight.float() * scales
