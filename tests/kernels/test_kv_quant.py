"""The int8 KV format (strata/kernels/kv_quant.py) against a plain torch formula: per (token, head) vector
scale = absmax / 127, values = round(x / scale), rounded half away from zero; dequantized = values * scale.
Writes and reads through a paged cache, int8 and 16-bit, at scattered slots."""

from __future__ import annotations

import pytest
import torch

from strata.kernels.kv_quant import dequantize_int8_ref, quantize_int8_ref, read_kv_ref, write_kv_ref


def randn(*shape, seed=0):
    generator = torch.Generator().manual_seed(seed)
    # vectors of very different sizes, as K and V rows are
    return torch.randn(*shape, generator=generator) * torch.rand(*shape[:-1], 1, generator=generator).mul(30).exp2()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quantize_int8_matches_the_plain_formula(dtype):
    x = randn(7, 3, 80, seed=1).to(dtype)                                 # [T, Hkv, D]
    values, scale = quantize_int8_ref(x)
    plain_scale = x.float().abs().amax(-1) / 127
    plain = torch.round(x.float() / plain_scale[..., None])               # no exact .5 ties in random data
    assert values.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (7, 3)
    assert torch.equal(scale, plain_scale)
    assert torch.equal(values, plain.to(torch.int8))
    assert torch.equal(values.abs().amax(-1), torch.full((7, 3), 127, dtype=torch.int8))  # absmax -> +-127
    back = dequantize_int8_ref(values, scale, torch.float32)
    assert torch.equal(back, values.float() * scale[..., None])
    assert ((back - x.float()).abs() <= scale[..., None] / 2 * (1 + 1e-6)).all()    # half a step at most


def test_ties_round_away_from_zero_and_a_zero_vector_stays_zero():
    x = torch.tensor([[127.0, 0.5, -0.5, 1.5, -2.5, 2.5, 0.0, -127.0], [0.0] * 8])  # scale 1, then a zero vector
    values, scale = quantize_int8_ref(x)
    assert scale.tolist() == [1.0, 0.0]
    assert values.tolist() == [[127, 1, -1, 2, -3, 3, 0, -127], [0] * 8]
    assert not dequantize_int8_ref(values, scale, torch.float32)[1].any()


@pytest.mark.parametrize("cache_dtype", [torch.int8, torch.float32, torch.float8_e4m3fn])
def test_kv_rows_written_at_scattered_slots_read_back(cache_dtype):
    x = randn(5, 2, 16, seed=2)                                            # [T, Hkv, D]
    slots = torch.tensor([9, 0, 23, 4, 17])
    cache = torch.zeros(6, 4, 2, 16, dtype=cache_dtype)                    # [N_blocks, B, Hkv, D]
    scale = torch.zeros(6, 4, 2) if cache_dtype == torch.int8 else None    # [N_blocks, B, Hkv]
    write_kv_ref(x, cache, scale, slots)
    rows = cache.view(-1, 2, 16)[slots]
    got = read_kv_ref(rows, None if scale is None else scale.view(-1, 2)[slots], torch.float32)
    if cache_dtype == torch.int8:
        values, row_scale = quantize_int8_ref(x)
        assert torch.equal(rows, values) and torch.equal(scale.view(-1, 2)[slots], row_scale)
        assert torch.equal(got, dequantize_int8_ref(values, row_scale, torch.float32))
    else:
        assert torch.equal(got, x.to(cache_dtype).float())
    others = torch.ones(24, dtype=torch.bool)
    others[slots] = False
    assert not cache.view(-1, 2, 16)[others].float().any()                 # nothing written elsewhere
