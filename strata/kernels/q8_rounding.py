"""Activations rounded to 8 bits per 32 values for the kernels that multiply them with packed weights' integer
quants (packed_q8, packed_mmq): q = round(x * 127 / max|x|) per block of 32, one float32 scale dx = max|x| / 127
a block, and the sum of q per 16 (the offsets of the K types' mins and of Q3_K's -4 and Q6_K's -32).

`quantize` rounds rows in their own launch; `round_blocks` / `store_rounding` are the same rounding inside other
kernels (rms_norm's and the attention epilogue's), which leave their result on their output tensor (`attach`) so the
next packed projection reads it without a launch of its own. `quantize_ref` is the contract in torch.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install
    triton = tl = None

from strata.kernels.launch import pdl_options

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel


def attach(x: torch.Tensor, quantized: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
    """Keep quantize(x)'s result, computed elsewhere (rms_norm's launch), on x itself: quantize(x) then returns
    it without a launch of its own while x is unchanged (its version counter; a view or copy of x is another
    tensor and is quantized afresh; an inference-mode tensor has no version counter: nothing here changes a
    norm's output in place)."""
    x.q8_rows = (*quantized, _version(x))


_KEEP = "keep the first rounding"


def keep_rounding(x: torch.Tensor) -> None:
    """x's producer (a fresh tensor that nothing changes in place: the hyper-connection mixer's block input)
    lets the first quantize(x) be kept on x for the packed weights that read it after (a Gated DeltaNet's two
    projections, a shared expert and the routed experts): one rounding launch instead of one a reader."""
    x.q8_rows = _KEEP


def _version(x: torch.Tensor) -> int | None:
    return None if x.is_inference() else x._version


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [M, K] (K a multiple of 128) -> (q int8 [M, K], dx float32 [M, K / 32], sums float32 [M, K / 16]):
    per 32 values q = round(x / dx) with dx = max|x| / 127 (q = 0 where the block is all zeros), and the
    sum of q over each 16 (exact integers, for the offsets of the K types' mins and of Q3_K's -4 and Q6_K's -32).
    What `attach` left on x is returned as it is; on an x given `keep_rounding`, the result is attached for the
    next call."""
    attached = getattr(x, "q8_rows", None)
    if isinstance(attached, tuple) and attached[3] == _version(x):
        return attached[:3]
    m, k = x.shape
    assert k % 128 == 0 and x.stride(1) == 1
    q, dx, sums = empty_rounding(m, k, x.device)
    _quantize_kernel[(m, k // 128)](x, q, dx, sums, k, x.stride(0), num_warps=2, **pdl_options(x))
    if attached is _KEEP:
        attach(x, (q, dx, sums))
    return q, dx, sums


def empty_rounding(m: int, k: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """quantize's outputs for [M, K] rows, unwritten: q int8 [M, K], dx float32 [M, K / 32], sums float32
    [M, K / 16]."""
    return (torch.empty(m, k, dtype=torch.int8, device=device),
            torch.empty(m, k // 32, dtype=torch.float32, device=device),
            torch.empty(m, k // 16, dtype=torch.float32, device=device))


def quantize_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """quantize's contract in torch (round half away from zero, as the kernel)."""
    m, k = x.shape
    blocks = x.float().reshape(m, k // 32, 32)
    amax = blocks.abs().amax(dim=2, keepdim=True)
    # tensors divided by tensors: IEEE's rounding, as the kernel's div_rn (a division by a Python number
    # multiplies by its reciprocal on the CUDA device and `127.0 / amax` does on the CPU; either is off by an
    # ulp now and then, which moves a q sitting on .5 or a scale)
    by = torch.full_like(amax, 127.0)
    inv = torch.where(amax > 0, by / amax, torch.zeros_like(amax))
    scaled = blocks * inv
    q = (scaled.abs() + 0.5).floor().copysign(scaled).clamp(-127, 127)
    sums = q.reshape(m, k // 16, 16).sum(dim=2)
    return q.to(torch.int8).reshape(m, k), (amax / by).reshape(m, k // 32), sums


def dequantize_activations(q: torch.Tensor, dx: torch.Tensor) -> torch.Tensor:
    """(q int8 [M, K], dx [M, K / 32]) -> float32 [M, K]: the activations the kernels multiply."""
    m, k = q.shape
    return (q.float().reshape(m, k // 32, 32) * dx.unsqueeze(2)).reshape(m, k)


if triton is not None:

    @triton.jit
    def round_blocks(x):
        """Blocks of 32 values x [B, 32] (float32) -> (q [B, 32] as float32 integers in -127..127, dx [B]): the
        rounding every 8-bit activation here gets (quantize_ref's numbers; rms_norm's launch uses it too)."""
        amax = tl.max(tl.abs(x), axis=1)                                                        # [B]
        inv = tl.where(amax > 0, tl.div_rn(127.0, amax), 0.0)  # IEEE division: the rounding torch does
        scaled = x * inv[:, None]
        q = tl.minimum(tl.floor(tl.abs(scaled) + 0.5), 127.0)
        return tl.where(scaled < 0, -q, q), tl.div_rn(amax, 127.0)

    @triton.jit
    def store_rounding(y, rows, first, limit, ok, width, q_ptr, dx_ptr, sums_ptr, R: tl.constexpr, C: tl.constexpr):
        """A kernel's output tile y [R, C] (C a multiple of 32) at columns first .. first + C (a scalar or [R, 1],
        a multiple of 32) of rows `rows` [R] of [*, width]: its rounding (round_blocks) stored as quantize lays it
        out (q int8 [*, width], dx [*, width / 32], sums [*, width / 16]) where ok [R] and the column < limit."""
        q, dx = round_blocks(tl.reshape(y.to(tl.float32), (R * C // 32, 32)))                # [R C / 32, 32]
        columns = first + tl.arange(0, C)[None, :]                                           # [R or 1, C]
        tl.store(q_ptr + rows[:, None] * width + columns, tl.reshape(q, (R, C)).to(tl.int8),
                 mask=ok[:, None] & (columns < limit))
        blocks = first // 32 + tl.arange(0, C // 32)[None, :]
        tl.store(dx_ptr + rows[:, None] * (width // 32) + blocks, tl.reshape(dx, (R, C // 32)),
                 mask=ok[:, None] & (blocks * 32 < limit))
        halves = tl.sum(tl.reshape(q, (R * C // 16, 16)), axis=1)                             # [R C / 16]
        runs = first // 16 + tl.arange(0, C // 16)[None, :]
        tl.store(sums_ptr + rows[:, None] * (width // 16) + runs, tl.reshape(halves, (R, C // 16)),
                 mask=ok[:, None] & (runs * 16 < limit))

    @triton.jit
    def _quantize_kernel(x_ptr, q_ptr, dx_ptr, sums_ptr, k, stride_xm, USE_PDL: tl.constexpr):
        """One program per (row, 128 values): four blocks of 32 rounded to int8 with their scales."""
        wait_for_previous_kernel(USE_PDL)
        row, chunk = tl.program_id(0), tl.program_id(1)
        offs = chunk * 128 + tl.arange(0, 4)[:, None] * 32 + tl.arange(0, 32)[None, :]          # [4, 32]
        x = tl.load(x_ptr + row.to(tl.int64) * stride_xm + offs).to(tl.float32)
        q, dx = round_blocks(x)
        tl.store(q_ptr + row.to(tl.int64) * k + offs, q.to(tl.int8))
        tl.store(dx_ptr + row.to(tl.int64) * (k // 32) + chunk * 4 + tl.arange(0, 4), dx)
        halves = tl.sum(tl.reshape(q, (8, 16)), axis=1)                                         # [8]
        tl.store(sums_ptr + row.to(tl.int64) * (k // 16) + chunk * 8 + tl.arange(0, 8), halves)
