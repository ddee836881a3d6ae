"""CPU matmuls on GGUF blocks as stored (native/quant_matmul.c): y = x @ W.T with W never dequantized.

Activations are quantized per block to int8 with a float32 scale, as llama.cpp does (q8_0 / q8_K): over
32 values for Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/IQ4_NL/MXFP4, over 256 for the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), IQ4_XS and the
i-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M; their grids are gguf-py's, handed to the
library at load): the weight type's block. Each y then differs from "dequantize W, matmul in float32" by at most sum
over blocks of amax|x_block| / 254 * |w_block|_1; measured, 0.5-0.8 % of |y| (relative RMS) for Gaussian x, 1 % (32) to
3 % (256) when 1 % of x are 20x outliers; Q4 weights themselves cost ~8 %. `quant_matmul_ref` states the
exact semantics; tests/kernels/test_cpu_quant.py holds the kernel to it and to the bound. Built at first use
with the system C compiler (kernels/native_build.py); AVX-512 VNNI (with VBMI: faster IQ2_XXS, IQ2_XS, IQ2_S,
IQ3_XXS, IQ3_S and IQ4_XS, same bits), AVX2 or portable kernels are chosen at load.
With no compiler `supports()` is False for every type and callers keep their torch path.

`dequant_matmul` is the same product with x kept in float32 (native/dequant_matmul.c): each weight is
decoded to exactly gguf's float32 value and the products are summed in float32, so a float32 model gets
the numbers of the dense dequantized weight (up to summation order) at the cost of reading the packed
bytes; `dequant_matmul_ref` states it and tests/kernels/test_cpu_dequant_matmul.py holds it bit-exact on
the weights and within float32 rounding on the sums.

`quant_moe` runs one MoE layer's routed experts (gate/up, SiLU, down, the routing weights) over packed
expert rows in one call (native/quant_moe.c), reading each distinct expert's bytes once; `quant_moe_ref`
states its semantics and tests/kernels/test_cpu_quant_moe.py its bounds."""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform
import threading
from pathlib import Path

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, quants
from gguf.quants import dequantize

from strata.config import debug_value
from strata.kernels.native_build import build_library

logger = logging.getLogger(__name__)

_NATIVE = Path(__file__).with_name("native")
_AVX2 = ["-mavx2", "-mfma", "-mf16c"]
_AVX512 = [*_AVX2, "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"]
ISAS = ("scalar", "avx2", "avx512", "avx512vbmi")  # the C side's numbering
_ATTENTION, _ATTENTION_AVX2 = "strata_paged_attention_f32", "strata_paged_attention_f32_avx2"  # portable, AVX2
_GDN, _GDN_AVX2 = "strata_gdn_recurrent_f32", "strata_gdn_recurrent_f32_avx2"  # cpu_gdn.py's: portable, AVX2
_LINEAR, _LINEAR_AVX2 = "strata_row_linear_f32", "strata_row_linear_f32_avx2"  # cpu_linear.py's
_CONV = "strata_conv_windows_f32"  # cpu_gdn.py's conv_windows (one build: no sums across lanes)
TYPES = frozenset(GGMLQuantizationType[name] for name in ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "IQ4_NL", "MXFP4", "Q2_K",
                                                           "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "IQ2_XXS",
                                                           "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"))
# the i-quants' grids in strata_qmm_set_iq_tables's order, with the shapes its copies have (IQ1_M reads IQ1_S's)
_IQ_GRIDS = {"IQ2_XXS": (256, 8), "IQ2_XS": (512, 8), "IQ2_S": (1024, 8), "IQ3_XXS": (256, 4), "IQ3_S": (512, 4),
             "IQ1_S": (2048, 8)}
_LAYOUTS = {int(qtype): (*GGML_QUANT_SIZES[qtype], qtype.name) for qtype in TYPES}  # values, bytes a block; name

_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_failed: str | None = None
_num_threads: int | None = None


