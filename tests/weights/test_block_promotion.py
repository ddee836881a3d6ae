"""Blocks promoted to a wider type (strata.weights.block_promotion) keep every value bit for bit (gguf_blocks'
dequantization, itself gguf-py's), so a layer whose gate and up experts differ in type loads packed."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q
from gguf.quants import quantize as gguf_quantize

from strata.kernels.gguf_blocks import dequantize_ref
from strata.weights.block_promotion import common_type, promote
from strata.weights.quantize import quantize


def blocks_of(qtype: Q, rows: int, k: int) -> torch.Tensor:
    """uint8 [rows, row bytes]: Gaussian weights quantized (gguf-py where it can, else Strata's quantizer); Q4_K
    also random bytes, whose 6-bit scales and mins take every value."""
    values = np.random.default_rng(int(qtype)).standard_normal((rows, k)).astype(np.float32)
    if qtype in (Q.Q4_0, Q.Q5_0, Q.Q8_0):
        return torch.from_numpy(gguf_quantize(values, qtype))
    return quantize(torch.from_numpy(values), qtype)


@pytest.mark.parametrize("qtype, target", [(Q.Q4_K, Q.Q5_K), (Q.Q4_0, Q.Q8_0), (Q.Q5_0, Q.Q8_0), (Q.IQ4_NL, Q.Q8_0)])
def test_promoted_blocks_hold_the_same_values(qtype, target):
    k = 512
    blocks = blocks_of(qtype, 6, k)
    if qtype == Q.Q4_K:  # random bytes beside the quantized rows, float16 d and dmin kept finite
        noise = torch.from_numpy(np.random.default_rng(1).integers(0, 256, (6, blocks.shape[1]), dtype=np.uint8))
        noise.view(6, -1, 144)[:, :, 0:4] = blocks.view(6, -1, 144)[:, :, 0:4]
        blocks = torch.cat([blocks, noise])
    promoted = promote(blocks.view(2, -1, blocks.shape[1]), qtype, target)     # a leading expert dimension too
    assert promoted.shape == (2, blocks.shape[0] // 2, k // GGML_QUANT_SIZES[target][0] * GGML_QUANT_SIZES[target][1])
    expected = dequantize_ref(blocks, qtype, k)
    got = dequantize_ref(promoted.reshape(blocks.shape[0], -1), target, k)
    assert torch.equal(got.view(torch.int32), expected.view(torch.int32))


def test_common_types():
    assert common_type({Q.Q6_K}) == Q.Q6_K
    assert common_type({Q.Q4_K, Q.Q5_K}) == Q.Q5_K
    assert common_type({Q.Q4_0, Q.IQ4_NL}) == common_type({Q.Q5_0, Q.Q8_0}) == Q.Q8_0
    assert common_type({Q.Q4_K, Q.Q6_K}) is None and common_type({Q.Q4_K, Q.Q8_0}) is None
    with pytest.raises(ValueError, match="no exact promotion of GGUF type Q6_K to Q8_0"):
        promote(torch.zeros(1, 210, dtype=torch.uint8), Q.Q6_K, Q.Q8_0)
