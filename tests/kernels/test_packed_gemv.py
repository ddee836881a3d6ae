"""packed_gemv (few-row projections over packed GGUF blocks) against gguf's dequantization + a
float32 matmul, on blocks of every type it reads: quantized real values where gguf-py can quantize the
type, else random bytes with finite scales. The kernels also run in Triton's interpreter on the CPU
(TRITON_INTERPRET=1, triton installed), on small shapes; the i-quants' decode tables against gguf-py's."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from strata.kernels.packed_gemv import (BLOCK_LAYOUT, IQ4_NL, IQ4_XS, MXFP4, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1,
                                       Q5_K, Q6_K, Q8_0, packed_gemv, packed_gemv_ref, supports)
from strata.kernels.packed_iquants import (IQ1_M, IQ1_S, IQ2_S, IQ2_XS, IQ2_XXS, IQ3_S, IQ3_XXS, SUPERBLOCK_BYTES,
                                           decode_table)

IQ_TYPES = sorted(SUPERBLOCK_BYTES)

gpu = pytest.mark.gpu
interpreted = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="the kernels in Triton's interpreter: set TRITON_INTERPRET=1, triton installed")


def random_blocks(qtype: int, n: int, k: int, seed: int, low: float = 1e-3, high: float = 2e-2) -> torch.Tensor:
    """uint8 [n, row_bytes] of valid blocks: gguf-py quantizes Q8_0; for the other types random bytes with
    their f16 fields (d, and m / dmin) set to finite values in [low, high), MXFP4's exponents to small scales."""
    rng = np.random.default_rng(seed)
    per_block, block_bytes = BLOCK_LAYOUT[qtype]
    if qtype == Q8_0:
        from gguf.quants import quantize

        return torch.from_numpy(quantize(rng.standard_normal((n, k), dtype=np.float32), qtype))
    blocks = rng.integers(0, 256, (n, k // per_block, block_bytes), dtype=np.uint8)
    if qtype == IQ1_M:  # d's 16 bits are the top nibbles of the 4 uint16 scale words at bytes 48-55
        scale = rng.uniform(low, high, (n, k // per_block)).astype(np.float16)
        words = blocks[:, :, 48:56].copy().view(np.uint16) & 0x0FFF
        nibbles = (scale.view(np.uint16)[..., None].astype(np.int64) >> (4 * np.arange(4))) & 0xF
        blocks[:, :, 48:56] = (words | (nibbles << 12)).astype(np.uint16).view(np.uint8)
        return torch.from_numpy(blocks.reshape(n, -1))
    if qtype == MXFP4:  # an exponent byte: scales 2^-13 .. 2^-4 (random bytes reach 2^127)
        blocks[:, :, 0] = rng.integers(115, 125, (n, k // per_block))
        return torch.from_numpy(blocks.reshape(n, -1))
    f16_fields = {Q4_0: (0,), Q4_1: (0, 2), Q5_0: (0,), Q5_1: (0, 2), IQ4_NL: (0,), Q2_K: (80, 82), Q3_K: (108,),
                  Q4_K: (0, 2), Q5_K: (0, 2), Q6_K: (208,), IQ4_XS: (0,)}.get(qtype, (0,))  # the i-quants: d first
    for offset in f16_fields:
        scale = rng.uniform(low, high, (n, k // per_block)).astype(np.float16)
        blocks[:, :, offset:offset + 2] = scale.view(np.uint8).reshape(n, k // per_block, 2)
    return torch.from_numpy(blocks.reshape(n, -1))


def test_ref_matches_a_plain_dequantization():
    """The reference is gguf's dequantize + matmul: checked on Q8_0 against the quantized values."""
    blocks = random_blocks(Q8_0, 5, 64, seed=1)
    x = torch.randn(2, 64)
    raw = blocks.numpy().reshape(5, 2, 34)
    weight = raw[:, :, :2].copy().view(np.float16).astype(np.float32) * raw[:, :, 2:].copy().view(np.int8)
    torch.testing.assert_close(packed_gemv_ref(x, blocks, Q8_0, 5, 64), x @ torch.from_numpy(weight.reshape(5, 64)).t())


SMALL_BLOCK_TYPES = [Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4]


def test_supports_whole_blocks_of_the_types_read():
    """Superblock types (Q2_K = 10, Q3_K = 11 and the i-quants among them) need whole superblocks; 32-value types
    any number of blocks (a partial last chunk); types the kernels do not decode (Q8_1 = 9, TQ1_0 = 34) are never
    claimed."""
    assert supports(Q4_K, 512) and not supports(Q4_K, 320) and not supports(Q5_K, 640) and supports(IQ4_XS, 256)
    assert supports(Q2_K, 256) and supports(Q3_K, 768) and not supports(Q2_K, 640) and not supports(Q3_K, 32)
    assert all(supports(q, 640) and supports(q, 32) and not supports(q, 48) for q in SMALL_BLOCK_TYPES)
    assert IQ_TYPES == [IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ3_S, IQ2_S, IQ1_M] == [16, 17, 18, 19, 21, 22, 29]
    assert all(supports(q, 768) and not supports(q, 640) and not supports(q, 32) for q in IQ_TYPES)
    assert not supports(9, 256) and not supports(34, 256)


def test_decode_tables_are_gguf_py_s():
    """The i-quants' tables: gguf-py's code book as int8 (rows of 8, of 4 for IQ3_*), then for the 7-bit sign codes
    their sign bytes (bit i: value i of gguf-py's ksigns is negative; bit 7 makes the count of set bits even)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants

    for qtype in IQ_TYPES:
        name = GGMLQuantizationType(qtype).name
        assert GGML_QUANT_SIZES[GGMLQuantizationType(qtype)] == (256, SUPERBLOCK_BYTES[qtype]) == BLOCK_LAYOUT[qtype]
        cls = getattr(quants, name)
        cls.init_grid()
        grid = cls.grid.reshape(-1)
        table = decode_table(qtype, torch.device("cpu"))
        sign_codes = 128 if qtype in (IQ2_XXS, IQ2_XS, IQ3_XXS) else 0
        assert table.dtype == torch.int8 and table.numel() == grid.size + sign_codes
        assert np.array_equal(table[:grid.size].numpy(), grid.astype(np.int8))
        if table.numel() > grid.size:
            sign_bytes = table[grid.size:].view(torch.uint8).numpy()
            assert np.array_equal(sign_bytes, np.frombuffer(quants.IQ2_XXS.ksigns, dtype=np.uint8))
            assert all(bin(b).count("1") % 2 == 0 for b in sign_bytes)


def test_word_decoding_takes_rows_of_whole_words():
    """packed_gemv_words reads Q4_K / Q5_K / Q6_K rows whose bytes are whole 32-bit words: any Q4_K / Q5_K row
    (144 / 176 bytes a superblock), Q6_K rows of an even number of superblocks (210 bytes each)."""
    from strata.kernels.packed_gemv_words import supports as words_supports

    def fits(qtype, k):
        return words_supports(qtype, k, random_blocks(qtype, 2, k, seed=k))

    assert fits(Q4_K, 256) and fits(Q5_K, 768) and fits(Q6_K, 512) and fits(Q6_K, 2560)
    assert not fits(Q6_K, 256) and not fits(Q6_K, 768) and not fits(Q8_0, 256) and not fits(IQ4_XS, 256)
    assert not fits(Q2_K, 256) and not fits(Q3_K, 512) and not any(fits(q, 512) for q in IQ_TYPES)
    assert not words_supports(Q4_K, 256, random_blocks(Q4_K, 2, 512, seed=0).view(-1)[2:290].view(2, 144))


@gpu
@pytest.mark.parametrize("form", ["groups", "acc", "words", "words_wide"])
@pytest.mark.parametrize("qtype", sorted(BLOCK_LAYOUT))
@pytest.mark.parametrize("rows, n, k", [(1, 33, 256), (3, 64, 2048), (1, 5120, 2048), (16, 7, 768), (2, 9, 2560)])
def test_packed_gemv_matches_ref(qtype, rows, n, k, form):
    """Every K-loop form where allowed: group sums scaled per step, one accumulator of weights times x (refused
    for the types where the H200 gave wrong sums with it), and the word decoder (Q4_K / Q5_K / Q6_K rows of
    whole words, in both its tilings; the others fall back to the group sums)."""
    from strata.kernels.packed_gemv import ACC_REFUSED

    blocks = random_blocks(qtype, n, k, seed=rows * n + k)
    if form == "acc" and qtype in ACC_REFUSED:
        with pytest.raises(ValueError, match="accumulator"):
            packed_gemv(torch.zeros(1, k, dtype=torch.bfloat16, device="cuda"), blocks.cuda(), qtype, n, k,
                        config=dict(ACC=True))
        return
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(k)).to(torch.bfloat16)
    expected = packed_gemv_ref(x, blocks, qtype, n, k)
    from strata.kernels.packed_gemv_words import WIDE_CONFIG

    config = {"groups": dict(ACC=False, WORDS=False), "acc": dict(ACC=True), "words": dict(WORDS=True),
              "words_wide": dict(WORDS=True, **WIDE_CONFIG)}[form]
    out = packed_gemv(x.cuda(), blocks.cuda(), qtype, n, k, config=config)
    # the kernel sums in float32 in another order than the reference matmul
    scale = (x.float().abs() @ packed_gemv_ref(torch.eye(k), blocks, qtype, n, k).abs()).clamp_min(1.0)
    assert ((out.cpu() - expected).abs() / scale).max() < 1e-5


@gpu
@pytest.mark.parametrize("rows", [1, 4, 8, 9, 40])
def test_packed_linear_on_cuda_matches_the_cpu_reference(rows):
    """ops.packed_linear on CUDA (packed_q8 for the rows it takes of a narrow weight: the reference on the rounded
    activations; dequantize + matmul beyond) against the same weight's reference on the CPU, two segments of different
    types as in a Q4_K_M qkv."""
    from strata.model import ops
    from strata.model.packed import PackedWeight

    from strata.kernels import packed_q8, q8_rounding

    q, v = random_blocks(Q4_K, 64, 512, seed=1), random_blocks(Q6_K, 32, 512, seed=2)
    weight = PackedWeight.cat_rows([PackedWeight(q, Q4_K, 512), PackedWeight(v, Q6_K, 512)])
    x = torch.randn(rows, 512, generator=torch.Generator().manual_seed(rows)).to(torch.bfloat16)
    in_q8 = packed_q8.linear_takes(rows)
    if in_q8:  # both segments in packed_q8: x rounded to 8 bits per 32, once for both
        x = q8_rounding.dequantize_activations(*q8_rounding.quantize_ref(x)[:2])
    expected = torch.cat([packed_gemv_ref(x, q, Q4_K, 64, 512), packed_gemv_ref(x, v, Q6_K, 32, 512)], dim=1)
    out = ops.packed_linear(x.cuda(), weight.cuda(), out_dtype=torch.float32).cpu()
    dense = torch.cat([packed_gemv_ref(torch.eye(512), blocks, qtype, n, 512) for blocks, qtype, n in
                       ((q, Q4_K, 64), (v, Q6_K, 32))], dim=1)                       # W.T [K, N]
    scale = (x.float().abs() @ dense.abs()).clamp_min(1.0)
    # float32 sums up to MAX_ROWS; beyond, a bf16 GEMM of the dequantized weight (8-bit mantissas)
    assert ((out - expected).abs() / scale).max() < (1e-5 if in_q8 else 1e-2)


@gpu
@pytest.mark.parametrize("qtype", sorted(BLOCK_LAYOUT))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_packed_dequant_matches_the_reference(qtype, dtype):
    """One launch from blocks to 16-bit weights: gguf's float32 values rounded once; rows spaced further
    apart than their bytes (a slice of wider rows) read as well as contiguous ones."""
    from strata.kernels.gguf_blocks import dequantize_ref
    from strata.kernels.packed_dequant import dequantize

    blocks = random_blocks(qtype, 37, 768, seed=qtype)
    wide = torch.zeros(37, blocks.shape[1] + 40, dtype=torch.uint8)
    wide[:, :blocks.shape[1]] = blocks
    expected = dequantize_ref(blocks, qtype, 768).to(dtype)
    for source in (blocks.cuda(), wide.cuda()[:, :blocks.shape[1]]):
        out = dequantize(source, qtype, 768, dtype)
        assert out.dtype == dtype and torch.equal(out.cpu(), expected)


@gpu
@pytest.mark.parametrize("qtype", SMALL_BLOCK_TYPES)
@pytest.mark.parametrize("rows, n, k", [(1, 33, 640), (3, 64, 96), (16, 7, 32)])
def test_packed_gemv_and_dequant_partial_chunks(qtype, rows, n, k):
    """32-value-block rows that are not whole 256-value chunks (Qwen4-Exp's 640-wide expert down rows, in
    llama.cpp's Q5_0 / Q5_1 / Q8_0 fallbacks): the gemv and the 16-bit dequantization against the references."""
    from strata.kernels import packed_dequant, packed_gemv
    from strata.kernels.gguf_blocks import dequantize_ref

    blocks = random_blocks(qtype, n, k, seed=rows + k)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(k)).to(torch.bfloat16)
    expected = packed_gemv_ref(x, blocks, qtype, n, k)
    out = packed_gemv.packed_gemv(x.cuda(), blocks.cuda(), qtype, n, k)
    scale = (x.float().abs() @ packed_gemv_ref(torch.eye(k), blocks, qtype, n, k).abs()).clamp_min(1.0)
    assert ((out.cpu() - expected).abs() / scale).max() < 1e-5
    dense = packed_dequant.dequantize(blocks.cuda(), qtype, k, torch.float32)
    torch.testing.assert_close(dense.cpu(), dequantize_ref(blocks, qtype, k), rtol=0, atol=0)


@interpreted
@pytest.mark.parametrize("acc", [False, True])
@pytest.mark.parametrize("qtype", sorted(BLOCK_LAYOUT))
@pytest.mark.parametrize("rows, n, k", [(1, 5, 256), (3, 9, 768)])
def test_packed_gemv_in_the_interpreter(qtype, rows, n, k, acc):
    """The group sums and the accumulator loop (where allowed) on the CPU, a last program of masked rows and
    odd superblock counts included, against the reference within float32 summation error."""
    from strata.kernels.packed_gemv import ACC_REFUSED

    if acc and qtype in ACC_REFUSED:
        return
    blocks = random_blocks(qtype, n, k, seed=rows * n + k)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(k))
    out = packed_gemv(x, blocks, qtype, n, k, config=dict(ACC=acc, WORDS=False, SUPERBLOCKS=2))
    scale = (x.abs() @ packed_gemv_ref(torch.eye(k), blocks, qtype, n, k).abs()).clamp_min(1.0)
    assert ((out - packed_gemv_ref(x, blocks, qtype, n, k)).abs() / scale).max() < 1e-5


@interpreted
@pytest.mark.parametrize("qtype", IQ_TYPES)
@pytest.mark.parametrize("low, high", [(0, 1e-5), (10.0, 6e4)], ids=["subnormal", "large"])
def test_iq_dequant_and_gemv_at_extreme_scales(qtype, low, high):
    """The i-quants' scales (d times a sub-block factor in gguf_blocks' order of roundings) for d from float16
    subnormals to near its largest: the one-launch dequantization bit for bit, the gemv within summation error."""
    from strata.kernels.gguf_blocks import dequantize_ref
    from strata.kernels.packed_dequant import dequantize_blocks

    blocks = random_blocks(qtype, 5, 512, seed=qtype, low=low, high=high)
    expected = dequantize_ref(blocks, qtype, 512)
    assert torch.isfinite(expected).all() and expected.abs().max() > 0
    assert torch.equal(dequantize_blocks(blocks, qtype, 512, torch.float32), expected)
    x = torch.randn(2, 512, generator=torch.Generator().manual_seed(qtype))
    out = packed_gemv(x, blocks, qtype, 5, 512, config=dict(SUPERBLOCKS=2))
    scale = (x.abs() @ expected.abs().t()).clamp_min(torch.finfo(torch.float32).tiny)
    assert ((out - x @ expected.t()).abs() / scale).max() < 1e-5


@interpreted
@pytest.mark.parametrize("qtype", sorted(BLOCK_LAYOUT))
def test_packed_dequant_in_the_interpreter(qtype):
    """The one-launch dequantization on the CPU: gguf's float32 values exactly, and rounded once to float16
    (the interpreter's bf16 cast truncates), for rows spaced further apart than their bytes (a slice of wider
    rows)."""
    from strata.kernels.gguf_blocks import dequantize_ref
    from strata.kernels.packed_dequant import dequantize_blocks

    blocks = random_blocks(qtype, 11, 768, seed=qtype)
    wide = torch.zeros(11, blocks.shape[1] + 40, dtype=torch.uint8)
    wide[:, :blocks.shape[1]] = blocks
    expected = dequantize_ref(blocks, qtype, 768)
    assert torch.equal(dequantize_blocks(blocks, qtype, 768, torch.float32), expected)
    assert torch.equal(dequantize_blocks(wide[:, :blocks.shape[1]], qtype, 768, torch.float16),
                       expected.to(torch.float16))


def _table_problem(qtype: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A lookup table's blocks [R, row bytes] and ids [N] with repeats, out of order (a step's PLE rows)."""
    blocks = random_blocks(qtype, 23, k, seed=qtype + k)
    return blocks, torch.tensor([7, 0, 22, 7, 3, 19, 11, 1, 5])


@pytest.mark.parametrize("qtype", [Q8_0, IQ4_NL, Q4_K])
def test_dequantize_rows_off_cuda_is_the_reference_of_the_rows(qtype):
    """packed_dequant.dequantize_rows: dequantize(blocks[ids]) on the ids' device (here the CPU, by torch)."""
    from strata.kernels.gguf_blocks import dequantize_ref
    from strata.kernels.packed_dequant import dequantize_rows

    k = 256 if qtype == Q4_K else 160
    blocks, ids = _table_problem(qtype, k)
    assert torch.equal(dequantize_rows(blocks, ids, qtype, k, torch.float32), dequantize_ref(blocks[ids], qtype, k))


@interpreted
@pytest.mark.parametrize("qtype, k", [(Q8_0, 160), (IQ4_NL, 160), (Q4_K, 512), (Q6_K, 256), (IQ2_XS, 256)])
def test_dequantize_rows_in_the_interpreter(qtype, k):
    """The one launch reading each output row's blocks at its id (Qwen4-Exp's PLE table rows: 160 values, 90-byte
    IQ4_NL rows that are not whole words): gguf's float32 values exactly."""
    from strata.kernels.gguf_blocks import dequantize_ref
    from strata.kernels.packed_dequant import dequantize_rows

    blocks, ids = _table_problem(qtype, k)
    assert torch.equal(dequantize_rows(blocks, ids, qtype, k, torch.float32), dequantize_ref(blocks[ids], qtype, k))


@interpreted
def test_dequantize_rows_of_a_dense_type_in_the_interpreter():
    """F16 / BF16 tables (whole-word rows): gathered by the SMs, then widened."""
    from gguf import GGMLQuantizationType as GGML

    from strata.kernels.packed_dequant import dequantize_rows

    values = torch.randn(23, 160, generator=torch.Generator().manual_seed(3))
    ids = torch.tensor([7, 0, 22, 7, 3])
    for qtype, dtype in ((GGML.F16, torch.float16), (GGML.BF16, torch.bfloat16)):
        blocks = values.to(dtype).view(torch.uint8)                                           # [R, 320]
        assert torch.equal(dequantize_rows(blocks, ids, qtype, 160, torch.float32), values.to(dtype)[ids].float())


@gpu
@pytest.mark.parametrize("qtype, k", [(IQ4_NL, 160), (Q8_0, 160), (Q4_K, 512)])
def test_dequantize_rows_reads_page_locked_host_blocks_in_place(qtype, k):
    """A table in host memory page-locked where it lies (transfer.pin_in_place, as a PLE table in
    host memory is), ids on the GPU: the kernel reads the rows over PCIe, inside a CUDA graph too."""
    from strata.kernels.gguf_blocks import dequantize_ref
    from strata.kernels.packed_dequant import dequantize_rows
    from strata.transfer import pin_in_place

    blocks, ids = _table_problem(qtype, k)
    assert pin_in_place(blocks, "a test's table")
    expected = dequantize_ref(blocks[ids], qtype, k).to(torch.bfloat16)
    ids = ids.cuda()
    assert torch.equal(dequantize_rows(blocks, ids, qtype, k, torch.bfloat16).cpu(), expected)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = dequantize_rows(blocks, ids, qtype, k, torch.bfloat16)
    graph.replay()
    assert torch.equal(out.cpu(), expected)
