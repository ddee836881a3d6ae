"""The i-quants of llama.cpp's 1-3 bit files (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) in torch:
groups of 8 (or 4) values are rows of a fixed grid (gguf-py's code books, built at first use), times a sign per
value and a scale. Their part of gguf_blocks.dequantize_ref, equal to gguf-py's numpy dequantize bit for bit.
"""

from __future__ import annotations

import functools

import torch

_QK_K = 256  # values per superblock
_IQ1_DELTA = 0.125  # IQ1_S / IQ1_M: the shift of a group's grid values (gguf-py's IQ1_S.delta)


def _f16(b: torch.Tensor, at: int) -> torch.Tensor:
    """The float16 at byte `at` (even) of each block -> float32 [B, 1] (as gguf_blocks reads it)."""
    return b.view(torch.float16)[:, at // 2:at // 2 + 1].float()


def _interleaved_nibbles(x: torch.Tensor) -> torch.Tensor:
    """x uint8 [B, n] -> uint8 [B, 2n]: byte i's low nibble at 2i, its high nibble at 2i + 1."""
    return torch.stack((x & 0x0F, x >> 4), dim=-1).view(x.shape[0], -1)


@functools.cache
def _iq_grid(name: str, device: torch.device) -> torch.Tensor:
    """gguf-py's grid of i-quant type `name` (built from its packed table) -> float32 [rows, 8 or 4]; cached
    per device, as `_iq4_values`."""
    from gguf import quants

    cls = getattr(quants, name)
    cls.init_grid()
    return torch.tensor(cls.grid.reshape(cls.grid_shape), dtype=torch.float32, device=device)


@functools.cache
def _bit_signs(device: torch.device) -> torch.Tensor:
    """byte -> the signs of 8 values, +1 or -1 (bit i set: value i negative) -> float32 [256, 8]."""
    bits = (torch.arange(256, device=device).unsqueeze(-1) >> torch.arange(8, device=device)) & 1
    return (1 - 2 * bits).float()


@functools.cache
def _ksigns(device: torch.device) -> torch.Tensor:
    """7-bit sign code -> the signs of 8 values -> float32 [128, 8], through gguf-py's `ksigns` (the code
    with the eighth sign that makes the count of minus signs even)."""
    from gguf.quants import IQ2_XXS

    codes = torch.frombuffer(bytearray(IQ2_XXS.ksigns), dtype=torch.uint8).to(device)
    return _bit_signs(device)[codes.long()]


def _le_words(x: torch.Tensor, width: int) -> torch.Tensor:
    """uint8 [B, n * width] -> int64 [B, n]: the little-endian unsigned words of `width` bytes."""
    shifts = torch.arange(0, 8 * width, 8, device=x.device)
    return (x.unflatten(-1, (-1, width)).long() << shifts).sum(-1)


def _fields(words: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    """int words [B, n] -> [B, n * count]: the `count` fields of `bits` bits of each word, lowest first."""
    shifts = torch.arange(0, bits * count, bits, dtype=words.dtype, device=words.device)
    return ((words.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)).view(words.shape[0], -1)


def _grid_rows(name: str, index: torch.Tensor, *shape: int) -> torch.Tensor:
    """The grid rows `index` [B, n] of i-quant type `name` -> float32 values in order, viewed as `shape`."""
    return _iq_grid(name, index.device)[index.long()].view(*shape)


def _iq2_scale(b: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """IQ2_XS / IQ2_S: d * (0.5 + scale) * 0.25 of the 16 sub-blocks of 16, from 8 scale bytes -> [B, 16, 1, 1]."""
    return (_f16(b, 0) * _interleaved_nibbles(scales).float().add_(0.5) * 0.25).view(-1, 16, 1, 1)


def _iq2_xxs(b: torch.Tensor) -> torch.Tensor:
    # [B, 66]: float16 d, then 8 groups of 32 values of 8 bytes each: 4 indices into the 256 x 8 grid, then
    # a uint32 of four 7-bit sign codes (bits 0-27) and a 4-bit scale; w = d * (0.5 + scale) / 4 * grid * sign
    groups = b[:, 2:].view(-1, 8, 8)
    aux = _le_words(groups[:, :, 4:8].reshape(-1, 32), 4)                                 # [B, 8]
    scale = (_f16(b, 0) * ((aux >> 28).float() + 0.5) * 0.25).view(-1, 8, 1, 1)
    signs = _ksigns(b.device)[_fields(aux, 7, 4)].view(-1, 8, 4, 8)
    rows = _grid_rows("IQ2_XXS", groups[:, :, 0:4].reshape(-1, 32), -1, 8, 4, 8)
    return rows.mul_(scale).mul_(signs).view(-1, _QK_K)


def _iq2_xs(b: torch.Tensor) -> torch.Tensor:
    # [B, 74]: float16 d, 32 uint16 (a 9-bit index into the 512 x 8 grid, a 7-bit sign code above it), then
    # 8 scale bytes (16 nibbles, low first, one per 16 values)
    words = _le_words(b[:, 2:66], 2)                                                      # [B, 32]
    signs = _ksigns(b.device)[words >> 9].view(-1, 16, 2, 8)
    rows = _grid_rows("IQ2_XS", words & 511, -1, 16, 2, 8)
    return rows.mul_(_iq2_scale(b, b[:, 66:74])).mul_(signs).view(-1, _QK_K)


def _iq2_s(b: torch.Tensor) -> torch.Tensor:
    # [B, 82]: float16 d, 32 bytes of the indices' low 8 bits, 32 sign bytes (one per 8 values), 8 bytes of
    # the indices' top 2 bits (4 a byte, lowest first) into the 1024 x 8 grid, then IQ2_XS's 8 scale bytes
    index = b[:, 2:34].long() | (_fields(b[:, 66:74], 2, 4).long() << 8)                 # [B, 32]
    signs = _bit_signs(b.device)[b[:, 34:66].long()].view(-1, 16, 2, 8)
    rows = _grid_rows("IQ2_S", index, -1, 16, 2, 8)
    return rows.mul_(_iq2_scale(b, b[:, 74:82])).mul_(signs).view(-1, _QK_K)


def _iq3_xxs(b: torch.Tensor) -> torch.Tensor:
    # [B, 98]: float16 d, 64 indices into the 256 x 4 grid, then 8 uint32 (one per 32 values) laid out as
    # IQ2_XXS's; w = d * (0.5 + scale) / 2 * grid * sign
    aux = _le_words(b[:, 66:98], 4)                                                       # [B, 8]
    scale = (_f16(b, 0) * ((aux >> 28).float() + 0.5) * 0.5).view(-1, 8, 1, 1)
    signs = _ksigns(b.device)[_fields(aux, 7, 4)].view(-1, 8, 4, 8)
    return _grid_rows("IQ3_XXS", b[:, 2:66], -1, 8, 4, 8).mul_(scale).mul_(signs).view(-1, _QK_K)


def _iq3_s(b: torch.Tensor) -> torch.Tensor:
    # [B, 110]: float16 d, 64 bytes of the indices' low 8 bits, 8 bytes of their top bits (bit i of byte j:
    # index 8j + i) into the 512 x 4 grid, 32 sign bytes, 4 scale bytes (8 nibbles, low first, one per 32
    # values); w = d * (1 + 2 * scale) * grid * sign
    index = b[:, 2:66].long() | (_fields(b[:, 66:74], 1, 8).long() << 8)                 # [B, 64]
    scale = (_f16(b, 0) * _interleaved_nibbles(b[:, 106:110]).float().mul_(2).add_(1)).view(-1, 8, 1, 1)
    signs = _bit_signs(b.device)[b[:, 74:106].long()].view(-1, 8, 4, 8)
    return _grid_rows("IQ3_S", index, -1, 8, 4, 8).mul_(scale).mul_(signs).view(-1, _QK_K)


def _iq1_delta(negative: torch.Tensor) -> torch.Tensor:
    """0 or 1 (int) -> +delta or -delta, float32."""
    return (1 - 2 * negative).float().mul_(_IQ1_DELTA)


def _iq1_s(b: torch.Tensor) -> torch.Tensor:
    # [B, 50]: float16 d, 32 bytes of the indices' low 8 bits, then 8 uint16 (one per 32 values): the top 3
    # bits of its 4 indices into the 2048 x 8 grid (shifts 0, 3, 6, 9), a 3-bit scale, the delta's sign bit;
    # w = d * (2 * scale + 1) * (grid + delta)
    words = _le_words(b[:, 34:50], 2)                                                     # [B, 8]
    index = b[:, 2:34].long() | (_fields(words, 3, 4) << 8)                               # [B, 32]
    scale = (_f16(b, 0) * ((words >> 12) & 7).float().mul_(2).add_(1)).view(-1, 8, 1, 1)
    delta = _iq1_delta(words >> 15).view(-1, 8, 1, 1)
    return _grid_rows("IQ1_S", index, -1, 8, 4, 8).add_(delta).mul_(scale).view(-1, _QK_K)


def _iq1_m(b: torch.Tensor) -> torch.Tensor:
    # [B, 56]: 32 bytes of the indices' low 8 bits, 16 bytes of a nibble per index (low first: its top 3
    # bits into IQ1_S's grid, then the delta's sign bit for its 8 values), then 4 uint16: four 3-bit scales
    # (one per 16 values) and, in the top nibbles, the float16 d (word k: bits 4k .. 4k + 3)
    nibbles = _interleaved_nibbles(b[:, 32:48]).long()                                   # [B, 32]
    index = b[:, 0:32].long() | ((nibbles & 7) << 8)
    d_nibbles = (b[:, 49:56:2] >> 4).view(-1, 2, 2)                                      # [B, 2 bytes, 2]
    d = (d_nibbles[:, :, 0] | (d_nibbles[:, :, 1] << 4)).view(torch.float16).float()      # [B, 1]
    scale = (d * _fields(_le_words(b[:, 48:56], 2), 3, 4).float().mul_(2).add_(1)).view(-1, 16, 1, 1)
    delta = _iq1_delta(nibbles >> 3).view(-1, 16, 2, 1)
    return _grid_rows("IQ1_S", index, -1, 16, 2, 8).add_(delta).mul_(scale).view(-1, _QK_K)


IQ_BLOCKS = {"IQ2_XXS": _iq2_xxs, "IQ2_XS": _iq2_xs, "IQ2_S": _iq2_s, "IQ3_XXS": _iq3_xxs, "IQ3_S": _iq3_s,
             "IQ1_S": _iq1_s, "IQ1_M": _iq1_m}
