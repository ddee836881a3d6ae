"""Qwen4-Exp's hyper-connection mixer in two launches for few rows (decode and verification steps).

The torch form (`hyper_mix_ref`, what strata.model.hyper computes) is a dozen small launches per mixer,
two mixers a layer: a grouped RMSNorm of the streams, a low-rank down projection, silu, an up projection,
sigmoid, a product and a mean over the streams, and the per-stream write weights. Here:

1. `_down_kernel`, one program per (row, block of down/inject outputs, stream): each normalises its stream
   (a few KB; every program recomputes its stream's norm) and writes that stream's share of its outputs'
   dot products; the first output block also writes the normed stream. Splitting by stream gives the
   GPU hc times more programs for the same weight reads, and the shares are summed in a fixed order
   (no atomics: the result does not depend on scheduling).
2. `_up_kernel`, one program per (row, block of hidden columns): sums the shares into silu(down / hc) (and,
   in the row's first program, the write weights 2 sigmoid(inject / hc)), then for each stream the up
   projection's rows of those columns dotted with that vector, sigmoid, times the normed stream; the
   mean over streams is the block input.

Everything accumulates in float32 and rounds once, where the torch form rounds each op's output to the
model dtype: in bf16 the two agree to bf16 rounding, not bit for bit. Each program rereads the weights it
needs, so the kernels are for few rows (`MAX_ROWS`); longer steps take the torch form (GEMMs).

An MoE block's output goes back into the streams in one more launch (`topk_sum_inject`): its float32
top-k expert rows summed in order, the shared expert's output added, then written into every stream with
its weight, where the torch form (`topk_sum_inject_ref`) takes a launch per expert, one for the shared
expert and one for the write.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only install: hyper_mix_ref still works
    triton = tl = None

from strata.kernels.launch import pdl_options
from strata.kernels.rms_norm import topk_sum_ref

if triton is not None:
    from strata.kernels.launch import wait_for_previous_kernel
    from strata.kernels.rms_norm import gated_shared

MAX_ROWS = 16


def group_rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, group: int, eps: float) -> torch.Tensor:
    """Zero-centred RMSNorm of each `group`-sized slice of the last dim: x [..., G * group] -> same shape,
    (1 + weight) * x̂ with weight [G * group], in float32 and cast back (HF's form)."""
    x32 = x.float().unflatten(-1, (-1, group))
    x32 = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).flatten(-2)
    return (x32 * (1.0 + weight.float())).to(x.dtype)


