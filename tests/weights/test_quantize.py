"""strata.weights.quantize writes GGUF bytes that gguf-py reads back close to the input (K-quants, IQ4_NL, Q5_0,
Q5_1: within each block's step), bit for bit as gguf-py writes them (Q8_0, Q4_0, Q5_0, Q5_1 and the float types),
and the same bytes on CUDA as on the CPU; the i-quants (IQ4_XS, IQ3_S, IQ3_XXS, IQ2_S, IQ2_XXS) within their error,
signs where their layout puts them."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
from gguf.quants import dequantize

from strata.weights.quantize import (BF16, F16, F32, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_0, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K,
                                     Q8_0, quantize)

IQ4_XS, IQ3_S, IQ3_XXS, IQ2_S, IQ2_XXS = (gguf.GGMLQuantizationType[name]
                                          for name in ("IQ4_XS", "IQ3_S", "IQ3_XXS", "IQ2_S", "IQ2_XXS"))

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA"))]


def gaussian(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def read_back(weights: torch.Tensor, qtype) -> np.ndarray:
    return dequantize(quantize(weights, qtype).cpu().numpy(), qtype).reshape(weights.shape)


@pytest.mark.parametrize("qtype, bound", [(Q4_K, 0.1), (Q5_K, 0.05), (Q6_K, 0.025), (Q8_0, 0.01), (IQ4_NL, 0.1),
                                          (MXFP4, 0.15), (Q5_0, 0.05), (Q5_1, 0.05), (Q2_K, 0.36), (Q3_K, 0.17),
                                          (IQ4_XS, 0.1), (IQ3_S, 0.15), (IQ3_XXS, 0.2), (IQ2_S, 0.27),
                                          (IQ2_XXS, 0.36)])
@pytest.mark.parametrize("shape", [(1, 256), (3, 512), (2, 3, 2048)])
def test_blocks_read_back_by_gguf_within_the_types_error(qtype, bound, shape):
    """Relative RMS error of gaussian weights: 15 steps over a group of 32's range (about 4 sigma, so
    0.27 sigma a step, 0.077 RMS) at Q4_K, 31 at Q5_K and Q5_1 (measured 0.038); 63 steps over twice a group
    of 16's peak at Q6_K; 254 over twice a block of 32's peak at Q8_0, 32 at Q5_0 (measured 0.042); IQ4_NL's
    16 non-linear levels over a block of 32's range; 3 steps over a group of 16's range at Q2_K (1.2 sigma a step,
    measured 0.32-0.35 RMS), a group's peak over 4 at Q3_K (measured 0.155). The i-quants (measured at (64, 1024)):
    IQ4_XS 0.080 (IQ4_NL's levels, 6-bit scales a sub-block), IQ3_S 0.131, IQ3_XXS 0.179, IQ2_S 0.240, IQ2_XXS 0.330
    (grid rows of 4 or 8 values; Q3_K's and Q2_K's at about their bits)."""
    weights = gaussian(shape, seed=shape[0])
    back = read_back(weights, qtype)
    assert quantize(weights, qtype).shape[:-1] == weights.shape[:-1]
    assert np.sqrt(np.mean((back - weights.numpy()) ** 2) / np.mean(weights.numpy() ** 2)) < bound


@pytest.mark.parametrize("qtype, group", [(Q4_K, 32), (Q5_K, 32), (Q6_K, 16), (Q2_K, 16), (Q3_K, 16)])
def test_every_weight_lands_within_a_step_of_its_group(qtype, group):
    """A step is a group's range over 15 (Q4_K), 31 (Q5_K) or 3 (Q2_K), or its peak over 31 (Q6_K) or 4 (Q3_K,
    whose other end clips a step short: q runs -4..3); a weight read back
    from the wrong place would miss by about the range (checks the layout, element by element; gaussian
    groups give 6-bit scales of 30-63, so every scale bit is exercised). A group much quieter than its
    superblock's loudest gets a coarser step (its scale is a small integer): not tested here."""
    weights = gaussian((2, 512))
    back = read_back(weights, qtype)
    groups = weights.numpy().reshape(2, -1, group)
    if qtype in (Q6_K, Q3_K):
        step = np.abs(groups).max(axis=-1) / (31 if qtype == Q6_K else 4)
    else:
        levels = {Q4_K: 15, Q5_K: 31, Q2_K: 3}[qtype]
        step = (groups.max(axis=-1) - np.minimum(groups.min(axis=-1), 0)) / levels
    assert np.all(np.abs(back - weights.numpy()).reshape(2, -1, group) <= step[..., None] * 1.05 + 1e-6)


