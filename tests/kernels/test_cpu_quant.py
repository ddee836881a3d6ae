"""The native CPU matmul on GGUF blocks (strata/kernels/cpu_quant.py) for every type it handles.

The kernel quantizes activations per block to int8 (d = amax|x_block| / 127; 32 values for Q8_0/Q4_0/
Q4_1/Q5_0/Q5_1/IQ4_NL, 256 for the K-quants, IQ4_XS and the i-quants), so two tolerances, both per output element:
- against quant_matmul_ref (the same quantized activations @ gguf's dequantization, in float64) the
  only difference is float32 rounding of the per-block products and their sum:
  |y - ref| <= 1e-5 * (|x_hat| @ |W|.T);
- against the exact float64 x @ W.T, each activation is off by at most half a step (d / 2 = amax / 254),
  so |y - exact| <= sum over blocks b of amax|x_b| / 254 * |W_b|_1 (1.001 times that, for the float32
  rounding of x / d), plus the float32 slack above.
Weights: gguf.quants.quantize of random values where gguf can quantize the type (IQ4_NL: strata.weights.quantize,
as tests/gguf_writer.py writes it), and random bytes with finite float16 scales (every bit pattern of the quants,
e.g. -128 in Q8_0, every grid row of the i-quants) for all types.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize

from strata.kernels import cpu_quant
from strata.weights.quantize import quantize as strata_quantize

BUILT = cpu_quant.supports(Q.Q8_0)
needs_kernel = pytest.mark.skipif(not BUILT, reason="no C compiler to build the kernel")

IQ_TYPES = [Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S, Q.IQ1_S, Q.IQ1_M]
TYPES = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ4_XS, Q.IQ4_NL,
         Q.MXFP4, *IQ_TYPES]
QUANTIZABLE = {Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.IQ4_NL, Q.MXFP4}  # quantize_gaussian implements these
# byte offsets of each block's float16 fields (put_f16: IQ1_M's d is the top nibbles of the 4 uint16 at 48)
F16_FIELDS = {Q.Q8_0: [0], Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q2_K: [80, 82], Q.Q3_K: [108],
              Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208], Q.IQ4_XS: [0], Q.IQ4_NL: [0], Q.IQ2_XXS: [0],
              Q.IQ2_XS: [0], Q.IQ2_S: [0], Q.IQ3_XXS: [0], Q.IQ3_S: [0], Q.IQ1_S: [0], Q.IQ1_M: [48], Q.MXFP4: []}
UNSUPPORTED = Q.TQ2_0  # a packed type no kernel reads (ternary, 256 values in 66 bytes)
SHAPES = [(1, 33, 256), (3, 33, 512), (17, 33, 2816), (8, 64, 768)]  # (T, N, K): 17 = two full row tiles + one
SIMD_ISAS = [name for name in cpu_quant.available_isas() if name != "scalar"] if BUILT else []


@pytest.fixture(autouse=True)
def best_isa():
    best = cpu_quant.isa() if BUILT else None
    yield
    if best is not None:
        cpu_quant.set_isa(best)


def put_f16(raw: np.ndarray, qtype: Q, offset: int, values: np.ndarray) -> None:
    """Blocks raw [..., type bytes] get float16 `values` [...] as their field at byte `offset`."""
    bits = values.astype(np.float16).view(np.uint16)
    if qtype == Q.IQ1_M:  # nibble i of d (lowest first) is the top nibble of the uint16 at offset + 2i
        for i in range(4):
            at = offset + 2 * i + 1  # the uint16's high byte
            raw[..., at] = (raw[..., at] & 0x0F) | (((bits >> (4 * i)) & 0x0F) << 4).astype(np.uint8)
    else:
        raw[..., offset:offset + 2] = bits[..., None].view(np.uint8)


def quantize_gaussian(qtype: Q, n: int, k: int, rng: np.random.Generator) -> torch.Tensor:
    """[N, row bytes]: Gaussian weights quantized by gguf-py, or by strata.weights.quantize for IQ4_NL (which
    gguf-py only reads)."""
    values = rng.standard_normal((n, k), dtype=np.float32)
    if qtype == Q.IQ4_NL:
        return strata_quantize(torch.from_numpy(values), qtype)
    return torch.from_numpy(quantize(values, qtype))


def make_blocks(qtype: Q, n: int, k: int, source: str, seed: int) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    if source == "quantized":
        return quantize_gaussian(qtype, n, k, rng)
    block, type_bytes = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n, k // block, type_bytes), dtype=np.uint8)
    for offset in F16_FIELDS[qtype]:
        put_f16(raw, qtype, offset, rng.uniform(-0.05, 0.05, size=(n, k // block)))
    if qtype == Q.MXFP4:
        put_mxfp4_exponents(raw, rng)
    return torch.from_numpy(raw.reshape(n, -1))


def put_mxfp4_exponents(raw: np.ndarray, rng: np.random.Generator) -> None:
    """MXFP4 blocks raw [N, blocks, 17] get exponent bytes of moderate scales (2^-13 .. 2^-3), the first block of
    each row a subnormal one (exponent 0 or 1: gguf-py's e8m0_to_fp32_half's other branch)."""
    raw[..., 0] = rng.integers(115, 126, size=raw.shape[:2])
    raw[:, 0, 0] = rng.integers(0, 2, size=raw.shape[0])


def weight_of(blocks: torch.Tensor, qtype: Q, n: int, k: int) -> torch.Tensor:
    return torch.from_numpy(dequantize(blocks.numpy(), qtype).reshape(n, k)).double()  # [N, K]


def rounding_slack(x: torch.Tensor, weight: torch.Tensor, qtype: Q) -> torch.Tensor:
    x_hat = cpu_quant.quantize_activations_ref(x, GGML_QUANT_SIZES[qtype][0])
    return 1e-5 * (x_hat.abs() @ weight.abs().T)  # [T, N]


def activation_bound(x: torch.Tensor, weight: torch.Tensor, qtype: Q) -> torch.Tensor:
    block = GGML_QUANT_SIZES[qtype][0]
    half_step = x.double().abs().reshape(x.shape[0], -1, block).amax(-1) / 254  # [T, K / block]
    weight_l1 = weight.abs().reshape(weight.shape[0], -1, block).sum(-1)  # [N, K / block]
    return 1.001 * half_step @ weight_l1.T  # [T, N]


def sources(qtype: Q) -> list[str]:
    return ["quantized", "random"] if qtype in QUANTIZABLE else ["random"]


CASES = [(qtype, source, shape) for qtype in TYPES for source in sources(qtype) for shape in SHAPES]


@needs_kernel
@pytest.mark.parametrize("qtype,source,shape", CASES, ids=[f"{q.name}-{s}-{t}x{n}x{k}" for q, s, (t, n, k) in CASES])
def test_matches_reference_and_activation_bound(qtype, source, shape):
    t, n, k = shape
    blocks = make_blocks(qtype, n, k, source, seed=k + n + t)
    x = torch.randn(t, k, generator=torch.Generator().manual_seed(t * k))
    y = cpu_quant.quant_matmul(x, blocks, qtype, n, k)
    weight = weight_of(blocks, qtype, n, k)
    slack = rounding_slack(x, weight, qtype)
    assert y.shape == (t, n) and y.dtype == torch.float32
    assert ((y.double() - cpu_quant.quant_matmul_ref(x, blocks, qtype, n, k)).abs() <= slack).all()
    error = (y.double() - x.double() @ weight.T).abs()
    assert (error <= activation_bound(x, weight, qtype) + slack).all()


@needs_kernel
@pytest.mark.parametrize("qtype", TYPES, ids=[q.name for q in TYPES])
def test_one_block(qtype):
    block = GGML_QUANT_SIZES[qtype][0]
    blocks = make_blocks(qtype, 5, block, "random", seed=1)
    x = torch.randn(2, block, generator=torch.Generator().manual_seed(2))
    y = cpu_quant.quant_matmul(x, blocks, qtype, 5, block)
    ref = cpu_quant.quant_matmul_ref(x, blocks, qtype, 5, block)
    assert ((y.double() - ref).abs() <= rounding_slack(x, weight_of(blocks, qtype, 5, block), qtype)).all()


@pytest.mark.skipif(not SIMD_ISAS, reason="no SIMD kernels on this CPU (or no C compiler)")
@pytest.mark.parametrize("qtype", TYPES, ids=[q.name for q in TYPES])
def test_scalar_fallback_equals_simd(qtype):
    t, n, k = 11, 37, 1024
    blocks = make_blocks(qtype, n, k, "random", seed=5)
    x = torch.randn(t, k, generator=torch.Generator().manual_seed(6))
    cpu_quant.set_isa("scalar")
    assert cpu_quant.isa() == "scalar"
    scalar = cpu_quant.quant_matmul(x, blocks, qtype, n, k)
    slack = rounding_slack(x, weight_of(blocks, qtype, n, k), qtype)
    for name in SIMD_ISAS:
        cpu_quant.set_isa(name)
        assert cpu_quant.isa() == name
        assert ((cpu_quant.quant_matmul(x, blocks, qtype, n, k) - scalar).abs() <= slack).all(), name


@needs_kernel
def test_thread_count_does_not_change_the_result():
    """Each output is summed by one thread in a fixed order: any thread count gives the same bits. 40 x 2048
    values of x are enough for the pool to quantize them too."""
    blocks = make_blocks(Q.Q4_K, 301, 2048, "random", seed=7)
    x = torch.randn(40, 2048, generator=torch.Generator().manual_seed(8))
    results = []
    for threads in (1, 2, 5):
        cpu_quant.set_num_threads(threads)
        results.append(cpu_quant.quant_matmul(x, blocks, Q.Q4_K, 301, 2048))
    cpu_quant.set_num_threads(torch.get_num_threads())
    assert all(torch.equal(results[0], r) for r in results[1:])
    slack = rounding_slack(x, weight_of(blocks, Q.Q4_K, 301, 2048), Q.Q4_K)
    assert ((results[0].double() - cpu_quant.quant_matmul_ref(x, blocks, Q.Q4_K, 301, 2048)).abs() <= slack).all()


@needs_kernel
@pytest.mark.parametrize("isa", ["scalar", *SIMD_ISAS])
@pytest.mark.parametrize("qtype", TYPES)
def test_a_row_gets_the_same_bits_alone_and_in_a_batch(qtype, isa):
    """Batch invariance (batched decode = each request alone): a row's products do not depend on how
    many rows share its call, from 1 to two row tiles and a part."""
    n, k = 37, 512
    blocks = make_blocks(qtype, n, k, "random", seed=9)
    x = torch.randn(19, k, generator=torch.Generator().manual_seed(10))
    cpu_quant.set_isa(isa)  # the best one comes back after the test (best_isa)
    alone = torch.cat([cpu_quant.quant_matmul(x[i:i + 1].contiguous(), blocks, qtype, n, k) for i in range(19)])
    for rows in (2, 3, 4, 5, 8, 19):
        assert torch.equal(cpu_quant.quant_matmul(x[:rows].contiguous(), blocks, qtype, n, k), alone[:rows]), rows


def assert_tables_agree(qtype, k: int, isas: tuple[str, str], seed: int) -> None:
    """Every output of 45 weight rows of random blocks (every scale, min, high bit, grid row and sign code) has the
    same bits from the two kernel tables, for every row count of a tile and past it, and is near the reference."""
    n = 45
    blocks = make_blocks(qtype, n, k, "random", seed=seed)
    x = torch.randn(19, k, generator=torch.Generator().manual_seed(seed + 1))
    for rows in (1, 2, 3, 4, 5, 6, 7, 8, 19):
        results = []
        for isa in isas:
            cpu_quant.set_isa(isa)
            results.append(cpu_quant.quant_matmul(x[:rows].contiguous(), blocks, qtype, n, k))
        assert torch.equal(*results), rows
    slack = rounding_slack(x, weight_of(blocks, qtype, n, k), qtype)
    assert ((results[1].double() - cpu_quant.quant_matmul_ref(x, blocks, qtype, n, k)).abs() <= slack).all()


# what quant_simd.c builds differently in its AVX-512 table: the K-quants on 512-bit vectors; the 32-value block types'
# nibbles and fifth bits through mask registers (21 blocks a row: one row's kernel takes two weight rows a pass)
WIDE_TYPES = [(Q.Q4_K, 1536), (Q.Q5_K, 1536), (Q.Q6_K, 1536), (Q.Q8_0, 672), (Q.Q4_0, 672), (Q.Q4_1, 672),
              (Q.Q5_0, 672), (Q.Q5_1, 672), (Q.IQ4_NL, 672), (Q.MXFP4, 672)]


@pytest.mark.skipif(not {"avx2", "avx512"} <= set(SIMD_ISAS), reason="no AVX-512 on this CPU (or no C compiler)")
@pytest.mark.parametrize("qtype,k", WIDE_TYPES, ids=[q.name for q, _ in WIDE_TYPES])
def test_avx512_kernels_give_the_avx2_bits(qtype, k):
    """The AVX-512 table's kernels build each row's integer sums in the 256-bit kernels' lanes (the K-quants' 64-value
    vectors folded) and scale them in the same order: the AVX2 table's bits, an odd last weight row and block too."""
    assert_tables_agree(qtype, k, ("avx2", "avx512"), seed=13)


