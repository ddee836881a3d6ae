"""strata.weights.quantize writes K-quant blocks that gguf-py reads back close to the input."""

from __future__ import annotations

import numpy as np
import pytest
from gguf.quants import dequantize

from strata.weights.quantize import Q4_K, Q6_K, quantize


@pytest.mark.parametrize("qtype, bound", [(Q4_K, 0.1), (Q6_K, 0.025)])
@pytest.mark.parametrize("shape", [(1, 256), (3, 512), (7, 2048)])
def test_blocks_read_back_by_gguf_within_the_types_error(qtype, bound, shape):
    """Relative RMS error of gaussian weights: 15 steps over a group of 32's range (about 4 sigma, so
    0.27 sigma a step, 0.077 RMS) at Q4_K; 63 steps over twice a group of 16's peak at Q6_K."""
    weights = np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32)
    back = dequantize(quantize(weights, qtype), qtype).reshape(shape)
    assert np.sqrt(np.mean((back - weights) ** 2) / np.mean(weights ** 2)) < bound


@pytest.mark.parametrize("qtype, group", [(Q4_K, 32), (Q6_K, 16)])
def test_every_weight_lands_within_a_step_of_its_group(qtype, group):
    """A step is a group's range over 15 (Q4_K) or its peak over 31 (Q6_K); a weight read back from
    the wrong place would miss by about the range (checks the layout, element by element; gaussian
    groups give 6-bit scales of 30-63, so every scale bit is exercised). A group much quieter than its
    superblock's loudest gets a coarser step (its scale is a small integer): not tested here."""
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((2, 512)).astype(np.float32)
    back = dequantize(quantize(weights, qtype), qtype).reshape(2, 512)
    groups = weights.reshape(2, -1, group)
    if qtype == Q4_K:
        step = (groups.max(axis=-1) - np.minimum(groups.min(axis=-1), 0)) / 15
    else:
        step = np.abs(groups).max(axis=-1) / 31
    assert np.all(np.abs(back - weights).reshape(2, -1, group) <= step[..., None] * 1.05 + 1e-6)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="whole 256-weight superblocks"):
        quantize(np.zeros((2, 100), np.float32), Q4_K)
    with pytest.raises(ValueError, match="not one of Q4_K"):
        quantize(np.zeros((2, 256), np.float32), 2)