@pytest.mark.parametrize("qtype", [IQ3_S, IQ3_XXS, IQ2_S, IQ2_XXS])
def test_grid_types_keep_each_weights_sign(qtype):
    """The grid rows' values are all positive, so a weight read back has its stored sign: its own, except in
    IQ3_XXS / IQ2_XXS (7 signs stored, the eighth from an even count of minus signs), where a group of 8 with an
    odd count of negatives has exactly one flipped, its smallest (checks the sign bytes' and codes' layout)."""
    weights = gaussian((4, 512), seed=3).numpy()
    back = read_back(torch.from_numpy(weights), qtype)
    flipped = (np.sign(back) != np.sign(weights)).reshape(-1, 8)                    # [groups of 8, 8]
    if qtype in (IQ3_S, IQ2_S):
        assert not flipped.any()
        return
    odd = (weights.reshape(-1, 8) < 0).sum(-1) % 2 == 1
    assert np.array_equal(flipped.sum(-1), odd.astype(int))
    smallest = np.abs(weights.reshape(-1, 8)).argmin(-1)
    assert np.all(flipped[odd, smallest[odd]])


@pytest.mark.parametrize("qtype", [Q8_0, Q4_0, Q5_0, Q5_1, MXFP4, F16, BF16, F32])
def test_reference_quantizers_and_float_types_are_gguf_pys_bytes(qtype):
    weights = gaussian((5, 96)) * torch.tensor([1.0, 1e-3, 0.0, 30.0, 0.5]).unsqueeze(1)  # a block of zeros too
    weights[2] = 0.0  # +0 only: which signed zero numpy's min picks (Q5_1's m of -0 or +0) is its own affair
    weights[4, :4] = torch.tensor([127.0, 2.5, -3.5, 0.5])  # d = 1: ties, which go away from zero
    ours = quantize(weights, qtype).numpy()
    theirs = gguf.quants.quantize(weights.numpy(), qtype)
    assert np.array_equal(ours, theirs.view(np.uint8).reshape(ours.shape))


@pytest.mark.parametrize("qtype", [Q5_0, Q5_1])
@pytest.mark.parametrize("scale", [1.0, 1e-3, 300.0])
def test_q5_weights_land_within_half_a_step(qtype, scale):
    """Each weight read back is within half its block's step of itself (Q5_0: |peak| / 16, the step it was
    rounded on; Q5_1: (max - min) / 31), plus what storing d (and m) as float16 moves it: 2^-11 relative to
    up to 16 (Q5_0) or 31 (Q5_1) steps and to m. Q5_0's other end clips (q = 32 is 31): a weight of
    -peak lands within one step. Checks the layout weight by weight (low nibbles 0-15, high 16-31, bit i of
    qh weight i's fifth bit)."""
    blocks = gaussian((64, 32), seed=int(scale)).numpy() * scale
    blocks[1] = -blocks[1, np.abs(blocks[1]).argmax()]  # a block of one value: the clipped end, every weight
    back = read_back(torch.from_numpy(blocks), qtype)
    f16_eps = 2.0 ** -11
    if qtype == Q5_0:
        step = np.abs(blocks).max(axis=-1, keepdims=True) / 16
        clipped = blocks * np.sign(blocks[np.arange(64), np.abs(blocks).argmax(-1)])[:, None] / step <= -15.5
        allowed = np.where(clipped, 1.0, 0.5) * step + 16 * step * f16_eps
    else:
        low = blocks.min(axis=-1, keepdims=True)
        step = (blocks.max(axis=-1, keepdims=True) - low) / 31
        allowed = 0.5 * step + 31 * step * f16_eps + np.abs(low) * f16_eps
    assert np.all(np.abs(back - blocks) <= allowed * 1.001 + 1e-30)
    assert np.abs(back - blocks).max() > 0.25 * step.min()  # not trivially exact