VBMI_TYPES = [Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S, Q.IQ4_XS]  # iquant_vbmi.c's


@pytest.mark.skipif("avx512vbmi" not in SIMD_ISAS, reason="no AVX-512 VBMI on this CPU (or no C compiler)")
@pytest.mark.parametrize("qtype", VBMI_TYPES, ids=[q.name for q in VBMI_TYPES])
def test_vbmi_iquants_give_the_avx512_bits(qtype):
    """The VBMI kernels (grids looked up in registers) give each output the AVX-512 kernels' bits."""
    assert_tables_agree(qtype, 1536, ("avx512", "avx512vbmi"), seed=11)


@needs_kernel
def test_zero_activations_give_zeros_and_no_rows_give_an_empty_result():
    blocks = make_blocks(Q.Q4_1, 7, 64, "quantized", seed=9)
    x = torch.zeros(2, 64)
    x[1, 32:] = 1.0  # one all-zero block (scale 0) beside a non-zero one
    y = cpu_quant.quant_matmul(x, blocks, Q.Q4_1, 7, 64)
    assert torch.equal(y[0], torch.zeros(7)) and torch.isfinite(y).all()
    assert cpu_quant.quant_matmul(torch.zeros(0, 64), blocks, Q.Q4_1, 7, 64).shape == (0, 7)


