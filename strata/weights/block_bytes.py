"""Small helpers the block quantizers (quantize, quantize_iq) share: float16 rounding and bytes, little-endian
words as bytes, a division that gives 0 where the divisor is 0."""

from __future__ import annotations

import torch


def f16_rounded(values: torch.Tensor) -> torch.Tensor:
    """float32 -> its float16 rounding, kept as float32 (what the reader will multiply by)."""
    return values.half().float()


def f16_bytes(values: torch.Tensor) -> torch.Tensor:
    """[B] float -> [B, 2] uint8, little-endian float16."""
    return values.half().unsqueeze(-1).view(torch.uint8)


def le_bytes(words: torch.Tensor, width: int) -> torch.Tensor:
    """int64 [..., n] -> uint8 [..., n * width]: each word's `width` little-endian bytes."""
    shifts = torch.arange(0, 8 * width, 8, device=words.device)
    return ((words.unsqueeze(-1) >> shifts) & 255).to(torch.uint8).flatten(-2)


def safe_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a / b, 0 where b is 0."""
    return torch.where(b != 0, a / torch.where(b != 0, b, 1.0), 0.0)