def test_iq4_nl_weights_land_on_their_nearest_level():
    """d = a block's peak / -127: a weight read back is within half the widest gap between levels (24 d) of
    itself, or 14 d where it clips to the top level 113 (checks the layout: weight j low nibble, j + 16 high)."""
    weights = gaussian((3, 96))
    back = read_back(weights, IQ4_NL).reshape(-1, 32)
    blocks = weights.numpy().reshape(-1, 32)
    d = np.abs(blocks).max(axis=-1, keepdims=True) / 127
    assert np.all(np.abs(back - blocks) <= 14 * d * 1.01)


def test_zero_and_constant_blocks_stay_finite():
    weights = torch.zeros(3, 256)
    weights[1] = 2.5
    weights[2, 0] = -1.0
    for qtype in (Q4_K, Q5_K, Q6_K, Q8_0, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_XS):
        back = read_back(weights, qtype)
        assert np.isfinite(back).all() and np.abs(back - weights.numpy()).max() < 0.05
    for qtype in (IQ3_S, IQ3_XXS, IQ2_S, IQ2_XXS):  # no zero level, and not every constant row of 8 is a grid row
        back = read_back(weights, qtype)
        assert np.isfinite(back).all() and not back[0].any()
        assert np.all(np.abs(back - weights.numpy()).max(-1)[1:] < np.abs(weights.numpy()).max(-1)[1:])


@pytest.mark.parametrize("device", DEVICES)
def test_16_bit_input_and_devices_give_the_cpu_float32_bytes(device):
    """bf16 weights quantize as their float32 values, on any device, in chunks or not."""
    weights = gaussian((4, 1024)).bfloat16()
    for qtype in (Q4_K, Q5_K, Q6_K, Q8_0, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_XS, IQ3_XXS, IQ2_S):
        expected = quantize(weights.float(), qtype)
        assert torch.equal(quantize(weights.to(device), qtype).cpu(), expected)


def test_chunks_and_views_give_the_bytes_of_one_pass(monkeypatch):
    """Steps along dim 0 (2, 2, then 1 row of 512 here) and a strided view (the gate half of stacked experts
    [E, 2I, D]) give the bytes of the whole contiguous tensor at once; so does a vector."""
    from strata.weights import quantize as module

    weights, w13 = gaussian((5, 512)), gaussian((3, 4, 256))
    expected = quantize(weights, Q4_K), quantize(w13[:, :2].contiguous(), Q6_K), quantize(weights[0], Q8_0)
    assert expected[2].shape == (512 // 32 * 34,) and torch.equal(expected[2], quantize(weights[:1], Q8_0)[0])
    monkeypatch.setattr(module, "_CHUNK_VALUES", 1500)
    assert torch.equal(quantize(weights, Q4_K), expected[0])
    assert torch.equal(quantize(w13[:, :2], Q6_K), expected[1])
    assert torch.equal(quantize(weights[0], Q8_0), expected[2])


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="Q4_K needs rows of whole 256-weight blocks, got rows of 100"):
        quantize(torch.zeros(2, 100), Q4_K)
    with pytest.raises(ValueError, match="GGUF type Q4_1 is not one of F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, "
                                         "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K"):
        quantize(torch.zeros(2, 256), 3)
