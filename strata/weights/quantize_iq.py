"""Float weights -> the i-quants' GGUF blocks (IQ4_XS, IQ3_S, IQ3_XXS, IQ2_S, IQ2_XXS) in torch, for `strata quantize`'s
i-quant schemes: test and benchmark files of the 2-4 bit types the largest models ship in, not llama.cpp's
importance-weighted search. Vectorised over blocks; all math float32; gguf-py's `dequantize` reads the bytes.

The grid types: each sub-block (32 values, IQ2_S's 16) takes the scale (of a few candidates around its peak over
the grid's largest value) whose nearest grid rows give the least squared error; the 4-bit scales are that over
the superblock's d. IQ3_XXS and IQ2_XXS store 7 signs of each 8 values and take the eighth from an even count of
minus signs, so a group of odd count flips its smallest value's sign (the grid search then sees that value as
-|x|, its error as reconstructed).
"""

from __future__ import annotations

import functools

import torch

from strata.kernels.gguf_blocks import IQ4_VALUES
from strata.kernels.gguf_iquants import _iq_grid
from strata.weights.block_bytes import f16_bytes, f16_rounded, le_bytes, safe_div

QK_K = 256
# x a sub-block's peak / the grid's largest value (the larger ones put the peak on a lower grid level)
_SCALE_CANDIDATES = (0.70, 0.80, 0.875, 0.95, 1.0, 1.05, 1.15, 1.3, 1.5, 1.75, 2.0)


def iq4_xs(x: torch.Tensor) -> torch.Tensor:
    """[B, 256] -> [B, 136]: float16 d, the sub-block scales' top 2 bits (uint16, 2 bits each) and low 4 bits
    (4 bytes, low nibble first), then each sub-block of 32 as IQ4_NL's 16 code bytes. A sub-block's ideal scale
    is its peak / -127 (IQ4_NL's); d is the largest magnitude of those over 31, each sub-block's 6-bit scale
    the nearest multiple of d (dl = d * (scale - 32)), then each weight's nearest level x / dl."""
    sub = x.view(-1, 8, 32)                                                             # [B, 8 sub-blocks, 32]
    peak = sub.gather(-1, sub.abs().argmax(dim=-1, keepdim=True))[..., 0]               # [B, 8]
    ideal = peak / -127.0
    d = f16_rounded(ideal.abs().amax(dim=-1) / 31.0)                                    # [B]
    scale = (safe_div(ideal, d[:, None]).round().clamp(-32, 31) + 32).long()            # [B, 8], 0 .. 63
    dl = d[:, None] * (scale - 32).float()                                              # [B, 8]
    levels = torch.tensor(IQ4_VALUES, dtype=torch.float32, device=x.device)
    codes = (safe_div(sub, dl[..., None])[..., None] - levels).abs().argmin(dim=-1).to(torch.uint8)  # [B, 8, 32]
    qs = (codes[..., :16] | (codes[..., 16:] << 4)).view(-1, 128)
    high = ((scale >> 4) << torch.arange(0, 16, 2, device=x.device)).sum(-1)            # [B] uint16's value
    low = (scale & 15).view(-1, 4, 2)
    low_bytes = (low[..., 0] | (low[..., 1] << 4)).to(torch.uint8)                      # [B, 4]
    return torch.cat([f16_bytes(d), le_bytes(high[:, None], 2), low_bytes, qs], dim=1)