@needs_kernel
def test_bad_input_says_what_is_wrong():
    blocks = make_blocks(Q.Q8_0, 4, 64, "quantized", seed=10)
    assert not cpu_quant.supports(UNSUPPORTED) and not cpu_quant.supports(Q.F16)
    with pytest.raises(ValueError, match="contiguous CPU float32"):
        cpu_quant.quant_matmul(torch.randn(2, 64, dtype=torch.float64), blocks, Q.Q8_0, 4, 64)
    with pytest.raises(ValueError, match=r"Q8_0 blocks for \[4, 64\] must be a contiguous CPU uint8 \[4, 68\]"):
        cpu_quant.quant_matmul(torch.randn(2, 64), blocks[:, :34].contiguous(), Q.Q8_0, 4, 64)
    with pytest.raises(ValueError, match="not handled"):
        cpu_quant.quant_matmul(torch.randn(2, 256), torch.zeros(4, 66, dtype=torch.uint8), UNSUPPORTED, 4, 256)
    with pytest.raises(ValueError, match="not available"):
        cpu_quant.set_isa("neon")


@needs_kernel
def test_iquants_wait_for_their_tables(tmp_path):
    """A fresh copy of the library (its own globals) supports no i-quant until gguf-py's grids are handed over,
    refuses grids out of the range its kernels assume (copying nothing), and supports them all once the real ones
    are in."""
    fresh = tmp_path / "fresh.so"
    shutil.copy(cpu_quant._require()._name, fresh)
    library = ctypes.CDLL(str(fresh))
    library.strata_qmm_set_iq_tables.argtypes = [ctypes.c_void_p] * 7

    def supported() -> list[bool]:
        return [bool(library.strata_qmm_supports(int(qtype))) for qtype in IQ_TYPES]

    assert not any(supported()) and library.strata_qmm_supports(int(Q.Q4_K))
    too_large = [np.full(n, 64, np.int8) for n in (2048, 4096, 8192, 1024, 2048, 16384, 128)]
    assert library.strata_qmm_set_iq_tables(*(table.ctypes.data for table in too_large)) == 1
    assert not any(supported())
    cpu_quant._set_iq_tables(library)
    assert all(supported())


