"""Float weights -> the i-quants' GGUF blocks (IQ4_XS, IQ3_XXS, IQ2_XXS) in torch, for `strata quantize`'s
i-quant schemes: test and benchmark files of the 2-4 bit types the largest models ship in, not llama.cpp's
importance-weighted search. Vectorised over blocks; all math float32; gguf-py's `dequantize` reads the bytes.

IQ3_XXS and IQ2_XXS: each sub-block of 32 values takes the scale (of a few candidates around its peak over the
grid's largest value) whose nearest grid rows give the least squared error; each group of 8 values stores 7
signs and takes the eighth from an even count of minus signs, so a group of odd count flips its smallest value's
sign (the grid search then sees that value as -|x|, its error as reconstructed).
"""

from __future__ import annotations

import torch

from strata.kernels.gguf_blocks import IQ4_VALUES
from strata.kernels.gguf_iquants import _iq_grid

QK_K = 256
_SCALE_CANDIDATES = (0.70, 0.80, 0.875, 0.95, 1.0, 1.05, 1.15)  # x a sub-block's peak / the grid's largest value


def _f16(values: torch.Tensor) -> torch.Tensor:
    return values.to(torch.float16).float()


def _f16_bytes(values: torch.Tensor) -> torch.Tensor:
    """float [B] -> uint8 [B, 2]: each value as little-endian float16."""
    return values.to(torch.float16).view(torch.uint8).view(-1, 2)


def _le_bytes(words: torch.Tensor, width: int) -> torch.Tensor:
    """int64 [..., n] -> uint8 [..., n * width]: each word's `width` little-endian bytes."""
    shifts = torch.arange(0, 8 * width, 8, device=words.device)
    return ((words.unsqueeze(-1) >> shifts) & 255).to(torch.uint8).flatten(-2)