def _signs(groups: torch.Tensor, parity: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """groups [..., 8] -> (sign bits int64 [...]: bit i set = value i negative, magnitudes [..., 8] for the grid
    search). parity: the eighth sign is implied by an even count of negatives, so a group of odd count has its
    smallest |x|'s sign flipped (its magnitude becomes -|x|)."""
    negative = groups < 0
    magnitude = groups.abs()
    if parity:
        odd = negative.sum(-1, keepdim=True) % 2 == 1                                   # [..., 1]
        flipped = torch.zeros_like(negative).scatter_(-1, magnitude.argmin(-1, keepdim=True), True) & odd
        negative ^= flipped
        magnitude = torch.where(flipped, -magnitude, magnitude)
    bits = (negative.long() << torch.arange(8, device=groups.device)).sum(-1)
    return bits, magnitude


_NEIGHBOURS = 16  # grid rows tried per group: those nearest to its point of levels
_SEARCH_NEIGHBOURS = 4  # the same while a sub-block's scale is searched (16: 3.5x the time, 0.2 % less error)


@functools.cache
def _row_table(name: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Grid type `name` -> (its grid float32 [R, w], the midpoints between its L distinct levels [L - 1], and for
    each of the L^w points of levels (a point's index: level indices in base L, lowest first) the _NEIGHBOURS grid
    rows nearest to it, int64 [L^w, _NEIGHBOURS]). L^w: 6,561 for the 2-bit grids (3 levels, rows of 8), 4,096
    for the 3-bit ones."""
    grid = _iq_grid(name, device)                                                       # [R, w]
    levels = torch.unique(grid)                                                         # [L]
    count, width = len(levels), grid.shape[1]
    digits = torch.arange(count ** width, device=device)[:, None] // count ** torch.arange(width, device=device)
    points = levels[digits % count]                                                     # [L^w, w]
    table = torch.cdist(points, grid).topk(_NEIGHBOURS, dim=-1, largest=False).indices  # [L^w, N]
    return grid, (levels[1:] + levels[:-1]) / 2, table


def _nearest_rows(values: torch.Tensor, name: str, neighbours: int = _NEIGHBOURS) -> tuple[torch.Tensor, torch.Tensor]:
    """values [..., w] (in grid units) -> (each group's grid row int64 [...], its squared error): the nearest of
    the `neighbours` rows nearest to the group's point of levels (each value rounded to its nearest level;
    _row_table), a lookup in place of a distance to every row (at 16, the same rows as that search on nearly every
    gaussian group)."""
    grid, midpoints, table = _row_table(name, values.device)
    level = torch.bucketize(values, midpoints)                                          # [..., w], 0 .. L - 1
    count = len(midpoints) + 1
    point = (level * count ** torch.arange(grid.shape[1], device=values.device)).sum(-1)
    candidates = table[point, :neighbours]                                              # [..., N]
    error = (values.unsqueeze(-2) - grid[candidates]).pow(2).sum(-1)                    # [..., N]
    best, at = error.min(dim=-1)
    return candidates.gather(-1, at.unsqueeze(-1)).squeeze(-1), best


def _search(x: torch.Tensor, name: str, sub: int, offset: float, unit: float, parity: bool):
    """The grid search of IQ2_XXS, IQ2_S, IQ3_XXS and IQ3_S: x [B, 256], sub-blocks of `sub` values whose scale
    is db = d * (offset + s) * unit for a 4-bit s -> (float16 d [B], s int64 [B, 256 / sub], grid rows int64
    [B, 256 / width], sign bits int64 [B, 32]: a byte per 8 values)."""
    grid = _iq_grid(name, x.device)                                                     # [R, width]
    width = grid.shape[1]
    bits, magnitude = _signs(x.view(-1, 32, 8), parity)                                 # [B, 32], [B, 32, 8]
    groups = magnitude.reshape(-1, QK_K // sub, sub // width, width)                    # [B, S, n, width]
    base = groups.amax(dim=(-1, -2)) / grid.max()                                       # [B, S]
    best_scale, best_error = torch.zeros_like(base), torch.full_like(base, float("inf"))
    for factor in _SCALE_CANDIDATES:
        scale = base * factor
        _, error = _nearest_rows(safe_div(groups, scale[..., None, None]), name, _SEARCH_NEIGHBOURS)
        error = error.sum(-1) * scale * scale                                           # [B, S], in x's units
        better = error < best_error
        best_scale, best_error = torch.where(better, scale, best_scale), torch.where(better, error, best_error)
    d = f16_rounded(best_scale.amax(dim=-1) / ((15 + offset) * unit))                   # [B]
    s = (safe_div(best_scale, d[:, None] * unit) - offset).round().clamp(0, 15).long()  # [B, S]
    db = d[:, None] * (s.float() + offset) * unit
    rows, _ = _nearest_rows(safe_div(groups, db[..., None, None]), name)                # [B, S, n]
    return d, s, rows.view(x.shape[0], -1), bits


def _seven_bit_words(bits: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """IQ2_XXS / IQ3_XXS's aux words: sign bits [B, 32] (bytes of even parity), s [B, 8] -> int64 [B, 8]: the four
    groups' low 7 sign bits of each sub-block of 32, then s at bit 28."""
    codes = (bits & 127).view(-1, 8, 4)
    return (codes << torch.arange(0, 28, 7, device=bits.device)).sum(-1) | (s << 28)


def _nibbles(values: torch.Tensor) -> torch.Tensor:
    """int [B, 2n] -> uint8 [B, n]: value 2i in byte i's low nibble, 2i + 1 in its high nibble."""
    pairs = values.view(values.shape[0], -1, 2)
    return (pairs[..., 0] | (pairs[..., 1] << 4)).to(torch.uint8)


def iq2_xxs(x: torch.Tensor) -> torch.Tensor:
    """[B, 256] -> [B, 66]: float16 d, then per sub-block of 32 its 4 grid rows (bytes) and its aux word."""
    d, s, rows, bits = _search(x, "IQ2_XXS", 32, 0.5, 0.25, parity=True)
    aux = le_bytes(_seven_bit_words(bits, s)[..., None], 4).view(-1, 8, 4)
    per_sub = torch.cat([rows.view(-1, 8, 4).to(torch.uint8), aux], dim=-1)             # [B, 8, 8]
    return torch.cat([f16_bytes(d), per_sub.view(-1, 64)], dim=1)


def iq3_xxs(x: torch.Tensor) -> torch.Tensor:
    """[B, 256] -> [B, 98]: float16 d, the 64 grid rows (bytes, 8 a sub-block), then the 8 aux words."""
    d, s, rows, bits = _search(x, "IQ3_XXS", 32, 0.5, 0.5, parity=True)
    return torch.cat([f16_bytes(d), rows.to(torch.uint8), le_bytes(_seven_bit_words(bits, s), 4)], dim=1)


def iq2_s(x: torch.Tensor) -> torch.Tensor:
    """[B, 256] -> [B, 82]: float16 d, the 32 grid rows' low bytes, 32 sign bytes, their top 2 bits (4 a byte,
    lowest first), then 16 scale nibbles (one per 16 values); db = d * (0.5 + s) / 4."""
    d, s, rows, bits = _search(x, "IQ2_S", 16, 0.5, 0.25, parity=False)
    high = ((rows >> 8).view(-1, 8, 4) << torch.arange(0, 8, 2, device=x.device)).sum(-1)  # [B, 8]
    return torch.cat([f16_bytes(d), (rows & 255).to(torch.uint8), bits.to(torch.uint8), high.to(torch.uint8),
                      _nibbles(s)], dim=1)


def iq3_s(x: torch.Tensor) -> torch.Tensor:
    """[B, 256] -> [B, 110]: float16 d, the 64 grid rows' low bytes, their top bits (bit i of byte j: row 8j + i),
    32 sign bytes, then 8 scale nibbles (one per 32 values); db = d * (1 + 2 s)."""
    d, s, rows, bits = _search(x, "IQ3_S", 32, 0.5, 2.0, parity=False)
    high = ((rows >> 8).view(-1, 8, 8) << torch.arange(8, device=x.device)).sum(-1)     # [B, 8]
    return torch.cat([f16_bytes(d), (rows & 255).to(torch.uint8), high.to(torch.uint8), bits.to(torch.uint8),
                      _nibbles(s)], dim=1)
