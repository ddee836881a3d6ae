"""strata.kernels.gguf_blocks: the block formats are gguf-py's, `dequantize_ref` equals gguf-py's numpy
dequantization bit for bit for every type (one row, odd row counts, one block and several superblocks,
rows taken from a larger tensor; the i-quants also at scales from float16 subnormals to large),
`packed_matmul_ref` is "dequantize, then matmul" also in row chunks, and bad shapes are ValueErrors."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from gguf_writer import random_blocks
from strata.kernels import gguf_blocks
from strata.kernels.gguf_blocks import (DENSE_TYPE_NAMES, IQ_TYPE_NAMES, PACKED_TYPE_NAMES, block_format,
                                        dequantize_ref, is_packed_type, packed_matmul_ref)

TYPES = DENSE_TYPE_NAMES + PACKED_TYPE_NAMES
Q = gguf.GGMLQuantizationType


def gguf_blocks_of(name: str, rows: int, k: int, seed: int = 0) -> np.ndarray:
    """uint8 [rows, row_bytes] of type `name`: random floats quantized by gguf-py where it can, else random
    blocks with finite float16 scales."""
    rng = np.random.default_rng(seed)
    qtype = Q[name]
    values = (rng.standard_normal((rows, k)) * rng.uniform(0.01, 3, (rows, 1))).astype(np.float32)
    if name == "F32":
        return values.view(np.uint8)
    if name == "F16":
        return values.astype(np.float16).view(np.uint8)
    try:
        return gguf.quants.quantize(values, qtype)
    except NotImplementedError:  # the K and IQ types: gguf-py only dequantizes them
        return scaled_random_blocks(name, rows, k, rng, scale=float(rng.uniform(1e-3, 1)))


def scaled_random_blocks(name: str, rows: int, k: int, rng: np.random.Generator, scale: float) -> np.ndarray:
    """uint8 [rows, row_bytes]: random blocks of type `name` whose float16 d are finite, near `scale`."""
    if name != "IQ1_M":
        return random_blocks((rows, k), Q[name], rng, scale=scale)
    # IQ1_M spreads d over the top nibbles of the 4 uint16 scale words at bytes 48-55 (word j: bits 4j .. 4j + 3)
    raw = rng.integers(0, 256, (rows * k // 256, 56), dtype=np.uint8)
    d = (rng.uniform(0.5, 1.5, raw.shape[0]) * scale).astype(np.float16).view(np.uint16)
    nibbles = (d[:, None].astype(np.int64) >> (4 * np.arange(4))) & 0xF
    words = (raw[:, 48:56].copy().view(np.uint16) & 0x0FFF) | (nibbles << 12)
    raw[:, 48:56] = words.astype(np.uint16).view(np.uint8)
    return raw.reshape(rows, -1)


def gguf_dequantize(raw: np.ndarray, name: str, k: int) -> torch.Tensor:
    if name in ("F32", "F16"):
        raw = raw.view(np.float32 if name == "F32" else np.float16)
    return torch.from_numpy(np.ascontiguousarray(gguf.quants.dequantize(raw, Q[name]), dtype=np.float32)).reshape(-1, k)


def assert_same_bits(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype == torch.float32 and actual.shape == expected.shape
    assert torch.equal(actual.view(torch.int32), expected.view(torch.int32))


def test_formats_are_gguf_py_s():
    for name in TYPES:
        fmt = block_format(Q[name])
        assert (fmt.name, fmt.qtype) == (name, int(Q[name]))
        assert (fmt.block_size, fmt.type_size) == gguf.GGML_QUANT_SIZES[Q[name]]
        assert is_packed_type(Q[name]) == (name in PACKED_TYPE_NAMES)
    assert block_format(Q.TQ1_0) is None and not is_packed_type(Q.TQ1_0) and not is_packed_type(Q.F32)
    assert set(IQ_TYPE_NAMES) <= set(PACKED_TYPE_NAMES)
    assert block_format(Q.Q4_K).row_bytes(512) == 288


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("rows, blocks", [(1, 1), (7, 3), (5, 4), (33, 1)], ids=["one-row", "odd", "several", "tall"])
def test_dequantize_ref_equals_gguf_bit_for_bit(name, rows, blocks):
    fmt = block_format(Q[name])
    # dense types: a block is one value, so make rows of 3 x 32 (odd) and 4 x 64 values instead
    k = fmt.block_size * blocks if fmt.block_size > 1 else 32 * blocks
    raw = gguf_blocks_of(name, rows, k, seed=rows * 10 + blocks)
    assert raw.shape == (rows, fmt.row_bytes(k))
    assert_same_bits(dequantize_ref(torch.from_numpy(raw.copy()), fmt.qtype, k), gguf_dequantize(raw, name, k))


@pytest.mark.parametrize("name", IQ_TYPE_NAMES)
@pytest.mark.parametrize("scale", [1e-6, 1e-2, 1.0, 3e4], ids=["subnormal", "small", "one", "large"])
def test_iq_types_equal_gguf_bit_for_bit_at_any_scale(name, scale):
    """Rows of several superblocks, d from float16 subnormals to near its largest: gguf-py's values exactly,
    all finite and not all zero (so the comparison covers the grids, signs and scales, not only NaNs)."""
    fmt = block_format(Q[name])
    k = fmt.block_size * 3
    raw = scaled_random_blocks(name, 6, k, np.random.default_rng(int(fmt.qtype)), scale)
    expected = gguf_dequantize(raw, name, k)
    assert torch.isfinite(expected).all() and expected.abs().max() > 0
    assert_same_bits(dequantize_ref(torch.from_numpy(raw.copy()), fmt.qtype, k), expected)


@pytest.mark.parametrize("name", PACKED_TYPE_NAMES)
def test_random_bytes_and_strided_rows_equal_gguf(name):
    """Every bit pattern decodes as gguf-py decodes it (NaN / inf scales included), also for rows taken
    from a larger tensor (a row slice with a stride, as an embedding's gathered rows or a chunk)."""
    fmt = block_format(Q[name])
    k = fmt.block_size * 2
    raw = np.random.default_rng(3).integers(0, 256, (9, fmt.row_bytes(k)), dtype=np.uint8)
    strided = torch.from_numpy(raw.copy())[::2]
    with np.errstate(invalid="ignore"):  # numpy warns as it multiplies by a signalling-NaN d
        expected = gguf_dequantize(raw[::2], name, k)
    assert_same_bits(dequantize_ref(strided, fmt.qtype, k), expected)


@pytest.mark.parametrize("name", ["Q4_1", "Q6_K", "IQ4_XS"])
def test_packed_matmul_ref_is_dequantize_then_matmul(name, monkeypatch):
    fmt = block_format(Q[name])
    k, n = fmt.block_size * 2, 37
    blocks = torch.from_numpy(gguf_blocks_of(name, n, k, seed=5))
    x = torch.randn(3, k, generator=torch.Generator().manual_seed(0))
    expected = (x.double() @ dequantize_ref(blocks, fmt.qtype, k).double().t()).float()
    whole = packed_matmul_ref(x, blocks, fmt.qtype, k)
    monkeypatch.setattr(gguf_blocks, "_CHUNK_VALUES", k * 8)  # 8 rows per chunk: 5 chunks, the last one short
    chunked = packed_matmul_ref(x, blocks, fmt.qtype, k)
    assert whole.shape == chunked.shape == (3, n)
    torch.testing.assert_close(whole, expected, rtol=1e-5, atol=1e-5 * expected.abs().max().item())
    torch.testing.assert_close(chunked, whole, rtol=1e-5, atol=1e-5 * expected.abs().max().item())


def test_bad_shapes_are_value_errors():
    q41 = int(Q.Q4_1)
    with pytest.raises(ValueError, match=r"a row of 48 values is not a whole number of Q4_1 blocks \(32 values each\)"):
        dequantize_ref(torch.zeros(2, 30, dtype=torch.uint8), q41, 48)
    with pytest.raises(ValueError, match=r"Q4_1 rows of 64 values are uint8 \[N, 40\], got torch.uint8 \(2, 36\)"):
        dequantize_ref(torch.zeros(2, 36, dtype=torch.uint8), q41, 64)
    with pytest.raises(ValueError, match=r"got torch.float32"):
        dequantize_ref(torch.zeros(2, 40), q41, 64)
    with pytest.raises(ValueError, match=r"GGML type 34 has no reference dequantization here; known: F32, F16"):
        dequantize_ref(torch.zeros(2, 54, dtype=torch.uint8), int(Q.TQ1_0), 256)


@pytest.mark.gpu
@pytest.mark.parametrize("name", TYPES)
def test_dequantize_ref_on_cuda_equals_gguf(name):
    """The same ops on CUDA tensors (the fallback of packed projections the Triton kernels do not take);
    to float32 rounding, as the device may order or fuse a block's multiply-adds differently."""
    k = 256 * 2
    raw = gguf_blocks_of(name, 5, k)
    out = dequantize_ref(torch.from_numpy(raw).cuda(), getattr(Q, name), k)
    torch.testing.assert_close(out.cpu(), gguf_dequantize(raw, name, k), rtol=1e-6, atol=1e-30)
