"""Rotary position embedding (HF "rotate_half" layout), full or partial (first rot_dim dims only),
with the default, linear and llama3 frequency schedules. cos/sin are precomputed for every position."""

from __future__ import annotations

import math

import torch
from torch import nn


def inv_frequencies(rot_dim: int, theta: float, scaling: dict | None) -> torch.Tensor:
    inv_freq = 1.0 / (theta ** (torch.arange(0, rot_dim, 2, dtype=torch.int64).float() / rot_dim))
    rope_type = (scaling or {}).get("rope_type", "default")
    if rope_type == "default":
        return inv_freq.float()
    if rope_type == "linear":
        return (inv_freq / scaling["factor"]).float()
    if rope_type == "llama3":
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        old_len = scaling["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_len / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        mid = (wavelen <= old_len / low) & (wavelen >= old_len / high)
        return torch.where(mid, (1 - smooth) * inv_freq / factor + smooth * inv_freq, scaled).float()
    raise ValueError(f"rope type {rope_type!r} is not supported (supported: default, linear, llama3)")


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, rot_dim: int, max_positions: int, theta: float,
                 scaling: dict | None = None) -> None:
        super().__init__()
        self.rot_dim = rot_dim
        # equal configs give equal tables (layers may share per-step lookups of them)
        self.config = (head_dim, rot_dim, max_positions, theta, repr(scaling))
        freqs = torch.outer(torch.arange(max_positions, dtype=torch.float32),
                            inv_frequencies(rot_dim, theta, scaling))  # [P, rot_dim / 2]
        self.register_buffer("cos", freqs.cos(), persistent=False)
        self.register_buffer("sin", freqs.sin(), persistent=False)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # q: [T, H, D], k: [T, Hkv, D]; rotates the first rot_dim dims of each head
        cos = self.cos[positions].unsqueeze(1)  # [T, 1, rot_dim / 2]
        sin = self.sin[positions].unsqueeze(1)
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)

    def rotate(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """x [T, H, D'] (D' >= rot_dim, e.g. an indexer head) rotated by each row's position [T]."""
        return self._rotate(x, self.cos[positions].unsqueeze(1), self.sin[positions].unsqueeze(1))

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = self.rot_dim // 2
        x_rot = x[..., : self.rot_dim].float()
        x1, x2 = x_rot[..., :half], x_rot[..., half:]
        rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)
        if self.rot_dim == x.shape[-1]:
            return rotated
        return torch.cat((rotated, x[..., self.rot_dim:]), dim=-1)
