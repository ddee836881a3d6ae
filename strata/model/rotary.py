"""Rotary position embedding (HF "rotate_half" layout), full or partial (first rot_dim dims only),
with the default, linear, llama3 and yarn frequency schedules. cos/sin are precomputed for every position,
shared by the layers of equal config, and already carry YaRN's attention factor: every consumer (the torch
path, the fused rope + KV-write kernel, QSA's indexer, MTP layers) reads these tables and none applies the
factor again."""

from __future__ import annotations

import math
import weakref

import torch
from torch import nn

from strata.config import ROPE_TYPES, rope_attention_factor


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
    if rope_type == "yarn":
        return _yarn_inv_frequencies(rot_dim, theta, scaling)
    raise ValueError(f"rope type {rope_type!r} is not supported (supported: {', '.join(ROPE_TYPES)})")


def _yarn_inv_frequencies(rot_dim: int, theta: float, scaling: dict) -> torch.Tensor:
    """YaRN (arXiv 2309.00071) as HF's _compute_yarn_parameters: high frequencies (more than beta_fast
    turns over the original context) keep their value, low ones (fewer than beta_slow turns) are divided
    by `factor`, a linear ramp over the dimensions between."""
    factor, old_len = scaling["factor"], scaling["original_max_position_embeddings"]
    beta_fast, beta_slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1

    def dim_of(turns: float) -> float:  # the dimension whose frequency turns `turns` times over old_len
        return rot_dim * math.log(old_len / (turns * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dim_of(beta_fast), dim_of(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rot_dim - 1)
    if low == high:
        high += 0.001  # HF's guard against a zero-width ramp
    ramp = ((torch.arange(rot_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation = 1 - ramp  # 1: keep the frequency, 0: interpolate it
    pos_freqs = theta ** (torch.arange(0, rot_dim, 2).float() / rot_dim)
    return (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation


class _Tables:
    """One rotary config's cos / sin on one device, shared by every layer with that config: a 1M-position
    YaRN table pair is 256 MiB at rot_dim 64, once per model rather than once per attention layer."""

    def __init__(self, cos: torch.Tensor, sin: torch.Tensor) -> None:
        self.cos, self.sin = cos, sin


_SHARED_TABLES: weakref.WeakValueDictionary[tuple, _Tables] = weakref.WeakValueDictionary()


def _tables(rot_dim: int, max_positions: int, theta: float, scaling: dict | None) -> _Tables:
    device = torch.empty(0).device  # the default device: models are built under `with torch.device(...)`
    key = (rot_dim, max_positions, theta, repr(scaling), str(device))
    tables = _SHARED_TABLES.get(key)
    if tables is None:
        freqs = torch.outer(torch.arange(max_positions, dtype=torch.float32),
                            inv_frequencies(rot_dim, theta, scaling))  # [P, rot_dim / 2]
        scale = rope_attention_factor(scaling)
        tables = _SHARED_TABLES[key] = _Tables(freqs.cos() * scale, freqs.sin() * scale)
    return tables


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, rot_dim: int, max_positions: int, theta: float,
                 scaling: dict | None = None) -> None:
        super().__init__()
        self.rot_dim = rot_dim
        # equal configs give equal tables (layers may share per-step lookups of them)
        self.config = (head_dim, rot_dim, max_positions, theta, repr(scaling))
        self._tables = _tables(rot_dim, max_positions, theta, scaling)  # kept alive while a layer uses them
        self.register_buffer("cos", self._tables.cos, persistent=False)  # read-only: other layers share it
        self.register_buffer("sin", self._tables.sin, persistent=False)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                step_rows: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        # q: [T, H, D], k: [T, Hkv, D]; rotates the first rot_dim dims of each head
        cos, sin = self.rows(positions, step_rows)
        return self.rotate_rows(q, cos, sin), self.rotate_rows(k, cos, sin)

    def rotate(self, positions: torch.Tensor, x: torch.Tensor, step_rows: dict | None = None) -> torch.Tensor:
        """x [T, H, D'] (D' >= rot_dim, e.g. an indexer head) rotated by each row's position [T]."""
        return self.rotate_rows(x, *self.rows(positions, step_rows))

    def rows(self, positions: torch.Tensor, step_rows: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens' rows in the form `rotate_rows` takes: (cos, cos) and (-sin, sin), each [T, 1, rot_dim]
        float32 (rotate_half's sign folded into sin). `step_rows`: a dict kept for one forward and shared
        by the layers of equal tables (ForwardScratch.rope_rows[config]); the first caller stores the rows
        there, so a forward looks them up once rather than once per layer."""
        rows = step_rows.get("torch") if step_rows is not None else None
        if rows is None:
            cos, sin = self.cos[positions], self.sin[positions]  # [T, rot_dim / 2]
            rows = torch.cat((cos, cos), dim=-1).unsqueeze(1), torch.cat((-sin, sin), dim=-1).unsqueeze(1)
            if step_rows is not None:
                step_rows["torch"] = rows
        return rows

    def rotate_rows(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x [T, H, D] rotated by rows(...): HF's x * cos + rotate_half(x) * sin in float32, cast back.
        rotate_half(x) * sin is (x2, x1) * (-sin, sin): the same float32 products, so the same bits."""
        x_rot = (x if self.rot_dim == x.shape[-1] else x[..., : self.rot_dim]).float()
        rotated = (x_rot * cos + x_rot.roll(self.rot_dim // 2, -1) * sin).to(x.dtype)  # roll: (x2, x1)
        if self.rot_dim == x.shape[-1]:
            return rotated
        return torch.cat((rotated, x[..., self.rot_dim:]), dim=-1)
