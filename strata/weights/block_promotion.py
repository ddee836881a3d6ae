"""GGUF blocks rewritten in a wider type that holds every value exactly: how a layer whose gate and up experts came in
different types (llama.cpp's per-tensor overrides, some community recipes) still loads packed, the kernels taking
one type for a layer's gate/up rows.

Exact promotions (each weight's float32 value is the same product, bit for bit: tested against gguf_blocks'
dequantization):
- Q4_K -> Q5_K: the same header and 4-bit quants, fifth bits zero (w = d sc q - dmin m either way);
- Q4_0, Q5_0, IQ4_NL -> Q8_0: the same float16 d, each value's integer (q - 8, q - 16, the IQ4_NL level) as int8.
Any other pair of types has no common type here; such a layer's experts load dense (gguf_source's notice).
"""

from __future__ import annotations

import torch

from strata.kernels.gguf_blocks import IQ4_VALUES

# gguf.GGMLQuantizationType ids (gguf itself is imported on first use: it takes ~0.3 s)
Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, IQ4_NL = 2, 6, 8, 12, 13, 20
# the type each set of a joined tensor's part types is promoted to (the first that holds all of them)
_TARGETS = ((frozenset({Q4_K, Q5_K}), Q5_K), (frozenset({Q4_0, Q5_0, IQ4_NL, Q8_0}), Q8_0))


def common_type(qtypes: set[int]) -> int | None:
    """The type every one of `qtypes` promotes to exactly (itself for one type), else None."""
    if len(qtypes) == 1:
        return next(iter(qtypes))
    return next((target for members, target in _TARGETS if set(qtypes) <= members), None)


def promote(blocks: torch.Tensor, qtype: int, target: int) -> torch.Tensor:
    """uint8 [..., row bytes] of `qtype` -> uint8 [..., row bytes of `target`] with the same values (a copy)."""
    if qtype == target:
        return blocks
    lead = blocks.shape[:-1]
    if (qtype, target) == (Q4_K, Q5_K):
        b = blocks.reshape(-1, 144)                                                         # [B, 144] superblocks
        out = torch.cat([b[:, :16], b.new_zeros(b.shape[0], 32), b[:, 16:]], dim=1)        # [B, 176]
        return out.reshape(*lead, -1)
    if target != Q8_0 or qtype not in (Q4_0, Q5_0, IQ4_NL):
        from gguf import GGMLQuantizationType

        names = GGMLQuantizationType(qtype).name, GGMLQuantizationType(target).name
        raise ValueError(f"no exact promotion of GGUF type {names[0]} to {names[1]}")
    size = {Q4_0: 18, Q5_0: 22, IQ4_NL: 18}[qtype]
    b = blocks.reshape(-1, size)                                                            # [B, size] blocks of 32
    nibbles = b[:, -16:]
    codes = torch.cat([nibbles & 0x0F, nibbles >> 4], dim=1).to(torch.int16)               # [B, 32]: values 0-15, 16-31
    if qtype == Q4_0:
        values = codes - 8
    elif qtype == Q5_0:  # bytes 2-5: a little-endian uint32 whose bit i is value i's fifth bit
        bits = (b[:, 2:6].to(torch.int16).unsqueeze(-1) >> torch.arange(8, dtype=torch.int16)) & 1  # [B, 4, 8]
        values = (codes | (bits.reshape(-1, 32) << 4)) - 16
    else:
        values = torch.tensor(IQ4_VALUES, dtype=torch.int16)[codes.long()]
    out = torch.cat([b[:, :2], values.to(torch.int8).view(torch.uint8)], dim=1)            # [B, 34]
    return out.reshape(*lead, -1)
