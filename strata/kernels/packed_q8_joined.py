"""Two row segments of different types in one 8-bit GEMV launch (on CUDA unless STRATA_NO_JOINED_GEMV=1).

A fused projection whose parts came in different types (Q4_K_M's attn_v in Q6_K beside a Q4_K attn_q / attn_k, in
half the layers) takes one packed_q8 GEMV launch per segment. Session 55's trace of issue 23's model put the second
launch at 3.1 us of each such layer's critical path at one stream and 11.2 us at eight (a 512-row GEMV is bound by
its latency, not its bytes). Here one launch runs both: programs below `programs_a` take BLOCK_N rows of segment A,
the rest segment B, each at its own type's K steps (q8_steps.k_step) with one tiling (rows of W a program, warps);
each writes its own columns of one output row. The same numbers as two packed_gemv_q8 launches at that tiling.
"""

from __future__ import annotations

import torch

from strata.kernels import packed_iquants, packed_q8
from strata.kernels.launch import pdl_options
from strata.kernels.q8_rounding import quantize

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install
    triton = tl = None

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel
    from strata.kernels.packed_q8 import gemv_tile


def enabled() -> bool:
    """Two-segment projections come here (ops.packed_linear) unless STRATA_NO_JOINED_GEMV=1. Session 57 (H100, issue
    23's Q4_K_M command, two alternated rounds): c1 683.4 / 682.8 tok/s against 673.9 / 674.3 without it, c8
    2,102.8 / 2,104.8 against 2,086.4 / 2,088.9."""
    from strata.config import debug_flag

    return not debug_flag("NO_JOINED_GEMV")


def joinable(segments: list[tuple[int, torch.Tensor]], k: int, rows: int) -> bool:
    """Whether a weight's (qtype, blocks) segments go to one launch: two of them, each one packed_q8's GEMV takes
    at this step's rows."""
    return len(segments) == 2 and all(packed_q8.gemv_takes(rows, q, b, k) for q, b in segments)


def packed_gemv_q8_joined(x: torch.Tensor, segments: list[tuple[int, torch.Tensor]], k: int, quantized=None,
                          out: torch.Tensor | None = None, config: dict | None = None) -> torch.Tensor:
    """x [M, K] @ [A; B] transposed -> [M, N_A + N_B] (float32, or out's dtype): segments [(qtype, blocks uint8
    [N, row_bytes])] x 2, packed_gemv_q8's numbers. `quantized`: quantize(x) where the caller has it."""
    (qtype_a, a), (qtype_b, b) = segments
    num_rows, n_a, n_b = x.shape[0], a.shape[0], b.shape[0]
    cfg = {**packed_q8.default_config(n_a + n_b, k, num_rows), **(config or {})}
    q, dx, sums = quantized if quantized is not None else quantize(x)
    if out is None:
        out = torch.empty(num_rows, n_a + n_b, dtype=torch.float32, device=x.device)
    assert out.shape == (num_rows, n_a + n_b) and out.stride(1) == 1
    isum = cfg.get("ISUM", int(num_rows > 1))
    block_n = cfg["BLOCK_N"]
    programs_a = triton.cdiv(n_a, block_n)
    _gemv_joined_kernel[(programs_a + triton.cdiv(n_b, block_n),)](
        q, dx, sums, a, packed_iquants.table_for(qtype_a, a), b, packed_iquants.table_for(qtype_b, b), out,
        n_a, n_b, k, num_rows, a.stride(0), b.stride(0), out.stride(0), programs_a,
        QTYPE_A=qtype_a, QTYPE_B=qtype_b, BLOCK_N=block_n,
        SB_A=packed_q8.units_per_step(cfg["SUPERBLOCKS"], qtype_a, k),
        SB_B=packed_q8.units_per_step(cfg["SUPERBLOCKS"], qtype_b, k),
        UNIT_A=packed_q8.UNIT[qtype_a], UNIT_B=packed_q8.UNIT[qtype_b], ROWS=triton.next_power_of_2(num_rows),
        WT_A=packed_q8.word_tiles(qtype_a, isum > 0), WT_B=packed_q8.word_tiles(qtype_b, isum > 0), ISUM=isum,
        ASM=not packed_q8.interpreted(), num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **pdl_options(x))
    return out


if triton is not None:

    @triton.jit
    def _gemv_joined_kernel(q_ptr, dx_ptr, sums_ptr, a_ptr, table_a_ptr, b_ptr, table_b_ptr, out_ptr, n_a, n_b, k,
                            num_rows, stride_a, stride_b, stride_om, programs_a,
                            QTYPE_A: tl.constexpr, QTYPE_B: tl.constexpr, BLOCK_N: tl.constexpr,
                            SB_A: tl.constexpr, SB_B: tl.constexpr, UNIT_A: tl.constexpr, UNIT_B: tl.constexpr,
                            ROWS: tl.constexpr, WT_A: tl.constexpr, WT_B: tl.constexpr, ISUM: tl.constexpr,
                            USE_PDL: tl.constexpr, ASM: tl.constexpr):
        """packed_q8._gemv_kernel over segment A (programs below programs_a) or B (the rest, columns from n_a)."""
        wait_for_previous_kernel(USE_PDL)
        pid = tl.program_id(0)
        if pid < programs_a:
            gemv_tile(q_ptr, dx_ptr, sums_ptr, a_ptr, table_a_ptr, out_ptr, pid, 0, n_a, k, num_rows, stride_a,
                      stride_om, QTYPE_A, BLOCK_N, SB_A, ROWS, UNIT_A, WT_A, ISUM, ASM)
        else:
            gemv_tile(q_ptr, dx_ptr, sums_ptr, b_ptr, table_b_ptr, out_ptr, pid - programs_a, n_a, n_b, k, num_rows,
                      stride_b, stride_om, QTYPE_B, BLOCK_N, SB_B, ROWS, UNIT_B, WT_B, ISUM, ASM)