def _build() -> ctypes.CDLL:
    exact = ["-O3", "-ffp-contract=off"]  # the dequantizing kernels: a multiply and an add stay two roundings
    attention = _NATIVE / "paged_attention_cpu.c", ["-O3", "-ffast-math", "-pthread"]  # cpu_attention.py
    gdn = _NATIVE / "gdn_recurrent_cpu.c", [*exact, "-pthread"]  # cpu_gdn.py
    linear = _NATIVE / "row_linear_cpu.c", [*exact, "-pthread"]  # cpu_linear.py
    conv = _NATIVE / "conv_windows_cpu.c", [*exact, "-pthread"]  # cpu_gdn.py's conv_windows
    units = [(_NATIVE / "quant_scalar.c", ["-O3"]), (_NATIVE / "dequant_scalar.c", exact), attention, gdn, linear,
             conv]
    if platform.machine().lower() in ("x86_64", "amd64"):
        units += [(_NATIVE / "quant_matmul.c", ["-O3", "-pthread", "-DSTRATA_X86_SIMD"]),
                  (_NATIVE / "quant_simd.c", ["-O3", *_AVX2]), (_NATIVE / "quant_simd.c", ["-O3", *_AVX512]),
                  (_NATIVE / "iquant_vbmi.c", ["-O3", *_AVX512, "-mavx512vbmi", "-mbmi2"]),
                  (_NATIVE / "dequant_simd.c", [*exact, *_AVX2]),
                  (_NATIVE / "dequant_avx512.c", [*exact, *_AVX512]),
                  (attention[0], [*attention[1], *_AVX2, "-DSTRATA_ATTENTION_ENTRY=" + _ATTENTION_AVX2]),
                  (gdn[0], [*gdn[1], *_AVX2, "-DSTRATA_GDN_ENTRY=" + _GDN_AVX2]),
                  (linear[0], [*linear[1], *_AVX2, "-DSTRATA_ROW_LINEAR_ENTRY=" + _LINEAR_AVX2])]
    else:
        units += [(_NATIVE / "quant_matmul.c", ["-O3", "-pthread"])]
    units += [(_NATIVE / "quant_moe.c", ["-O3", "-pthread"]), (_NATIVE / "offload_host_part.c", ["-O3"]),
              (_NATIVE / "dequant_matmul.c", ["-O3", "-pthread"]), (_NATIVE / "rope_kv_cpu.c", exact),
              (_NATIVE / "dense_stack_cpu.c", exact)]
    headers = ("quant_matmul.h", "iquant.h", "iquant_simd.h", "simd_rows.h", "quant_simd_block32.h",
               "quant_simd_kquants512.h", "dequant_simd.c")  # (dequant_simd.c: dequant_avx512.c includes it)
    library = ctypes.CDLL(str(build_library("quant_matmul", units, ["-pthread", "-lm"],
                                            headers=[_NATIVE / name for name in headers])))
    pointer, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    weights = [i32, pointer, i64, i64]  # type, rows, expert stride, row stride
    for name, argtypes in (("strata_qmm", [i32, pointer, i64, pointer, i64, i64, pointer, i64, i32]),
                           ("strata_dqmm", [i32, pointer, i64, pointer, i64, i64, pointer, i64, i32]),
                           ("strata_dqmm_segments", [i32, pointer, pointer, pointer, pointer, i64, i64, pointer, i64,
                                                     i32]),
                           ("strata_qmoe", [pointer, pointer, i64, i64, i64, pointer, pointer, pointer, *weights,
                                            *weights, i32, i64, i64]),
                           *((name, [pointer, i64, i64, pointer, pointer, i64, i64, pointer, i64, pointer, pointer,
                                      i64, ctypes.c_float, pointer, i32])
                             for name in (_ATTENTION, _ATTENTION_AVX2) if hasattr(library, name)),
                           *((name, [*[pointer] * 5, i64, i64, i64, i64, pointer, i64, *[pointer] * 4, i64, pointer,
                                      pointer, i32]) for name in (_GDN, _GDN_AVX2) if hasattr(library, name)),
                           *((name, [pointer, i64, pointer, i64, i64, pointer, pointer, i64, i32])
                             for name in (_LINEAR, _LINEAR_AVX2) if hasattr(library, name)),
                           ("strata_qmoe_host_part", [pointer, i64, i64, i32, pointer, pointer]),
                           (_CONV, [pointer, i64, i64, i64, pointer, i64, i64, pointer, i64, *[pointer] * 4, i64,
                                    pointer, pointer, i32]),
                           ("strata_rope_kv_f32", [pointer, i64, i64, i64, i64, i64, i64, pointer, pointer, pointer,
                                                   i64, pointer, pointer, pointer]),
                           ("strata_dense_stack_f32", [pointer, pointer, i32, i32, pointer, pointer]),
                           ("strata_qmm_supports", [i32]), ("strata_qmm_set_isa", [i32]),
                           ("strata_qmm_best_isa", []), ("strata_qmm_set_iq_tables", [pointer] * 7),
                           ("strata_qmm_set_spin_us", [i32])):
        getattr(library, name).argtypes = argtypes
        getattr(library, name).restype = i32
    asked = debug_value("CPU_QUANT_ISA")  # a lower table than the best for A/B runs: scalar, avx2, avx512
    if asked in ISAS and ISAS.index(asked) <= library.strata_qmm_best_isa():
        library.strata_qmm_set_isa(ISAS.index(asked))
    elif asked:
        logger.warning("STRATA_CPU_QUANT_ISA=%s is not one of this CPU's kernel tables %s; using the best", asked,
                       ISAS[:library.strata_qmm_best_isa() + 1])
    _set_iq_tables(library)
    return library