def hyper_mix_ref(streams: torch.Tensor, norm_weight: torch.Tensor, down, up, inject, hc: int,
                  eps: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """streams [T, hc * D] -> (block input [T, D], write weights [T, hc] or None); weights down [R, hc * D],
    up [hc * D, R], inject [hc, hc * D] (tensors, or modules computing x @ W.T: a packed GGUF weight's Linear),
    norm_weight [hc * D] (zero-centred). HF's op order and dtypes."""
    normed = group_rms_norm_ref(streams, norm_weight, streams.shape[-1] // hc, eps)
    mix = torch.sigmoid(_project(F.silu(_project(normed, down) / hc), up))
    block_input = (mix * normed).unflatten(-1, (hc, -1)).mean(dim=-2)
    if inject is None:
        return block_input, None
    return block_input, 2 * torch.sigmoid(_project(normed, inject) / hc)


def _project(x: torch.Tensor, weight) -> torch.Tensor:
    return F.linear(x, weight) if isinstance(weight, torch.Tensor) else weight(x)


def inject_ref(streams: torch.Tensor, output: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """streams [T, hc * D] + a block's output [T, D] written into stream s with weight weights[:, s] [T, hc]."""
    return torch.addcmul(streams.unflatten(-1, (weights.shape[-1], -1)), weights.unsqueeze(-1),
                         output.unsqueeze(-2)).flatten(-2)


def topk_sum_inject_ref(partials: torch.Tensor, shared: torch.Tensor | None, streams: torch.Tensor,
                        weights: torch.Tensor, shared_gate: torch.Tensor | None = None) -> torch.Tensor:
    """inject_ref of an MoE block's output given as float32 partials [T, K, D] (summed over K in order, cast
    to the streams' dtype) plus the shared expert's output [T, D] or None, times sigmoid(shared_gate [T, 1])
    where given (strata.model.moe.TopkPartials)."""
    return inject_ref(streams, topk_sum_ref(partials, shared, streams.dtype, shared_gate), weights)


def topk_sum_inject(partials: torch.Tensor, shared: torch.Tensor | None, streams: torch.Tensor,
                    weights: torch.Tensor, shared_gate: torch.Tensor | None = None) -> torch.Tensor:
    """topk_sum_inject_ref's contract in one launch; every operand contiguous. The sum, the shared expert's
    gate and add, and the write round to the streams' dtype where the torch form does."""
    rows, width = streams.shape
    top_k, dim = partials.shape[1], partials.shape[2]
    hc = weights.shape[1]
    assert width == hc * dim and partials.shape[0] == rows and weights.shape[0] == rows
    assert partials.is_contiguous() and streams.is_contiguous() and weights.is_contiguous()
    assert shared is None or shared.is_contiguous()
    assert shared_gate is None or (shared is not None and shared_gate.shape == (rows, 1))
    out = torch.empty_like(streams)
    block = 512
    _topk_sum_inject_kernel[(rows, triton.cdiv(dim, block))](
        partials, shared if shared is not None else streams, shared_gate if shared_gate is not None else streams,
        shared_gate.stride(0) if shared_gate is not None else 0, streams, weights, out, dim, width, TOP_K=top_k,
        HC=hc, HAS_SHARED=shared is not None, HAS_GATE=shared_gate is not None, BLOCK=block, num_warps=4,
        **pdl_options(streams))
    return out


def hyper_mix(streams: torch.Tensor, norm_weight: torch.Tensor, down: torch.Tensor, up: torch.Tensor,
              inject: torch.Tensor | None, hc: int, eps: float,
              rows_alike: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """hyper_mix_ref's contract in two launches; streams [T <= MAX_ROWS, hc * D] contiguous, weights
    contiguous in the streams' dtype. Each row is its own program, so its result does not depend on the
    others, except that one row alone reads its stream in one block (faster, summed in another order);
    `rows_alike` keeps the blocks of several rows for one row too."""
    rows, width = streams.shape
    rank, hidden = down.shape[0], width // hc
    num_inject = 0 if inject is None else hc
    outputs = rank + num_inject
    normed = torch.empty_like(streams)
    partials = torch.empty(rows, hc, outputs, device=streams.device, dtype=torch.float32)  # per stream
    # block sizes measured on the H200 at the 125B shape (bench/results/2026-12-01-h200-qwen4exp/micro_hc*):
    # one row reads its whole stream in one block with 8 warps (9.7 us against 11.5), more rows in 512s
    one_block = rows == 1 and hidden <= 4096 and not rows_alike
    block_r = 4
    _down_kernel[(rows, triton.cdiv(outputs, block_r), hc)](
        streams, norm_weight, down, inject if inject is not None else down, normed, partials,
        width, hidden, rank, outputs, eps, BLOCK_C=triton.next_power_of_2(hidden) if one_block else 512,
        BLOCK_R=block_r, num_warps=8 if one_block else 4)
    out = torch.empty(rows, hidden, device=streams.device, dtype=streams.dtype)
    weights = torch.empty(rows, max(num_inject, 1), device=streams.device, dtype=streams.dtype)
    block_d = 4  # one warp per 4 columns: 9.5 us at one row, 11.1 at four (8 columns, 4 warps: 12.4, 13.3)
    _up_kernel[(rows, triton.cdiv(hidden, block_d))](
        normed, partials, up, out, weights, width, hidden, rank, outputs, num_inject, 1.0 / hc, HC=hc,
        BLOCK_D=block_d, BLOCK_R=triton.next_power_of_2(rank), BLOCK_I=triton.next_power_of_2(max(num_inject, 1)),
        num_warps=1)
    return out, (weights if inject is not None else None)


if triton is not None:
    @triton.jit
    def _down_kernel(x_ptr, norm_w_ptr, down_ptr, inject_ptr, normed_ptr, partials_ptr,
                     width, hidden, rank, outputs, eps, BLOCK_C: tl.constexpr, BLOCK_R: tl.constexpr):
        """Program (row, block of outputs, stream s): stream s's share of the outputs' dot products with the
        normed row -> partials[row, s, outputs]; the outputs are the down rows, then the inject rows."""
        row, block, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
        outs = block * BLOCK_R + tl.arange(0, BLOCK_R)
        is_down = outs < rank
        is_inject = (outs >= rank) & (outs < outputs)
        stream = x_ptr + row * width + s * hidden
        sumsq = tl.zeros([BLOCK_C], dtype=tl.float32)
        for c0 in range(0, hidden, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            v = tl.load(stream + cols, mask=cols < hidden, other=0.0).to(tl.float32)
            sumsq += v * v
        rstd = tl.rsqrt(tl.sum(sumsq, axis=0) / hidden + eps)
        acc = tl.zeros([BLOCK_R], dtype=tl.float32)
        for c0 in range(0, hidden, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            ok = cols < hidden
            at = s * hidden + cols                                                # [BLOCK_C] in the row
            v = tl.load(stream + cols, mask=ok, other=0.0).to(tl.float32)
            w = tl.load(norm_w_ptr + at, mask=ok, other=0.0).to(tl.float32)
            normed = (v * rstd * (1.0 + w)).to(normed_ptr.dtype.element_ty)
            if block == 0:
                tl.store(normed_ptr + row * width + at, normed, mask=ok)
            d = tl.load(down_ptr + outs[:, None] * width + at[None, :], mask=is_down[:, None] & ok[None, :], other=0.0)
            i = tl.load(inject_ptr + (outs - rank)[:, None] * width + at[None, :],
                        mask=is_inject[:, None] & ok[None, :], other=0.0)
            acc += tl.sum((d + i).to(tl.float32) * normed.to(tl.float32)[None, :], axis=1)
        tl.store(partials_ptr + (row * tl.num_programs(2) + s) * outputs + outs, acc, mask=outs < outputs)

    @triton.jit
    def _up_kernel(normed_ptr, partials_ptr, up_ptr, out_ptr, weights_ptr, width, hidden, rank, outputs,
                   num_inject, inv_hc, HC: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr,
                   BLOCK_I: tl.constexpr):
        """Program (row, block of hidden columns): low = silu(sum over streams of the partials / hc), then for
        each stream sigmoid(up rows . low) * normed stream, averaged; the row's first program also writes
        the write weights 2 sigmoid(inject / hc)."""
        row, block = tl.program_id(0), tl.program_id(1)
        rs = tl.arange(0, BLOCK_R)
        low = tl.zeros([BLOCK_R], dtype=tl.float32)
        for s in tl.static_range(HC):
            low += tl.load(partials_ptr + (row * HC + s) * outputs + rs, mask=rs < rank, other=0.0)
        low = low * inv_hc
        low = low / (1.0 + tl.exp(-low))
        if block == 0:
            js = tl.arange(0, BLOCK_I)
            inj = tl.zeros([BLOCK_I], dtype=tl.float32)
            for s in tl.static_range(HC):
                inj += tl.load(partials_ptr + (row * HC + s) * outputs + rank + js, mask=js < num_inject, other=0.0)
            tl.store(weights_ptr + row * num_inject + js,
                     (2.0 / (1.0 + tl.exp(-inj * inv_hc))).to(weights_ptr.dtype.element_ty), mask=js < num_inject)
        cols = block * BLOCK_D + tl.arange(0, BLOCK_D)
        ok = cols < hidden
        total = tl.zeros([BLOCK_D], dtype=tl.float32)
        for s in tl.static_range(HC):
            at = s * hidden + cols                                                # rows of `up`, columns of the row
            w = tl.load(up_ptr + at[:, None] * rank + rs[None, :], mask=ok[:, None] & (rs < rank)[None, :],
                        other=0.0).to(tl.float32)
            gate = tl.sum(w * low[None, :], axis=1)
            normed = tl.load(normed_ptr + row * width + at, mask=ok, other=0.0).to(tl.float32)
            total += normed / (1.0 + tl.exp(-gate))
        tl.store(out_ptr + row * hidden + cols, (total * inv_hc).to(out_ptr.dtype.element_ty), mask=ok)

    @triton.jit
    def _topk_sum_inject_kernel(partials_ptr, shared_ptr, gate_ptr, stride_g, streams_ptr, weights_ptr, out_ptr, dim,
                                width, TOP_K: tl.constexpr, HC: tl.constexpr, HAS_SHARED: tl.constexpr,
                                HAS_GATE: tl.constexpr, BLOCK: tl.constexpr, USE_PDL: tl.constexpr):
        """Program (row, block of hidden columns): the block's sum over the row's TOP_K partials, in order,
        rounded; plus the shared output (times its rounded sigmoid gate, rounded), rounded; each stream's
        columns plus its weight times that."""
        wait_for_previous_kernel(USE_PDL)
        row, block = tl.program_id(0).to(tl.int64), tl.program_id(1)
        cols = block * BLOCK + tl.arange(0, BLOCK)
        ok = cols < dim
        dtype = out_ptr.dtype.element_ty
        at = partials_ptr + row * TOP_K * dim + cols
        total = tl.load(at, mask=ok, other=0.0)
        for k in tl.static_range(1, TOP_K):
            total += tl.load(at + k * dim, mask=ok, other=0.0)
        total = total.to(dtype)
        if HAS_SHARED:
            shared = tl.load(shared_ptr + row * dim + cols, mask=ok, other=0.0)
            if HAS_GATE:
                shared = gated_shared(shared, tl.load(gate_ptr + row * stride_g), dtype)
            total = (total.to(tl.float32) + shared.to(tl.float32)).to(dtype)
        t = total.to(tl.float32)
        for s in tl.static_range(HC):
            w = tl.load(weights_ptr + row * HC + s).to(tl.float32)
            x = tl.load(streams_ptr + row * width + s * dim + cols, mask=ok, other=0.0).to(tl.float32)
            tl.store(out_ptr + row * width + s * dim + cols, (x + w * t).to(dtype), mask=ok)