@needs_kernel
def test_the_environment_picks_a_lower_kernel_table():
    """STRATA_CPU_QUANT_ISA (A/B runs of whole models) selects a table this CPU has at load; a name it lacks is
    logged and the best table stays."""
    code = "import logging; logging.basicConfig()\nfrom strata.kernels import cpu_quant\nprint(cpu_quant.isa())\n"
    picked = []
    for asked in ("scalar", "neon"):
        env = {**os.environ, "STRATA_CPU_QUANT_ISA": asked}
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        picked.append((result.stdout.strip(), "not one of this CPU's kernel tables" in result.stderr))
    assert picked == [("scalar", False), (cpu_quant.available_isas()[-1], True)]


def test_no_compiler_means_unsupported_not_an_error(tmp_path):
    code = ("from strata.kernels import cpu_quant\n"
            "print(any(cpu_quant.supports(t) for t in range(40)))\n"
            "try:\n    cpu_quant.isa()\nexcept RuntimeError as e:\n    print('RuntimeError', 'no C compiler' in str(e))\n")
    env = {**os.environ, "CC": str(tmp_path / "missing-cc"), "STRATA_CACHE_DIR": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "RuntimeError", "True"]


@needs_kernel
@pytest.mark.skipif(cpu_quant.default_num_threads() < 2 if BUILT else True, reason="no second core for a worker")
def test_idle_workers_poll_as_long_as_set():
    """set_spin_us: after a call on two threads the worker polls for the set time before it sleeps (CPU time the
    process spends while the caller sleeps), returns the previous setting and refuses a negative one; the
    offloading pool sets OFFLOAD_SPIN_US."""
    from strata.experts.cpu_pool import OFFLOAD_SPIN_US, CpuExpertPool

    # 4 experts: gate/up rows [64] of 64 values, down rows [64] of 32
    w13 = make_blocks(Q.Q8_0, 4 * 64, 64, "quantized", seed=3).view(4, 64, -1)
    w2 = make_blocks(Q.Q8_0, 4 * 64, 32, "quantized", seed=4).view(4, 64, -1)
    hidden, out = torch.randn(8, 64), torch.zeros(8, 64)
    rows, experts = np.arange(8, dtype=np.int64), np.arange(8, dtype=np.int64) % 4
    previous = cpu_quant.set_spin_us(0)

    def cpu_seconds_idle_after_a_call() -> float:  # on two threads (the caller and a worker)
        cpu_quant.quant_moe(hidden, rows, experts, np.ones(8, dtype=np.float32), w13, Q.Q8_0, w2, Q.Q8_0, 32, out,
                            num_threads=2)
        started = time.process_time()
        time.sleep(0.1)
        return time.process_time() - started

    try:
        assert cpu_quant.set_spin_us(60_000) == 0
        polling = cpu_seconds_idle_after_a_call()
        assert cpu_quant.set_spin_us(0) == 60_000
        cpu_seconds_idle_after_a_call()  # the workers still polling from the last call go to sleep
        sleeping = cpu_seconds_idle_after_a_call()
        assert polling > 0.02 and sleeping < 0.01, (polling, sleeping)
        with pytest.raises(ValueError, match="microseconds"):
            cpu_quant.set_spin_us(-1)
        CpuExpertPool(2).poll_between_layers((Q.Q4_K, Q.Q6_K))
        assert cpu_quant.set_spin_us(0) == OFFLOAD_SPIN_US
    finally:
        cpu_quant.set_spin_us(previous)