def _set_iq_tables(library: ctypes.CDLL) -> None:
    """Hand gguf-py's i-quant grids (built by its init_grid) and sign codes to the library, which copies them;
    until then it supports none of the i-quants."""
    tables = []
    for name, shape in _IQ_GRIDS.items():
        cls = getattr(quants, name)
        cls.init_grid()
        grid = np.asarray(cls.grid, dtype=np.float32).reshape(-1)
        rows = grid.astype(np.int8)
        if grid.size != shape[0] * shape[1] or not np.array_equal(rows, grid):
            logger.warning("gguf-py's %s grid is not %s small integers; the i-quants stay on the torch path", name,
                           shape)
            return
        tables.append(rows)
    tables.append(np.frombuffer(quants.IQ2_XXS.ksigns, dtype=np.uint8))
    if len(tables[-1]) != 128 or library.strata_qmm_set_iq_tables(*(table.ctypes.data for table in tables)) != 0:
        logger.warning("gguf-py's i-quant tables are out of the kernels' ranges; the i-quants stay on the torch path")


def _load() -> ctypes.CDLL | None:
    global _library, _failed
    if _library is None and _failed is None:
        with _lock:
            if _library is None and _failed is None:
                try:
                    _library = _build()
                except Exception as e:  # no compiler, read-only cache...: callers keep their torch path
                    _failed = str(e)
                    logger.warning("native CPU quantized matmul unavailable (%s); using the torch path", e)
    return _library


def supports(qtype: int) -> bool:
    """The kernel is built here and handles this GGUF type (a gguf.GGMLQuantizationType value)."""
    library = _load()
    return library is not None and qtype in TYPES and bool(library.strata_qmm_supports(int(qtype)))


def set_num_threads(num_threads: int) -> None:
    """Threads per call, the caller's included (default: default_num_threads()), for every product: one
    row of SmolLM2's projections (0.1-1.8 M multiply-adds) decoded 16.7 tok/s on both cores of the idle
    2-core VM against 14.5 on the caller alone, and as fast with a CPU hog on the other core (13.2 / 13.0;
    bench/results/2026-12-02-cpu-smollm2-session18): the caller never waits for a worker that has not
    started an item."""
    global _num_threads
    if num_threads < 1:
        raise ValueError(f"set_num_threads: {num_threads} threads; pass 1 or more")
    _num_threads = num_threads