def _safe_div(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(b != 0, a / torch.where(b != 0, b, torch.ones_like(b)), torch.zeros_like(a))


def iq4_xs(x: torch.Tensor) -> torch.Tensor:
    """[B, 256] -> [B, 136]: float16 d, the sub-block scales' top 2 bits (uint16, 2 bits each) and low 4 bits
    (4 bytes, low nibble first), then each sub-block of 32 as IQ4_NL's 16 code bytes. A sub-block's ideal scale
    is its peak / -127 (IQ4_NL's); d is the largest magnitude of those over 31, each sub-block's 6-bit scale
    the nearest multiple of d (dl = d * (scale - 32)), then each weight's nearest level x / dl."""
    sub = x.view(-1, 8, 32)                                                          # [B, 8 sub-blocks, 32]
    peak = sub.gather(-1, sub.abs().argmax(dim=-1, keepdim=True))[..., 0]             # [B, 8]
    ideal = peak / -127.0
    d = _f16(ideal.abs().amax(dim=-1) / 31.0)                                        # [B]
    scale = (_safe_div(ideal, d[:, None]).round().clamp(-32, 31) + 32).long()       # [B, 8], 0 .. 63
    dl = d[:, None] * (scale - 32).float()                                           # [B, 8]
    levels = torch.tensor(IQ4_VALUES, dtype=torch.float32, device=x.device)
    codes = (_safe_div(sub, dl[..., None])[..., None] - levels).abs().argmin(dim=-1).to(torch.uint8)  # [B, 8, 32]
    qs = (codes[..., :16] | (codes[..., 16:] << 4)).view(-1, 128)
    high = ((scale >> 4) << torch.arange(0, 16, 2, device=x.device)).sum(-1)        # [B] uint16's value
    low = (scale & 15).view(-1, 4, 2)
    low_bytes = (low[..., 0] | (low[..., 1] << 4)).to(torch.uint8)                    # [B, 4]
    return torch.cat([_f16_bytes(d), _le_bytes(high[:, None], 2), low_bytes, qs], dim=1)


def _signs(sub: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """sub [B, 8, 32] -> (7-bit sign codes int64 [B, 8, 4], magnitudes [B, 8, 32] for the grid search): a group
    of 8 with an odd count of negatives has its smallest |x|'s sign flipped (its magnitude becomes -|x|)."""
    groups = sub.view(*sub.shape[:-1], 4, 8)                                          # [B, 8, 4 groups, 8]
    negative = groups < 0
    odd = negative.sum(-1, keepdim=True) % 2 == 1                                    # [B, 8, 4, 1]
    smallest = torch.zeros_like(negative).scatter_(-1, groups.abs().argmin(-1, keepdim=True), True)
    flipped = smallest & odd
    negative ^= flipped
    codes = (negative[..., :7].long() << torch.arange(7, device=sub.device)).sum(-1)  # [B, 8, 4]
    magnitude = torch.where(flipped, -groups.abs(), groups.abs())
    return codes, magnitude.view(sub.shape)


def _nearest_rows(values: torch.Tensor, grid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """values [..., w] (in grid units), grid [R, w] -> (each group's nearest row int64 [...], its squared error)."""
    norms = (grid * grid).sum(-1)                                                      # [R]
    score = norms - 2 * values @ grid.T                                                # [..., R]
    best, index = score.min(dim=-1)
    return index, best + (values * values).sum(-1)


def _xxs(x: torch.Tensor, name: str, width: int, unit: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """IQ2_XXS / IQ3_XXS's shared search: x [B, 256] -> (float16 d [B], grid rows int64 [B, 8, 32 / width],
    aux words int64 [B, 8]: four 7-bit sign codes and the 4-bit scale s at bit 28; db = d * (0.5 + s) * unit)."""
    grid = _iq_grid(name, x.device)                                                   # [R, width]
    sub = x.view(-1, 8, 32)
    codes, magnitude = _signs(sub)
    groups = magnitude.view(-1, 8, 32 // width, width)                                # [B, 8, n, width]
    base = magnitude.amax(dim=-1) / grid.max()                                        # [B, 8]
    best_scale, best_error = torch.zeros_like(base), torch.full_like(base, float("inf"))
    for factor in _SCALE_CANDIDATES:
        scale = base * factor
        _, error = _nearest_rows(_safe_div(groups, scale[..., None, None]), grid)    # [B, 8, n]
        error = (error * (scale * scale)[..., None]).sum(-1)                          # [B, 8], in x's units
        better = error < best_error
        best_scale, best_error = torch.where(better, scale, best_scale), torch.where(better, error, best_error)
    d = _f16(best_scale.amax(dim=-1) / (15.5 * unit))                                 # [B]
    s = (_safe_div(best_scale, d[:, None] * unit) - 0.5).round().clamp(0, 15).long()  # [B, 8]
    db = d[:, None] * (s.float() + 0.5) * unit
    rows, _ = _nearest_rows(_safe_div(groups, db[..., None, None]), grid)            # [B, 8, n]
    aux = (codes << torch.arange(0, 28, 7, device=x.device)).sum(-1) | (s << 28)      # [B, 8]
    return d, rows, aux


def iq2_xxs(x: torch.Tensor) -> torch.Tensor:
    """[B, 256] -> [B, 66]: float16 d, then per sub-block of 32 its 4 grid rows (bytes) and its aux word."""
    d, rows, aux = _xxs(x, "IQ2_XXS", 8, 0.25)
    per_sub = torch.cat([rows.to(torch.uint8), _le_bytes(aux[..., None], 4).view(-1, 8, 4)], dim=-1)  # [B, 8, 8]
    return torch.cat([_f16_bytes(d), per_sub.view(-1, 64)], dim=1)


def iq3_xxs(x: torch.Tensor) -> torch.Tensor:
    """[B, 256] -> [B, 98]: float16 d, the 64 grid rows (bytes, 8 a sub-block), then the 8 aux words."""
    d, rows, aux = _xxs(x, "IQ3_XXS", 4, 0.5)
    return torch.cat([_f16_bytes(d), rows.to(torch.uint8).view(-1, 64), _le_bytes(aux, 4)], dim=1)
