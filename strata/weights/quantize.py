"""Quantizing float weights into GGUF K-quant blocks (Q4_K, Q6_K), where gguf-py only dequantizes them.

For test and benchmark files (a random model of a real shape written as a Q4_K_M GGUF), not a rival to
llama.cpp's quantizer: scales come from each group's range in one pass, without llama.cpp's search for
the scale that minimises the error, so the error is somewhat larger than llama-quantize's. The blocks
are the file format byte for byte: gguf-py's `dequantize` reads them (the tests check it).
"""

from __future__ import annotations

import numpy as np

QK_K = 256
Q4_K, Q6_K = 12, 14


def quantize(weights: np.ndarray, qtype: int) -> np.ndarray:
    """float [N, K] with K % 256 == 0 -> uint8 [N, K / 256 * bytes per superblock]."""
    rows, k = weights.shape
    if k % QK_K:
        raise ValueError(f"K-quants need rows of whole 256-weight superblocks, got {k} columns")
    blocks = np.asarray(weights, dtype=np.float32).reshape(-1, QK_K)
    if qtype == Q4_K:
        packed = _q4_k(blocks)
    elif qtype == Q6_K:
        packed = _q6_k(blocks)
    else:
        raise ValueError(f"quantize: GGUF type {qtype} is not one of Q4_K ({Q4_K}), Q6_K ({Q6_K}); "
                         f"gguf.quants.quantize covers Q8_0, Q4_0 and the 16-bit types")
    return packed.reshape(rows, -1)


def _f16(values: np.ndarray) -> np.ndarray:
    """float32 -> its float16 rounding, kept as float32 (what the reader will multiply by)."""
    return values.astype(np.float16).astype(np.float32)


def _safe_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.divide(a, b, out=np.zeros_like(a), where=b != 0)


def _q4_k(x: np.ndarray) -> np.ndarray:
    """[B, 256] -> [B, 144]: per sub-block of 32, w = d * sc * q - dmin * m with q in 0..15 and 6-bit
    sc, m; d, dmin float16 per superblock."""
    sub = x.reshape(-1, 8, 32)
    low = np.minimum(sub.min(axis=-1), 0.0)                               # [B, 8] <= 0
    scale = (sub.max(axis=-1) - low) / 15.0                               # [B, 8]
    d = _f16(scale.max(axis=-1) / 63.0)                                   # [B]
    dmin = _f16(-low.min(axis=-1) / 63.0)
    sc = np.clip(np.rint(_safe_div(scale, d[:, None])), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(_safe_div(-low, dmin[:, None])), 0, 63).astype(np.uint8)
    step = d[:, None] * sc                                                # [B, 8]
    q = np.clip(np.rint(_safe_div(sub + (dmin[:, None] * m)[..., None], step[..., None])), 0, 15).astype(np.uint8)
    scales = np.empty((x.shape[0], 12), dtype=np.uint8)
    scales[:, 0:4] = (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6)
    scales[:, 4:8] = (m[:, :4] & 63) | ((m[:, 4:] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)
    qs = q[:, 0::2] | (q[:, 1::2] << 4)                                   # [B, 4, 32]: sub-blocks 2j, 2j+1
    return np.concatenate([d.astype(np.float16).view(np.uint8).reshape(-1, 2),
                           dmin.astype(np.float16).view(np.uint8).reshape(-1, 2), scales,
                           qs.reshape(-1, 128)], axis=1)


def _q6_k(x: np.ndarray) -> np.ndarray:
    """[B, 256] -> [B, 210]: per group of 16, w = d * scale * q with q in -32..31, int8 scales, float16 d.
    Weight r * 32 + l (r < 8) keeps its low 4 bits in nibble (r // 2) % 2 of ql[64 (r // 4) + 32 (r % 2) + l]
    and its high 2 bits in bits 2 (r % 4) of qh[32 (r // 4) + l]."""
    groups = x.reshape(-1, 16, 16)
    peak = np.take_along_axis(groups, np.abs(groups).argmax(axis=-1)[..., None], axis=-1)[..., 0]   # [B, 16]
    scale = -peak / 32.0                                                  # the peak maps to q = -32
    d = _f16(np.abs(scale).max(axis=-1) / 127.0)                          # [B]
    sc = np.clip(np.rint(_safe_div(scale, d[:, None])), -128, 127).astype(np.int8)
    step = d[:, None] * sc.astype(np.float32)                             # [B, 16]
    q = np.clip(np.rint(_safe_div(groups, step[..., None])), -32, 31).astype(np.int16) + 32
    q = q.reshape(-1, 2, 4, 32).astype(np.uint8)                          # [B, half h, row r % 4, l]
    ql = np.empty((x.shape[0], 2, 2, 32), dtype=np.uint8)                 # [B, h, r % 2, l]
    ql[:, :, 0] = (q[:, :, 0] & 15) | ((q[:, :, 2] & 15) << 4)
    ql[:, :, 1] = (q[:, :, 1] & 15) | ((q[:, :, 3] & 15) << 4)
    qh = (q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6)
    return np.concatenate([ql.reshape(-1, 128), qh.reshape(-1, 64), sc.view(np.uint8),
                           d.astype(np.float16).view(np.uint8).reshape(-1, 2)], axis=1)
