"""cpu_quant.dequant_matmul: float32 activations times GGUF blocks, each weight exactly gguf's dequantization.

Two properties, for every type, instruction set and odd shape:
- the weights are gguf-py's float32 values bit for bit: x = rows of the identity picks them out exactly
  (one nonzero product a sum), including for every finite float16 scale;
- the sums are float32 sums of exact products (FMA): against the float64 reference,
  |y - ref| <= c * K * eps32 * (|x| @ |W|.T) with c = 1 and eps32 = 2^-23 (any order of K - 1 roundings
  of at most eps32 / 2 each stays within half of that). quant_matmul's int8 activations break this bound
  (test_int8_activations_break_the_bound), so it has teeth.
Weights: random bytes with finite float16 scales (every bit pattern of the quants), and gguf.quants.quantize
of Gaussian values where gguf can quantize the type (IQ4_NL: strata.weights.quantize).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q
from gguf.quants import dequantize
from test_cpu_quant import (F16_FIELDS, IQ_TYPES, QUANTIZABLE, TYPES, UNSUPPORTED, put_f16, put_mxfp4_exponents,
                            quantize_gaussian)

from strata.kernels import cpu_quant
from strata.kernels.gguf_blocks import dequantize_ref

BUILT = cpu_quant.supports_dequant(Q.Q8_0)
pytestmark = pytest.mark.skipif(not BUILT, reason="no C compiler to build the kernel")

ISAS = list(cpu_quant.available_isas()) if BUILT else []
EPS32 = 2.0 ** -23


@pytest.fixture(autouse=True)
def best_isa():
    best = cpu_quant.isa() if BUILT else None
    yield
    if best is not None:
        cpu_quant.set_isa(best)
        cpu_quant.set_num_threads(torch.get_num_threads())


def make_blocks(qtype: Q, n: int, k: int, seed: int, source: str = "random",
                scales: np.ndarray | None = None) -> torch.Tensor:
    """[N, row bytes]: random bytes with float16 scales uniform in +-0.05 (or `scales` [N, K / block, fields]),
    or the quantization of Gaussian weights (quantize_gaussian)."""
    rng = np.random.default_rng(seed)
    if source == "quantized":
        return quantize_gaussian(qtype, n, k, rng)
    block, type_bytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n, k // block, type_bytes), dtype=np.uint8)
    for i, offset in enumerate(F16_FIELDS[qtype]):
        field = rng.uniform(-0.05, 0.05, size=(n, k // block)).astype(np.float16) if scales is None else scales[..., i]
        put_f16(raw, qtype, offset, field)
    if qtype == Q.MXFP4:
        put_mxfp4_exponents(raw, rng)
    return torch.from_numpy(raw.reshape(n, -1))


def weight_of(blocks: torch.Tensor, qtype: Q, n: int, k: int) -> torch.Tensor:
    return torch.from_numpy(dequantize(blocks.numpy(), qtype).reshape(n, k))  # [N, K] float32


def rounding_bound(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x.shape[1] * EPS32 * (x.double().abs() @ weight.double().abs().T)  # [T, N]


def block_of(qtype: Q) -> int:
    return GGML_QUANT_SIZES[qtype][0]


# (T, N, blocks a row): T = 17 spans a full tile of 12 rows and a part; 19 and 5 blocks span two chunks of
# 512 decoded values
CASES = [(qtype, source, t, n, blocks) for qtype in TYPES
         for source in (["random", "quantized"] if qtype in QUANTIZABLE else ["random"])
         for t in (1, 3, 17) for n in (1, 33) for blocks in (1, 19 if block_of(qtype) == 32 else 5)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype,source,t,n,blocks", CASES,
                         ids=[f"{q.name}-{s}-{t}x{n}x{b}" for q, s, t, n, b in CASES])
def test_within_float32_rounding_of_the_reference(isa, qtype, source, t, n, blocks):
    cpu_quant.set_isa(isa)
    k = blocks * block_of(qtype)
    w = make_blocks(qtype, n, k, seed=t * 100 + n + blocks, source=source)
    x = torch.randn(t, k, generator=torch.Generator().manual_seed(t + k))
    y = cpu_quant.dequant_matmul(x, w, qtype, n, k)
    assert y.shape == (t, n) and y.dtype == torch.float32
    error = (y.double() - cpu_quant.dequant_matmul_ref(x, w, qtype, n, k)).abs()
    assert (error <= rounding_bound(x, weight_of(w, qtype, n, k))).all()


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", TYPES, ids=[q.name for q in TYPES])
def test_weights_are_ggufs_bit_for_bit(isa, qtype):
    """x = the identity [K, K]: y = W.T, each value one product by 1.0 and zeros."""
    cpu_quant.set_isa(isa)
    k = 2 * block_of(qtype)
    w = make_blocks(qtype, 33, k, seed=3)
    y = cpu_quant.dequant_matmul(torch.eye(k), w, qtype, 33, k)
    assert torch.equal(y, weight_of(w, qtype, 33, k).T)
    assert torch.equal(y, dequantize_ref(w, qtype, k).T)


@pytest.mark.parametrize("qtype", TYPES, ids=[q.name for q in TYPES])
def test_every_finite_float16_scale(qtype):
    """One block a row, the first float16 field of row r the r-th finite float16 (both signs, subnormals,
    65504), the second (Q4_1's m, the dmin of Q2_K, Q4_K, Q5_K) a shuffle of them: the SIMD kernels compute
    q * d + m as one FMA where q * d is exact, which this holds to gguf's two roundings over every scale. The
    i-quants' weights round nowhere (exact products, iquant_simd.h): a random quarter of the scales and the
    extremes (65504, the least subnormal) hold them, at a quarter of the time of gguf's reference.
    x picks 8 values of each block (one a 32) out of the identity."""
    finite = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    finite = finite[np.isfinite(finite)]  # [63488]
    if qtype in IQ_TYPES:
        extremes = finite[np.isin(np.abs(finite), np.array([65504, 2 ** -24], dtype=np.float16))]
        finite = np.concatenate([extremes, np.random.default_rng(6).choice(finite, len(finite) // 4, replace=False)])
    fields = np.stack([finite, np.random.default_rng(4).permutation(finite)], axis=-1)[:, None, :]  # [N, 1, 2]
    k = block_of(qtype)
    w = make_blocks(qtype, len(finite), k, seed=5, scales=fields)
    columns = torch.arange(0, k, k // 8) + torch.arange(8) % (k // 8)  # [8]: one in each eighth of the block
    x = torch.eye(k)[columns].contiguous()  # [8, K]
    expected = weight_of(w, qtype, len(finite), k)[:, columns].T
    for isa in ISAS:
        cpu_quant.set_isa(isa)
        assert torch.equal(cpu_quant.dequant_matmul(x, w, qtype, len(finite), k), expected), isa


@pytest.mark.parametrize("qtype", TYPES, ids=[q.name for q in TYPES])
def test_int8_activations_break_the_bound(qtype):
    """Gaussian x with 1 % outliers of 20x: int8 activations (quant_matmul) miss the float32 bound that
    dequant_matmul keeps, so the bound tells the two apart."""
    k, n = 4 * block_of(qtype), 33
    w = make_blocks(qtype, n, k, seed=6)
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(5, k, generator=generator)
    x[torch.rand(5, k, generator=generator) < 0.01] *= 20
    ref = cpu_quant.dequant_matmul_ref(x, w, qtype, n, k)
    bound = rounding_bound(x, weight_of(w, qtype, n, k))
    assert ((cpu_quant.dequant_matmul(x, w, qtype, n, k).double() - ref).abs() <= bound).all()
    assert ((cpu_quant.quant_matmul(x, w, qtype, n, k).double() - ref).abs() > bound).any()


@pytest.mark.parametrize("isa", ISAS)
def test_batch_rows_and_threads_do_not_change_the_bits(isa):
    """Each output is summed by one thread in one order: alone or in a batch of any size, on 1 or 2
    threads, a row of x gives the same bits (a request's logits do not depend on its neighbours)."""
    cpu_quant.set_isa(isa)
    qtype, n, k = Q.Q4_K, 301, 1536
    w = make_blocks(qtype, n, k, seed=8)
    x = torch.randn(40, k, generator=torch.Generator().manual_seed(9))
    results = []
    for threads in (1, 2):
        cpu_quant.set_num_threads(threads)
        results.append(cpu_quant.dequant_matmul(x, w, qtype, n, k))
    assert torch.equal(results[0], results[1])
    for size in (1, 2, 3, 5, 8):  # 4, 2 and 1 weight rows at a time; tiles of 8 rows of x and their tails
        in_parts = torch.cat([cpu_quant.dequant_matmul(x[i:i + size], w, qtype, n, k) for i in range(0, 40, size)])
        assert torch.equal(in_parts, results[0]), size


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", TYPES, ids=[q.name for q in TYPES])
def test_many_rows_equal_one_row_at_a_time(isa, qtype):
    """The AVX2 kernel meets a decoded weight row with up to 8 rows of x (one accumulator each), takes 4 or 2
    weight rows at once for 1-2 or 3-4 rows of x, walks K whole while the tile's x is at most 6144 floats and
    in chunks of 512 over groups of 16 weight rows past that; from 16 rows of x (a prompt chunk) it decodes up
    to 64 weight rows into a buffer and meets them 3 x 4 rows of x at a time; from 64 rows of x on AVX-512 it
    decodes them in pairs and meets them 4 pairs x 6 rows of x at a time in 512-bit registers: every batch size
    from 1 to 22 (full tiles and tails; up to 5 rows in one pass, 6-8 in chunks, 16-22 through the buffer with
    4-row tails of 1-3) and 64-71 (6-row tails of 4-5 and 0-5), 37 weight rows (2 groups + 5: tails of the 4-
    and 2-row steps, an odd last pair, 4 pairs + 2 with an odd row) and a K whose last chunk is partial give
    each row the bits of that row alone, within the float32 bound of the reference."""
    cpu_quant.set_isa(isa)
    cpu_quant.set_num_threads(1)
    n, k = 37, 1056 if block_of(qtype) == 32 else 1280  # chunks 512 + 512 + 32 / + 256
    w = make_blocks(qtype, n, k, seed=15)
    x = torch.randn(71, k, generator=torch.Generator().manual_seed(16))
    alone = torch.cat([cpu_quant.dequant_matmul(x[i:i + 1], w, qtype, n, k) for i in range(71)])
    for t in [*range(1, 23), 64, 67, 71]:
        assert torch.equal(cpu_quant.dequant_matmul(x[:t].contiguous(), w, qtype, n, k), alone[:t]), t
    error = (alone.double() - cpu_quant.dequant_matmul_ref(x, w, qtype, n, k)).abs()
    assert (error <= rounding_bound(x, weight_of(w, qtype, n, k))).all()


def test_isas_agree_within_the_bound():
    qtype, t, n, k = Q.Q5_K, 11, 37, 1024
    w = make_blocks(qtype, n, k, seed=10)
    x = torch.randn(t, k, generator=torch.Generator().manual_seed(11))
    bound = rounding_bound(x, weight_of(w, qtype, n, k))
    results = {}
    for name in ISAS:
        cpu_quant.set_isa(name)
        assert cpu_quant.isa() == name
        results[name] = cpu_quant.dequant_matmul(x, w, qtype, n, k)
    assert all(((y - results["scalar"]).abs() <= 2 * bound).all() for y in results.values())


def test_zero_rows_and_zero_activations():
    w = make_blocks(Q.Q4_1, 7, 64, seed=12)
    assert torch.equal(cpu_quant.dequant_matmul(torch.zeros(2, 64), w, Q.Q4_1, 7, 64), torch.zeros(2, 7))
    assert cpu_quant.dequant_matmul(torch.zeros(0, 64), w, Q.Q4_1, 7, 64).shape == (0, 7)


def test_bad_input_says_what_is_wrong():
    w = make_blocks(Q.Q8_0, 4, 64, seed=13)
    assert cpu_quant.supports_dequant(Q.Q4_K) and not cpu_quant.supports_dequant(UNSUPPORTED)
    assert not cpu_quant.supports_dequant(Q.F16)
    with pytest.raises(ValueError, match="dequant_matmul: x must be a contiguous CPU float32"):
        cpu_quant.dequant_matmul(torch.randn(2, 64, dtype=torch.float64), w, Q.Q8_0, 4, 64)
    with pytest.raises(ValueError, match="contiguous CPU float32"):
        cpu_quant.dequant_matmul(torch.randn(64, 2).T, w, Q.Q8_0, 4, 64)
    with pytest.raises(ValueError, match=r"Q8_0 blocks for \[4, 64\] must be a contiguous CPU uint8 \[4, 68\]"):
        cpu_quant.dequant_matmul(torch.randn(2, 64), w[:, :34].contiguous(), Q.Q8_0, 4, 64)
    with pytest.raises(ValueError, match="K a multiple of 256"):
        cpu_quant.dequant_matmul(torch.randn(2, 128), torch.zeros(4, 72, dtype=torch.uint8), Q.Q4_K, 4, 128)
    with pytest.raises(ValueError, match="not handled"):
        cpu_quant.dequant_matmul(torch.randn(2, 256), torch.zeros(4, 66, dtype=torch.uint8), UNSUPPORTED, 4, 256)


def test_float32_packed_linear_reads_the_blocks_and_falls_back_to_the_dense_copy(monkeypatch):
    """ops.packed_linear on float32 CPU input: dequant_matmul per segment (a Q4_K part beside a Q6_K one),
    no dense copy of the weight made; with STRATA_NO_CPU_DEQUANT=1, the dense copy (PackedWeight.dense_float32)."""
    from strata.model import cpu_ops, ops
    from strata.model.packed import PackedWeight

    parts = [PackedWeight(make_blocks(qtype, n, 512, seed=n), qtype, 512) for qtype, n in ((Q.Q4_K, 9), (Q.Q6_K, 4))]
    weight = PackedWeight.cat_rows(parts)
    x = torch.randn(2, 3, 512, generator=torch.Generator().manual_seed(14))  # [..., K]
    bias = torch.randn(13)
    out = ops.packed_linear(x, weight, bias)
    rows = x.reshape(-1, 512)
    expected = torch.cat([cpu_quant.dequant_matmul(rows, blocks, qtype, blocks.shape[0], 512)
                          for qtype, blocks in weight.segments()], dim=-1) + bias
    assert out.shape == (2, 3, 13) and torch.equal(out.reshape(-1, 13), expected)
    assert getattr(weight, "_dense_float32", None) is None
    cpu_ops.native_dequant.cache_clear()
    monkeypatch.setenv("STRATA_NO_CPU_DEQUANT", "1")
    try:
        dense = ops.packed_linear(x, weight, bias)
        assert weight._dense_float32 is not None
        assert torch.equal(dense.reshape(-1, 13), torch.nn.functional.linear(rows, weight.dequantize()) + bias)
    finally:
        cpu_ops.native_dequant.cache_clear()


@pytest.mark.parametrize("t", [1, 3, 20])
def test_products_written_into_columns_of_a_wider_output(t):
    """out=: each kernel writes its [T, N] into columns of a wider tensor (a fused projection's segments) with
    the bits it returns alone, and leaves the other columns as they were; a bad out is refused."""
    k = 64
    a, b = make_blocks(Q.Q4_1, 5, k, seed=17), make_blocks(Q.Q8_0, 7, k, seed=18)
    x = torch.randn(t, k, generator=torch.Generator().manual_seed(19))
    for matmul in (cpu_quant.dequant_matmul, cpu_quant.quant_matmul):
        out = torch.full((t, 14), -7.0)
        matmul(x, a, Q.Q4_1, 5, k, out=out[:, 1:6])
        matmul(x, b, Q.Q8_0, 7, k, out=out[:, 6:13])
        assert torch.equal(out[:, 1:6], matmul(x, a, Q.Q4_1, 5, k))
        assert torch.equal(out[:, 6:13], matmul(x, b, Q.Q8_0, 7, k))
        assert (out[:, 0] == -7).all() and (out[:, 13] == -7).all()
        with pytest.raises(ValueError, match="contiguous rows"):
            matmul(x, a, Q.Q4_1, 5, k, out=torch.zeros(10, t)[::2].T)  # columns 2t apart


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("t", [1, 3, 20])
def test_segments_in_one_call_give_each_segments_bits(isa, t):
    """dequant_matmul_segments (a fused projection's parts in one library call, one pool job) writes each segment's
    columns with dequant_matmul's bits on that segment alone, on 1 and 2 threads, for parts of different types and
    sizes that split into chunks unevenly; more segments than the library takes, or a block it cannot read, are
    refused when the segments are prepared."""
    cpu_quant.set_isa(isa)
    k = 256
    parts = [(Q.Q4_K, make_blocks(Q.Q4_K, 70, k, seed=21)), (Q.Q6_K, make_blocks(Q.Q6_K, 3, k, seed=22)),
             (Q.Q4_K, make_blocks(Q.Q4_K, 129, k, seed=23))]
    x = torch.randn(t, k, generator=torch.Generator().manual_seed(24))
    expected = torch.cat([cpu_quant.dequant_matmul(x, blocks, qtype, blocks.shape[0], k) for qtype, blocks in parts], 1)
    segments = cpu_quant.Segments(parts, k)
    for threads in (1, 2):
        cpu_quant.set_num_threads(threads)
        assert torch.equal(cpu_quant.dequant_matmul_segments(x, segments), expected)
    with pytest.raises(ValueError, match="1 to 8"):
        cpu_quant.Segments(parts * 3, k)
    with pytest.raises(ValueError, match="Q6_K blocks"):
        cpu_quant.Segments([parts[0], (Q.Q6_K, parts[1][1][:, :-1])], k)
    with pytest.raises(ValueError, match=r"\[T, 256\]"):
        cpu_quant.dequant_matmul_segments(x[:, :128], segments)