@functools.cache
def default_num_threads() -> int:
    """Every core this process may run on (its affinity mask), not torch's thread count: the engine keeps
    torch at one thread less on small hosts because an OpenMP team spin-waits for a descheduled member, but
    this pool's caller never waits for a worker that has not started an item (quant_matmul.c), so a core
    taken by someone else costs a wake-up, not a time slice. On the idle 2-core VM the second thread cut a
    batch of 8 rows' matmul 1.6-1.9x (bench/results/2026-12-02-cpu-smollm2-batched)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _threads() -> int:
    return _num_threads or default_num_threads()


def set_spin_us(us: int) -> int:
    """How long the kernels' idle workers poll for the next call before they sleep (microseconds; 200 unless
    set); returns the previous value. A sleeping worker costs a wake-up at the next call (tens of
    microseconds, more for a halted virtual CPU): an offloaded layer's CPU experts run every few hundred
    microseconds of a decode step, a little longer than the default."""
    if not isinstance(us, int) or us < 0:
        raise ValueError(f"set_spin_us: a whole number of microseconds >= 0, got {us!r}")
    return _require().strata_qmm_set_spin_us(us)


def isa() -> str:
    """The kernels in use: 'avx512vbmi', 'avx512', 'avx2' or 'scalar'."""
    return ISAS[_require().strata_qmm_set_isa(-1)]


def available_isas() -> tuple[str, ...]:
    """The kernels this CPU can run, from 'scalar' up."""
    return ISAS[:_require().strata_qmm_best_isa() + 1]


def entry(portable: str, avx2: str):
    """A kernel built twice into the library (cpu_attention's, cpu_gdn's, cpu_linear's): its AVX2 build where the CPU
    has AVX2 and FMA (the kernels above say so) and the build exists, else the portable one."""
    library = _require()
    use_avx2 = available_isas()[-1] != "scalar" and hasattr(library, avx2)
    return getattr(library, avx2 if use_avx2 else portable)


def set_isa(name: str) -> None:
    """Use a lower instruction set than the best this CPU has (tests, debugging)."""
    if name not in available_isas():
        raise ValueError(f"set_isa: {name!r} is not available on this CPU; choose one of {available_isas()}")
    _require().strata_qmm_set_isa(ISAS.index(name))


def quant_matmul(x: torch.Tensor, blocks: torch.Tensor, qtype: int, n: int, k: int,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """x [T, K] float32 @ W.T -> [T, N] float32, W [N, K] the dequantization of blocks [N, row_bytes]
    uint8 (GGUF rows: K / block_size blocks each). Check supports(qtype) first. `out`: where to write y, a
    [T, N] float32 CPU tensor whose rows may be strided (columns of a wider output); returned."""
    library = _library or _require()  # decode calls this a few hundred times a token: checks stay cheap
    _check_matmul("quant_matmul", x, blocks, qtype, n, k)
    y, ldy = _output("quant_matmul", x, n, out)
    status = library.strata_qmm(qtype, x.data_ptr(), x.shape[0], blocks.data_ptr(), n, k, y.data_ptr(), ldy,
                                _threads())
    if status != 0:  # the C side's other refusals (type, K) were checked above
        raise MemoryError("quant_matmul: no scratch memory for the quantized activations")
    return y


@functools.cache  # asked at every float32 projection; the answer is fixed once the library loads (or fails)
def supports_dequant(qtype: int) -> bool:
    """dequant_matmul is built here and handles this GGUF type (every type quant_matmul handles)."""
    return supports(qtype)


def dequant_matmul(x: torch.Tensor, blocks: torch.Tensor, qtype: int, n: int, k: int,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """quant_matmul's contract with x kept in float32: y [T, N] = x [T, K] @ W.T, each weight exactly gguf's
    float32 dequantization of blocks [N, row_bytes], the products summed in float32 (in an order that
    depends on neither T nor the thread count). Check supports_dequant(qtype) first. `out` as quant_matmul's."""
    library = _library or _require()
    _check_matmul("dequant_matmul", x, blocks, qtype, n, k)
    y, ldy = _output("dequant_matmul", x, n, out)
    library.strata_dqmm(qtype, x.data_ptr(), x.shape[0], blocks.data_ptr(), n, k, y.data_ptr(), ldy,
                        _threads())  # its refusals (type, K) are checked above
    return y


class Segments:
    """The row segments [(qtype, blocks uint8 [n_s, row_bytes])] of one weight of K values a row, checked once and
    kept as the arrays dequant_matmul_segments hands the library (it holds the blocks: their memory stays valid)."""

    MAX = 8  # the library's DQ_MAX_SEGMENTS

    def __init__(self, segments: list[tuple[int, torch.Tensor]], k: int) -> None:
        if not 1 <= len(segments) <= self.MAX:
            raise ValueError(f"dequant_matmul_segments: {len(segments)} segments; it takes 1 to {self.MAX}")
        probe = torch.empty(1, k)
        for qtype, blocks in segments:
            _check_matmul("dequant_matmul_segments", probe, blocks, qtype, blocks.shape[0], k)
        self.blocks = [blocks for _, blocks in segments]
        self.k, self.n, count = k, sum(b.shape[0] for b in self.blocks), len(segments)
        self.args = (count, (ctypes.c_int * count)(*(int(q) for q, _ in segments)),
                     (ctypes.c_void_p * count)(*(b.data_ptr() for b in self.blocks)),
                     (ctypes.c_int64 * count)(*(b.shape[0] for b in self.blocks)))


def dequant_matmul_segments(x: torch.Tensor, segments: Segments) -> torch.Tensor:
    """dequant_matmul over a weight's row segments in one library call (one job on the pool): y [T, N] with
    segment s's products in its columns, the bits of dequant_matmul on each segment."""
    library = _library or _require()
    if x.dim() != 2 or x.shape[1] != segments.k or x.dtype != torch.float32 or not x.is_contiguous() or not x.is_cpu:
        raise ValueError(f"dequant_matmul_segments: x must be a contiguous CPU float32 [T, {segments.k}] tensor, got "
                         f"{x.dtype} {tuple(x.shape)}")
    y = torch.from_numpy(np.empty((x.shape[0], segments.n), np.float32))
    library.strata_dqmm_segments(*segments.args, x.data_ptr(), x.shape[0], segments.k, y.data_ptr(), segments.n,
                                 _threads())  # its refusals (types, K, count) are checked by Segments
    return y


def _output(caller: str, x: torch.Tensor, n: int, out: torch.Tensor | None) -> tuple[torch.Tensor, int]:
    """(y [T, N], the distance between its rows): `out` checked, or a new tensor."""
    if out is None:
        return torch.from_numpy(np.empty((x.shape[0], n), np.float32)), n  # a third of torch.empty's cost
    if out.shape != (x.shape[0], n) or out.dtype != torch.float32 or not out.is_cpu or \
            (n > 1 and out.stride(1) != 1) or (x.shape[0] > 1 and out.stride(0) < n):
        raise ValueError(f"{caller}: out must be a CPU float32 [{x.shape[0]}, {n}] tensor with contiguous rows, got "
                         f"{out.dtype} {tuple(out.shape)} strides {out.stride()} on {out.device}")
    return out, out.stride(0) if x.shape[0] > 1 else n


def _check_matmul(caller: str, x: torch.Tensor, blocks: torch.Tensor, qtype: int, n: int, k: int) -> None:
    if qtype not in _LAYOUTS:
        raise ValueError(f"{caller}: GGUF type {qtype} is not handled; check supports()")
    block, type_bytes, name = _LAYOUTS[qtype]
    shape = x.shape
    if len(shape) != 2 or shape[1] != k or x.dtype != torch.float32 or not x.is_contiguous() or not x.is_cpu:
        raise ValueError(f"{caller}: x must be a contiguous CPU float32 [T, {k}] tensor, got {x.dtype} "
                         f"{tuple(shape)}")
    if k % block != 0 or blocks.shape != (n, k // block * type_bytes) or blocks.dtype != torch.uint8 \
            or not blocks.is_contiguous() or not blocks.is_cpu:
        raise ValueError(f"{caller}: {name} blocks for [{n}, {k}] must be a contiguous CPU uint8 "
                         f"[{n}, {k // block * type_bytes}] tensor (K a multiple of {block}), got {blocks.dtype} "
                         f"{tuple(blocks.shape)}")


def supports_moe(qtype13: int, qtype2: int) -> bool:
    """quant_moe is built here and handles experts of these types (w13's, w2's: any pair of supported ones)."""
    return supports(qtype13) and supports(qtype2)


def quant_moe(hidden: torch.Tensor, rows: np.ndarray, experts: np.ndarray, weights: np.ndarray, w13: torch.Tensor,
              qtype13: int, w2: torch.Tensor, qtype2: int, inter: int, out: torch.Tensor,
              num_threads: int | None = None) -> None:
    """out [R, D] += for every pair p: weights[p] * W2[e] @ (silu(G[e] @ x) * (U[e] @ x)), e = experts[p],
    x = hidden[rows[p]]; hidden / out [R, D] contiguous CPU float32; rows, experts int64 and weights float32
    contiguous numpy [P]. w13 [E, 2I, >= row bytes] uint8: expert e's gate rows (0..I-1) then up rows of D
    values each, GGUF qtype13 blocks from the start of each row (a strided view of a larger buffer is fine;
    each row's bytes must be contiguous); w2 [E, D, >= row bytes]: the down rows of I values, qtype2. The
    activations are quantized per block as quant_matmul does (act stays float32 until then); the result
    does not depend on the thread count (`num_threads`, the caller's included; default as quant_matmul's).
    Check supports_moe first."""
    library = _library or _require()
    _check_moe(hidden, rows, experts, weights, w13, qtype13, w2, qtype2, inter, out)
    if len(rows) == 0:
        return
    status = library.strata_qmoe(
        hidden.data_ptr(), out.data_ptr(), hidden.shape[1], inter, len(rows), rows.ctypes.data, experts.ctypes.data,
        weights.ctypes.data, qtype13, w13.data_ptr(), w13.stride(0), w13.stride(1), qtype2, w2.data_ptr(),
        w2.stride(0), w2.stride(1), num_threads or _threads(), hidden.shape[0], w13.shape[0])
    if status == 3:
        raise ValueError(f"quant_moe: rows must be in [0, {hidden.shape[0]}) (rows of hidden), got "
                         f"{rows.min()}..{rows.max()}")
    if status == 4:
        raise ValueError(f"quant_moe: experts must be in [0, {w13.shape[0]}), got {experts.min()}..{experts.max()}")
    if status != 0:  # the C side's other refusals (types, blocks) were checked above
        raise MemoryError("quant_moe: no scratch memory for the activations")


def _check_moe(hidden: torch.Tensor, rows: np.ndarray, experts: np.ndarray, weights: np.ndarray,
               w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int, inter: int, out: torch.Tensor) -> None:
    """Everything quant_moe's C side does not check itself (it checks each pair's row and expert)."""
    if hidden.dim() != 2 or hidden.dtype != torch.float32 or not hidden.is_contiguous() or not hidden.is_cpu:
        raise ValueError(f"quant_moe: hidden must be a contiguous CPU float32 [R, D] tensor, got {hidden.dtype} "
                         f"{tuple(hidden.shape)}")
    dim = hidden.shape[1]
    if out.shape != hidden.shape or out.dtype != torch.float32 or not out.is_contiguous() or not out.is_cpu:
        raise ValueError(f"quant_moe: out must be a contiguous CPU float32 {list(hidden.shape)} tensor like hidden, "
                         f"got {out.dtype} {tuple(out.shape)}")
    _check_experts("w13", w13, qtype13, 2 * inter, dim)
    _check_experts("w2", w2, qtype2, dim, inter)
    if w2.shape[0] != w13.shape[0]:
        raise ValueError(f"quant_moe: w13 holds {w13.shape[0]} experts and w2 {w2.shape[0]}; pass the same experts")
    for name, array, dtype in (("rows", rows, np.int64), ("experts", experts, np.int64),
                               ("weights", weights, np.float32)):
        if not isinstance(array, np.ndarray) or array.dtype != dtype or array.ndim != 1 or len(array) != len(rows) \
                or not array.flags.c_contiguous:
            raise ValueError(f"quant_moe: {name} must be a contiguous 1-D {np.dtype(dtype).name} numpy array, one "
                             f"value a pair as in rows; got {type(array).__name__} {getattr(array, 'dtype', '')} "
                             f"{getattr(array, 'shape', '')}")


def _check_experts(name: str, w: torch.Tensor, qtype: int, n: int, k: int) -> None:
    """w: E experts of n rows of k values of `qtype`, each row's bytes contiguous."""
    if qtype not in _LAYOUTS:
        raise ValueError(f"quant_moe: {name}'s GGUF type {qtype} is not handled; check supports_moe()")
    block, _, type_name = _LAYOUTS[qtype]
    if k <= 0 or k % block != 0:
        raise ValueError(f"quant_moe: {name}'s rows hold {k} values, not a positive multiple of {type_name}'s block "
                         f"of {block}")
    row_bytes = _row_bytes(qtype, k)
    if w.dtype != torch.uint8 or not w.is_cpu or w.dim() != 3 or w.shape[1] != n or w.shape[2] < row_bytes \
            or w.stride(2) != 1:
        raise ValueError(f"quant_moe: {name} must be a CPU uint8 [E, {n}, >= {row_bytes}] tensor of {type_name} rows "
                         f"of {k} values, each row's bytes contiguous; got {w.dtype} {tuple(w.shape)} strides "
                         f"{w.stride()}")


class HostPartArgs(ctypes.Structure):
    """native/offload_host_part.c's host_part_t: one offloaded layer's fixed arguments, made by host_part_args."""
    _fields_ = [*((name, ctypes.c_void_p) for name in ("slot_ids", "topk_ids", "topk_weights", "hidden", "cpu_sum",
                                                       "hidden_f32", "pair_rows", "pair_experts", "pair_weights")),
                *((name, ctypes.c_int64) for name in ("max_rows", "top_k", "d", "inter", "num_experts", "hidden_f16",
                                                      "qtype13", "qtype2")),
                ("w13", ctypes.c_void_p), ("w2", ctypes.c_void_p),
                *((name, ctypes.c_int64) for name in ("w13_expert_stride", "w13_row_stride", "w2_expert_stride",
                                                      "w2_row_stride"))]


def host_part_scratch(rows: int, top_k: int, dim: int) -> tuple:
    """offload_host_part's scratch for an exchange of [rows, top_k] pairs and [rows, dim] rows: float32 rows, the
    pairs' rows, experts and weights. Layers whose host parts never overlap may share one."""
    pairs = rows * top_k
    return (np.empty((rows, dim), np.float32), np.empty(pairs, np.int64), np.empty(pairs, np.int64),
            np.empty(pairs, np.float32))


def host_part_args(slot_ids: np.ndarray, topk_ids: np.ndarray, topk_weights: np.ndarray, hidden: torch.Tensor,
                   cpu_sum: torch.Tensor, w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int,
                   inter: int, scratch: tuple) -> HostPartArgs:
    """offload_host_part's fixed arguments, checked once: the exchange's slot_ids / topk_ids int64 and topk_weights
    float32 numpy [N, K], hidden 16-bit [N, D] and cpu_sum float32 [N, D] CPU tensors (contiguous), one layer's
    experts as quant_moe takes them, host_part_scratch(N, K, D) (the caller keeps it alive)."""
    rows, top_k = slot_ids.shape
    dim = hidden.shape[1] if hidden.dim() == 2 else -1
    for name, array, dtype in (("slot_ids", slot_ids, np.int64), ("topk_ids", topk_ids, np.int64),
                               ("topk_weights", topk_weights, np.float32)):
        if array.dtype != dtype or array.shape != (rows, top_k) or not array.flags.c_contiguous:
            raise ValueError(f"offload_host_part: {name} must be a contiguous {np.dtype(dtype).name} [{rows}, {top_k}] "
                             f"array, got {array.dtype} {array.shape}")
    if hidden.dtype not in (torch.bfloat16, torch.float16) or hidden.shape != (rows, dim) or not hidden.is_contiguous():
        raise ValueError(f"offload_host_part: hidden must be a contiguous 16-bit [{rows}, D] tensor, got "
                         f"{hidden.dtype} {tuple(hidden.shape)}")
    _check_moe(torch.zeros(1, dim), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32), w13,
               qtype13, w2, qtype2, inter, torch.zeros(1, dim))
    if cpu_sum.dtype != torch.float32 or cpu_sum.shape != hidden.shape or not cpu_sum.is_contiguous():
        raise ValueError(f"offload_host_part: cpu_sum must be a contiguous float32 {list(hidden.shape)} tensor, got "
                         f"{cpu_sum.dtype} {tuple(cpu_sum.shape)}")
    if [(a.shape, a.dtype) for a in scratch] != [(a.shape, a.dtype) for a in host_part_scratch(rows, top_k, dim)]:
        raise ValueError(f"offload_host_part: the scratch must be host_part_scratch({rows}, {top_k}, {dim})'s")
    args = HostPartArgs(slot_ids.ctypes.data, topk_ids.ctypes.data, topk_weights.ctypes.data, hidden.data_ptr(),
                        cpu_sum.data_ptr(), *(a.ctypes.data for a in scratch), rows, top_k, dim, inter, w13.shape[0],
                        int(hidden.dtype == torch.float16), qtype13, qtype2, w13.data_ptr(), w2.data_ptr(),
                        w13.stride(0), w13.stride(1), w2.stride(0), w2.stride(1))
    return args


def offload_host_part(args_address: int, rows: int, real_rows: int, row_counts: int | None, totals: int,
                      num_threads: int) -> None:
    """An offloaded layer's host part (native/offload_host_part.c states it) with the arguments at
    ctypes.addressof(host_part_args(...)); row_counts: the address of an int64 [2, real_rows] array or None;
    totals: of an int64 [2] array (CPU pairs, pairs read in place)."""
    status = (_library or _require()).strata_qmoe_host_part(args_address, rows, real_rows, num_threads, row_counts,
                                                           totals)
    if status == 5:
        raise ValueError(f"offload_host_part: {real_rows} real rows of {rows} do not fit the exchange")
    if status in (3, 4):
        raise ValueError("offload_host_part: a missed pair's expert is outside the layer's experts")
    if status != 0:
        raise MemoryError("offload_host_part: no scratch memory for the activations")


def _require() -> ctypes.CDLL:
    library = _load()
    if library is None:
        raise RuntimeError(f"the native CPU quantized matmul could not be built ({_failed}); check supports() "
                           "and use the torch path")
    return library


def dequant_matmul_ref(x: torch.Tensor, blocks: torch.Tensor, qtype: int, n: int, k: int) -> torch.Tensor:
    """What dequant_matmul computes, in float64 [T, N]: x @ gguf's dequantization of the blocks, transposed."""
    weight = torch.from_numpy(dequantize(blocks.numpy(), GGMLQuantizationType(qtype)).reshape(n, k))
    return x.double() @ weight.double().T


def quantize_activations_ref(x: torch.Tensor, block: int) -> torch.Tensor:
    """x [T, K] as the kernel sees it, in float64: per `block` values, d * rint(x / d), d = amax|x| / 127
    (float32 arithmetic, ties to even, like the C code)."""
    xb = x.float().reshape(x.shape[0], -1, block)  # [T, K / block, block]
    scale = xb.abs().amax(-1, keepdim=True) / 127
    inverse = torch.where(scale != 0, 1 / scale, torch.zeros_like(scale))
    return (torch.round(xb * inverse).double() * scale.double()).reshape(x.shape)


def quant_matmul_ref(x: torch.Tensor, blocks: torch.Tensor, qtype: int, n: int, k: int) -> torch.Tensor:
    """What quant_matmul computes, in float64: quantized activations @ gguf's dequantization of the blocks."""
    weight = torch.from_numpy(dequantize(blocks.numpy(), GGMLQuantizationType(qtype)).reshape(n, k))
    x_hat = quantize_activations_ref(x, GGML_QUANT_SIZES[GGMLQuantizationType(qtype)][0])
    return x_hat @ weight.double().T  # [T, N]


def quant_moe_ref(hidden: torch.Tensor, rows: np.ndarray, experts: np.ndarray, weights: np.ndarray,
                  w13: torch.Tensor, qtype13: int, w2: torch.Tensor, qtype2: int, inter: int) -> torch.Tensor:
    """What quant_moe adds to out, in float64 [R, D]: for each pair, gate and up = quant_matmul_ref of its
    hidden row with its expert's w13 rows; act = silu(gate) * up, rounded to float32 and quantized at w2's
    block; quant_matmul_ref of act with the w2 rows, times the pair's weight; summed per row."""
    dim = hidden.shape[1]
    total = torch.zeros(hidden.shape, dtype=torch.float64)  # [R, D]
    for expert in np.unique(experts):
        pairs = np.flatnonzero(experts == expert)
        index = torch.from_numpy(rows[pairs])
        w13_e = w13[expert, :, :_row_bytes(qtype13, dim)].contiguous()  # [2I, row bytes]
        gate, up = quant_matmul_ref(hidden[index], w13_e, qtype13, 2 * inter, dim).split(inter, dim=1)  # [n, I] each
        act = torch.nn.functional.silu(gate) * up
        y = quant_matmul_ref(act.float(), w2[expert, :, :_row_bytes(qtype2, inter)].contiguous(), qtype2, dim, inter)
        total.index_add_(0, index, y * torch.from_numpy(weights[pairs]).double()[:, None])
    return total


def _row_bytes(qtype: int, k: int) -> int:
    block, type_bytes, _ = _LAYOUTS[qtype]
    return k // block * type_bytes
